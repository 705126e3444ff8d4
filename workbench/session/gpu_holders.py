"""Who holds the box's GPU memory: each holder named (pid, process title, user, parent, MiB per
GPU), the live server tree it belongs to, and whether it is an orphan of an earlier SGLang launch.

Facts encoded here:

- SGLang 0.5.23 titles its processes with ``setproctitle``: ``sglang::scheduler`` plus the rank
  prefix with ``_`` for spaces (``sglang::scheduler_TP0``, ``sglang::scheduler_DP0_TP0_EP0``,
  ``sglang::scheduler_PP2_TP1``: ``srt/managers/scheduler.py`` ``run_scheduler_process``) and
  ``sglang::detokenizer`` (``srt/managers/detokenizer_manager.py``). The title replaces the
  argv, so ``/proc/PID/cmdline`` is the title.
- Ranks orphaned by a killed launcher are reparented to PID 1 (or a subreaper) and keep their GPU
  memory (sglang #23627, ai-dynamo/dynamo #1889).
- Inside a container nvidia-smi lists no PIDs; processes with SGLang's titles are then the only
  way to name who holds the memory (their MiB unknown).

A holder is an *orphan* when it is an SGLang process (an ``sglang::`` title, or an SGLang / sandbox
launcher command line: :func:`remote.engines.launcher_engine`) of the box's own user (same uid)
that no live launcher has above it (walking ``ppid`` up to PID 1) and that was left behind: it was
reparented to PID 1, or the leader of its process group (the launcher it was started in: ranks
inherit its group) is gone. A rank of a live ``sglang.Engine`` inside a user's script (its parent and
group leader alive) is no orphan. Only orphans are ever offered for clean-up; another user's
processes never are.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from remote import engines
from remote.errors import RemoteError, RemoteFileError
from remote.result import ProcessInfo
from workbench.session.gpus import GpuSnapshot, read_gpu_snapshot

__all__ = ["Holder", "BoxGpus", "read_box_gpus", "box_uid", "uid_of", "user_names", "live_launchers", "server_of",
           "is_sglang_process", "title_of", "holders_table",
           "left_behind_by_launcher"]

#: The prefix of SGLang 0.5.23's process titles (see the module docstring).
SGLANG_TITLE = "sglang::"

_NAMES: "weakref.WeakKeyDictionary[Any, dict[int, str]]" = weakref.WeakKeyDictionary()


def title_of(argv: Sequence[str]) -> str:
    """A process's title: its ``/proc/PID/cmdline`` words joined by spaces (what ``setproctitle`` set)."""
    return " ".join(str(a) for a in argv).strip()


def is_sglang_process(argv: Sequence[str]) -> bool:
    """True for an SGLang process: an ``sglang::`` title or an SGLang / sandbox launcher command line."""
    return title_of(argv).startswith(SGLANG_TITLE) or engines.launcher_engine(argv) == engines.SGLANG


def _uid_from_status(text: str) -> Optional[int]:
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


def uid_of(box: Any, pid: int, *, timeout: float = 10) -> Optional[int]:
    """The real uid of process ``pid`` (``/proc/PID/status``, ``Uid:``), ``None`` when it is gone."""
    try:
        return _uid_from_status(box.transport.read_range(f"/proc/{int(pid)}/status", timeout=timeout)
                                .decode("ascii", "replace"))
    except RemoteFileError:
        return None


def box_uid(box: Any, *, timeout: float = 10) -> Optional[int]:
    """The uid of the box's user: ``/proc/self/status`` read through the transport (over SSH the
    SFTP server, which runs as the login user; locally this process). ``None`` when unreadable."""
    try:
        return _uid_from_status(box.transport.read_range("/proc/self/status", timeout=timeout)
                                .decode("ascii", "replace"))
    except RemoteFileError:
        return None


def user_names(box: Any, uids: Sequence[int], *, timeout: float = 10) -> dict[int, str]:
    """``{uid: user name}`` on the box (``getent passwd``, one command for the uids not cached on
    this box object yet); a uid with no entry is named ``uid N``."""
    cache = _NAMES.setdefault(box, {})
    missing = sorted({int(u) for u in uids if u is not None} - set(cache))
    if missing:
        try:
            text = box.run(["getent", "passwd"] + [str(u) for u in missing], check=False, timeout=timeout).stdout
        except RemoteError:
            text = ""  # each is named by its number below
        for line in text.splitlines():
            parts = line.split(":")
            if len(parts) > 2 and parts[2].isdigit():
                cache[int(parts[2])] = parts[0]
        for u in missing:
            cache.setdefault(u, f"uid {u}")
    return {int(u): cache[int(u)] for u in uids if u is not None}


def live_launchers(procs: Sequence[ProcessInfo]) -> dict[int, ProcessInfo]:
    """``{pid: process}`` of the live engine launchers among ``procs``
    (:func:`remote.engines.launcher_engine`), leaving out a child that runs its parent's very argv
    (a forked worker of that launcher)."""
    by_pid = {p.pid: p for p in procs}
    out = {}
    for p in procs:
        if p.exited or not p.argv or engines.launcher_engine(p.argv) is None:
            continue
        parent = by_pid.get(p.ppid)
        if parent is not None and parent.argv == p.argv:
            continue
        out[p.pid] = p
    return out


def server_of(pid: int, by_pid: Mapping[int, ProcessInfo], launchers: Mapping[int, Any]) -> Optional[int]:
    """The pid of the live launcher whose tree ``pid`` is in (``pid`` itself, or an ancestor by
    ``ppid``), else ``None``."""
    seen: set[int] = set()
    cur: Optional[int] = int(pid)
    while cur is not None and cur > 1 and cur not in seen:
        if cur in launchers:
            return cur
        seen.add(cur)
        proc = by_pid.get(cur)
        cur = proc.ppid if proc is not None else None
    return None


def left_behind_by_launcher(proc: ProcessInfo, by_pid: Mapping[int, ProcessInfo]) -> bool:
    """Reparented to PID 1, or the leader of its process group is gone (see the module docstring)."""
    return proc.ppid == 1 or (proc.pgid > 1 and proc.pgid not in by_pid)


@dataclass
class Holder:
    """A process holding GPU memory: ``pid``, ``title`` (its command line / process title; for a
    process gone while being read, the name nvidia-smi gave), ``user`` and ``uid`` (``None``: gone),
    ``ppid``, ``pgid``, ``mib`` (``{GPU index: MiB}``, MiB ``None`` when N/A or unknown), ``left_behind``
    (reparented to PID 1, or its process group's leader is gone), ``server``
    (the pid of the live launcher whose tree it is in, else ``None``), ``sglang`` (an SGLang
    process: :func:`is_sglang_process`), ``own`` (the box's user), ``gone`` (exited while being
    read), ``listed`` (nvidia-smi listed it; False: found by its SGLang title in a container, where
    no PIDs are listed)."""

    pid: int
    title: str
    user: Optional[str]
    uid: Optional[int]
    ppid: Optional[int]
    pgid: Optional[int]
    mib: dict[int, Optional[int]] = field(default_factory=dict)
    server: Optional[int] = None
    sglang: bool = False
    own: bool = False
    gone: bool = False
    listed: bool = True
    left_behind: bool = False

    @property
    def orphan(self) -> bool:
        """An SGLang process of the box's user in no live server tree, left behind by its launcher
        (``left_behind``: reparented to PID 1, or its process group's leader gone; module docstring)."""
        return self.sglang and self.own and self.server is None and self.left_behind and not self.gone

    @property
    def total_mib(self) -> Optional[int]:
        known = [m for m in self.mib.values() if m is not None]
        return sum(known) if known else None

    def mib_text(self) -> str:
        """``GPU0 71772 MiB, GPU1 71772 MiB`` (``? MiB`` when unknown)."""
        if not self.listed:
            return "GPU memory unknown (nvidia-smi lists no PIDs)"
        return ", ".join(f"GPU{i} {m if m is not None else '?'} MiB" for i, m in sorted(self.mib.items())) or "no GPU"

    def describe(self) -> str:
        """One line: ``pid 123 sglang::scheduler_TP0 (user alice, ppid 1) GPU0 71772 MiB [orphan]``."""
        title = self.title if len(self.title) <= 100 else self.title[:97] + "..."
        tags = (["orphan"] if self.orphan else []) + ([f"server pid {self.server}"] if self.server else []) + \
            (["gone"] if self.gone else []) + ([] if self.listed else ["not listed by nvidia-smi"])
        return (f"pid {self.pid} {title} (user {self.user or '?'}, ppid {self.ppid if self.ppid is not None else '?'})"
                f" {self.mib_text()}" + (f" [{', '.join(tags)}]" if tags else ""))

    def to_dict(self) -> dict:
        return {"pid": self.pid, "title": self.title, "user": self.user, "uid": self.uid, "ppid": self.ppid,
                "pgid": self.pgid, "mib": {str(k): v for k, v in sorted(self.mib.items())}, "server": self.server,
                "sglang": self.sglang, "own": self.own, "left_behind": self.left_behind, "orphan": self.orphan,
                "gone": self.gone, "listed": self.listed}


@dataclass
class BoxGpus:
    """The box's GPUs now: ``snapshot`` (:class:`~workbench.session.gpus.GpuSnapshot`), ``holders``
    (:class:`Holder`, by pid), ``user`` / ``uid`` (the box's user)."""

    snapshot: GpuSnapshot
    holders: list[Holder] = field(default_factory=list)
    user: Optional[str] = None
    uid: Optional[int] = None

    @property
    def available(self) -> bool:
        return self.snapshot.available

    @property
    def note(self) -> str:
        return self.snapshot.note

    def holders_on(self, index: int) -> list[Holder]:
        return [h for h in self.holders if index in h.mib]

    @property
    def orphans(self) -> list[Holder]:
        return [h for h in self.holders if h.orphan]

    def unattributed(self) -> dict[int, Optional[int]]:
        """``{GPU index: MiB of memory.used no listed process accounts for}``."""
        return {g.index: self.snapshot.unattributed_mib(g.uuid) for g in self.snapshot.gpus}

    def to_dict(self) -> dict:
        return {**self.snapshot.to_dict(), "user": self.user, "unattributed_mib": {str(k): v for k, v in
                                                                                  self.unattributed().items()},
                "holders": [h.to_dict() for h in self.holders]}


def holders_table(holders: Sequence[Holder]) -> str:
    """The holders as a text table, one per line (``pid``, user, MiB per GPU, title)."""
    return "\n".join(f"  {h.describe()}" for h in holders)


def read_box_gpus(box: Any, *, snapshot: Optional[GpuSnapshot] = None,
                  processes: Optional[Sequence[ProcessInfo]] = None, sglang_candidates: bool = False,
                  timeout: float = 10) -> BoxGpus:
    """The box's GPUs and their holders named: ``snapshot`` (read now when not given), the box's
    process table (``processes``, read now when not given and something holds memory) for titles,
    parents and server trees, ``/proc/PID/status`` for each holder's uid, ``getent passwd`` for
    user names. A holder that exits while being read is kept, marked ``gone``, titled with
    nvidia-smi's process name. ``sglang_candidates``: also list, as holders with unknown MiB
    (``listed`` False), the SGLang processes of the box's user in no live server tree when
    nvidia-smi lists no PIDs (a container). Raises ``remote.errors.RemoteError`` when the box fails."""
    snap = snapshot if snapshot is not None else read_gpu_snapshot(box, timeout=timeout)
    out = BoxGpus(snap)
    if not snap.available:
        return out
    index = {g.uuid: g.index for g in snap.gpus}
    want_candidates = sglang_candidates and not snap.apps
    if not snap.apps and not want_candidates:
        return out
    procs = list(processes) if processes is not None else box.transport.processes(argv=True, timeout=timeout)
    by_pid = {p.pid: p for p in procs if not p.exited}
    launchers = live_launchers(list(by_pid.values()))
    out.uid = box_uid(box, timeout=timeout)
    holders: dict[int, Holder] = {}
    for app in snap.apps:
        h = holders.get(app.pid)
        if h is None:
            proc = by_pid.get(app.pid)
            uid = uid_of(box, app.pid, timeout=timeout) if proc is not None else None
            gone = proc is None or uid is None
            h = holders[app.pid] = Holder(
                pid=app.pid, title=title_of(proc.argv) if proc is not None and proc.argv else app.process_name,
                user=None, uid=uid, ppid=None if proc is None else proc.ppid, pgid=None if proc is None else proc.pgid,
                server=None if gone else server_of(app.pid, by_pid, launchers),
                sglang=proc is not None and is_sglang_process(proc.argv), own=uid is not None and uid == out.uid,
                gone=gone, left_behind=proc is not None and left_behind_by_launcher(proc, by_pid))
        gpu = index.get(app.gpu_uuid)
        if gpu is not None:
            prev = h.mib.get(gpu)
            h.mib[gpu] = app.used_mib if prev is None else prev + (app.used_mib or 0)
    if want_candidates:
        for proc in by_pid.values():
            if proc.pid in holders or not is_sglang_process(proc.argv) or server_of(proc.pid, by_pid, launchers) \
                    or not left_behind_by_launcher(proc, by_pid):
                continue
            uid = uid_of(box, proc.pid, timeout=timeout)
            if uid is None or uid != out.uid:
                continue
            holders[proc.pid] = Holder(pid=proc.pid, title=title_of(proc.argv), user=None, uid=uid, ppid=proc.ppid,
                                       pgid=proc.pgid, sglang=True, own=True, left_behind=True,
                                       listed=False)
    names = user_names(box, [h.uid for h in holders.values() if h.uid is not None] +
                       ([out.uid] if out.uid is not None else []), timeout=timeout)
    for h in holders.values():
        h.user = names.get(h.uid) if h.uid is not None else None
    out.user = names.get(out.uid) if out.uid is not None else None
    out.holders = sorted(holders.values(), key=lambda h: h.pid)
    return out
