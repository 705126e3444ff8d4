"""Debug probes: a debug print injected into a Python source file on a box, and reverted.

A probe is a managed block (as Ansible's ``blockinfile``) inserted before an anchor line, at the
anchor's indentation, between marker comments::

    # >>> eagle-workbench probe TAG >>>
    ...prints once per process (or once per distinct key, see below), to stderr, flushed:
    [probe:TAG pgid=1234 pid=1240] expr1=repr(value1) expr2=repr(value2)
    # <<< eagle-workbench probe TAG <<<

Each expression is evaluated on its own; one that raises prints ``expr=<error:Type('msg')>``
instead, and nothing the probe does can raise into the patched code.

Which launch printed a line: ``pgid`` is the printing process's process group. A server started
by ``Box.launch_server`` is its own group (pid == pgid) and the processes it spawns (SGLang's
scheduler and TP workers) inherit it, so a log appended to by several launches can be split by
launch: ``read_probe_log(..., pgid=handle)`` returns only the lines of that launch. ``pid`` tells
the processes of one launch apart (one line per TP rank). Lines printed by the probe blocks of
earlier versions, ``[probe:TAG] ...``, are still read, as of unknown launch (``pgid`` ``None``).
A pid can in principle be reused by a later launch into the same log; within one box's uptime
that needs the pid counter to wrap around between the two launches.

Conditional: with ``when=EXPR`` a call prints only when ``EXPR`` is true (``"param_name not in
params_dict"`` prints only the checkpoint names ``load_weights`` drops).

One shot per distinct key: with ``once_per=EXPR`` the probe prints the first time each distinct
``repr(EXPR)`` is seen in the process, at most ``max_prints`` lines per process. SGLang captures
CUDA graphs at startup, running the draft's forward on a 1x-wide zeros buffer before any request:
a once-per-process probe shows only that call, while ``once_per="hidden_states.shape[-1]"`` shows
each width (the aux-wide draft-extend call under EAGLE3 too).

Expressions (and ``once_per``, ``when``) only read: ``check_expression`` accepts only a whitelist
of their syntax tree (names, attribute reads without dunders, subscripts, constants, containers,
operators, comprehensions, calls of :data:`PURE_FUNCTIONS`, :data:`TORCH_FUNCTIONS` and
:data:`PURE_METHODS`) and refuses anything else (``__import__``, ``open``, ``getattr``, ``eval``,
lambdas, ``:=``, in-place methods such as ``zero_``), naming the node and its column
(:class:`ProbeExpressionRefused`). The inserted block evaluates exactly the checked tree
(:func:`guarded_source`): each call goes through a gate that checks, when the probe runs, that the
callee is still the builtin or torch function of that name, that no ``nn.Module`` is cast or moved
in place, and that no iterator of the frame is consumed. The file is resolved on the box (every
symlink) and, given the engine's root, must stay inside it (:func:`resolve_probe_path`,
:class:`ProbePathOutside`).

Safety, in order: only a ``.py`` file is probed, and only when the original compiles with the
box's python; the original bytes are backed up next to the journal with their sha256; a journal
entry (JSON, ``STATE_DIR/probes/TAG.json`` on the box) is written as ``pending``; the patched text
goes to a temporary file in the source's directory (the original's mode, and its owner when the
box user may set it) and is compiled there with the box's python; the original's sha256 is
checked again; then one atomic rename replaces it (so the file gets a new inode) and the entry
becomes ``active``. A process killed at any point leaves either the original or the patched file,
never half of one, and ``revert_all`` (``workbench probe revert --all``, from any later session)
cleans up.

Bytecode: Python may run the engine from a cached ``__pycache__/NAME.cpython-XY[.opt-N].pyc``
(:func:`bytecode_caches` asks the box's python where, ``importlib.util.cache_from_source``). A
timestamp cache (pip's default) or a checked-hash one is invalidated by the patched file (new
mtime and size; new hash) and recompiled by the next import; an *unchecked-hash* cache (``py_compile
--invalidation-mode unchecked-hash``, used by some distributions and container builds, e.g. with
``SOURCE_DATE_EPOCH``) is trusted without looking at the source, so a probe would never run:
``add_probe`` backs such a cache up next to the journal and removes it, and ``revert_probe``
restores it byte for byte (``Probe.bytecode``). A sourceless module (only a ``.pyc``) cannot be
probed: there is no ``.py`` to patch.

``revert_probe`` restores the backup byte for byte (mode and owner as recorded) and checks the
sha256; it refuses, keeping the backup, when the file is neither the patched text nor the
original (someone edited it). Probes on the same file stack: revert the newest first
(``revert_all`` does). ``list_journal`` returns the journal's probes and the entries it could not
read; ``list_probes`` the probes only.

Reading back: ``read_probe_log`` greps the server's log on the box for ``[probe:TAG`` lines (the
log is never read whole) and returns one ``ProbeReading`` per line (of one launch with ``pgid=``),
each value parsed by
``parse_probe_value`` (shapes to tuples of ints, Python literals to values, anything else kept
as the printed text). ``probe_file_status`` says whether a probed file is still as the journal
recorded it.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import logging
import math
import os
import posixpath
import re
import shlex
import signal
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

from .box import Box, PathLike
from .errors import (
    AnchorAmbiguous,
    AnchorNotFound,
    ProbeCompileError,
    ProbeConflict,
    ProbeError,
    ProbeExists,
    ProbeExpressionRefused,
    ProbePathOutside,
    ProbeNotFound,
    RemoteFileDecodeError,
    RemoteFileError,
    RemoteFileNotFound,
    RemoteIsADirectory,
)

log = logging.getLogger(__name__)

BEGIN_MARKER = "# >>> eagle-workbench probe {tag} >>>"
END_MARKER = "# <<< eagle-workbench probe {tag} <<<"
_MARKER_RE = re.compile(r"^\s*# (>>>|<<<) eagle-workbench probe (\S+) (>>>|<<<)\s*$")
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

#: Environment variable naming a point at which ``add_probe`` SIGKILLs its own process (tests).
CRASH_ENV = "EAGLE_WORKBENCH_PROBE_CRASH_AT"
CRASH_POINTS = ("after-backup", "before-replace", "after-replace")

#: Compiles ``argv[1]`` (as file name ``argv[2]``) with the box's python, then prints the owner of
#: ``argv[1]`` (``uid gid``). Run on the original before patching and on the patched temporary file.
_COMPILE_SNIPPET = (
    "import sys\n"
    "src = open(sys.argv[1], 'rb').read()\n"
    "compile(src, sys.argv[2], 'exec', dont_inherit=True)\n"
    "import os\n"
    "st = os.stat(sys.argv[1])\n"
    "print(st.st_uid, st.st_gid)\n"
)

#: Prints, as JSON, the bytecode caches of the source ``argv[1]`` the box's python would use
#: (``importlib.util.cache_from_source`` for optimisation levels "", 1, 2: ``__pycache__`` or
#: ``PYTHONPYCACHEPREFIX``): ``[{"cache", "flags", "kind", "magic_ok"}]`` for each that exists. The
#: header (PEP 552): magic (4 bytes), flags (4: bit 0 hash-based, bit 1 check_source), then mtime +
#: size or the source hash.
_BYTECODE_SNIPPET = (
    "import importlib.util, json, os, sys\n"
    "out = []\n"
    "for opt in ('', 1, 2):\n"
    "    try:\n"
    "        cache = importlib.util.cache_from_source(sys.argv[1], optimization=opt)\n"
    "    except (NotImplementedError, ValueError):\n"
    "        continue\n"
    "    if not os.path.isfile(cache):\n"
    "        continue\n"
    "    with open(cache, 'rb') as f:\n"
    "        head = f.read(16)\n"
    "    flags = int.from_bytes(head[4:8], 'little') if len(head) >= 8 else -1\n"
    "    kind = ('unreadable' if flags < 0 else 'timestamp' if not flags & 1 else\n"
    "            'checked-hash' if flags & 2 else 'unchecked-hash')\n"
    "    out.append({'cache': cache, 'flags': flags, 'kind': kind,\n"
    "                'magic_ok': head[:4] == importlib.util.MAGIC_NUMBER})\n"
    "print(json.dumps(out))\n"
)

#: Default of ``max_prints``: lines a ``once_per`` probe prints per process at most.
MAX_PRINTS = 8

#: Default of ``max_repr``: the longest repr (characters) a probe prints for one value; longer ones
#: are cut and end in "...".
MAX_REPR = 2000


@dataclass(frozen=True)
class Probe:
    """A probe recorded in the box's journal.

    ``line`` is the 1-based anchor line in the file as it was before this probe (the block starts
    there in the patched file and spans ``block_lines`` lines); ``anchor`` is the regex or line
    number asked for, ``function`` the function it was restricted to. ``state`` is ``"active"``,
    or ``"pending"`` when an ``add_probe`` was interrupted before it finished (``temp_path`` may
    then remain). ``created_at`` is seconds since the epoch.

    ``once_per``: the key expression (``None``: once per process); ``max_prints``: lines per
    process at most with a key; ``when``: the condition a call must meet to print (``None``:
    every call may); ``max_repr``: characters of one printed value at most. ``mode``,
    ``owner_uid``, ``owner_gid``: the original file's permission bits and owner, restored by a
    revert (``None`` in entries written by older versions). ``owner_note``: ``"owner could not be
    kept: ..."`` when the last write (the add, or the revert for the value ``revert_probe``
    returns) left the file with another owner.
    """

    tag: str
    path: str
    line: int
    anchor: Union[str, int]
    function: Optional[str]
    exprs: tuple[str, ...]
    original_sha256: str
    patched_sha256: str
    backup_path: str
    journal_path: str
    block_lines: int
    created_at: float
    state: str = "active"
    temp_path: Optional[str] = None
    once_per: Optional[str] = None
    max_prints: int = MAX_PRINTS
    mode: Optional[int] = None
    owner_uid: Optional[int] = None
    owner_gid: Optional[int] = None
    owner_note: Optional[str] = None
    when: Optional[str] = None
    max_repr: int = MAX_REPR
    bytecode: tuple = ()
    bytecode_note: Optional[str] = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["exprs"] = list(self.exprs)
        d["bytecode"] = [dict(b) for b in self.bytecode]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Probe":
        """A ``Probe`` from its journal JSON; keys it does not know are ignored, the ones added
        later (``once_per``, ``max_prints``, ``mode``, owner, ``when``, ``max_repr``) default.
        Raises ``ValueError`` (with the reason) when a field is missing or of the wrong type."""
        if not isinstance(d, dict):
            raise ValueError(f"not a JSON object but {type(d).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        required = [n for n, f in fields.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in d]
        if missing:
            raise ValueError(f"missing field(s) {', '.join(missing)}")
        data = {k: v for k, v in d.items() if k in fields}
        for name, kinds in _FIELD_TYPES.items():
            if name in data and not (isinstance(data[name], kinds) and not isinstance(data[name], bool)):
                raise ValueError(f"field {name!r} is {data[name]!r}, not {'/'.join(k.__name__ for k in kinds)}")
        if not all(isinstance(e, str) for e in data["exprs"]):
            raise ValueError("field 'exprs' holds something other than text")
        if data.get("state", "active") not in ("active", "pending"):
            raise ValueError(f"field 'state' is {data['state']!r}, not 'active' or 'pending'")
        for name in ("max_prints", "max_repr"):
            if data.get(name, 1) < 1:
                raise ValueError(f"field {name!r} is {data[name]!r}, not a positive number")
        data["exprs"] = tuple(data["exprs"])
        if "bytecode" in data:
            if not all(isinstance(b, dict) and isinstance(b.get("cache"), str) and isinstance(b.get("backup"), str)
                       and isinstance(b.get("sha256"), str) for b in data["bytecode"]):
                raise ValueError("field 'bytecode' holds an entry without cache / backup / sha256")
            data["bytecode"] = tuple(dict(b) for b in data["bytecode"])
        return cls(**data)


_NONE = type(None)
#: The journal's field types checked by ``Probe.from_dict`` (bools are refused where ints go).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "tag": (str,), "path": (str,), "line": (int,), "anchor": (str, int), "function": (str, _NONE),
    "exprs": (list, tuple), "original_sha256": (str,), "patched_sha256": (str,), "backup_path": (str,),
    "journal_path": (str,), "block_lines": (int,), "created_at": (int, float), "state": (str,),
    "temp_path": (str, _NONE), "once_per": (str, _NONE), "max_prints": (int,), "mode": (int, _NONE),
    "owner_uid": (int, _NONE), "owner_gid": (int, _NONE), "owner_note": (str, _NONE), "when": (str, _NONE),
    "max_repr": (int,), "bytecode": (list, tuple), "bytecode_note": (str, _NONE),
}


@dataclass(frozen=True)
class JournalProblem:
    """A journal entry that could not be read: ``tag`` (from its file name), ``journal_path``,
    ``backup_path`` (where that probe's original would be kept; it may not exist), ``reason``."""

    tag: str
    journal_path: str
    backup_path: str
    reason: str

    def describe(self) -> str:
        """One line: what is wrong and what to do about it."""
        return (f"journal entry {self.journal_path} is unreadable ({self.reason}); check the file that probe "
                f"{self.tag!r} patched by hand (its original may be at {self.backup_path}), then delete the entry")


# -- the journal -------------------------------------------------------------------------------


def journal_dir(box: Box) -> str:
    """Directory on the box holding the probe journal and backups."""
    return f"{box.state_dir}/probes"


def _journal_path(box: Box, tag: str) -> str:
    return f"{journal_dir(box)}/{tag}.json"


def _backup_path(box: Box, tag: str) -> str:
    return f"{journal_dir(box)}/{tag}.orig"


def _save(box: Box, probe: Probe) -> None:
    box.write_file(probe.journal_path, json.dumps(probe.to_dict(), indent=2) + "\n", mode=0o600, make_dirs=True)


def _parse_entry(text: str, tag: str) -> Probe:
    """The ``Probe`` in journal entry ``TAG.json``. Raises ``ValueError`` saying why it is unreadable."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    probe = Probe.from_dict(data)
    if probe.tag != tag:
        raise ValueError(f"it records tag {probe.tag!r} under the name {tag}.json")
    return probe


def _load(box: Box, tag: str, *, timeout: float = 30) -> Optional[Probe]:
    path = _journal_path(box, tag)
    try:
        text = box.read_text(path, timeout=timeout)
    except RemoteFileNotFound:
        return None
    except RemoteFileDecodeError as exc:
        raise ProbeError(f"probe journal entry is unreadable ({exc})", path=path, box=box.name) from None
    try:
        return _parse_entry(text, tag)
    except ValueError as exc:
        raise ProbeError(f"probe journal entry is unreadable ({exc})", path=path, box=box.name) from None


def list_journal(box: Box, *, timeout: float = 30) -> tuple[list[Probe], list[JournalProblem]]:
    """``(probes, problems)``: the probes recorded on the box (active and pending), oldest first,
    and a :class:`JournalProblem` for each entry that could not be read (not JSON, a field missing
    or of the wrong type, a tag that does not match its file name, not UTF-8, not readable), by
    tag. ``timeout``: seconds for each box call. Other box errors (a lost connection, a time-out)
    propagate; a missing journal directory is an empty journal."""
    try:
        names = box.listdir(journal_dir(box), timeout=timeout)
    except RemoteFileNotFound:
        return [], []
    probes: list[Probe] = []
    problems: list[JournalProblem] = []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        tag = name[: -len(".json")]
        path = _journal_path(box, tag)
        try:
            probes.append(_parse_entry(box.read_text(path, timeout=timeout), tag))
        except RemoteFileNotFound:
            continue  # reverted meanwhile
        except ValueError as exc:
            problems.append(JournalProblem(tag, path, _backup_path(box, tag), str(exc)))
        except RemoteFileError as exc:  # not UTF-8, not readable, a directory
            problems.append(JournalProblem(tag, path, _backup_path(box, tag), f"{type(exc).__name__}: {exc}"))
    probes.sort(key=lambda p: (p.created_at, p.tag))
    return probes, problems


def list_probes(box: Box, *, timeout: float = 30) -> list[Probe]:
    """Probes recorded on the box (active and pending), oldest first. ``timeout``: seconds for
    each box call. An unreadable journal entry is skipped (and logged as a warning):
    :func:`list_journal` returns those too."""
    probes, problems = list_journal(box, timeout=timeout)
    for problem in problems:
        log.warning("[%s] probe %s", box.name, problem.describe())
    return probes


def _forget(box: Box, probe: Probe) -> None:
    """Drop a probe's backup, then its journal entry (in that order: an interrupted forget leaves
    an entry whose file already matches the original, which the next revert just drops)."""
    box.remove(probe.backup_path, missing_ok=True)
    for b in probe.bytecode:
        box.remove(b["backup"], missing_ok=True)
    box.remove(probe.journal_path, missing_ok=True)


def _parse_owner(stdout: str) -> Optional[tuple[int, int]]:
    """``(uid, gid)`` from the last line the compile snippet printed, ``None`` if it is not that."""
    lines = stdout.strip().splitlines()
    parts = lines[-1].split() if lines else []
    if len(parts) == 2 and all(s.isdigit() for s in parts):
        return int(parts[0]), int(parts[1])
    return None


def _keep_owner(
    box: Box, path: str, uid: Optional[int], gid: Optional[int], *, current: Optional[tuple[int, int]] = None,
    timeout: float = 30,
) -> Optional[str]:
    """Give the file ``path`` (a temporary file about to be renamed over the original) the owner
    ``uid:gid`` when it has another (``current``, read with ``stat`` on the box when not given).
    Returns ``None`` when the owner is as wanted, else ``"owner could not be kept: ..."`` (chown
    needs root, or the same owner and a group the user is in); never raises for that."""
    if uid is None or gid is None:
        return None
    if current is None:
        res = box.run(["stat", "-L", "-c", "%u %g", path], timeout=timeout, check=False)
        current = _parse_owner(res.stdout) if res.ok else None
        if current is None:
            why = (res.stderr or res.stdout).strip()[-200:]
            return f"owner could not be kept: cannot read the new file's owner ({why})"
    if current == (uid, gid):
        return None
    res = box.run(["chown", f"{uid}:{gid}", path], timeout=timeout, check=False)
    if res.ok:
        return None
    lines = (res.stderr or res.stdout).strip().splitlines()
    why = f"chown: {lines[-1].rpartition(': ')[2]}" if lines else f"chown exit {res.exit_code}"  # not the temp's name
    return (f"owner could not be kept: the file is now owned by {current[0]}:{current[1]}, the original by "
            f"{uid}:{gid} ({why})")


def _crash_point(name: str) -> None:
    """Test hook: SIGKILL this process when ``$EAGLE_WORKBENCH_PROBE_CRASH_AT`` names ``name``."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


# -- the block ---------------------------------------------------------------------------------


def render_block(
    tag: str,
    exprs: Sequence[str],
    indent: str = "",
    newline: str = "\n",
    max_repr: int = MAX_REPR,
    *,
    once_per: Optional[str] = None,
    max_prints: int = MAX_PRINTS,
    when: Optional[str] = None,
) -> str:
    """The probe's source text (marker lines included), indented by ``indent``.

    Each value is printed as its ``repr`` cut to ``max_repr`` characters, on one line
    ``[probe:TAG pgid=G pid=P] expr=value ...`` to the process's stderr, flushed. ``G`` is
    ``os.getpgrp()`` of the printing process (a server launched by ``Box.launch_server`` is its
    own process group and the processes it spawns inherit it: the pgid names the launch), ``P``
    its ``os.getpid()`` (one TP rank, say); both are ``?`` when they cannot be read. They are
    read only when the line is printed (never on the calls that print nothing).

    Without ``once_per`` the block prints once per process. With ``once_per`` (an expression) it
    prints the first time each distinct ``repr(once_per)`` is seen in the process, at most
    ``max_prints`` lines per process (after that the key is not even evaluated). With ``when``
    (an expression) it prints only on a call where ``when`` is true: the condition is evaluated
    first, on each call until the probe has printed (once per process) or reached
    ``max_prints`` (``once_per``), and a call where it is false uses up nothing.

    Everything is evaluated inside the block's ``try``: an expression that raises prints
    ``expr=<error:...>``; a key or a condition that raises (or a print that fails) prints one
    ``<probe failed:...>`` line, once per process, and nothing ever raises into the code. When
    stderr itself cannot be written the failure is kept in
    ``sys._eagle_workbench_probes_lost[TAG]`` (there is nowhere left to print it). The key and the
    condition are not printed: list them among ``exprs`` to see them. Pick cheap host-side ones (a
    shape, an int, a name): ``repr`` of a tensor's values would synchronise the GPU (and fail
    inside CUDA-graph capture).
    """
    exprs_code = [guarded_source(e) for e in exprs]
    once_code = guarded_source(once_per, what="once_per") if once_per is not None else None
    when_code = guarded_source(when, what="when") if when is not None else None
    head = f"[probe:{tag}]"  # the tag as grep finds it in the source; printed as [probe:TAG pgid=G pid=P]
    cut = f"_ewb_cut = lambda s: s if _ewb_b.len(s) <= {int(max_repr)} else s[:{int(max_repr)}] + '...'"
    who = [
        "try:",
        "    import os as _ewb_os",
        "    _ewb_who = ' pgid=%d pid=%d' % (_ewb_os.getpgrp(), _ewb_os.getpid())",
        "except Exception:  # not POSIX: the line is still printed, its launch unknown",
        "    _ewb_who = ' pgid=? pid=?'",
    ]
    # The block's own builtins come from the builtins module: the probed frame may shadow any name.
    body = [BEGIN_MARKER.format(tag=tag), "try:", "    import sys as _ewb_sys, builtins as _ewb_b"]
    if once_per is None:
        body += [
            "    _ewb_fired = _ewb_sys.__dict__.setdefault('_eagle_workbench_probes_fired', _ewb_b.set())",
            f"    if {tag!r} not in _ewb_fired:",
        ]
        pad = "        "
        body += [pad + line for line in _GATE_LINES]
        if when is not None:
            body += [pad + "_ewb_g.z()", pad + f"if {when_code}:"]
            pad += "    "
        body.append(pad + f"_ewb_fired.add({tag!r})")
    else:
        body += [
            "    _ewb_seen = _ewb_sys.__dict__.setdefault('_eagle_workbench_probes_seen', {})"
            + f".setdefault({tag!r}, _ewb_b.set())",
            f"    if _ewb_b.len(_ewb_seen) < {int(max_prints)}:",
        ]
        pad = "        "
        body += [pad + line for line in _GATE_LINES]
        if when is not None:
            body += [pad + "_ewb_g.z()", pad + f"if {when_code}:"]
            pad += "    "
        body += [
            pad + "_ewb_g.z()",
            pad + f"_ewb_key = _ewb_b.repr({once_code})",
            pad + "if _ewb_key not in _ewb_seen:",
            pad + "    _ewb_seen.add(_ewb_key)",
        ]
        pad += "    "
    body += [pad + "_ewb_parts = []", pad + cut]
    for expr, code in zip(exprs, exprs_code):
        body += [
            pad + "try:",
            pad + "    _ewb_g.z()",
            pad + f"    _ewb_parts.append({expr + '='!r} + _ewb_cut(_ewb_b.repr({code})))",
            pad + "except Exception as _ewb_exc:",
            pad + f"    _ewb_parts.append({expr + '=<error:'!r} + _ewb_b.repr(_ewb_exc) + '>')",
        ]
    body += [pad + line for line in who]
    body.append(pad + f"_ewb_b.print({head!r}[:-1] + _ewb_who + '] ' + ' '.join(_ewb_parts).replace('\\n', '\\\\n'), "
                      "file=_ewb_sys.stderr, flush=True)")
    body += [
        "except Exception as _ewb_exc:  # a probe must never break the code it watches",
        "    try:",
        "        import sys as _ewb_sys, builtins as _ewb_b",
        "        _ewb_failed = _ewb_sys.__dict__.setdefault('_eagle_workbench_probes_failed', _ewb_b.set())",
        f"        if {tag!r} not in _ewb_failed:",
        f"            _ewb_failed.add({tag!r})",
        *("            " + line for line in who),
        f"            _ewb_b.print({head!r}[:-1] + _ewb_who + '] <probe failed:' + _ewb_b.repr(_ewb_exc)[:{int(max_repr)}]"
        " + '>', file=_ewb_sys.stderr, flush=True)",
        "    except Exception as _ewb_lost:  # stderr cannot be written: nowhere left to say it but here",
        "        __import__('sys').__dict__.setdefault('_eagle_workbench_probes_lost', {})"
        f"[{tag!r}] = __import__('builtins').repr(_ewb_lost)",
        END_MARKER.format(tag=tag),
    ]
    return "".join(indent + line + newline for line in body)


#: Names of in-place methods are those ending in one ``_`` (PyTorch's convention); dunders are not.
_INPLACE_RE = re.compile(r"^(?!__.*__$).*[^_]_$|^_$")


# -- what a probe expression may do (a whitelist over its syntax tree) --------------------------

#: Functions a probe expression may call, by name; at run time the callee must still be that
#: builtin (``len is builtins.len``), so a frame variable called ``len`` is not called. Each is
#: pure (no I/O, changes nothing it is given): ``len``, ``repr``, ``str``, ``int``, ``float``,
#: ``bool``, ``abs``, ``round``, ``min``, ``max``, ``sum``, ``any``, ``all``, ``sorted`` (a new
#: list), ``tuple``, ``list``, ``dict``, ``set``, ``frozenset``, ``range``, ``enumerate``, ``zip``,
#: ``isinstance``, ``type`` (one argument: the class; three would create one), ``hasattr`` (a
#: constant attribute name, checked like ``x.name``). Left out: ``getattr`` / ``vars`` /
#: ``globals`` / ``locals`` (attributes by computed name), ``map`` / ``filter`` (they call what
#: they are given), ``open``, ``eval``, ``exec``, ``compile``, ``__import__``, ``print``, ``input``.
PURE_FUNCTIONS = frozenset({
    "len", "repr", "str", "int", "float", "bool", "abs", "round", "min", "max", "sum", "any", "all", "sorted",
    "tuple", "list", "dict", "set", "frozenset", "range", "enumerate", "zip", "isinstance", "type", "hasattr",
})
#: Keyword arguments those functions may be given (``key=`` is left out: it would be called).
_FUNCTION_KEYWORDS = {"sorted": {"reverse"}, "min": {"default"}, "max": {"default"}, "sum": {"start"},
                      "round": {"ndigits"}, "enumerate": {"start"}}
#: The builtins that iterate their positional arguments (an iterator read from the frame is refused
#: at run time: iterating it would consume it).
_ITERATING = frozenset({"tuple", "list", "dict", "set", "frozenset", "sorted", "sum", "min", "max", "any", "all",
                        "enumerate", "zip"})
#: Torch functions a probe may call, by dotted name from the module ``torch`` (at run time the callee
#: must be that function of the loaded torch): each returns a new tensor or a bool and writes nothing.
TORCH_FUNCTIONS = frozenset({
    "torch.linalg.vector_norm", "torch.linalg.norm", "torch.isfinite", "torch.isnan", "torch.isinf",
    "torch.equal", "torch.allclose", "torch.count_nonzero", "torch.is_tensor",
})
#: Methods a probe may call. On a tensor (``torch.Tensor``) each returns a new value, a view that
#: the probe cannot write through (in-place methods are refused), or a number: sizes (``size``,
#: ``dim``, ``numel``, ``nelement``, ``stride``, ``element_size``), reductions (``sum``, ``mean``,
#: ``std``, ``var``, ``norm``, ``abs``, ``max``, ``min``, ``amax``, ``amin``, ``argmax``,
#: ``argmin``, ``all``, ``any``, ``count_nonzero``, ``isfinite``, ``isnan``, ``isinf``,
#: ``unique``), comparisons (``eq``, ``ne``, ``lt``, ``le``, ``gt``, ``ge``, ``equal``,
#: ``allclose``), copies and views (``float``, ``double``, ``half``, ``bfloat16``, ``cpu``,
#: ``to``, ``detach``, ``clone``, ``contiguous``, ``flatten``, ``reshape``, ``view``, ``t``,
#: ``transpose``, ``permute``, ``squeeze``, ``unsqueeze``), values (``item``, ``tolist``); on a
#: module: ``named_parameters``, ``parameters``, ``named_buffers``, ``buffers``,
#: ``named_modules``, ``modules``, ``named_children``, ``children`` (fresh iterators); on dicts
#: ``keys``, ``values``, ``items``, ``get``; on strings ``startswith``, ``endswith``. Also any
#: predicate ``is_NAME()`` without arguments (``is_contiguous``, ``is_floating_point``, SGLang's
#: ``SpeculativeAlgorithm.is_eagle3``): by convention they only answer. ``float``, ``double``,
#: ``half``, ``bfloat16``, ``cpu``, ``to`` change an ``nn.Module`` in place: on a module they are
#: refused when the probe runs (``<error:...>``). Left out: ``cuda`` (allocates on the GPU),
#: ``numpy`` (shares memory), ``format`` (reads attributes by name), every method ending in ``_``.
PURE_METHODS = frozenset({
    "size", "dim", "numel", "nelement", "stride", "element_size",
    "sum", "mean", "std", "var", "norm", "abs", "max", "min", "amax", "amin", "argmax", "argmin", "all", "any",
    "count_nonzero", "isfinite", "isnan", "isinf", "unique",
    "eq", "ne", "lt", "le", "gt", "ge", "equal", "allclose",
    "float", "double", "half", "bfloat16", "cpu", "to", "detach", "clone", "contiguous", "flatten", "reshape", "view",
    "t", "transpose", "permute", "squeeze", "unsqueeze", "item", "tolist",
    "named_parameters", "parameters", "named_buffers", "buffers", "named_modules", "modules", "named_children",
    "children", "keys", "values", "items", "get", "startswith", "endswith",
})
#: Of those, the ones allowed on a ``torch.nn.Module`` when the probe runs (the others change it).
MODULE_METHODS = frozenset({
    "named_parameters", "parameters", "named_buffers", "buffers", "named_modules", "modules", "named_children",
    "children",
})
#: Methods whose result is a fresh iterator: iterating it consumes nothing of the engine's.
_FRESH_ITERATORS = MODULE_METHODS | {"keys", "values", "items"}
_PREDICATE_RE = re.compile(r"^is_[a-z0-9_]*[a-z0-9]$")
#: Dunder attributes a probe may read: plain strings naming a class or function.
SAFE_DUNDERS = frozenset({"__name__", "__qualname__"})
#: Names refused outright, with why (a clearer message than "not a function a probe may call").
_REFUSED_NAMES = {
    "getattr": "getattr (an attribute by computed name; write x.name)", "setattr": "setattr (it writes)",
    "delattr": "delattr (it writes)", "eval": "eval", "exec": "exec", "compile": "compile", "open": "open (I/O)",
    "__import__": "__import__", "globals": "globals()", "locals": "locals()", "vars": "vars()",
    "breakpoint": "breakpoint()", "input": "input()", "print": "print (the probe prints)", "exit": "exit",
    "quit": "quit",
}
#: Prefix of the probe block's own variables; a probe expression may not name them.
_BLOCK_PREFIX = "_ewb"
_EXPR_NODES = (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Set,
               ast.Dict, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.ListComp,
               ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.JoinedStr, ast.FormattedValue)


#: Bounds on what one probe expression may build, enforced when the probe runs (``<error:...>``)
#: and, where the operands are constants, when it is added: an ``int ** int`` only with an
#: exponent of at most ``MAX_POW_EXPONENT`` in absolute value and ``base.bit_length() * exponent``
#: at most ``MAX_INT_BITS``; an ``int << n`` only with ``n`` at most ``MAX_SHIFT``; a str / bytes /
#: bytearray / list / tuple times an int only up to ``MAX_SEQUENCE_LEN`` items; ``range(...)``
#: only up to ``MAX_RANGE_LEN`` items; all comprehensions of one evaluation together at most
#: ``MAX_LOOP_STEPS`` steps. (Without them ``10**10**10`` hangs the engine in one bytecode that no
#: signal interrupts, and ``'a'*10**9`` allocates 1 GB in it.)
MAX_POW_EXPONENT = 256
MAX_INT_BITS = 4096
MAX_SHIFT = 4096
MAX_SEQUENCE_LEN = 10_000
MAX_RANGE_LEN = 10_000
MAX_LOOP_STEPS = 100_000
_SIZED_OPS = {ast.Pow: "pow", ast.LShift: "lshift", ast.Mult: "mul", ast.Mod: "mod"}
#: A width or precision in a ``%`` format or a format spec: more than ``MAX_SEQUENCE_LEN`` is
#: refused (``'%0999999999d' % 1`` builds a 1 GB string), and so is ``*`` (a width from the values).
#: The ``%`` conversions as ``str %`` reads them (Python's printf-style formatting): ``%``, an
#: optional ``(key)``, flags, width, ``.precision``; in a format spec every number is a width or
#: a precision.
_PERCENT_RE = re.compile(r"%%|%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d*))?")
_SPEC_NUMBER_RE = re.compile(r"(\d+)")


def _format_refusal(fmt: Any, percent: bool) -> Optional[str]:
    """Why the format string ``fmt`` (``%``-style when ``percent``, else a format spec) could build
    an unbounded string, else ``None`` (also for what is not a str / bytes)."""
    if isinstance(fmt, bytes):
        fmt = fmt.decode("latin-1")
    if not isinstance(fmt, str):
        return None
    for m in (_PERCENT_RE if percent else _SPEC_NUMBER_RE).finditer(fmt):
        for g in m.groups():
            if g == "*":
                return "a % format with a * width or precision (taken from the values: unbounded)"
            if g and int(g) > MAX_SEQUENCE_LEN:
                return f"a format width or precision of {g} (at most {MAX_SEQUENCE_LEN})"
    return None
    for m in _BIG_WIDTH_RE.finditer(fmt):
        if int(m.group()) > MAX_SEQUENCE_LEN:
            return f"a format width or precision of {m.group()} (at most {MAX_SEQUENCE_LEN})"
    if percent and _FORMAT_STAR_RE.search(fmt):
        return "a % format with a * width or precision (taken from the values: unbounded)"
    return None


class _Seq:
    """A value known at add time only by its length (a constant str / list / tuple)."""

    def __init__(self, n: int) -> None:
        self.n = n


def _size_refusal(tree: ast.Expression) -> Optional[tuple[ast.AST, str]]:
    """``(node, why)`` for the first ``**`` / ``<<`` / ``*`` / ``range()`` whose operands are
    constants (ints, or str / bytes / list / tuple literals by their length) and whose result would
    exceed the bounds above; ``None`` when none does (the rest is checked when the probe runs)."""
    bad: list[tuple[ast.AST, str]] = []

    def value(node: ast.AST) -> Any:  # an int, a _Seq, or None (not known at add time)
        if bad:
            return None
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, (str, bytes)):
                return _Seq(len(v))
            return v if isinstance(v, int) else None
        if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return _Seq(len(node.elts))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            v = value(node.operand)
            if isinstance(v, int):
                return -v if isinstance(node.op, ast.USub) else (~v if isinstance(node.op, ast.Invert) else v)
            return None
        if isinstance(node, ast.BinOp):
            a, b = value(node.left), value(node.right)
            ints = isinstance(a, int) and isinstance(b, int)
            if isinstance(node.op, ast.Pow) and ints:
                if abs(b) > MAX_POW_EXPONENT or a.bit_length() * abs(b) > MAX_INT_BITS:
                    bad.append((node, f"a power too large to compute (a {a.bit_length()}-bit int ** "
                                      f"{b if b.bit_length() <= 64 else 'a ' + str(b.bit_length()) + '-bit int'}; "
                                      f"exponent at most {MAX_POW_EXPONENT}, result at most {MAX_INT_BITS} bits)"))
                    return None
                return a ** b if b >= 0 else None
            if isinstance(node.op, ast.LShift) and ints:
                if b > MAX_SHIFT:
                    bad.append((node, f"a shift too large to compute (<< {b}; at most {MAX_SHIFT})"))
                    return None
                return a << b if b >= 0 else None
            if isinstance(node.op, ast.Mult):
                if ints:
                    return a * b
                for s, n in ((a, b), (b, a)):
                    if isinstance(s, _Seq) and isinstance(n, int):
                        if s.n * n > MAX_SEQUENCE_LEN:
                            bad.append((node, f"a repetition too large to build (length {s.n} * {n}; "
                                              f"at most {MAX_SEQUENCE_LEN})"))
                            return None
                        return _Seq(max(0, s.n * n))
                return None
            if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
                why = _format_refusal(node.left.value, True)
                if why:
                    bad.append((node, why))
                return None
            if isinstance(node.op, (ast.Add, ast.Sub)) and ints:
                return a + b if isinstance(node.op, ast.Add) else a - b
            if isinstance(node.op, ast.Add) and isinstance(a, _Seq) and isinstance(b, _Seq):
                return _Seq(a.n + b.n)
            return None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            value(node)
        elif isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = node.format_spec
            parts = spec.values if isinstance(spec, ast.JoinedStr) else [spec]
            if any(not isinstance(p, ast.Constant) for p in parts):
                bad.append((spec, "a computed format spec (f'{x:{w}}': its width is unbounded; write it as a constant)"))
            else:
                why = _format_refusal("".join(str(p.value) for p in parts), False)
                if why:
                    bad.append((node, why))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" \
                and not node.keywords and 1 <= len(node.args) <= 3:
            args = [value(a) for a in node.args]
            if not bad and all(isinstance(v, int) for v in args):
                try:
                    n = len(range(*args))
                except OverflowError:
                    n = MAX_RANGE_LEN + 1
                except ValueError:  # range() arg 3 must not be zero: fails when it runs
                    n = 0
                if n > MAX_RANGE_LEN:
                    bad.append((node, f"a range of more than {MAX_RANGE_LEN} items (at most {MAX_RANGE_LEN})"))
        if bad:
            return bad[0]
    return None


def _dotted(node: ast.AST) -> Optional[str]:
    """``"torch.linalg.vector_norm"`` for that chain of attribute reads on a name, else ``None``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id] + parts[::-1])


def _refuse_name(name: str) -> Optional[str]:
    if name in _REFUSED_NAMES:
        return _REFUSED_NAMES[name]
    if name.startswith("__") and name.endswith("__"):
        return f"the dunder name {name}"
    if name.startswith(_BLOCK_PREFIX):
        return f"the name {name} (the probe block's own variables start with {_BLOCK_PREFIX})"
    return None


def _refuse_attr(attr: str) -> Optional[str]:
    if attr.startswith("__") and attr not in SAFE_DUNDERS:
        return f"the attribute .{attr} (dunder and name-mangled attributes reach the interpreter's internals)"
    return None


def _whitelist_refusal(tree: ast.Expression) -> Optional[tuple[ast.AST, str]]:
    """``(node, why)`` for the first node of ``tree`` outside the whitelist, ``None`` when it all is."""

    def check(node: ast.AST) -> Optional[tuple[ast.AST, str]]:
        if not isinstance(node, _EXPR_NODES):
            kinds = {ast.Lambda: "a lambda", ast.Starred: "unpacking (*x)", ast.NamedExpr: "an assignment (:=)",
                     ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from"}
            return node, kinds.get(type(node), f"a {type(node).__name__} expression")
        if isinstance(node, ast.Name):
            why = _refuse_name(node.id)
            return (node, why) if why else None
        if isinstance(node, ast.Attribute):
            why = _refuse_attr(node.attr)
            return (node, why) if why else check(node.value)
        if isinstance(node, ast.Call):  # what it is called on and with first: the inner fault is the clearer one
            children: list[ast.AST] = list(node.args) + [k.value for k in node.keywords]
            if isinstance(node.func, ast.Attribute) and _dotted(node.func) not in TORCH_FUNCTIONS:
                children.insert(0, node.func.value)
            elif not isinstance(node.func, (ast.Name, ast.Attribute)):
                children.insert(0, node.func)
            for child in children:
                bad = check(child)
                if bad:
                    return bad
            return call(node)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            children = []
            for gen in node.generators:
                if gen.is_async:
                    return gen, "an async comprehension"
                for target in ast.walk(gen.target):
                    if not isinstance(target, (ast.Name, ast.Tuple, ast.List, ast.Store)):
                        return target, "a comprehension target other than names"
                    if isinstance(target, ast.Name) and _refuse_name(target.id):
                        return target, _refuse_name(target.id)
                children += [gen.iter, *gen.ifs]
            children += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        elif isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                return node, "unpacking (**x)"
            children = [*node.keys, *node.values]
        else:
            children = [c for c in ast.iter_child_nodes(node)
                        if not isinstance(c, (ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop))]
        for child in children:
            bad = check(child)
            if bad:
                return bad
        return None

    def call(node: ast.Call) -> Optional[tuple[ast.AST, str]]:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return node, "a call with *args / **kwargs"
        func = node.func
        if isinstance(func, ast.Name):
            name = func.id
            if name in _REFUSED_NAMES:
                return func, _REFUSED_NAMES[name]
            if name not in PURE_FUNCTIONS:
                return func, (f"a call of {name}(): only these functions may be called: "
                              f"{', '.join(sorted(PURE_FUNCTIONS))}")
            extra = [k.arg for k in node.keywords if k.arg not in _FUNCTION_KEYWORDS.get(name, ())]
            if extra:
                return node, f"{name}() with the keyword {extra[0]}= (a probe passes no callables)"
            if name == "type" and len(node.args) != 1:
                return node, "type() with other than one argument (three would create a class)"
            if name == "hasattr":
                if len(node.args) != 2 or not (isinstance(node.args[1], ast.Constant)
                                               and isinstance(node.args[1].value, str)):
                    return node, "hasattr() without a constant attribute name"
                why = _refuse_attr(node.args[1].value)
                if why:
                    return node.args[1], why
            return None
        dotted = _dotted(func) if isinstance(func, ast.Attribute) else None
        if dotted in TORCH_FUNCTIONS:
            return None
        if isinstance(func, ast.Attribute):
            attr = func.attr
            if _INPLACE_RE.match(attr):
                return func, f"a call of .{attr}(), an in-place method (a name ending in one '_')"
            if _PREDICATE_RE.match(attr):
                return None if not node.args and not node.keywords else (node, f".{attr}() with arguments")
            if attr not in PURE_METHODS:
                return func, (f"a call of .{attr}(), not one of the pure methods a probe may call "
                              "(remote.probes.PURE_METHODS: sizes, reductions, comparisons, copies, .item(), "
                              f".tolist(), ...; is_NAME() predicates; the functions {', '.join(sorted(TORCH_FUNCTIONS))})")
            return None
        return func, "a call of a computed value (only named functions and methods may be called)"

    return check(tree.body)


def _where(expr: str, node: ast.AST) -> str:
    col = getattr(node, "col_offset", None)
    text = ast.unparse(node) if isinstance(node, ast.AST) and hasattr(node, "lineno") else ""
    text = text if len(text) <= 60 else text[:57] + "..."
    return (f" at column {col + 1}" if col is not None else "") + (f" (`{text}`)" if text else "")


def parse_expression(expr: Any, *, what: str = "expression") -> ast.Expression:
    """The syntax tree of a probe expression, once it passes the whitelist (see
    :func:`check_expression`). Raises :class:`ProbeExpressionRefused` (a ``ProbeError``) naming the
    refused node, its column (1-based) and why; ``ProbeError`` for text that is not one line of
    Python."""
    if not isinstance(expr, str) or "\n" in expr or "\r" in expr or not expr.strip():
        raise ProbeError(f"{what} must be one line of text, got {expr!r}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ProbeError(f"{what} {expr!r} is not a Python expression ({exc.msg})") from None
    bad: Optional[tuple[ast.AST, str]] = None
    for node in ast.walk(tree):  # the changes of state first: they are the likeliest slip
        if isinstance(node, ast.NamedExpr):
            bad = node, "an assignment expression (:=)"
        elif isinstance(node, ast.Await):
            bad = node, "await"
        elif isinstance(node, (ast.Yield, ast.YieldFrom)):
            bad = node, "yield"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _INPLACE_RE.match(node.func.attr):
            bad = node.func, f"a call of .{node.func.attr}(), an in-place method (a name ending in one '_')"
        if bad:
            break
    bad = bad or _whitelist_refusal(tree)
    sized = None if bad else _size_refusal(tree)
    if sized:
        node, why = sized
        raise ProbeExpressionRefused(
            f"{what} {expr!r} is refused: it contains {why}{_where(expr, node)}; a probe's expressions run inside "
            "the engine and must stay small (the same bounds are checked when the probe runs)",
            node=type(node).__name__, column=(getattr(node, "col_offset", -1) + 1) or None)
    if bad:
        node, why = bad
        raise ProbeExpressionRefused(
            f"{what} {expr!r} is refused: it contains {why}{_where(expr, node)}; a probe's expressions must only "
            "read (names, attributes, subscripts, constants, operators, comprehensions, and calls of pure "
            "functions and methods)", node=type(node).__name__, column=(getattr(node, "col_offset", -1) + 1) or None)
    return tree


def check_expression(expr: Any, *, what: str = "expression") -> None:
    """Refuse an expression a probe must not evaluate. Allowed, and nothing else: names (the
    probed frame's locals and globals; not dunders, not the block's own ``_ewb*``), attribute
    reads (not dunders other than :data:`SAFE_DUNDERS`), subscripts and slices, constants,
    tuples / lists / sets / dicts of those, f-strings, comparisons, arithmetic and boolean
    operators, ``x if c else y``, comprehensions and generator expressions (their targets plain
    names), and calls of :data:`PURE_FUNCTIONS`, :data:`TORCH_FUNCTIONS`, :data:`PURE_METHODS` and
    ``.is_NAME()`` predicates. Refused (among all else): ``:=``, ``await``, ``yield``, lambdas,
    ``*x`` / ``**x``, ``getattr``, ``__import__``, ``open``, ``eval``, in-place methods (a name
    ending in one ``_``: ``x.zero_()``, ``x.add_(1)``), ``x.__class__``.

    The probe block evaluates exactly the checked tree, with each call going through a gate that
    checks, when the probe runs, that the callee is still the builtin / torch function of that
    name, that a module is not cast or moved in place, and that an iterator read from the frame is
    not consumed (see :func:`render_block`), and that no ``**`` / ``<<`` / sequence ``*`` / ``%``
    format / ``range`` / comprehension grows past the bounds of :data:`MAX_INT_BITS` and its
    neighbours; those bounds are also checked here where the operands are constants
    (``10**10**10``, ``'a'*10**9``). ``what`` names the expression in the message.

    Raises :class:`ProbeExpressionRefused` (a ``ProbeError``: the refused node's type in
    ``.node``, its 1-based ``.column``) or ``ProbeError`` for text that is not one line of Python.
    """
    parse_expression(expr, what=what)


class _Guard(ast.NodeTransformer):
    """Rewrites a checked tree for the probe block: ``f(a)`` -> ``_ewb_g.f(f, 'f')(a)``,
    ``x.m(a)`` -> ``_ewb_g.m(x, 'm')(a)``, each value iterated that the expression did not
    create -> ``_ewb_g.it(v)``, ``a ** b`` / ``a << b`` / ``a * b`` -> ``_ewb_g.b('pow'|'lshift'|'mul',
    a, b)`` (size-checked), and each comprehension's iterable -> ``_ewb_g.lp(...)`` (step-counted)."""

    @staticmethod
    def _gate(kind: str, *args: ast.expr) -> ast.expr:
        return ast.Call(ast.Attribute(ast.Name("_ewb_g", ast.Load()), kind, ast.Load()), list(args), [])

    def _iterated(self, node: ast.expr) -> ast.expr:
        # a generator expression of the probe's own is fresh too (its loops are counted by lp)
        fresh = isinstance(node, ast.GeneratorExp) or isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Attribute) and node.func.attr in _FRESH_ITERATORS)
            or (isinstance(node.func, ast.Name) and node.func.id in ("range", "enumerate", "zip")))
        node = self.visit(node)
        return node if fresh else self._gate("it", node)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        func = node.func
        dotted = _dotted(func) if isinstance(func, ast.Attribute) else None
        if isinstance(func, ast.Name):
            iterating = func.id in _ITERATING
            args = [self._iterated(a) if iterating else self.visit(a) for a in node.args]
            new_func = self._gate("f", func, ast.Constant(func.id))
        elif dotted in TORCH_FUNCTIONS:
            args = [self.visit(a) for a in node.args]
            new_func = self._gate("f", func, ast.Constant(dotted))
        else:
            args = [self.visit(a) for a in node.args]
            new_func = self._gate("m", self.visit(func.value), ast.Constant(func.attr))
        keywords = [ast.keyword(k.arg, self.visit(k.value)) for k in node.keywords]
        return ast.Call(new_func, args, keywords)

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        kind = _SIZED_OPS.get(type(node.op))
        left, right = self.visit(node.left), self.visit(node.right)
        if kind is None:
            return ast.BinOp(left, node.op, right)
        return self._gate("b", ast.Constant(kind), left, right)

    def _comp(self, node):
        for gen in node.generators:
            gen.iter = self._gate("lp", self._iterated(gen.iter))
            gen.ifs = [self.visit(i) for i in gen.ifs]
        for name in ("elt", "key", "value"):
            if hasattr(node, name):
                setattr(node, name, self.visit(getattr(node, name)))
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comp


def guarded_source(expr: str, *, what: str = "expression") -> str:
    """The Python source the probe block evaluates for the probe expression ``expr``: its checked
    tree (:func:`parse_expression`) with every call through the block's gate ``_ewb_g`` (see
    :func:`render_block`), in parentheses. Comments and layout of ``expr`` are not kept. Raises as
    :func:`parse_expression`."""
    tree = _Guard().visit(parse_expression(expr, what=what))
    return "(" + ast.unparse(ast.fix_missing_locations(tree)) + ")"


#: The gate the probe block defines once per process (kept in ``sys`` under this name) and calls
#: for every call a probe expression makes: ``f(fn, name)`` returns ``fn`` only when it is the
#: builtin (or ``torch.`` function) of that name; ``m(obj, name)`` returns ``obj.name`` unless
#: ``obj`` is a ``torch.nn.Module`` and ``name`` is not in :data:`MODULE_METHODS`; ``it(v)``
#: returns ``v`` unless it is an iterator (iterating it would consume the engine's); ``f(range,
#: 'range')`` returns a ``range`` refusing more than :data:`MAX_RANGE_LEN` items; ``b(op, a, b)``
#: computes ``a ** b`` / ``a << b`` / ``a * b`` unless its result would be unbounded (see
#: :data:`MAX_INT_BITS`); ``lp(it)`` yields ``it``'s items, at most :data:`MAX_LOOP_STEPS` over all
#: comprehensions of one evaluation (``z()`` starts the count, per thread). A refusal raises
#: ``TypeError`` or ``ValueError``: that expression prints ``<error:...(...)>``. The ``_2`` in the
#: name: a process whose blocks came from an older version (its gate lacks ``b``/``lp``/``z``)
#: keeps that gate under the old name.
GATE_NAME = "_eagle_workbench_probe_gate_2"
_GATE_LINES = [
    f"_ewb_g = _ewb_sys.__dict__.get({GATE_NAME!r})",
    "if _ewb_g is None:",
    "    import types as _ewb_t",
    "    def _ewb_gf(fn, name, _b=_ewb_b, _s=_ewb_sys):",
    "        if name.startswith('torch.'):",
    "            want = _s.modules.get('torch')",
    "            for part in name.split('.')[1:]:",
    "                want = _b.getattr(want, part, None)",
    "        else:",
    "            want = _b.getattr(_b, name, None)",
    "        if want is None or fn is not want:",
    "            raise _b.TypeError('probe: %s here is %r, not the function of that name; not called' % (name, fn))",
    "        return _ewb_gr if name == 'range' else fn",
    "    def _ewb_gm(obj, name, _b=_ewb_b, _s=_ewb_sys, _ok=" + repr(tuple(sorted(MODULE_METHODS))) + "):",
    "        _t = _s.modules.get('torch')",
    "        if _t is not None and _b.isinstance(obj, _t.nn.Module) and name not in _ok:",
    "            raise _b.TypeError('probe: .%s() would change the module in place; not called' % name)",
    "        return _b.getattr(obj, name)",
    "    def _ewb_git(value, _b=_ewb_b):",
    "        if _b.hasattr(_b.type(value), '__next__'):",
    "            raise _b.TypeError('probe: %s is an iterator; iterating it would consume it' % _b.type(value).__name__)",
    "        return value",
    "    import threading as _ewb_th, re as _ewb_re, operator as _ewb_op",
    f"    _ewb_pc, _ewb_sp = _ewb_re.compile({_PERCENT_RE.pattern!r}), _ewb_re.compile({_SPEC_NUMBER_RE.pattern!r})",
    "    def _ewb_fr(fmt, percent, _b=_ewb_b, _pc=_ewb_pc, _sp=_ewb_sp):",
    "        fmt = fmt.decode('latin-1') if _b.isinstance(fmt, _b.bytes) else fmt",
    "        for m in (_pc if percent else _sp).finditer(fmt):",
    "            for g in m.groups():",
    "                if g == '*':",
    "                    return 'a % format with a * width or precision'",
    f"                if g and _b.int(g) > {MAX_SEQUENCE_LEN}:",
    f"                    return 'a format width or precision of %s (at most {MAX_SEQUENCE_LEN})' % g",
    "        return None",
    "    _ewb_tl = _ewb_th.local()",
    "    def _ewb_gz(_tl=_ewb_tl):",
    "        _tl.n = 0",
    "    def _ewb_glp(it, _b=_ewb_b, _tl=_ewb_tl):",
    "        for v in it:",
    "            _tl.n = _b.getattr(_tl, 'n', 0) + 1",
    f"            if _tl.n > {MAX_LOOP_STEPS}:",
    f"                raise _b.ValueError('probe: comprehensions of one expression ran over {MAX_LOOP_STEPS} steps; stopped')",
    "            yield v",
    "    def _ewb_gb(op, a, b, _b=_ewb_b, _fr=_ewb_fr, _op=_ewb_op):",
    "        _int = _b.isinstance(a, _b.int) and _b.isinstance(b, _b.int)",
    "        if op == 'pow':",
    f"            if _int and (_b.abs(b) > {MAX_POW_EXPONENT} or a.bit_length() * _b.abs(b) > {MAX_INT_BITS}):",
    "                raise _b.ValueError('probe: a %d-bit int ** %d is refused (exponent at most "
    f"{MAX_POW_EXPONENT}, result at most {MAX_INT_BITS} bits)' % (a.bit_length(), b))",
    "            return a ** b",
    "        if op == 'lshift':",
    f"            if _int and b > {MAX_SHIFT}:",
    f"                raise _b.ValueError('probe: an int << %d is refused (shift at most {MAX_SHIFT})' % b)",
    "            return a << b",
    "        if op == 'mod':",
    "            if _b.isinstance(a, (_b.str, _b.bytes)):",
    "                why = _fr(a, True)",
    "                if why:",
    "                    raise _b.ValueError('probe: %s is refused' % why)",
    "            return a % b",
    "        for s, n in ((a, b), (b, a)):  # n: an int or what repetition takes for one (__index__)",
    "            if _b.isinstance(s, (_b.str, _b.bytes, _b.bytearray, _b.list, _b.tuple)):",
    "                try:",
    "                    k = _op.index(n)",
    "                except _b.TypeError:  # not a count (a float, a tensor of many values): not a repetition",
    "                    continue",
    f"                if _b.len(s) * k > {MAX_SEQUENCE_LEN}:",
    "                    raise _b.ValueError('probe: a %s of length %d * %d is refused (result length at most "
    f"{MAX_SEQUENCE_LEN})' % (_b.type(s).__name__, _b.len(s), k))",
    "        return a * b",
    "    def _ewb_gr(*args, _b=_ewb_b):",
    "        r = _b.range(*args)",
    "        try:",
    "            n = _b.len(r)",
    "        except _b.OverflowError:",
    "            n = None",
    f"        if n is None or n > {MAX_RANGE_LEN}:",
    f"            raise _b.ValueError('probe: %r is refused (a range of at most {MAX_RANGE_LEN} items)' % (r,))",
    "        return r",
    "    _ewb_g = _ewb_t.SimpleNamespace(f=_ewb_gf, m=_ewb_gm, it=_ewb_git, b=_ewb_gb, lp=_ewb_glp, z=_ewb_gz)",
    f"    _ewb_sys.__dict__[{GATE_NAME!r}] = _ewb_g",
]


def _split_lines(text: str) -> list[str]:
    """Lines with their endings kept; numbering matches Python's for ``\\n`` and ``\\r\\n``."""
    lines = re.split(r"(?<=\n)", text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _probe_block_lines(lines: Sequence[str]) -> set[int]:
    """0-based indices of lines inside any probe's marker block (markers included)."""
    inside: set[int] = set()
    open_at: Optional[int] = None
    for i, line in enumerate(lines):
        m = _MARKER_RE.match(line)
        if m and m.group(1) == ">>>":
            open_at = i
        elif m and m.group(1) == "<<<" and open_at is not None:
            inside.update(range(open_at, i + 1))
            open_at = None
    return inside


def probe_blocks(text: str) -> list[tuple[int, int]]:
    """The probe marker blocks in a file's ``text``: ``(first, last)`` 1-based line numbers of each
    block, markers included, in file order (empty: the file holds no probe)."""
    lines = _split_lines(text)
    inside = sorted(_probe_block_lines(lines))
    blocks: list[tuple[int, int]] = []
    for i in inside:
        if blocks and blocks[-1][1] == i:  # i is 0-based: the line after the block's last (1-based)
            blocks[-1] = (blocks[-1][0], i + 1)
        else:
            blocks.append((i + 1, i + 1))
    return blocks


def original_line_count(text: str) -> int:
    """How many lines ``text`` has without its probe blocks: the original file's line count
    (the lines of :func:`probe_blocks` not counted)."""
    lines = _split_lines(text)
    return len(lines) - len(_probe_block_lines(lines))


def _function_bodies(text: str, lines: Sequence[str], name: str) -> list[tuple[int, int]]:
    """1-based inclusive (first, last) body line ranges of functions called ``name``.

    ``name`` may be qualified (``LlamaModel.forward``). Uses ``ast`` when this Python can parse
    the file, else an indentation scan of ``def name(``.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    ranges: list[tuple[int, int]] = []
    if tree is not None:

        def visit(node: ast.AST, prefix: tuple[str, ...]) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    qual = prefix + (child.name,)
                    dotted = ".".join(qual)
                    if not isinstance(child, ast.ClassDef) and (dotted == name or dotted.endswith("." + name)):
                        ranges.append((child.body[0].lineno, child.end_lineno or child.body[-1].lineno))
                    visit(child, qual)
                else:
                    visit(child, prefix)

        visit(tree, ())
        return ranges
    short = name.rsplit(".", 1)[-1]
    def_rx = re.compile(rf"^(\s*)(?:async\s+)?def\s+{re.escape(short)}\s*\(")
    for i, line in enumerate(lines):
        m = def_rx.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        last = i
        started = False
        for j in range(i + 1, len(lines)):
            stripped = lines[j].strip()
            if not stripped or stripped.startswith("#"):
                continue
            cur = len(lines[j]) - len(lines[j].lstrip())
            if cur <= indent and not stripped.startswith(")"):
                break
            if cur > indent:
                started = True
            last = j
        if started:
            ranges.append((i + 2, last + 1))
    return ranges


def _statement_starts(text: str) -> Optional[dict[int, int]]:
    """Map 1-based line -> 1-based first line of the statement containing it, for lines where a
    statement (or its first decorator) starts. ``None`` when this Python cannot parse the file."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    starts: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            first = node.lineno
            decorators = getattr(node, "decorator_list", None)
            if decorators:
                first = min(d.lineno for d in decorators)
            starts[first] = first
    return starts


def _find_anchor(
    text: str, lines: Sequence[str], before: Union[str, int], function: Optional[str], path: str, box: Box
) -> int:
    """0-based index of the line the probe goes before."""
    blocked = _probe_block_lines(lines)
    if function:
        bodies = _function_bodies(text, lines, function)
        if not bodies:
            raise AnchorNotFound(f"no function named {function!r}", path=path, box=box.name)
        allowed = {i for first, last in bodies for i in range(first - 1, last)}
    else:
        allowed = set(range(len(lines)))
    if isinstance(before, bool) or not isinstance(before, (int, str)):
        raise TypeError(f"before must be a regex (str) or a 1-based line number (int), got {before!r}")
    if isinstance(before, int):
        idx = before - 1
        if not 0 <= idx < len(lines):
            raise AnchorNotFound(f"line {before} is outside the file (it has {len(lines)} lines)", path=path, box=box.name)
        if idx not in allowed:
            raise AnchorNotFound(f"line {before} is not inside function {function!r}", path=path, box=box.name)
        if idx in blocked:
            raise AnchorNotFound(f"line {before} is inside another probe's block", path=path, box=box.name)
        if not lines[idx].strip():
            raise AnchorNotFound(f"line {before} is blank; anchor on a statement", path=path, box=box.name)
    else:
        try:
            rx = re.compile(before)
        except re.error as exc:
            raise AnchorNotFound(f"anchor regex {before!r} is invalid ({exc})", path=path, box=box.name) from None
        hits = [i for i in sorted(allowed) if i not in blocked and rx.search(lines[i].rstrip("\r\n"))]
        where = f" inside function {function!r}" if function else ""
        if not hits:
            raise AnchorNotFound(f"anchor regex {before!r} matches no line{where}", path=path, box=box.name)
        if len(hits) > 1:
            numbers = [i + 1 for i in hits]
            restrict = "" if function else "restrict it with --function (function= in Python), "
            raise AnchorAmbiguous(
                f"anchor regex {before!r} matches {len(hits)} lines{where} (lines {numbers[:20]}); "
                f"make it more specific, {restrict}or give a line number (--line N; before=N in Python)",
                lines=numbers,
                path=path,
                box=box.name,
            )
        idx = hits[0]
    starts = _statement_starts(text)
    if starts is not None and (idx + 1) not in starts:
        owner = max((s for s in starts if s <= idx + 1), default=None)
        raise AnchorNotFound(
            f"line {idx + 1} does not start a statement"
            + (f" (it continues the statement starting at line {owner}, or is an else/except/elif clause)" if owner else "")
            + "; anchor on the first line of a statement",
            path=path,
            box=box.name,
        )
    return idx


# -- where a probe may write -------------------------------------------------------------------


def _inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root if root == "/" else root + "/")


def resolve_probe_path(box: Box, path: PathLike, root: Optional[PathLike] = None, *, timeout: float = 30) -> str:
    """The real file a probe on ``path`` patches: ``path`` with every symlink resolved on the box
    (``realpath``, each component). With ``root`` (the engine package directory) that file must
    lie inside the resolved ``root``: a symlink inside the package that leads out of it is refused.

    Returns the resolved absolute path. Raises :class:`ProbePathOutside` (``.link``: the first
    component of ``path``, as given, that is a symlink out of the root; ``.target``: where it
    resolves; ``.root``), and the box's file errors. ``timeout``: seconds for each box call
    (one ``realpath``, and one per component of ``path`` when it is refused)."""
    given = box.expand_path(path)
    real = box.realpath(given, timeout=timeout)
    if root is None:
        return real
    real_root = box.realpath(box.expand_path(root), timeout=timeout)
    if _inside(real, real_root):
        return real
    parts = [c for c in posixpath.normpath(given).split("/") if c]
    spelled, resolved = "", "/" if given.startswith("/") else ""
    for i, name in enumerate(parts):
        spelled = posixpath.join(spelled or ("/" if given.startswith("/") else ""), name)
        lexical = posixpath.join(resolved, name) if resolved else name
        target = box.realpath(spelled, timeout=timeout)
        if target != lexical and _inside(lexical, real_root) and not _inside(target, real_root):
            raise ProbePathOutside(
                f"{spelled} is a symlink to {target}, outside the engine package {real_root}; a probe only "
                "patches files inside the engine (remove the link or probe the file it points at explicitly)",
                link=spelled, target=target, root=real_root, path=given, box=box.name)
        resolved = target
    raise ProbePathOutside(f"{given} resolves to {real}, outside the engine package {real_root}; a probe only "
                           "patches files inside the engine",
                           target=real, root=real_root, path=given, box=box.name)


# -- add / revert ------------------------------------------------------------------------------


def add_probe(
    box: Box,
    path: PathLike,
    *,
    before: Union[str, int],
    exprs: Sequence[str],
    tag: str,
    function: Optional[str] = None,
    once_per: Optional[str] = None,
    max_prints: int = MAX_PRINTS,
    when: Optional[str] = None,
    max_repr: int = MAX_REPR,
    python: Optional[str] = None,
    root: Optional[PathLike] = None,
    timeout: float = 60,
) -> Probe:
    """Insert a debug print before an anchor line of the Python file ``path`` on the box.

    ``before`` is a regex searched in each line (must match exactly one line, outside other
    probes' blocks, within ``function`` when given; ``function`` may be ``Class.method``) or a
    1-based line number. ``exprs`` are Python expressions evaluated at that point (they must only
    read: the whitelist of :func:`check_expression`); ``tag`` names the probe (letters,
    digits, ``_.-``). ``python`` is the box interpreter for the compile checks (default
    ``box.python``); ``timeout`` in seconds for each box call.

    Without ``once_per`` the probe prints once per process. With ``once_per`` (an expression, e.g.
    ``"hidden_states.shape[-1]"``) it prints the first time each distinct ``repr(once_per)`` is
    seen in the process, at most ``max_prints`` (a positive int, default 8) lines per process;
    a key that raises prints ``<probe failed:...>`` once and never raises into the engine (see
    :func:`render_block`). With ``when`` (an expression, e.g. ``"param_name not in params_dict"``)
    only a call where it is true prints (and counts towards once / ``max_prints``); it is checked
    by the same guard as the expressions and evaluated inside the probe's ``try``: a condition that
    raises prints ``<probe failed:...>`` once per process and never raises into the engine.
    ``max_repr``: characters of one printed value at most (default :data:`MAX_REPR`). All are
    journalled. Each line says which process printed it: ``[probe:TAG pgid=G pid=P]``.

    Only a file whose (resolved) name ends in ``.py`` is probed, and only when the original
    compiles with ``python`` on the box. The patched file replaces the original by an atomic
    rename: it keeps the original's permission bits and, when the box user may set it (root, or
    the owner setting a group it is in), its owner ``uid:gid`` (recorded in the journal);
    otherwise the probe is still added and ``Probe.owner_note`` says ``"owner could not be kept:
    ..."``. The file gets a new inode (a hard link to it keeps the old text).

    Adding the same tag again with the same file, anchor, expressions and ``once_per`` (and
    ``max_prints`` when ``once_per`` is given) returns the existing probe without touching the
    file (also when newer probes were added on top of it). A symlinked ``path`` is resolved: the
    real file is patched (``Probe.path``) and the link stays a link. With ``root`` (the engine
    package directory on the box) the resolved file must lie inside the resolved root
    (:func:`resolve_probe_path`): a symlink in the package pointing out of it raises
    ``ProbePathOutside`` naming the link and its target, before anything is read or written.

    Raises ``AnchorNotFound`` / ``AnchorAmbiguous``; ``ProbeCompileError`` when the original or
    the patched file does not compile on the box (nothing is written); ``ProbeConflict`` when the
    file changed while patching (nothing is written) or an earlier add of this tag was interrupted;
    ``ProbeExists`` when the tag is used by a different probe; ``ProbeError`` for a bad tag, an
    expression (or ``once_per``, ``when``) that is not Python or would change state, a bad
    ``max_prints`` or ``max_repr``, a file that is not ``.py`` or not UTF-8.
    """
    if not isinstance(tag, str) or not TAG_RE.match(tag):
        raise ProbeError(f"probe tag {tag!r} must match {TAG_RE.pattern}")
    exprs = tuple(exprs)
    if not exprs:
        raise ProbeError(f"probe {tag!r} needs at least one expression")
    for expr in exprs:
        check_expression(expr, what=f"probe {tag!r}: expression")
    if once_per is not None:
        check_expression(once_per, what=f"probe {tag!r}: once_per")
    if when is not None:
        check_expression(when, what=f"probe {tag!r}: when")
    for name, value in (("max_prints", max_prints), ("max_repr", max_repr)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProbeError(f"probe {tag!r}: {name} must be a positive int, got {value!r}")
    p = resolve_probe_path(box, path, root, timeout=timeout)  # patch the real file, never replace a symlink
    if not p.endswith(".py"):
        raise ProbeError("not a Python source file (a probe goes only into a file ending in .py)", path=p,
                         box=box.name)
    python = python or box.python

    existing = _load(box, tag, timeout=timeout)
    if existing is not None:
        same = (existing.path == p and existing.exprs == exprs and existing.anchor == before
                and existing.function == function and existing.once_per == once_per
                and (once_per is None or existing.max_prints == max_prints)
                and existing.when == when and existing.max_repr == max_repr)
        if not same:
            key = (f", once per {existing.once_per} (max {existing.max_prints})" if existing.once_per is not None
                   else ", once per process")
            if existing.when is not None:
                key += f", when {existing.when}"
            raise ProbeExists(
                f"probe tag {tag!r} is already used by a probe on {existing.path} line {existing.line} "
                f"with {list(existing.exprs)}{key}; revert it first (`workbench probe revert --tag {tag}`) "
                "or choose another tag",
                path=p,
                box=box.name,
            )
        if existing.state != "active":
            raise ProbeConflict(
                f"an earlier add of probe {tag!r} was interrupted (journal state {existing.state!r}); "
                f"run `workbench probe revert --tag {tag}` (revert_probe in Python) to clean up first",
                path=p,
                backup_path=existing.backup_path,
                box=box.name,
            )
        if probe_file_status(box, existing, timeout=timeout)[0] not in ("patched", "stacked"):
            raise ProbeConflict(
                f"probe {tag!r} is recorded but the file was edited since it was added", path=p,
                backup_path=existing.backup_path, box=box.name,
            )
        return existing

    original = box.read_bytes(p, timeout=timeout)
    mode = box.stat(p, timeout=timeout).mode
    original_sha = hashlib.sha256(original).hexdigest()
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProbeError(f"cannot probe a file that is not UTF-8 (byte {exc.start})", path=p, box=box.name) from None
    check = box.run([python, "-B", "-c", _COMPILE_SNIPPET, p, p], timeout=timeout, check=False)
    if not check.ok:
        raise ProbeCompileError(
            f"the original file does not compile with {python}; probe {tag!r} not added, nothing was written",
            output=(check.stderr or check.stdout),
            path=p,
            box=box.name,
            of_original=True,
        )
    owner = _parse_owner(check.stdout)
    caches = bytecode_caches(box, p, python=python, timeout=timeout)
    moved = tuple({"cache": c["cache"], "backup": _bytecode_backup_path(box, tag, n), "kind": c["kind"]}
                  for n, c in enumerate(c for c in caches if c["kind"] == "unchecked-hash"))
    lines = _split_lines(text)
    if any((m := _MARKER_RE.match(line)) and m.group(2) == tag for line in lines):
        raise ProbeError(
            f"the file already holds markers of probe {tag!r} that the journal at {journal_dir(box)} does not know",
            path=p,
            box=box.name,
        )
    idx = _find_anchor(text, lines, before, function, p, box)
    anchor_line = lines[idx]
    indent = anchor_line[: len(anchor_line) - len(anchor_line.lstrip(" \t"))]
    newline = "\r\n" if anchor_line.endswith("\r\n") else "\n"
    block = render_block(tag, exprs, indent, newline, max_repr, once_per=once_per, max_prints=max_prints, when=when)
    patched = ("".join(lines[:idx]) + block + "".join(lines[idx:])).encode("utf-8")
    probe = Probe(
        tag=tag,
        path=p,
        line=idx + 1,
        anchor=before,
        function=function,
        exprs=exprs,
        original_sha256=original_sha,
        patched_sha256=hashlib.sha256(patched).hexdigest(),
        backup_path=_backup_path(box, tag),
        journal_path=_journal_path(box, tag),
        block_lines=block.count("\n"),
        created_at=time.time(),
        state="pending",
        temp_path=box.temp_path_for(p),
        once_per=once_per,
        max_prints=max_prints,
        when=when,
        max_repr=max_repr,
        mode=mode,
        owner_uid=owner[0] if owner else None,
        owner_gid=owner[1] if owner else None,
        bytecode_note=_describe_caches(caches),
    )

    box.makedirs(journal_dir(box), mode=0o700, timeout=timeout)
    box.write_file(probe.backup_path, original, mode=0o600, timeout=timeout)
    if moved:
        backed = []
        for b in moved:
            data = box.read_bytes(b["cache"], timeout=timeout)
            box.write_file(b["backup"], data, mode=0o600, timeout=timeout)
            backed.append({**b, "sha256": hashlib.sha256(data).hexdigest()})
        probe = dataclasses.replace(probe, bytecode=tuple(backed))
    _save(box, probe)
    _crash_point("after-backup")
    try:
        box.transport.write_new(probe.temp_path, patched, mode=mode, timeout=timeout)
        check = box.run([python, "-B", "-c", _COMPILE_SNIPPET, probe.temp_path, p], timeout=timeout, check=False)
        if not check.ok:
            raise ProbeCompileError(
                f"probe {tag!r} before line {idx + 1} makes the file fail to compile with {python}",
                output=(check.stderr or check.stdout),
                path=p,
                box=box.name,
            )
        if owner is None:
            note: Optional[str] = ("owner could not be kept: the original's owner could not be read "
                                   f"({check.stdout.strip()[-200:]!r})")
        else:
            note = _keep_owner(box, probe.temp_path, *owner, current=_parse_owner(check.stdout), timeout=timeout)
        _crash_point("before-replace")
        current = box.sha256(p, timeout=timeout)
        if current != original_sha:
            raise ProbeConflict(
                f"the file changed while probe {tag!r} was being added (sha256 {original_sha[:12]}… -> "
                f"{current[:12]}…); nothing was written",
                path=p,
                box=box.name,
            )
        box.transport.rename(probe.temp_path, p, timeout=timeout)
    except BaseException:
        box.remove(probe.temp_path, missing_ok=True)
        _forget(box, probe)
        raise
    for b in probe.bytecode:  # the source is patched: an unchecked-hash cache would still run the original
        box.remove(b["cache"], missing_ok=True, timeout=timeout)
    _crash_point("after-replace")
    probe = dataclasses.replace(probe, state="active", temp_path=None, owner_note=note)
    _save(box, probe)
    return probe


def bytecode_caches(box: Box, path: PathLike, *, python: Optional[str] = None, timeout: float = 30) -> list[dict]:
    """The bytecode caches of the source file ``path`` on the box that ``python`` (default
    ``box.python``) would use, each ``{"cache": path, "flags": int, "kind": "timestamp" |
    "checked-hash" | "unchecked-hash" | "unreadable", "magic_ok": bool}`` (``magic_ok``: written by
    this interpreter's version); ``[]`` when none exists. Raises ``ProbeError`` when the snippet
    cannot run or prints something else (the message has its output)."""
    res = box.run([python or box.python, "-B", "-c", _BYTECODE_SNIPPET, str(path)], timeout=timeout, check=False)
    try:
        if not res.ok:
            raise ValueError(f"exit {res.exit_code}")
        found = json.loads(res.stdout.strip().splitlines()[-1])
        if not isinstance(found, list):
            raise ValueError("not a list")
    except (ValueError, IndexError) as exc:
        raise ProbeError(f"could not list the bytecode caches of {path} ({exc}): "
                         f"{(res.stderr or res.stdout).strip()[-300:]}", path=str(path), box=box.name) from None
    return found


def _bytecode_backup_path(box: Box, tag: str, n: int) -> str:
    return f"{journal_dir(box)}/{tag}.pyc-{n}"


def _describe_caches(caches: Sequence[dict]) -> Optional[str]:
    if not caches:
        return None
    parts = []
    for c in caches:
        what = {"timestamp": "a timestamp cache: the patched file's new mtime and size invalidate it",
                "checked-hash": "a checked-hash cache: the patched file's new hash invalidates it",
                "unchecked-hash": "an unchecked-hash cache, trusted without the source: moved aside (restored "
                                  "by the revert) so the patched source is what runs",
                "unreadable": "unreadable"}.get(c.get("kind"), str(c.get("kind")))
        parts.append(f"{c['cache']}: {what}")
    return "; ".join(parts)


def _restore_bytecode(box: Box, probe: Probe, *, timeout: float) -> None:
    """Put back the bytecode caches ``add_probe`` moved aside, byte for byte (sha256 checked)."""
    for b in probe.bytecode:
        try:
            data = box.read_bytes(b["backup"], timeout=timeout)
        except RemoteFileNotFound:
            raise ProbeConflict(f"probe {probe.tag!r}: the backup {b['backup']} of the bytecode cache {b['cache']} "
                                "is gone; the source was restored, the cache not (Python recompiles it)",
                                path=probe.path, box=box.name) from None
        if hashlib.sha256(data).hexdigest() != b["sha256"]:
            raise ProbeConflict(f"probe {probe.tag!r}: the backup {b['backup']} does not match the bytecode cache's "
                                "sha256; not restoring it", path=probe.path, box=box.name)
        box.write_file(b["cache"], data, mode=0o644, make_dirs=True, timeout=timeout)


def default_tag(path: str, line: int, taken: set[str]) -> str:
    """The default tag of a probe at ``line`` of ``path``: ``<file stem>-L<line>`` (valid per
    :data:`TAG_RE`), with ``-2``, ``-3``... when ``taken`` (the journal's tags) already holds it. ``line``: the anchor's line in the original file's numbering
    (other probes' blocks not counted)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", posixpath.splitext(posixpath.basename(path))[0]).lstrip("_.-")
    base = f"{(stem or 'probe')[:48]}-L{line}"
    tag, n = base, 2
    while tag in taken:
        tag, n = f"{base}-{n}", n + 1
    return tag


def locate_anchor(
    box: Box,
    path: PathLike,
    *,
    before: Union[str, int],
    function: Optional[str] = None,
    without_probes: bool = False,
    timeout: float = 60,
) -> int:
    """The 1-based line of the file ``path`` on the box that a probe with this anchor would go
    before (the same rules as :func:`add_probe`: one match outside other probes' blocks, within
    ``function``, on the first line of a statement; an int ``before`` is a line of the file as it
    is now). Reads the file; changes nothing.

    With ``without_probes`` the line is counted as if the blocks of the probes already in the file
    were not there: the original file's numbering (the lines outside probe marker blocks).

    Raises ``AnchorNotFound`` / ``AnchorAmbiguous``; ``RemoteFileNotFound`` when the file is
    absent; ``ProbeError`` when it is not UTF-8.
    """
    p = box.realpath(path, timeout=timeout)
    raw = box.read_bytes(p, timeout=timeout)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProbeError(f"cannot probe a file that is not UTF-8 (byte {exc.start})", path=p, box=box.name) from None
    lines = _split_lines(text)
    idx = _find_anchor(text, lines, before, function, p, box)
    if without_probes:
        idx -= sum(1 for i in _probe_block_lines(lines) if i < idx)
    return idx + 1


#: What :func:`probe_file_status` can say about a probed file.
FILE_STATUSES = {
    "patched": "patched as recorded",
    "stacked": "patched, with newer probes on top",
    "original": "back to the original",
    "edited": "edited by someone else",
    "missing": "missing",
}


def probe_file_status(
    box: Box, probe: Probe, *, others: Optional[Sequence[Probe]] = None, timeout: float = 60
) -> tuple[str, Optional[str]]:
    """``(status, sha256 now)`` of the file ``probe`` patched, judged from its sha256 against the
    journal: ``"patched"`` (the probe's patched text), ``"stacked"`` (the patched text of a newer
    probe on the same file that was added on top of this one, directly or through others),
    ``"original"`` (the bytes before the probe), ``"edited"`` (anything else: someone changed
    it), ``"missing"`` (sha256 ``None``). ``others``: the journal's probes (read when not given).
    Box errors other than a missing file propagate.
    """
    try:
        current = box.sha256(probe.path, timeout=timeout)
    except RemoteFileNotFound:
        return "missing", None
    if current == probe.patched_sha256:
        return "patched", current
    if current == probe.original_sha256:
        return "original", current
    others = list_probes(box, timeout=timeout) if others is None else list(others)
    top = probe.patched_sha256
    chain = True
    while chain:
        chain = False
        for q in others:
            if q.tag != probe.tag and q.path == probe.path and q.original_sha256 == top and q.patched_sha256 != top:
                top = q.patched_sha256
                if current == top:
                    return "stacked", current
                chain = True
                break
    return "edited", current


def revert_probe(box: Box, probe: Union[Probe, str], *, timeout: float = 60) -> Probe:
    """Remove a probe: restore the backed-up original byte for byte and drop the journal entry.

    ``probe`` is a ``Probe`` or its tag; the journal on the box is authoritative. A pending
    entry (an interrupted ``add_probe``) is cleaned up: its temporary file removed and the
    original restored if the replace had happened. The restored file replaces the patched one by
    an atomic rename (a new inode) with the recorded permission bits and owner; when the owner
    cannot be set (not root, not the owner) the file is still restored and the returned probe's
    ``owner_note`` says ``"owner could not be kept: ..."`` (else it is ``None``). Returns the probe
    as it was recorded, with that ``owner_note``. ``timeout``: seconds for each box call.

    Raises ``ProbeNotFound`` when the tag is not in the journal (``ProbeError`` when its entry is
    unreadable); ``ProbeConflict`` (backup kept) when the file is neither the patched text nor the
    original (the message says how to put the original back by hand: ``cp BACKUP PATH``, then
    ``workbench probe revert --tag TAG`` drops the record), when a newer probe on the same file
    must be reverted first, or when the restored file's sha256 does not match the original.
    """
    tag = probe.tag if isinstance(probe, Probe) else probe
    entry = _load(box, tag, timeout=timeout)
    if entry is None:
        raise ProbeNotFound(f"no probe {tag!r} in the journal at {journal_dir(box)}", box=box.name)
    if entry.temp_path:
        box.remove(entry.temp_path, missing_ok=True)
    try:
        now = box.realpath(entry.path, timeout=timeout)
    except RemoteFileNotFound:
        now = entry.path
    if now != entry.path:  # a component became a symlink since the add: never write through it
        raise ProbeConflict(
            f"probe {tag!r}: {entry.path} (the resolved file the probe patched) now resolves to {now}; not "
            f"writing through the link; the original is kept at {entry.backup_path}",
            path=entry.path, backup_path=entry.backup_path, box=box.name)
    try:
        current = box.sha256(entry.path, timeout=timeout)
    except RemoteFileNotFound:
        raise ProbeConflict(
            f"probe {tag!r}: the probed file no longer exists; backup kept at {entry.backup_path}",
            path=entry.path,
            backup_path=entry.backup_path,
            box=box.name,
        ) from None
    if current == entry.original_sha256:  # never replaced (interrupted add) or already restored
        _restore_bytecode(box, entry, timeout=timeout)
        _forget(box, entry)
        return dataclasses.replace(entry, owner_note=None)
    if current != entry.patched_sha256:
        newer = [
            q.tag
            for q in list_probes(box, timeout=timeout)
            if q.tag != tag and q.path == entry.path and q.original_sha256 == entry.patched_sha256
        ]
        if newer:
            msg = (
                f"probe {tag!r} has newer probes {newer} on top of it in the same file; "
                "revert those first (`workbench probe revert --all` does it in order, as does "
                "`workbench probe revert --file PATH`; revert_all in Python)"
            )
        else:
            msg = (
                f"probe {tag!r}: the file was edited by someone else since the probe was added "
                f"(sha256 now {current[:12]}…, patched {entry.patched_sha256[:12]}…); "
                f"not restoring over their changes; the original is kept at {entry.backup_path}; "
                f"to put it back anyway (their changes are lost): "
                f"`cp {shlex.quote(entry.backup_path)} {shlex.quote(entry.path)}`, then "
                f"`workbench probe revert --tag {tag}` drops the record"
            )
        raise ProbeConflict(msg, path=entry.path, backup_path=entry.backup_path, box=box.name)
    backup = box.read_bytes(entry.backup_path, timeout=timeout)
    if hashlib.sha256(backup).hexdigest() != entry.original_sha256:
        raise ProbeConflict(
            f"probe {tag!r}: the backup {entry.backup_path} does not match the original's sha256; not restoring",
            path=entry.path,
            backup_path=entry.backup_path,
            box=box.name,
        )
    mode = entry.mode if entry.mode is not None else box.stat(entry.path, timeout=timeout).mode
    tmp = box.temp_path_for(entry.path)
    box.transport.write_new(tmp, backup, mode=mode, timeout=timeout)
    try:
        note = _keep_owner(box, tmp, entry.owner_uid, entry.owner_gid, timeout=timeout)
        box.transport.rename(tmp, entry.path, timeout=timeout)
    except BaseException:
        box.remove(tmp, missing_ok=True)
        raise
    restored = box.sha256(entry.path, timeout=timeout)
    if restored != entry.original_sha256:
        raise ProbeConflict(
            f"probe {tag!r}: after restoring, the file's sha256 is {restored[:12]}…, expected "
            f"{entry.original_sha256[:12]}…; backup kept",
            path=entry.path,
            backup_path=entry.backup_path,
            box=box.name,
        )
    _restore_bytecode(box, entry, timeout=timeout)
    _forget(box, entry)
    return dataclasses.replace(entry, owner_note=note)


def revert_all(box: Box, *, timeout: float = 60) -> list[Probe]:
    """Revert every readable probe in the box's journal, newest first; return those reverted.

    Keeps going past a probe that cannot be reverted, and past journal entries that cannot be
    read (:func:`list_journal`), then raises ``ProbeConflict`` naming each failure and each
    unreadable entry; the exception carries ``.reverted`` (the probes reverted, gone from the
    journal) and ``.unreadable`` (the :class:`JournalProblem` list). ``timeout``: seconds for
    each box call.
    """
    probes, problems = list_journal(box, timeout=timeout)
    reverted: list[Probe] = []
    failures: list[str] = []
    for probe in reversed(probes):
        try:
            reverted.append(revert_probe(box, probe, timeout=timeout))
        except ProbeError as exc:
            failures.append(f"{probe.tag}: {exc.message}")
    failures += [problem.describe() for problem in problems]
    if failures:
        err = ProbeConflict(
            f"reverted {len(reverted)} probe(s); could not revert {len(failures)}:\n  " + "\n  ".join(failures),
            box=box.name,
        )
        err.reverted = reverted  # type: ignore[attr-defined]
        err.unreadable = problems  # type: ignore[attr-defined]
        raise err
    return reverted


# -- reading what probes printed ---------------------------------------------------------------


def _line_rx(tag: str) -> "re.Pattern[str]":
    """A probe's output line: ``[probe:TAG pgid=G pid=P] `` (or ``[probe:TAG] ``, printed by the
    probe blocks of earlier versions) not preceded by a quote (a traceback that quotes the probe's
    own source, ``print('[probe:TAG' + ...)``, is not output)."""
    return re.compile(r"(?<!['\"])\[probe:" + re.escape(tag)
                      + r"(?: pgid=(?P<pgid>\d+|\?))?(?: pid=(?P<pid>\d+|\?))?\] (?P<body>.*)$")


def launch_pgid(launch: Any) -> Optional[int]:
    """The process group that identifies a launch: ``launch`` itself when it is an int, its
    ``.pgid`` for a ``ServerHandle`` (``Box.launch_server``), a ``ServerProcess``
    (``Box.find_servers``) or anything else with one; ``None`` for ``None``. Raises ``TypeError``
    for anything else (a bool, a string, a handle without ``pgid``)."""
    if launch is None:
        return None
    value = launch if isinstance(launch, int) else getattr(launch, "pgid", None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a launch is a process group id (int) or a server handle with .pgid, got {launch!r}")
    return value


def _parse_probe_line(line: str, tag: str, exprs: Optional[Sequence[str]]
                      ) -> Optional[tuple[Optional[int], Optional[int], dict[str, str]]]:
    """``(pgid, pid, {expr: text})`` of one log line printed by probe ``tag``, ``None`` when the
    line is not one. ``pgid``/``pid`` are ``None`` on a line of an older probe block (no pgid) or
    one printed where they could not be read (``?``)."""
    m = _line_rx(tag).search(line.rstrip("\r\n"))
    if not m:
        return None
    body = m.group("body")
    if body.startswith("<probe failed:"):
        raw = {"probe_error": body}
    elif exprs:
        raw = _split_known(body, list(exprs))
    else:
        raw = _split_heuristic(body)
    pgid, pid = (int(v) if v and v.isdigit() else None for v in (m.group("pgid"), m.group("pid")))
    return pgid, pid, raw


def read_probe_output(
    log: Union[str, Iterable[str]], tag: Union[str, Probe], *, exprs: Optional[Sequence[str]] = None,
    pgid: Any = None,
) -> list[dict[str, str]]:
    """The values each ``[probe:TAG ...]`` line printed, one dict ``{expr: repr-text}`` per line,
    in log order. ``log`` is the log text or its lines.

    With ``exprs`` (or a ``Probe`` for ``tag``) the fields are split exactly on the known
    expressions; without, on spaces outside brackets and quotes before ``name=``. A line
    printed by a failing probe gives ``{"probe_error": text}``.

    ``pgid``: only the lines printed by that launch (an int, or a server handle / process with
    ``.pgid``: see :func:`launch_pgid`); a line without a pgid (printed by an older probe block)
    belongs to no known launch and is then left out. Default: every line. Raises ``TypeError``
    for a ``pgid`` that is no launch.
    """
    if isinstance(tag, Probe):
        exprs = exprs or tag.exprs
        tag = tag.tag
    want = launch_pgid(pgid)
    lines = log.splitlines() if isinstance(log, str) else log
    out = []
    for line in lines:
        parsed = _parse_probe_line(line, tag, exprs)
        if parsed is not None and (want is None or parsed[0] == want):
            out.append(parsed[2])
    return out


_OPEN = {"(": ")", "[": "]", "{": "}"}


def _balanced(text: str) -> bool:
    """True when brackets and quotes in ``text`` (a repr) are closed."""
    depth = 0
    quote: Optional[str] = None
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in ")]}":
            depth -= 1
    return depth == 0 and quote is None


def _split_known(body: str, exprs: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    pos = 0
    for i, expr in enumerate(exprs):
        key = expr + "="
        if not body.startswith(key, pos):
            values[expr] = ""
            continue
        start = pos + len(key)
        if i + 1 == len(exprs):
            values[expr] = body[start:]
            break
        marker = " " + exprs[i + 1] + "="
        cut = body.find(marker, start)
        first = cut
        while cut >= 0 and not _balanced(body[start:cut]):
            cut = body.find(marker, cut + 1)
        if cut < 0:
            cut = first
        if cut < 0:
            values[expr] = body[start:]
            pos = len(body)
        else:
            values[expr] = body[start:cut]
            pos = cut + 1
    return values


def _key_end(token: str) -> int:
    """Index of the ``=`` ending an expression at the start of ``token`` (-1 if none)."""
    depth = 0
    quote: Optional[str] = None
    for i, ch in enumerate(token):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0 and i > 0:
            nxt = token[i + 1 : i + 2]
            if nxt != "=" and token[i - 1] not in "=!<>":
                return i
    return -1


def _split_heuristic(body: str) -> dict[str, str]:
    tokens: list[str] = []
    current = ""
    for ch in body:
        if ch == " " and _balanced(current):
            tokens.append(current)
            current = ""
        else:
            current += ch
    tokens.append(current)
    values: dict[str, str] = {}
    key: Optional[str] = None
    for token in tokens:
        end = _key_end(token)
        if end > 0 and token[0] not in "<'\"":
            key = token[:end]
            values[key] = token[end + 1 :]
        elif key is not None:
            values[key] += " " + token
    return values


def parse_shape(text: str) -> tuple[int, ...]:
    """``"torch.Size([1, 384])"``, ``"(1, 384)"``, ``"[1, 384]"``, ``"(384,)"`` -> ``(1, 384)`` etc.

    Raises ``ValueError`` when the text is not a shape.
    """
    m = re.fullmatch(r"\s*(?:torch\.)?(?:Size\(\s*\[(?P<a>[^\]]*)\]\s*\)|\((?P<b>[^)]*)\)|\[(?P<c>[^\]]*)\])\s*", text)
    if not m:
        raise ValueError(f"not a shape: {text!r}")
    inner = next(g for g in (m.group("a"), m.group("b"), m.group("c")) if g is not None)
    parts = [s.strip() for s in inner.split(",")]
    if parts and parts[-1] == "":
        parts.pop()
    if not all(re.fullmatch(r"\d+", s) for s in parts):
        raise ValueError(f"not a shape: {text!r}")
    return tuple(int(s) for s in parts)


# -- parsed read-back from a log on the box ---------------------------------------------------

_NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_SIZE_RE = re.compile(r"\s*(?:torch\.)?Size\(")


def parse_probe_value(text: str) -> Any:
    """One printed value (a ``repr``) as a Python value where that is safe and unambiguous.

    * a shape, ``torch.Size([1, 5, 480])`` or ``(1, 480)``, -> a tuple of ints;
    * ints, floats (``nan``/``inf`` too), bools, ``None``, strings, bytes, lists, tuples, dicts,
      sets -> the value (:func:`ast.literal_eval`, never ``eval``);
    * anything else (``torch.float32``, ``tensor([...])``, ``<error:...>``, a repr cut at
      ``MAX_REPR`` characters) -> the text unchanged.

    Raises ``TypeError`` when ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"a probe value is text, got {type(text).__name__}")
    s = text.strip()
    if _SIZE_RE.match(s):
        try:
            return parse_shape(s)
        except ValueError:
            return text
    if s in _NON_FINITE:
        return _NON_FINITE[s]
    if not s or s.startswith("<"):
        return text
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


@dataclass(frozen=True)
class ProbeReading:
    """One line a probe printed, read back from a log.

    ``values``: ``{expr: parsed value}`` (:func:`parse_probe_value`); ``raw``: ``{expr: the
    printed text}``; a line printed by a failing probe has the single key ``probe_error``.
    ``line_number``: 1-based line in the log; ``log_line``: the whole line as logged (rank tags
    and any prefix included). ``pgid``: the process group of the process that printed it (the
    launch: ``Box.launch_server`` makes the server its own group and SGLang's scheduler / TP
    worker processes inherit it); ``pid``: that process. Both ``None`` on a line printed by an
    older probe block (no ``pgid=`` in it: of unknown launch) or where they could not be read.
    """

    tag: str
    values: dict
    raw: dict
    line_number: int
    log_line: str = ""
    pgid: Optional[int] = None
    pid: Optional[int] = None

    @property
    def error(self) -> Optional[str]:
        """The failure text when the probe itself failed (``<probe failed:...>``), else ``None``."""
        return self.raw.get("probe_error")

    @property
    def errors(self) -> dict:
        """``{expr: text}`` of the expressions that raised (printed as ``<error:...>``)."""
        return {k: v for k, v in self.raw.items() if k != "probe_error" and v.startswith("<error:")}

    def to_dict(self) -> dict:
        """JSON-ready: tuples become lists; values JSON cannot hold (sets, bytes, nan) as text."""
        return {"tag": self.tag, "line_number": self.line_number, "pgid": self.pgid, "pid": self.pid,
                "values": {k: _jsonable(v) for k, v in self.values.items()}, "raw": dict(self.raw),
                "log_line": self.log_line}


def readings_by_launch(readings: Iterable[ProbeReading]) -> dict[Optional[int], list[ProbeReading]]:
    """``{pgid: readings}`` in order of first appearance; key ``None`` holds the lines of unknown
    launch (printed by an older probe block, without ``pgid=``)."""
    out: dict[Optional[int], list[ProbeReading]] = {}
    for r in readings:
        out.setdefault(r.pgid, []).append(r)
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON has no nan / inf
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def read_probe_log(
    box: Box,
    log_path: PathLike,
    tag: Union[str, Probe],
    *,
    exprs: Optional[Sequence[str]] = None,
    pgid: Any = None,
    timeout: float = 30,
) -> list[ProbeReading]:
    """What probe ``tag`` printed into the log file ``log_path`` on the box, one
    :class:`ProbeReading` per line, in log order (``[]`` when it has not fired).

    ``pgid``: only the lines printed by that launch: a process group id, or the launch's
    ``ServerHandle`` (``Box.launch_server``) / ``ServerProcess`` (``Box.find_servers``). A log
    appended to by several launches holds the same tag from each; only the lines of the launch
    you ask for are evidence about it. Lines without a pgid (printed by an older probe block) are
    of unknown launch and are then left out. Default ``None``: every line, each with its
    ``pgid`` (split them with :func:`readings_by_launch`).

    The log is never read whole: ``grep -n -a -F -e "[probe:TAG]" -e "[probe:TAG pgid=" LOG`` runs
    on the box and only the matching lines come back (a multi-GB log costs one sequential scan
    there). Fields are split on ``exprs`` (or the ``Probe``'s) when known, else heuristically (see
    :func:`read_probe_output`). ``timeout`` in seconds for the grep.

    Raises ``ProbeError`` for a malformed tag or when grep fails for another reason; ``TypeError``
    for a ``pgid`` that is no launch; ``RemoteFileNotFound`` when the log does not exist,
    ``RemoteIsADirectory`` when it is a directory, ``RemotePermissionError`` when it cannot be
    read; ``CommandTimedOut`` on time-out.
    """
    if isinstance(tag, Probe):
        exprs = exprs or tag.exprs
        tag = tag.tag
    if not isinstance(tag, str) or not TAG_RE.match(tag):
        raise ProbeError(f"probe tag {tag!r} must match {TAG_RE.pattern}")
    want = launch_pgid(pgid)
    path = box.expand_path(log_path)
    res = box.run(["grep", "-n", "-a", "-F", "-e", f"[probe:{tag}]", "-e", f"[probe:{tag} pgid=", "--", path],
                  timeout=timeout, check=False)
    if res.exit_code == 1:
        return []
    if res.exit_code != 0:
        st = box.stat(path, timeout=timeout)  # RemoteFileNotFound / RemotePermissionError, typed
        if st.is_dir:
            raise RemoteIsADirectory(f"the log {path} is a directory", path=path, box=box.name)
        raise ProbeError(f"grep over the log failed (exit {res.exit_code}): {res.stderr.strip()[-300:]}",
                         path=path, box=box.name)
    readings: list[ProbeReading] = []
    for row in res.stdout.splitlines():
        number, sep, line = row.partition(":")
        if not sep or not number.isdigit():
            continue
        parsed = _parse_probe_line(line, tag, exprs)
        if parsed is None:
            continue  # "[probe:TAG]" quoted, or not followed by the values
        line_pgid, line_pid, raw = parsed
        if want is not None and line_pgid != want:
            continue
        values = dict(raw) if "probe_error" in raw else {k: parse_probe_value(v) for k, v in raw.items()}
        readings.append(ProbeReading(tag, values, raw, int(number), line.rstrip("\r"), line_pgid, line_pid))
    return readings
