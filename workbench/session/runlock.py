"""One run per box: a lock ON the box, taken before a run changes anything, released at its end.

Two diagnoses (or sweeps) started on the same box at the same moment must not both pass the
"another run is pending" check: the decision is made atomically on the box, by one small Python
script run there (:data:`_SCRIPT`, through ``box.run``, so it works on the local box and over SSH
alike) that holds ``flock`` on the directory ``<state_dir>/diagnosis`` for the few milliseconds it
takes to read the lock file ``<state_dir>/diagnosis/run.lock`` (JSON, the holder), decide whether
its holder still lives and write the new holder (write to a temporary file, then ``rename``).

Whether the holder lives is decided ON THE BOX, so the driver may run on another machine:

* a holder on the box's own kernel (its recorded ``boot_id``, ``/proc/sys/kernel/random/boot_id``,
  is the box's): alive while ``/proc/<pid>/stat`` exists, is no zombie, and its start time (field 22, clock ticks
  since boot) is the one recorded; a pid reused by another process has another start time, so it
  never aliases; a reboot changes the boot id;
* a holder on another machine: it touches the lock file every :data:`HEARTBEAT_S` seconds (from a
  thread with its own connection, :class:`RunLock`); alive while the file's mtime, by the box's
  clock, is younger than :data:`STALE_AFTER_S`.

A run watched by a watchdog on the box (:mod:`workbench.session.watchdog`) heartbeats wherever it
runs, every :func:`workbench.session.watchdog.heartbeat_interval` seconds (``acquire(...,
heartbeat_s=...)``): the watchdog's signs of life are the lock file's mtime changing and, for a
holder on the box's kernel, its process alive. When the watchdog restores the box it takes the
lock over (holder ``runbook`` ``watchdog``, ``watchdog_of`` the run's id); the run's heartbeat then
finds the lock lost (:attr:`RunLock.lost`) and its journal refuses every further change.

A holder that ran on the machine asking is checked there too (pid and start time): the driver
that just killed its kernel knows it is dead before the heartbeat goes stale. A stale lock
(holder dead) is taken over under the same ``flock``: two contenders can never both take it. The lock file is ``{"run_id", "pid", "pid_start", "boot_id", "host", "runbook",
"started_at", "heartbeat"}``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from remote.errors import RemoteError
from workbench.errors import DiagnosisError, JournalError
from workbench.session.watchdog_box import (DIAGNOSIS_DIR, JOURNAL_NAME, LOCK_NAME, REPORT_NAME,
                                            WATCHDOG_RUNBOOK, WATCHDOG_STATE_NAME)

__all__ = ["HEARTBEAT_S", "STALE_AFTER_S", "RUNBOOK_ENV", "Holder", "BoxStatus", "RunLock", "RunLocked",
           "acquire", "box_status", "release", "heartbeat", "lock_path", "describe_holder", "is_mine", "self_identity", "run_name",
           "JUPYTER_SESSION_ENV"]

#: seconds between two heartbeats of a holder that runs on another machine than the box
HEARTBEAT_S = 10.0
#: a remote holder whose heartbeat is older than this (box clock) is dead
STALE_AFTER_S = 60.0
#: set by ``workbench runbook`` in the kernel's environment: the runbook's name, shown to a loser
RUNBOOK_ENV = "EAGLE_WORKBENCH_RUNBOOK"

# Run on the box: python3 -I -S - OP STATE_DIR ARG STALE_AFTER (OP: acquire, release, heartbeat). Prints one
# JSON object. Standard library only. Must decide ``alive`` as :func:`_alive_from` does.
_SCRIPT = r'''
import fcntl, json, os, sys, time
op, d = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else None
stale_after = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0
lock = os.path.join(d, "run.lock")
def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None
BOOT = boot_id()
def start_of(pid):
    # None for no such process, and for a zombie (it has exited; its parent has not reaped it)
    try:
        with open("/proc/%d/stat" % int(pid)) as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None
def read():
    try:
        with open(lock) as f:
            h = json.load(f)
        if not isinstance(h, dict):
            raise ValueError("not an object")
        h["_mtime"] = os.stat(lock).st_mtime
        return h
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return {"_unreadable": str(e), "_mtime": os.stat(lock).st_mtime}
def alive(h):
    if h is None:
        return None
    if "_unreadable" in h:
        return time.time() - h["_mtime"] < stale_after
    if BOOT is not None and h.get("boot_id") == BOOT:
        return start_of(h.get("pid", -1)) == h.get("pid_start")
    return time.time() - h["_mtime"] < stale_after
out = {"box_boot_id": BOOT}
os.makedirs(d, mode=0o700, exist_ok=True)  # private, as the journal it guards (workbench.session.journal)
g = os.open(d, os.O_RDONLY)  # flock on the directory itself: no guard file is left behind
try:
    fcntl.flock(g, fcntl.LOCK_EX)
    h = read()
    a = alive(h)
    if op == "acquire":
        req = json.loads(arg)
        new = req["holder"]
        # the caller runs where the holder ran and saw it dead: its heartbeat may still look fresh
        if h is not None and a and not (req.get("dead") and h.get("run_id") == req["dead"]):
            out.update(status="held", holder=h, alive=True)
        else:
            tmp = lock + ".%d.tmp" % os.getpid()
            with open(tmp, "w") as f:
                json.dump(new, f)
            os.rename(tmp, lock)
            out.update(status="acquired", previous=h)
    elif op == "release":
        if h is not None and (h.get("run_id") == arg or (arg == "*dead*" and not a)):
            os.unlink(lock)
            out.update(status="released", holder=h)
        else:
            out.update(status="not-held", holder=h, alive=a)
    elif op == "heartbeat":
        if h is not None and h.get("run_id") == arg:
            os.utime(lock)
            out.update(status="ours")
        else:
            out.update(status="lost", holder=h)
finally:
    os.close(g)
print(json.dumps(out))
'''


class RunLocked(DiagnosisError):
    """Another run, still alive, holds the box: ``holder`` (:class:`Holder`) names it. Exit 2."""

    def __init__(self, message: str, holder: "Holder"):
        super().__init__(message)
        self.holder = holder


@dataclass
class Holder:
    """Who holds (or held) a box's run lock, and whether it lives (decided on the box: see the
    module docstring). ``started_at``: epoch seconds; ``alive``: ``None`` when there is no lock."""

    run_id: Optional[str]
    pid: Optional[int]
    host: Optional[str]
    runbook: Optional[str]
    started_at: Optional[float]
    alive: Optional[bool]
    raw: dict

    @property
    def watchdog_of(self) -> Optional[str]:
        """The run whose watchdog this holder is (it restores the box for it), else None."""
        return self.raw.get("watchdog_of") if self.raw.get("runbook") == WATCHDOG_RUNBOOK else None

    @classmethod
    def from_box(cls, h: Optional[dict], alive: Optional[bool]) -> Optional["Holder"]:
        if h is None:
            return None
        return cls(run_id=h.get("run_id"), pid=h.get("pid"), host=h.get("host"), runbook=h.get("runbook"),
                   started_at=h.get("started_at"), alive=alive, raw=dict(h))

    def describe(self) -> str:
        """``run 1a2b3c (pid 123 on laptop, runbook diagnose_acceptance, since 15:02:11 UTC, 40 s ago)``."""
        if "_unreadable" in self.raw:
            return f"a run whose lock file is unreadable ({self.raw['_unreadable']})"
        if self.watchdog_of:
            return (f"the watchdog of run {self.watchdog_of} (pid {self.pid} on {self.host}), restoring the box since "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(self.started_at or 0))}")
        since = ""
        if isinstance(self.started_at, (int, float)):
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))
            since = f", since {stamp} ({max(0, int(time.time() - self.started_at))} s ago)"
        return (f"run {self.run_id} (pid {self.pid} on {self.host}, runbook {self.runbook or 'unknown'}{since})")


@dataclass
class BoxStatus:
    """One small read of a box's run state (:func:`box_status`): the lock's holder (or None), the
    journal's text (or None: no journal), the box's boot id; the watchdog's state file
    (``watchdog``: ``{"pid", "run_id", "after_s", "state", ...}`` or None) and whether its process
    lives (``watchdog_alive``), the text of the watchdog's report not yet shown (or None)."""

    holder: Optional[Holder]
    journal_text: Optional[str]
    box_boot_id: Optional[str]
    watchdog: Optional[dict] = None
    watchdog_alive: Optional[bool] = None
    watchdog_report_text: Optional[str] = None


def lock_path(box) -> str:
    """``<box.state_dir>/diagnosis/run.lock``."""
    return f"{box.state_dir}/{DIAGNOSIS_DIR}/{LOCK_NAME}"


def _run_script(box, op: str, arg: Optional[str] = None, *, timeout: float) -> dict:
    argv = [box.python, "-I", "-S", "-", op, f"{box.state_dir}/{DIAGNOSIS_DIR}"]
    if arg is not None:
        argv += [arg, str(STALE_AFTER_S)]
    res = box.run(argv, stdin=_SCRIPT, timeout=timeout, check=False)
    if res.exit_code != 0:
        raise JournalError(f"the run lock script failed on {box} (exit {res.exit_code}): "
                           f"{res.stderr.strip()[-300:]}")
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise JournalError(f"the run lock script on {box} printed no answer: {res.stdout[-300:]!r}") from exc


#: ``box_status``'s one read, in the shell (no interpreter start: it runs before every command):
#: the box's boot id and clock, the lock file with its mtime and its holder's /proc stat line, the
#: watchdog's state file and its process's stat line, the watchdog's report not yet shown, the journal.
_STATUS_SH = r"""d=$1
printf 'BOOT %s\n' "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
printf 'NOW %s\n' "$(date +%s)"
if [ -f "$d/@LOCK@" ]; then
  printf 'MTIME %s\n' "$(stat -c %Y "$d/@LOCK@")"
  pid=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$d/@LOCK@" | head -n 1)
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then printf 'STAT %s\n' "$(cat "/proc/$pid/stat" 2>/dev/null)"; fi
  printf 'LOCK %s\n' "$(tr '\n' ' ' < "$d/@LOCK@")"
fi
if [ -f "$d/@WATCHDOG@" ]; then
  printf 'WATCHDOG %s\n' "$(tr '\n' ' ' < "$d/@WATCHDOG@")"
  pid=$(tr '\n' ' ' < "$d/@WATCHDOG@" | sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' | head -n 1)
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then printf 'WSTAT %s\n' "$(cat "/proc/$pid/stat" 2>/dev/null)"; fi
fi
if [ -f "$d/@REPORT@" ]; then printf 'REPORT %s\n' "$(head -c 262144 "$d/@REPORT@" | tr '\n' ' ')"; fi
if [ -f "$d/@JOURNAL@" ]; then echo JOURNAL; head -c 1048576 "$d/@JOURNAL@"; fi
""".replace("@WATCHDOG@", WATCHDOG_STATE_NAME).replace("@REPORT@", REPORT_NAME).replace(
    "@LOCK@", LOCK_NAME).replace("@JOURNAL@", JOURNAL_NAME)


def _alive_from(holder: dict, box_boot: Optional[str], stat_line: Optional[str], mtime: float, now: float) -> bool:
    """The lock script's ``alive`` (see the module docstring), from what ``_STATUS_SH`` read."""
    if "_unreadable" in holder:
        return now - mtime < STALE_AFTER_S
    if box_boot and holder.get("boot_id") == box_boot:
        if not stat_line:
            return False
        try:
            fields = stat_line.rsplit(") ", 1)[1].split()
        except IndexError:
            return False
        if fields[0] in ("Z", "X") or len(fields) < 20:
            return False
        return fields[19] == str(holder.get("pid_start")) and stat_line.split(" ", 1)[0] == str(holder.get("pid"))
    return now - mtime < STALE_AFTER_S


def _alive_here(holder: dict, box_says: bool) -> bool:
    """A holder that ran on THIS machine (its boot id is this machine's) is checked here, by pid
    and ``/proc`` start time: a remote box only sees its heartbeat, which stays fresh for up to
    :data:`STALE_AFTER_S` after the holder died (the driver that just killed its kernel must not
    wait that long to restore). Any other holder: what the box says."""
    me = self_identity()
    if me["boot_id"] is None or holder.get("boot_id") != me["boot_id"] or not isinstance(holder.get("pid"), int):
        return box_says
    try:
        with open(f"/proc/{holder['pid']}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in ("Z", "X") and fields[19] == str(holder.get("pid_start"))


def box_status(box, *, timeout: float = 10.0) -> BoxStatus:
    """The lock's holder, whether it lives (decided from what the box reports: its boot id, the
    holder's ``/proc`` start time, the lock's mtime by the box's clock), the journal's text, the
    watchdog's state and report, in one shell call on the box (no interpreter started). Raises
    :class:`JournalError` when the box's answer cannot be read, ``RemoteError`` for the box."""
    res = box.run(["bash", "-c", _STATUS_SH, "status", f"{box.state_dir}/{DIAGNOSIS_DIR}"], timeout=timeout,
                  check=False)
    if res.exit_code != 0:
        raise JournalError(f"could not read the run state on {box} (exit {res.exit_code}): {res.stderr.strip()[-300:]}")
    head, _, journal = res.stdout.partition("JOURNAL\n")
    info: dict[str, str] = {}
    for line in head.splitlines():
        key, _, value = line.partition(" ")
        info[key] = value
    holder = None
    alive = None
    if "LOCK" in info:
        try:
            holder = json.loads(info["LOCK"])
            if not isinstance(holder, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            holder = {"_unreadable": str(exc)}
        try:
            mtime, now = float(info.get("MTIME", "0")), float(info.get("NOW", "0"))
        except ValueError as exc:
            raise JournalError(f"could not read the run lock's age on {box}: {info}") from exc
        alive = _alive_from(holder, info.get("BOOT") or None, info.get("STAT"), mtime, now)
        if alive:
            alive = _alive_here(holder, alive)
    watchdog = watchdog_alive = None
    if "WATCHDOG" in info:
        try:
            watchdog = json.loads(info["WATCHDOG"])
            if not isinstance(watchdog, dict):
                raise ValueError("not a JSON object")
            watchdog_alive = _stat_matches(info.get("WSTAT"), watchdog.get("pid"), watchdog.get("pid_start"))
        except ValueError as exc:
            watchdog, watchdog_alive = {"_unreadable": str(exc)}, None
    return BoxStatus(Holder.from_box(holder, alive), journal if "JOURNAL\n" in res.stdout else None,
                     info.get("BOOT") or None, watchdog=watchdog, watchdog_alive=watchdog_alive,
                     watchdog_report_text=info.get("REPORT"))


def _stat_matches(stat_line: Optional[str], pid: Any, pid_start: Any) -> bool:
    """True when ``stat_line`` (``/proc/PID/stat``) is of live process ``pid`` started at ``pid_start``."""
    if not stat_line:
        return False
    try:
        fields = stat_line.rsplit(") ", 1)[1].split()
    except IndexError:
        return False
    return (len(fields) >= 20 and fields[0] not in ("Z", "X") and fields[19] == str(pid_start)
            and stat_line.split(" ", 1)[0] == str(pid))


def self_identity() -> dict:
    """This process's pid, its start time in clock ticks (``/proc/self/stat`` field 22) and this
    machine's boot id; ``None`` for what this machine has no ``/proc`` for."""
    pid_start = boot = None
    try:
        with open("/proc/self/stat") as f:
            pid_start = int(f.read().rsplit(") ", 1)[1].split()[19])
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except (OSError, ValueError, IndexError):
        pid_start = boot = None
    return {"pid": os.getpid(), "pid_start": pid_start, "boot_id": boot}


def is_mine(holder: Optional[Holder]) -> bool:
    """True when ``holder`` is this very process (pid, start time and boot id all match)."""
    if holder is None:
        return False
    me = self_identity()
    return all(holder.raw.get(k) == me[k] for k in ("pid", "pid_start", "boot_id")) and me["boot_id"] is not None


class RunLock:
    """The run lock this process holds on ``box`` (from :func:`acquire`). ``heartbeat`` is True
    when this process runs on another machine than the box, or a watchdog watches the run: a
    daemon thread then touches the lock every ``heartbeat_s`` seconds (default
    :data:`HEARTBEAT_S`) over its own connection (``remote.connect(host)``). ``lost`` is set when
    the heartbeat finds the lock no longer this run's (the watchdog restored the box: the journal
    then refuses every change, :class:`workbench.errors.WatchdogError`). ``watchdog``: the run's
    :class:`workbench.session.watchdog.Watchdog` on the box, or None. :meth:`release` is idempotent."""

    def __init__(self, box, host: str, holder: dict, heartbeat: bool, *, heartbeat_s: float = HEARTBEAT_S):
        self.box = box
        self.host = host
        self.holder = holder
        self.run_id = holder["run_id"]
        self.released = False
        self.heartbeat_s = float(heartbeat_s)
        self.lost: Optional[str] = None
        self.watchdog = None
        self._stop = threading.Event()
        self._thread = None
        _MINE[self.run_id] = self
        if heartbeat:
            self._thread = threading.Thread(target=self._beat, name=f"run-lock-heartbeat-{self.run_id}", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        from remote import connect

        try:
            box = connect(self.host, state_dir=self.box.state_dir)
        except (RemoteError, OSError) as exc:
            print(f"[eagle-workbench] run lock heartbeat: cannot connect to {self.host}: {exc}", file=sys.stderr)
            return
        try:
            while not self._stop.wait(self.heartbeat_s):
                try:
                    out = _run_script(box, "heartbeat", self.run_id, timeout=max(self.heartbeat_s, 30.0))
                except (RemoteError, JournalError) as exc:
                    print(f"[eagle-workbench] run lock heartbeat failed: {exc}", file=sys.stderr)
                    continue
                if out.get("status") != "ours":
                    if self._stop.is_set() or self.released:
                        return  # released by the run itself meanwhile: nothing to say
                    # not released by this run (release() marks it): the watchdog took it over, or
                    # restored the box and released it
                    other = Holder.from_box(out.get("holder"), None)
                    self.lost = (f"the run lock on {self.box.name} is now held by {other.describe()}" if other
                                 else f"the run lock on {self.box.name} was released by someone else")
                    print(f"[eagle-workbench] run {self.run_id}: {self.lost}; heartbeat stopped", file=sys.stderr)
                    return
        finally:
            box.close()

    def stop_heartbeat(self) -> None:
        """Stop the heartbeat thread (the lock was released by someone else: :func:`restore_box`)."""
        self._stop.set()

    def release(self, *, timeout: float = 10.0) -> None:
        """Remove the lock if it is still this run's (its watchdog then exits within a poll).
        Raises ``RemoteError``/``JournalError``."""
        self._stop.set()
        if not self.released:
            release(self.box, self.run_id, timeout=timeout)
            self.released = True


#: set by Jupyter server (jupyter_server's ``SessionManager.get_kernel_env``) in a notebook's or
#: console's kernel: the notebook's path (``/work/repo/notebooks/box_console.ipynb``, a console's ``Console 1``)
JUPYTER_SESSION_ENV = "JPY_SESSION_NAME"


def run_name() -> str:
    """What the run lock names as the holder's runbook: ``$EAGLE_WORKBENCH_RUNBOOK`` (``workbench
    runbook``), else in a Jupyter kernel the notebook's or console's name (the last part of
    ``$JPY_SESSION_NAME``, e.g. ``box_console.ipynb``: the kernel's argv[0] is only
    ``ipykernel_launcher.py``), else the program (``os.path.basename(sys.argv[0])``)."""
    session = (os.environ.get(JUPYTER_SESSION_ENV) or "").strip().rstrip("/")
    return (os.environ.get(RUNBOOK_ENV) or (os.path.basename(session) or session)
            or os.path.basename(sys.argv[0] or "python") or "python")


def acquire(box, host: str, run_id: str, *, timeout: float = 10.0, name: Optional[str] = None,
            heartbeat_s: Optional[float] = None) -> RunLock:
    """Take the run lock on ``box`` for ``run_id`` (this process), taking over a stale one.
    ``name``: what the lock names as the holder's runbook (default :func:`run_name`; a command
    that is no runbook passes its own, e.g. ``workbench probe add``). ``heartbeat_s``: heartbeat
    every that many seconds wherever this process runs (a run a watchdog watches:
    :func:`workbench.session.watchdog.heartbeat_interval`); ``None``: every :data:`HEARTBEAT_S` s,
    and only when this process runs on another machine than the box.

    Raises :class:`RunLocked` naming the live holder (run id, pid, host it was started from, since
    when, which runbook) when another run holds it; :class:`JournalError` when the lock script
    cannot run on the box."""
    me = self_identity()
    holder = {"run_id": run_id, **me, "host": socket.gethostname(), "runbook": name or run_name(),
              "started_at": time.time()}
    status = box_status(box, timeout=timeout)
    holder["heartbeat"] = heartbeat_s is not None or me["boot_id"] is None or me["boot_id"] != status.box_boot_id
    dead = status.holder.run_id if status.holder is not None and status.holder.alive is False else None
    out = _run_script(box, "acquire", json.dumps({"holder": holder, "dead": dead}), timeout=timeout)
    if out.get("status") != "acquired":
        other = Holder.from_box(out.get("holder"), True)
        raise RunLocked(f"another run is using {box.name}: {other.describe()}; wait for it to finish "
                        f"(it restores the box itself at its end)", other)
    return RunLock(box, host, holder, heartbeat=holder["heartbeat"],
                   heartbeat_s=HEARTBEAT_S if heartbeat_s is None else heartbeat_s)


def heartbeat(box, run_id: str, *, timeout: float = 10.0) -> bool:
    """Touch the lock once for ``run_id`` (when it still holds it): what the heartbeat thread does,
    and what ``restore_box`` does between its steps while it restores a dead run's box (its
    watchdog then keeps away). Returns whether the lock was ``run_id``'s. Raises
    ``RemoteError``/``JournalError``."""
    return _run_script(box, "heartbeat", run_id, timeout=timeout).get("status") == "ours"


#: the run locks this process took, by run id: a release through :func:`release` (``restore_box``)
#: marks its :class:`RunLock` released, so its heartbeat does not take the release for a loss
_MINE: dict[str, RunLock] = {}


def release(box, run_id: str, *, timeout: float = 10.0) -> bool:
    """Remove the lock when ``run_id`` holds it (``"*dead*"``: when its holder is dead). Returns
    whether it was removed. Raises ``RemoteError``/``JournalError``."""
    mine = _MINE.get(run_id)
    if mine is not None:
        mine._stop.set()  # before the release: its heartbeat must not find the lock gone and call it lost
    released = _run_script(box, "release", run_id, timeout=timeout).get("status") == "released"
    if mine is not None and released:
        mine.released = True
    return released


def describe_holder(holder: Optional[Holder]) -> str:
    """:meth:`Holder.describe`, or ``no run`` for None."""
    return holder.describe() if holder is not None else "no run"
