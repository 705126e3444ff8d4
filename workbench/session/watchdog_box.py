"""The run's watchdog, ON the box: plain Python (standard library only), sent to the box's
``python3 -I -S -`` on stdin, as the run lock's script is (:mod:`workbench.session.runlock`).
Nothing of the workbench needs to be installed there. This file is that program; the driver side
is :mod:`workbench.session.watchdog`. It imports nothing of the workbench (a test keeps it so),
and the workbench imports its constants (the layout of ``<state_dir>/diagnosis``), so the facts of
the journal's layout have one source.

Operations (``python3 -I -S - OP STATE_DIR CONFIG_JSON``; each prints one JSON object):

``start``
    Start the watchdog of run ``config["run_id"]`` detached from the caller: double fork, a new
    session (``setsid``), stdin from ``/dev/null``, stdout and stderr to
    ``<state_dir>/diagnosis/watchdog.log``: it survives the SSH channel that started it closing,
    and sshd killing that session. The caller's answer (``{"status": "watching", "pid": ...}``,
    ``"busy"``, ``"not-held"``) comes once the watchdog holds ``flock`` on
    ``diagnosis/watchdog.lock`` (held for its whole life: one watchdog per state dir, hence per
    journal; a new one waits up to ``config["wait_s"]`` for the previous one to exit, which it
    does within a poll of its run's end) and has checked that the run lock is its run's.
``watch`` (what ``start`` runs, in the detached process)
    Every ``poll_s`` seconds, read the run lock ``diagnosis/run.lock``. The run's signs of life:
    the lock file's mtime changing (the run's heartbeat: :class:`workbench.session.runlock.RunLock`
    touches it every few seconds from wherever the driver runs), the journal's or the probe
    journal directory's mtime changing (the run at work, or whoever restores its box:
    ``restore_box`` beats the dead run's heartbeat between its steps too), and, for a holder on
    the box's own kernel (its ``boot_id`` is the box's), its process alive (``/proc/PID/stat``
    with the recorded start time). Silence is measured on the box's monotonic clock from the last sign
    seen, so a wall-clock jump, or a laptop that sleeps for less than ``after_s``, never triggers
    it. When the lock is gone or names another run, the run ended (or another took over a stale
    lock): exit at once, doing nothing. When silent for ``after_s`` seconds: under ``flock`` on
    the ``diagnosis`` directory (the run lock's own guard) check once more that the lock is still
    the run's and its mtime unchanged, and take the lock over (holder: this process, ``runbook``
    ``watchdog``, ``watchdog_of`` the run id: a new run is refused while it restores, naming it);
    then :func:`restore`, write the report ``diagnosis/watchdog-report.json``, release the lock
    and exit.
``restore``
    :func:`restore` now, with no lock taken or released (the parity test runs it and
    ``restore_box`` on the same journal).

:func:`restore` does what ``workbench.session.journal.restore_box`` does, from the same files:
stop the servers the run started (only while the pid still belongs to the recorded process group;
the whole group and its descendants, SIGTERM then SIGKILL), stop a launch that was in flight,
revert every probe of the probe journal byte for byte (``remote.probes.revert_probe``'s checks:
sha256 of the file against the patched and original text, the backup's sha256, mode and owner,
atomic rename, bytecode caches put back), remove ``created_paths`` under the state dir (``rm
-rf``: a symlink is removed, never followed), remove the temporary files of interrupted writes,
and relaunch the original server (argv, cwd, environment, log appended to) when the journal says
it was stopped and nothing with that argv already runs, waiting until it answers
``/health_generate`` (or ``/health``) with 200 while it makes progress (``server_start_timeout``
is a stall time-out, as the workbench's: :func:`wait_healthy`). The journal is rewritten (atomically, mode 0600)
after each step, and emptied when everything was undone.

Units: seconds. Errors: an operation that cannot run prints ``{"status": "error", "error": ...}``
and exits 1; a restore step that fails is a ``problems`` entry, never an exception.
"""

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import stat
import sys
import time
import urllib.error
import urllib.request

# -- the layout of <state_dir> (the workbench imports these: one source of truth) ---------------

#: the directory of the run lock, the journal and the watchdog, under the state dir
DIAGNOSIS_DIR = "diagnosis"
#: the diagnosis journal (``workbench.session.journal``)
JOURNAL_NAME = "journal.json"
#: the run lock (``workbench.session.runlock``)
LOCK_NAME = "run.lock"
#: the probe journal's directory, under the state dir (``remote.probes.journal_dir``)
PROBES_DIR = "probes"
#: held with ``flock`` by the live watchdog for its whole life (it removes it as it exits)
WATCHDOG_LOCK_NAME = "watchdog.lock"
#: who watches: ``{"pid", "pid_start", "boot_id", "run_id", "after_s", "poll_s", "started_at", "state"}``
WATCHDOG_STATE_NAME = "watchdog.json"
#: what the watchdog did when it acted, until ``workbench restore`` / ``workbench status`` showed it
REPORT_NAME = "watchdog-report.json"
#: a report already shown (the last one is kept)
SEEN_REPORT_NAME = "watchdog-report.seen.json"
#: the watchdog's own stdout and stderr
LOG_NAME = "watchdog.log"
#: the journal's permission bits (it holds the original server's secrets)
JOURNAL_MODE = 0o600
#: the diagnosis directory's permission bits when created
DIR_MODE = 0o700
#: the temporary file of an atomic write on the box (``remote.box.Box.temp_path_for``): ``.NAME.ewb-tmp-HEX``
WRITE_TEMP_PATTERN = r"^\.(?P<name>.+)\.ewb-tmp-[0-9a-f]{8}$"
#: the lock holder's ``runbook`` while a watchdog restores the box
WATCHDOG_RUNBOOK = "watchdog"

#: defaults of the configuration (seconds)
DEFAULTS = {"after_s": 300.0, "poll_s": 1.0, "wait_s": 10.0, "server_start_timeout": 600.0, "grace_s": 10.0,
            "kill_wait_s": 10.0}

_WRITE_TEMP = re.compile(WRITE_TEMP_PATTERN)
_TCP_LISTEN = "0A"


# -- small facts of this machine ---------------------------------------------------------------


def boot_id():
    """This kernel's boot id, or None."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def proc_stat(pid):
    """``(state, ppid, pgid, start)`` of process ``pid`` from ``/proc/PID/stat``, or None."""
    try:
        with open("/proc/%d/stat" % int(pid)) as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[19])
    except (OSError, ValueError, IndexError, TypeError):
        return None


def start_of(pid):
    """The start time (clock ticks since boot) of live process ``pid``; None when there is none or
    it is a zombie."""
    st = proc_stat(pid)
    return None if st is None or st[0] in ("Z", "X") else st[3]


def processes():
    """Every live (non-zombie) process: ``[{"pid", "ppid", "pgid", "argv"}]``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st is None or st[0] in ("Z", "X"):
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        out.append({"pid": int(name), "ppid": st[1], "pgid": st[2], "argv": argv})
    return out


def listening_ports():
    """The TCP ports something listens on (``/proc/net/tcp`` and ``tcp6``)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == _TCP_LISTEN:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def sha256_of(path):
    """The sha256 of the file ``path`` (hex). Raises OSError."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def temp_path_for(path):
    """A fresh temporary name beside ``path`` (``remote.box.Box.temp_path_for``'s shape)."""
    head, tail = os.path.split(path)
    return os.path.join(head, ".%s.ewb-tmp-%s" % (tail, secrets.token_hex(4)))


def _fsync_dir(directory):
    try:
        fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_atomic(path, data, mode):
    """Write ``data`` (bytes) to ``path`` through a temporary file beside it and one rename, with
    the permission bits ``mode``. Raises OSError."""
    tmp = temp_path_for(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass  # the temporary file was never made, or is gone already: nothing left behind
        raise
    _fsync_dir(os.path.dirname(path))


def write_json(path, data, mode=JOURNAL_MODE):
    """``data`` as JSON (the journal's formatting: indent 2, sorted keys) to ``path``, atomically."""
    write_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode)


class Layout:
    """The paths under one state dir."""

    def __init__(self, state_dir):
        self.state_dir = state_dir.rstrip("/") or "/"
        self.diagnosis = os.path.join(self.state_dir, DIAGNOSIS_DIR)
        self.journal = os.path.join(self.diagnosis, JOURNAL_NAME)
        self.lock = os.path.join(self.diagnosis, LOCK_NAME)
        self.probes = os.path.join(self.state_dir, PROBES_DIR)
        self.watchdog_lock = os.path.join(self.diagnosis, WATCHDOG_LOCK_NAME)
        self.watchdog_state = os.path.join(self.diagnosis, WATCHDOG_STATE_NAME)
        self.report = os.path.join(self.diagnosis, REPORT_NAME)
        self.log = os.path.join(self.diagnosis, LOG_NAME)


# -- the journal --------------------------------------------------------------------------------


def _is_pid(v):
    return isinstance(v, int) and not isinstance(v, bool) and v > 1


def journal_problem(data):
    """What makes ``data`` no journal this restore can act on, or None
    (``workbench.session.journal._shape_problem``'s checks)."""
    if not isinstance(data, dict):
        return "top level is not an object"
    started = data.get("started_servers")
    if started is not None:
        if not isinstance(started, list):
            return "started_servers is not a list"
        for i, server in enumerate(started):
            if not isinstance(server, dict) or not _is_pid(server.get("pid")):
                return "started_servers[%d] has no valid pid" % i
            if server.get("pgid") is not None and not _is_pid(server.get("pgid")):
                return "started_servers[%d] has an invalid pgid" % i
    created = data.get("created_paths")
    if created is not None and not (isinstance(created, list) and all(isinstance(p, str) for p in created)):
        return "created_paths is not a list of paths"
    original = data.get("original_server")
    if original is not None:
        if not isinstance(original, dict):
            return "original_server is not an object"
        argv = original.get("argv")
        if original.get("stopped") and not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            return "original_server is marked stopped but has no argv to relaunch it with"
        env = original.get("env")
        if env is not None and not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            return "original_server.env is not a mapping of strings"
    return None


def journal_pending(data):
    """True when the journal ``data`` records changes never undone
    (``workbench.session.journal.journal_data_pending``)."""
    return bool(data.get("started_servers")) or bool(data.get("launching")) or bool(
        (data.get("original_server") or {}).get("stopped")) or bool(data.get("created_paths"))


class Journal:
    """The journal file, rewritten after each step."""

    def __init__(self, path):
        self.path = path
        self.data = {}

    def load(self):
        """Read it; raises ValueError saying why it is no journal."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            self.data = {}
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError("%s: not a diagnosis journal (not UTF-8: %s)" % (self.path, exc))
        if not text.strip():
            self.data = {}
            return
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError("%s: not a diagnosis journal (%s)" % (self.path, exc))
        problem = journal_problem(data)
        if problem:
            raise ValueError("%s: not a diagnosis journal (%s)" % (self.path, problem))
        self.data = data

    def write(self):
        os.makedirs(os.path.dirname(self.path), mode=DIR_MODE, exist_ok=True)
        write_json(self.path, self.data)


# -- stopping servers (remote.box.Box.stop_server's way) ----------------------------------------


def _tree(pid, pgid, procs, also=()):
    kids = {}
    for p in procs:
        kids.setdefault(p["ppid"], []).append(p["pid"])
    roots = {p["pid"] for p in procs if p["pid"] == pid or (pgid is not None and p["pgid"] == pgid) or p["pid"] in also}
    members = set(roots)
    todo = [k for r in roots for k in kids.get(r, ())]
    while todo:
        child = todo.pop()
        if child not in members:
            members.add(child)
            todo.extend(kids.get(child, ()))
    return sorted((p for p in procs if p["pid"] in members), key=lambda p: p["pid"])


def _signal(pid, sig, group):
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return  # gone already: what the signal was for


def stop_server(pid, pgid, grace_s, kill_wait_s):
    """Stop process ``pid``, its process group ``pgid`` and every descendant of either: SIGTERM,
    up to ``grace_s`` seconds, then SIGKILL and up to ``kill_wait_s``. Returns ``"terminated"``,
    ``"killed"`` or ``"already-exited"``; raises RuntimeError naming the survivors."""
    group = pgid > 1 and pgid != os.getpgrp()
    tracked = set()

    def live():
        tree = _tree(pid, pgid if group else None, processes(), also=tracked)
        tracked.update(p["pid"] for p in tree)
        return tree

    def singles(tree):
        return [p["pid"] for p in tree if not (group and p["pgid"] == pgid) and p["pid"] != pid]

    def wait_gone(seconds):
        deadline = time.monotonic() + seconds
        delay = 0.02
        while True:
            tree = live()
            if not tree:
                return []
            if time.monotonic() >= deadline:
                return tree
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    first = live()
    if not first:
        return "already-exited"
    _signal(pgid if group else pid, signal.SIGTERM, group)
    for other in singles(first):
        _signal(other, signal.SIGTERM, False)
    left = wait_gone(grace_s)
    if not left:
        return "terminated"
    _signal(pgid if group else pid, signal.SIGKILL, group)
    for other in sorted({p["pid"] for p in left}):
        _signal(other, signal.SIGKILL, False)
    left = wait_gone(kill_wait_s)
    if left:
        raise RuntimeError("processes %s still alive %gs after SIGKILL" % (sorted(p["pid"] for p in left), kill_wait_s))
    return "killed"


# -- probes (remote.probes.revert_probe's way) --------------------------------------------------


def _probe_entries(layout):
    """``(entries, problems)``: the readable probe journal entries oldest first, and a line for
    each unreadable one."""
    try:
        names = sorted(os.listdir(layout.probes))
    except FileNotFoundError:
        return [], []
    entries, problems = [], []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        tag = name[: -len(".json")]
        path = os.path.join(layout.probes, name)
        try:
            with open(path, "rb") as f:
                entry = json.loads(f.read().decode("utf-8"))
            if not isinstance(entry, dict) or entry.get("tag") != tag:
                raise ValueError("not the journal entry of probe %r" % tag)
            for key in ("path", "original_sha256", "patched_sha256", "backup_path", "journal_path"):
                if not isinstance(entry.get(key), str):
                    raise ValueError("field %r missing or not text" % key)
            if not isinstance(entry.get("created_at"), (int, float)):
                raise ValueError("field 'created_at' missing or not a number")
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            problems.append("journal entry %s is unreadable (%s); check the file that probe %r patched by hand "
                            "(its original may be at %s), then delete the entry"
                            % (path, exc, tag, os.path.join(layout.probes, tag + ".orig")))
            continue
        entries.append(entry)
    entries.sort(key=lambda e: (e["created_at"], e["tag"]))
    return entries, problems


def _restore_bytecode(entry):
    for b in entry.get("bytecode") or ():
        with open(b["backup"], "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != b["sha256"]:
            raise ValueError("the backup %s does not match the bytecode cache's sha256; not restoring it" % b["backup"])
        os.makedirs(os.path.dirname(b["cache"]), exist_ok=True)
        write_atomic(b["cache"], data, 0o644)


def _forget(entry):
    for path in [entry["backup_path"]] + [b["backup"] for b in entry.get("bytecode") or ()] + [entry["journal_path"]]:
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue


def revert_probe(entry):
    """Revert one probe; returns a note (owner) or None. Raises ValueError (a conflict: the file
    kept) or OSError."""
    tag, path = entry["tag"], entry["path"]
    if entry.get("temp_path"):
        try:
            os.unlink(entry["temp_path"])
        except FileNotFoundError:
            pass  # the interrupted add's temporary file was already gone
    now = os.path.realpath(path)
    if now != path:
        raise ValueError("probe %r: %s now resolves to %s; not writing through the link; the original is kept at %s"
                         % (tag, path, now, entry["backup_path"]))
    try:
        current = sha256_of(path)
    except FileNotFoundError:
        raise ValueError("probe %r: the probed file no longer exists; backup kept at %s" % (tag, entry["backup_path"]))
    if current == entry["original_sha256"]:
        _restore_bytecode(entry)
        _forget(entry)
        return None
    if current != entry["patched_sha256"]:
        raise ValueError("probe %r: the file %s is neither the patched text nor the original (a newer probe on top of "
                         "it, or edited by someone else); not restoring; the original is kept at %s"
                         % (tag, path, entry["backup_path"]))
    with open(entry["backup_path"], "rb") as f:
        backup = f.read()
    if hashlib.sha256(backup).hexdigest() != entry["original_sha256"]:
        raise ValueError("probe %r: the backup %s does not match the original's sha256; not restoring"
                         % (tag, entry["backup_path"]))
    mode = entry.get("mode")
    if not isinstance(mode, int) or isinstance(mode, bool):
        mode = os.stat(path).st_mode & 0o7777
    tmp = temp_path_for(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    note = None
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(backup)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        uid, gid = entry.get("owner_uid"), entry.get("owner_gid")
        if isinstance(uid, int) and isinstance(gid, int):
            st = os.stat(tmp)
            if (st.st_uid, st.st_gid) != (uid, gid):
                try:
                    os.chown(tmp, uid, gid)
                except OSError as exc:
                    note = "owner could not be kept: the file is now owned by %d:%d, the original by %d:%d (%s)" % (
                        st.st_uid, st.st_gid, uid, gid, exc.strerror)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass  # never made, or renamed already
        raise
    _fsync_dir(os.path.dirname(path))
    restored = sha256_of(path)
    if restored != entry["original_sha256"]:
        raise ValueError("probe %r: after restoring, the file's sha256 is %s, expected %s; backup kept"
                         % (tag, restored[:12], entry["original_sha256"][:12]))
    _restore_bytecode(entry)
    _forget(entry)
    return note


# -- the restore --------------------------------------------------------------------------------


def _stop_started(journal, server, report, cfg):
    pid = int(server["pid"])
    pgid = int(server.get("pgid") or pid)
    label = server.get("label") or "diagnosis"
    st = proc_stat(pid)
    leader = st is not None and st[0] not in ("Z", "X")
    try:
        if leader and st[2] != pgid:
            report["actions"].append("%s server pid %d had exited; the pid now belongs to another process (process "
                                     "group %d, not %d), left alone" % (label, pid, st[2], pgid))
        elif leader or (pgid > 1 and any(p["pgid"] == pgid for p in processes())):
            how = stop_server(pid, pgid, cfg["grace_s"], cfg["kill_wait_s"])
            what = "server pid %d" % pid if leader else "server pid %d's leftover process group %d" % (pid, pgid)
            report["actions"].append("stopped %s %s (%s)" % (label, what, how))
        else:
            report["actions"].append("%s server pid %d had already exited" % (label, pid))
    except (OSError, RuntimeError) as exc:
        report["problems"].append("could not stop %s server pid %d: %s" % (label, pid, exc))
        return
    journal.data["started_servers"] = [s for s in journal.data.get("started_servers") or [] if s["pid"] != pid]
    _write(journal, report, "stopped %s server pid %d" % (label, pid))


def _write(journal, report, what):
    try:
        journal.write()
        return True
    except OSError as exc:
        report["problems"].append("%s but could not update the journal: %s" % (what, exc))
        return False


def _same_argv(argv, exclude=()):
    """The live processes whose argv is exactly ``argv`` (a forked child of one left out), pids
    in ``exclude`` left out."""
    procs = processes()
    by_pid = {p["pid"]: p for p in procs}
    out = []
    for p in procs:
        if p["argv"] != argv or p["pid"] in exclude:
            continue
        parent = by_pid.get(p["ppid"])
        if parent is not None and parent["argv"] == argv:
            continue
        out.append(p)
    return sorted(out, key=lambda p: p["pid"])


def _port_of(argv):
    port = None
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--port" and i + 1 < len(argv) else (
            arg.split("=", 1)[1] if arg.startswith("--port=") else None)
        if value is not None and value.isdigit():
            port = int(value)
    return port


def _stop_unrecorded_launch(journal, launching, report, cfg):
    argv = [str(a) for a in launching.get("argv") or []]
    label = launching.get("label") or "diagnosis"
    try:
        for p in _same_argv(argv):
            port = _port_of(p["argv"])
            if launching.get("port") is None or port in (None, launching["port"]):
                how = stop_server(p["pid"], p["pgid"], cfg["grace_s"], cfg["kill_wait_s"])
                report["actions"].append("stopped %s server pid %d, launched but not yet journalled (%s)"
                                         % (label, p["pid"], how))
    except (OSError, RuntimeError) as exc:
        report["problems"].append("could not stop the interrupted %s launch (%s): %s" % (label, " ".join(argv), exc))
        return
    journal.data.pop("launching", None)
    _write(journal, report, "stopped the interrupted %s launch" % label)


def _remove_tree(path):
    """``rm -rf -- path``: a symlink is removed, never followed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    for name in os.listdir(path):
        _remove_tree(os.path.join(path, name))
    os.rmdir(path)


def _remove_write_leftovers(layout, probed_files, report):
    wanted = {layout.diagnosis: None, layout.probes: None}
    for path in probed_files:
        directory = os.path.dirname(path)
        wanted.setdefault(directory, set())
        if wanted[directory] is not None:
            wanted[directory].add(os.path.basename(path))
    for directory, names in wanted.items():
        try:
            entries = os.listdir(directory)
        except FileNotFoundError:
            continue
        except OSError as exc:
            report["actions"].append("could not look for interrupted writes in %s: %s" % (directory, exc))
            continue
        for entry in entries:
            m = _WRITE_TEMP.match(entry)
            if not m or (names is not None and m.group("name") not in names):
                continue
            try:
                os.unlink(os.path.join(directory, entry))
                report["actions"].append("removed %s/%s (an interrupted write's temporary file)" % (directory, entry))
            except FileNotFoundError:
                continue
            except OSError as exc:
                report["problems"].append("could not remove %s/%s: %s" % (directory, entry, exc))


def launch_server(argv, port, log_path, cwd, env, layout):
    """Start ``argv`` detached as ``remote.box.Box.launch_server`` does: its own session and
    process group, stdin from /dev/null, stdout and stderr appended to ``log_path`` (default
    ``STATE_DIR/servers/server-PORT-TIME.log``, created 0600), ``env`` added to this process's
    environment (``PYTHONDONTWRITEBYTECODE=1`` unless set), its pid in ``log_path + ".pid"``.
    Returns ``(pid, log_path)``. Raises RuntimeError (the port is taken, no pid appeared) or OSError."""
    if port is not None and int(port) in listening_ports():
        raise RuntimeError("port %s is in use (something else listens on it)" % port)
    if log_path is None:
        servers = os.path.join(layout.state_dir, "servers")
        os.makedirs(servers, mode=DIR_MODE, exist_ok=True)
        log_path = os.path.join(servers, "server-%s-%s-%s.log" % (port, time.strftime("%Y%m%d-%H%M%S"),
                                                                 secrets.token_hex(2)))
    elif not log_path.startswith("/") and cwd:
        log_path = os.path.join(cwd, log_path)
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    pid_path = log_path + ".pid"
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    if cwd is not None and not os.path.isdir(cwd):
        raise RuntimeError("the original server's working directory %s does not exist" % cwd)
    try:
        os.unlink(pid_path)
    except FileNotFoundError:
        pass  # no pid file from an earlier launch
    child = os.fork()
    if child == 0:  # the intermediate: a new session, then the server's own process, and out
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            old = os.umask(0o077)
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.umask(old)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.closerange(3, 65536)  # never the watchdog's flock: it would outlive the watchdog
            if cwd is not None:
                os.chdir(cwd)
            with open(pid_path + ".tmp", "w") as f:
                f.write("%d\n" % os.getpid())
            os.replace(pid_path + ".tmp", pid_path)
            os.execvpe(argv[0], argv, full_env)
        except BaseException as exc:  # noqa: B036 - in the forked child: say why, never return
            try:
                os.write(2, ("eagle-workbench watchdog: could not launch %s: %r\n" % (argv[0], exc)).encode())
            finally:
                os._exit(127)
    os.waitpid(child, 0)
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        try:
            with open(pid_path) as f:
                text = f.read().strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit():
            return int(text), log_path
        time.sleep(0.02)
    raise RuntimeError("no pid file %s within 30 s of launching %s" % (pid_path, " ".join(argv)))


def _http_status(url, timeout):
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ValueError):
        return None


#: seconds a relaunch that keeps progressing is waited for in all (``workbench.session.startup_wait.MAX_START_S``)
MAX_START_S = 6 * 3600.0
#: CPU seconds per second of the group that count as progress (``remote.readiness.MIN_CPU_PROGRESS_S``)
MIN_CPU_PROGRESS_S = 0.05
#: an access-log line of a readiness poll: no progress (``remote.box.POLL_LINE``)
_POLL_LINE = re.compile(rb'"(?:GET|POST) /(?:health_generate|health|generate|v1/models|v1/completions)[ ?"]')


def group_cpu_s(pgid):
    """CPU seconds (user + system) used so far by the live processes of process group ``pgid``."""
    hz = os.sysconf("SC_CLK_TCK")
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / float(hz)


def _log_progress(log_path, offset):
    """``(bytes of new lines but the polls', new offset)`` of ``log_path`` after byte ``offset``."""
    try:
        size = os.path.getsize(log_path)
    except OSError:
        return 0, offset
    if size < offset:
        offset = 0
    if size == offset:
        return 0, offset
    with open(log_path, "rb") as f:
        f.seek(max(offset, size - (1 << 20)))
        new = f.read(size - offset)
    return sum(len(ln) + 1 for ln in new.split(b"\n") if ln.strip() and not _POLL_LINE.search(ln)), size


def _last_log_line(log_path):
    """The last line of ``log_path`` but the polls' (its last 64 KiB read), or None."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(os.path.getsize(log_path) - 65536, 0))
            lines = [ln for ln in f.read().replace(b"\r", b"\n").split(b"\n")
                     if ln.strip() and not _POLL_LINE.search(ln)]
    except OSError:
        return None
    return lines[-1].decode("utf-8", "replace").strip()[:300] if lines else None


def wait_healthy(pid, port, timeout, log_path=None, max_s=MAX_START_S):
    """Poll ``GET /health_generate`` (``/health`` on a server without it) on 127.0.0.1:``port``
    until 200 while ``pid`` lives. ``timeout`` is a STALL time-out (the workbench's
    ``server_start_timeout``, ``workbench.session.startup_wait``): given up after that many seconds
    without progress (no new log line but the polls' own, less than ``MIN_CPU_PROGRESS_S`` CPU
    seconds per second used by the group of ``pid``), or after ``max_s`` in all. Returns the
    seconds waited; raises RuntimeError (it died, it stalled: the last log line named, or not
    ready within ``max_s``)."""
    start = last_progress = time.monotonic()
    path, last = "/health_generate", "no answer yet"
    offset = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else 0
    pgid = (proc_stat(pid) or (None, None, pid))[2]
    cpu, looked = group_cpu_s(pgid), start
    while True:
        if start_of(pid) is None:
            raise RuntimeError("it exited before answering 200 (last: %s)" % last)
        status = _http_status("http://127.0.0.1:%d%s" % (port, path), min(30.0, max(timeout, 1.0)))
        if status == 200:
            return time.monotonic() - start
        if status in (404, 405) and path != "/health":
            path = "/health"
            continue
        last = "HTTP %s" % status if status is not None else "no answer"
        now = time.monotonic()
        grown, offset = _log_progress(log_path, offset) if log_path else (0, offset)
        used = group_cpu_s(pgid)
        if grown or (used - cpu) / max(now - looked, 1e-6) >= MIN_CPU_PROGRESS_S:
            last_progress = now
        cpu, looked = used, now
        if now - last_progress >= timeout:
            raise RuntimeError("it stalled: no progress for %.1f s (stall time-out %gs: no new log line, no CPU "
                               "time; last: %s; last log line: %s)" % (now - last_progress, timeout, last,
                                                        _last_log_line(log_path) if log_path else None))
        if now - start >= max_s:
            raise RuntimeError("it never became ready in %gs (last: %s)" % (max_s, last))
        time.sleep(0.25)


def _bring_back_original(journal, original, report, cfg, layout):
    argv = [str(a) for a in original["argv"]]
    command = " ".join(argv)
    port = original.get("port")
    ours = {int(s["pid"]) for s in journal.data.get("started_servers") or []}
    try:
        running = _same_argv(argv, exclude=ours)
        if running:
            pid, done = running[0]["pid"], ("the original server's command already runs (pid %d); not relaunched: %s"
                                            % (running[0]["pid"], command))
            _log = None
        else:
            launched_at = time.time()
            pid, _log = launch_server(argv, port, original.get("log_path"), original.get("cwd"), original.get("env"),
                                      layout)
            done = None
    except (OSError, RuntimeError) as exc:
        report["problems"].append("could not relaunch the original server (%s): %s" % (command, exc))
        return
    journal.data["original_server"] = dict(original, stopped=False)
    if not _write(journal, report, "relaunched the original server"):
        return
    settle(journal, report)
    try:
        health = ""
        if port is not None:
            wait_healthy(pid, int(port), cfg["server_start_timeout"], log_path=_log)
        elif done is None:
            time.sleep(1.0)
            if start_of(pid) is None:
                raise RuntimeError("it exited at once (no port recorded to health-check)")
            health = " (no port recorded: running, health not checked)"
    except RuntimeError as exc:
        report["problems"].append("could not relaunch the original server (%s): %s" % (command, exc))
        journal.data = dict(journal.data or {"run_id": report.get("run_id"), "started_at": time.time(),
                                             "started_servers": []})
        journal.data["original_server"] = dict(original, stopped=True)
        _write(journal, report, "the relaunched original did not come up")
        return
    if done is None:
        # the relaunch's record, as workbench.session.launches.launch_record makes it (no phases:
        # this script reads no log lines)
        ready_at = time.time() if port is not None else None
        after = round(ready_at - launched_at, 2) if ready_at is not None else None
        report["launch"] = {"label": "restore", "reason": "restore (watchdog): relaunch the server as found",
                            "launch_command": command, "pid": pid, "log_path": original.get("log_path"),
                            "log_start": None, "started": True, "error": None, "stopped_at": None, "stopped": None,
                            "launched_at": launched_at, "started_at": launched_at, "ready_at": ready_at,
                            "healthy_after_s": after, "ready_after_s": after, "phases": None, "startup": None}
    report["actions"].append(done or "relaunched the original server (pid %d)%s: %s" % (pid, health, command))


def settle(journal, report):
    """Everything undone: empty the journal (``{}``, as ``Journal.close`` writes it)."""
    if not report["problems"] and journal.data:
        journal.data = {}
        _write(journal, report, "everything was undone")


def restore(state_dir, cfg=None):
    """Undo everything the journal under ``state_dir`` records (see the module docstring).
    Returns the report: ``{"actions": [...], "problems": [...], "clean": bool, "run_id"}`` and, when
    the original server was relaunched, ``"launch"`` (its record: label ``restore``, reason, launch
    and ready times, as ``workbench.session.launches.launch_record`` makes it); never
    raises for a step that failed (it is a ``problems`` line and the journal keeps it)."""
    cfg = dict(DEFAULTS, **(cfg or {}))
    layout = Layout(state_dir)
    report = {"actions": [], "problems": []}
    journal = Journal(layout.journal)
    try:
        journal.load()
    except (OSError, ValueError) as exc:
        report["problems"].append(str(exc))
        report["clean"] = False
        return report
    report["run_id"] = journal.data.get("run_id")
    entries, unreadable = _probe_entries(layout)
    probed_files = sorted({e["path"] for e in entries})
    for server in list(journal.data.get("started_servers") or []):
        _stop_started(journal, server, report, cfg)
    if journal.data.get("launching"):
        _stop_unrecorded_launch(journal, journal.data["launching"], report, cfg)
    failures, reverted = [], 0
    for entry in reversed(entries):
        try:
            note = revert_probe(entry)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            failures.append("%s: %s" % (entry["tag"], exc))
            continue
        reverted += 1
        report["actions"].append("reverted probe %s in %s (sha256 restored)%s"
                                 % (entry["tag"], entry["path"], "; " + note if note else ""))
    failures += unreadable
    if failures:
        report["problems"].append("could not revert probes: reverted %d probe(s); could not revert %d:\n  %s"
                                  % (reverted, len(failures),
                                     "\n  ".join(failures)))
    for path in list(journal.data.get("created_paths") or []):
        if not path.startswith(layout.state_dir.rstrip("/") + "/"):
            report["problems"].append("journal names %s outside the state dir %s: not removed" % (path, layout.state_dir))
            continue
        try:
            _remove_tree(path)
        except OSError as exc:
            report["problems"].append("could not remove %s: %s" % (path, exc))
            continue
        journal.data["created_paths"] = [p for p in journal.data.get("created_paths") or [] if p != path]
        if _write(journal, report, "removed %s" % path):
            report["actions"].append("removed %s (created by the run)" % path)
    _remove_write_leftovers(layout, probed_files, report)
    original = journal.data.get("original_server") or {}
    if original.get("argv"):
        report["original_argv"] = list(original["argv"])  # for the redaction of what is printed of it
    if original.get("stopped"):
        _bring_back_original(journal, original, report, cfg, layout)
    else:
        settle(journal, report)
    report["clean"] = not report["problems"]
    return report


# -- the run lock (the lock script's rules: workbench.session.runlock._SCRIPT) -------------------


def read_lock(layout):
    """``(holder dict or None, mtime_ns or None)``; an unreadable lock is ``{"_unreadable": why}``."""
    try:
        with open(layout.lock, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read()
    except FileNotFoundError:
        return None, None
    try:
        h = json.loads(raw.decode("utf-8"))
        if not isinstance(h, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        h = {"_unreadable": str(exc)}
    return h, st.st_mtime_ns


def activity(layout):
    """The mtimes (ns) of what a run, or whoever restores its box, changes as it works: the
    journal and the probe journal's directory. A change is a sign of life as the heartbeat is."""
    out = []
    for path in (layout.journal, layout.probes):
        try:
            out.append(os.stat(path).st_mtime_ns)
        except OSError:
            out.append(None)
    return tuple(out)


def holder_alive_here(h, boot):
    """True when the holder ``h`` runs on this kernel and its process lives (pid and start time);
    None when it is no holder of this kernel (only its heartbeat tells)."""
    if boot is None or not isinstance(h, dict) or h.get("boot_id") != boot:
        return None
    return start_of(h.get("pid", -1)) == h.get("pid_start")


class DirLock:
    """``flock`` on the diagnosis directory: the run lock script's guard."""

    def __init__(self, directory):
        self.directory = directory
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.directory, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def _self_identity():
    return {"pid": os.getpid(), "pid_start": start_of(os.getpid()), "boot_id": boot_id()}


def watch(layout, cfg, announce=None):
    """The watch loop (see the module docstring). ``announce(dict)``: called once, with the start
    answer. Returns what ended it: ``{"status": "released"|"taken-over"|"acted", ...}``."""
    run_id = cfg["run_id"]
    after, poll = float(cfg["after_s"]), float(cfg["poll_s"])
    boot = boot_id()
    h, mtime = read_lock(layout)
    if h is None or h.get("run_id") != run_id:
        answer = {"status": "not-held", "holder": h}
        if announce:
            announce(answer)
        return answer
    me = dict(_self_identity(), run_id=run_id, after_s=after, poll_s=poll, started_at=time.time(), state="watching")
    write_json(layout.watchdog_state, me)
    if announce:
        announce({"status": "watching", "pid": me["pid"], "pid_start": me["pid_start"], "boot_id": boot})
    last_sign, last_sign_wall, last_seen = time.monotonic(), time.time(), (mtime, activity(layout))
    while True:
        h, mtime = read_lock(layout)
        now = time.monotonic()
        if h is None or h.get("run_id") != run_id:
            return {"status": "released" if h is None else "taken-over", "holder": h}
        seen = (mtime, activity(layout))
        if seen != last_seen or holder_alive_here(h, boot):
            last_sign, last_sign_wall, last_seen = now, time.time(), seen
        if now - last_sign >= after:
            with DirLock(layout.diagnosis):
                h2, mtime2 = read_lock(layout)
                if h2 is None or h2.get("run_id") != run_id:
                    return {"status": "released" if h2 is None else "taken-over", "holder": h2}
                seen = (mtime2, activity(layout))
                if seen != last_seen or holder_alive_here(h2, boot):
                    last_sign, last_sign_wall, last_seen = time.monotonic(), time.time(), seen
                    continue
                acted_at = time.time()
                ident = _self_identity()
                takeover = dict(ident, run_id="%s-watchdog" % run_id, host=socket.gethostname(),
                                runbook=WATCHDOG_RUNBOOK, started_at=acted_at, heartbeat=False, watchdog_of=run_id)
                write_atomic(layout.lock, json.dumps(takeover).encode("utf-8"), 0o600)
            return act(layout, cfg, run_id, takeover, silent_for=now - last_sign, last_sign_wall=last_sign_wall,
                       acted_at=acted_at, holder=h2)
        time.sleep(poll)


def act(layout, cfg, run_id, takeover, *, silent_for, last_sign_wall, acted_at, holder):
    """Restore the box for the silent run ``run_id`` (the lock is this watchdog's, ``takeover``),
    write the report, release the lock. Returns ``{"status": "acted", "report": ...}``."""
    state = dict(_self_identity(), run_id=run_id, after_s=cfg["after_s"], poll_s=cfg["poll_s"], state="restoring",
                 acted_at=acted_at)
    try:
        write_json(layout.watchdog_state, state)
    except OSError as exc:
        sys.stderr.write("could not write %s: %s\n" % (layout.watchdog_state, exc))
    started = time.monotonic()
    try:
        report = restore(layout.state_dir, cfg)
    except Exception as exc:  # noqa: BLE001 - a bug here must still end in a report and a released lock
        report = {"actions": [], "problems": ["the watchdog's restore failed: %s: %s" % (type(exc).__name__, exc)],
                  "clean": False}
    finished = time.time()
    report.update(run_id=run_id, watchdog_pid=os.getpid(), after_s=cfg["after_s"], silent_for_s=round(silent_for, 3),
                  last_sign_of_life_at=last_sign_wall, acted_at=acted_at, finished_at=finished,
                  restore_s=round(time.monotonic() - started, 3),
                  restored_after_silence_s=round(finished - last_sign_wall, 3),
                  holder={k: v for k, v in (holder or {}).items() if k in ("run_id", "pid", "host", "runbook",
                                                                             "started_at", "boot_id")})
    try:
        write_json(layout.report, report)
    except OSError as exc:
        sys.stderr.write("could not write the report %s: %s\n" % (layout.report, exc))
    with DirLock(layout.diagnosis):
        h, _m = read_lock(layout)
        if h is not None and h.get("run_id") == takeover["run_id"]:
            os.unlink(layout.lock)
    return {"status": "acted", "report": report}


def _daemonize(layout, cfg):
    """``start``: fork twice, the grandchild in a session of its own with its stdio away from the
    caller; return the grandchild's answer (read from a pipe) to print."""
    os.makedirs(layout.diagnosis, mode=DIR_MODE, exist_ok=True)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            _run_daemon(layout, cfg, w)
        except BaseException as exc:  # noqa: B036 - the daemon's last word, then out
            try:
                os.write(w, (json.dumps({"status": "error", "error": "%s: %s" % (type(exc).__name__, exc)}) + "\n")
                         .encode())
            except OSError:
                sys.stderr.write("watchdog: %r\n" % (exc,))
        os._exit(0)
    os.close(w)
    os.waitpid(child, 0)
    chunks = []
    deadline = time.monotonic() + float(cfg["wait_s"]) + 20.0
    while time.monotonic() < deadline:
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
        if b"\n" in data:
            break
    os.close(r)
    text = b"".join(chunks).decode("utf-8", "replace").strip()
    if not text:
        return {"status": "error", "error": "the watchdog gave no answer (see %s)" % layout.log}
    return json.loads(text.splitlines()[0])


def _flock_file(path, wait_s):
    """``flock`` the file ``path`` (created 0600) for this process's life, waiting up to ``wait_s``
    seconds. The file is removed by its holder when it exits (:func:`_unlock_file`), so a lock taken
    on a file that was removed meanwhile is let go and taken again on the new one (the inode checked
    after each ``flock``). Returns the fd, or None when another process still holds it."""
    deadline = time.monotonic() + wait_s
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
            continue
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # its holder removed it as we took it: take the new one


def _unlock_file(path, fd):
    """Remove the lock file, then let go of it (in that order: see :func:`_flock_file`)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass  # removed already (a state dir deleted under us)
    os.close(fd)


def _run_daemon(layout, cfg, w):
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    try:
        log_start = os.path.getsize(layout.log)
        if log_start > 256 * 1024:  # the log of the box's watchdogs: kept short
            os.unlink(layout.log)
            log_start = 0
    except FileNotFoundError:
        log_start = 0
    old = os.umask(0o077)
    log = os.open(layout.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.umask(old)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the session that started it may go

    answered = []

    def announce(answer):
        os.write(w, (json.dumps(answer) + "\n").encode())
        os.close(w)
        answered.append(answer)

    def quiet_exit():
        # nothing worth keeping happened: leave the state dir as found (no log lines of ours)
        try:
            if log_start == 0:
                os.unlink(layout.log)
            else:
                os.truncate(layout.log, log_start)
        except FileNotFoundError:
            return

    h, _m = read_lock(layout)
    if h is None or h.get("run_id") != cfg["run_id"]:
        announce({"status": "not-held", "holder": h})  # no waiting for a run that holds nothing
        quiet_exit()
        return
    fd = _flock_file(layout.watchdog_lock, float(cfg["wait_s"]))
    if fd is None:
        try:
            with open(layout.watchdog_state) as f:
                other = json.load(f)
        except (OSError, ValueError):
            other = None
        announce({"status": "busy", "watchdog": other})
        return
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print("%s watchdog pid %d watching run %s (acts after %gs of silence)" % (stamp, os.getpid(), cfg["run_id"],
                                                                               float(cfg["after_s"])))
    result = {"status": "error"}
    try:
        result = watch(layout, cfg, announce)
    finally:
        try:
            with open(layout.watchdog_state) as f:
                mine = json.load(f).get("pid") == os.getpid()
        except (OSError, ValueError):
            mine = False
        if mine:
            os.unlink(layout.watchdog_state)
        if not answered:
            announce({"status": "error", "error": "the watchdog ended before it watched"})
        if result["status"] in ("released", "taken-over", "not-held"):
            quiet_exit()
        else:
            report = result.get("report") or {}
            print("%s watchdog pid %d: %s%s" % (time.strftime("%Y-%m-%d %H:%M:%S"), os.getpid(), result["status"],
                                                "" if not report else " (%d actions, %d problems)"
                                                % (len(report.get("actions", [])), len(report.get("problems", [])))))
        _unlock_file(layout.watchdog_lock, fd)


def main(argv):
    """``OP STATE_DIR [CONFIG_JSON]``: see the module docstring. Prints one JSON object."""
    if len(argv) < 2 or argv[0] not in ("start", "restore"):
        print(json.dumps({"status": "error", "error": "usage: start|restore STATE_DIR [CONFIG_JSON]"}))
        return 2
    op, state_dir = argv[0], argv[1]
    cfg = dict(DEFAULTS, **(json.loads(argv[2]) if len(argv) > 2 else {}))
    layout = Layout(state_dir)
    if op == "restore":
        print(json.dumps(restore(state_dir, cfg)))
        return 0
    if not cfg.get("run_id"):
        print(json.dumps({"status": "error", "error": "start needs a run_id"}))
        return 2
    print(json.dumps(_daemonize(layout, cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
