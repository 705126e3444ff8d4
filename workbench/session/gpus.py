"""The box's GPUs, read with ``nvidia-smi``: which command, what it prints, one snapshot.

Which command (the rule shared with the sandbox, ``/tmp/wb/interfaces.md``): ``nvidia-smi`` when
``command -v nvidia-smi`` finds one on the box (a real GPU box: a sandbox's is never used then);
else ``<box.state_dir>/sandbox-gpus/bin/nvidia-smi`` when that file exists (the sandbox box's
GPUs, reported as such: the sandbox server installs it there, it is never on PATH); else none (the
GPU checks are skipped and :attr:`GpuCommand.reason` says why). ``command -v`` runs at most once
per :class:`remote.box.Box` object (cached); the sandbox's file is one ``stat`` each time it is
looked for, so a sandbox started after the first look is found.

Queries (NVIDIA's ``nvidia-smi --help-query-gpu`` / ``--help-query-compute-apps``):
:data:`GPU_QUERY` (``memory.used`` / ``memory.total`` in MiB) and :data:`APPS_QUERY` (one line per
process and GPU: ``used_memory`` in MiB, ``[N/A]`` when the driver cannot say). Inside a container
the driver lists no PIDs (it does not know the container's PID namespace: NVIDIA/nvidia-docker #179,
#1483): the compute-apps query prints nothing while ``memory.used`` is high, and per-GPU
``memory.used`` is all there is (:attr:`GpuSnapshot.container`).

Parsing never lets one bad line hide the rest: every line that parses is kept, each bad one is a
:class:`~workbench.errors.GpuQueryError` (query, line number, the line) in
:attr:`GpuSnapshot.problems`.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from remote.errors import CommandFailed
from workbench.errors import GpuQueryError

__all__ = ["sandbox_gpu_env", "SANDBOX_GPUS_DIR_ENV", "GPU_FIELDS", "APP_FIELDS", "GPU_QUERY", "APPS_QUERY", "SANDBOX_NVIDIA_SMI", "CONTAINER_MIN_MIB",
           "GpuCommand", "Gpu", "ComputeApp", "GpuSnapshot", "gpu_command", "parse_rows", "parse_gpu_lines",
           "parse_app_lines", "read_gpu_snapshot", "forget_gpu_command"]

#: The fields of the GPU query, in the order asked.
GPU_FIELDS = ("index", "uuid", "name", "memory.used", "memory.total")
#: The fields of the compute-apps query, in the order asked.
APP_FIELDS = ("pid", "used_memory", "gpu_uuid", "process_name")
GPU_QUERY = ["nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"]
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits"]
#: Where the sandbox box's nvidia-smi is, under ``Box.state_dir`` (interfaces.md, "Sandbox GPUs").
SANDBOX_NVIDIA_SMI = "sandbox-gpus/bin/nvidia-smi"
#: MiB of ``memory.used`` on one GPU that no listed process accounts for above which the box is
#: taken to hide its PIDs (a container): an idle datacenter GPU shows a few MiB (driver reservations).
CONTAINER_MIN_MIB = 1024

#: The free-text field of each query: the only one that may hold a comma (a process name, a GPU name).
_FREE_TEXT = {"name", "process_name"}
_INT_FIELDS = {"index", "pid"}
_MIB_FIELDS = {"memory.used", "memory.total", "used_memory"}
_NO_PROCESSES = "no running processes found"

#: ``command -v nvidia-smi`` per box: the path found, or "" (none). Weak: a closed box is forgotten.
_REAL: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class GpuCommand:
    """The GPU query command of a box: ``path`` (what to run: the real ``nvidia-smi`` as found on
    PATH, or the sandbox's absolute path; ``None``: none), ``kind`` (``"real"``, ``"sandbox"`` or
    ``"none"``), ``reason`` (why this one; for ``"none"``, why the GPU checks are skipped)."""

    path: Optional[str]
    kind: str
    reason: str

    @property
    def available(self) -> bool:
        return self.path is not None


#: The sandbox server's variable naming its GPU dir (``workbench.sandbox.gpus.GPUS_DIR_ENV``; not
#: imported from there: the session never imports the sandbox).
SANDBOX_GPUS_DIR_ENV = "SANDBOX_GPUS_DIR"


def sandbox_gpu_env(box: Any, launch: Any, env: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
    """``env`` for launching ``launch`` (a ``LaunchCommand``) on ``box``: unchanged unless it
    launches the embedded sandbox server (``workbench.sandbox_box.SANDBOX_SERVER_MODULE``) and sets
    no GPU dir of its own; then with ``SANDBOX_GPUS_DIR=<box.state_dir>/sandbox-gpus``, where
    :func:`gpu_command` looks for the sandbox box's GPUs. Without it a sandbox server started over
    SSH (whose session has no ``$EAGLE_WORKBENCH_STATE_DIR``) would take GPUs under the SSH
    user's home that the workbench never reads. A real engine's launch is never changed."""
    from workbench.sandbox_box import SANDBOX_SERVER_MODULE

    if getattr(launch, "module", None) != SANDBOX_SERVER_MODULE or (env or {}).get(SANDBOX_GPUS_DIR_ENV):
        return env
    return {**(env or {}), SANDBOX_GPUS_DIR_ENV: f"{str(box.state_dir).rstrip('/')}/sandbox-gpus"}


#: Where a real ``nvidia-smi`` is looked for: the box's PATH (a non-interactive SSH shell's), then
#: where drivers and containers put it (NVIDIA's container toolkit: ``/usr/local/nvidia/bin``), so a
#: GPU box whose non-interactive PATH lacks it is never judged on the sandbox's GPUs.
REAL_PATHS = ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi", "/usr/local/bin/nvidia-smi")
FIND_REAL = ("command -v nvidia-smi || for p in " + " ".join(REAL_PATHS)
             + '; do [ -x "$p" ] && { echo "$p"; break; }; done')


def forget_gpu_command(box: Any) -> None:
    """Drop the cached ``command -v nvidia-smi`` answer of ``box`` (the next look asks again)."""
    _REAL.pop(box, None)


def gpu_command(box: Any, *, timeout: float = 10) -> GpuCommand:
    """The GPU query command of ``box`` by the rule in the module docstring. At most one
    ``command -v nvidia-smi`` (then :data:`REAL_PATHS`) per box object (cached); then one ``stat`` of the sandbox's file
    while no real one was found. Raises ``remote.errors.RemoteError`` when the box cannot be asked
    (the command times out, the connection is gone)."""
    real = _REAL.get(box)
    if real is None:
        found = box.run(["sh", "-c", FIND_REAL], check=False, timeout=timeout)
        real = found.stdout.strip().splitlines()[0] if found.exit_code == 0 and found.stdout.strip() else ""
        try:
            _REAL[box] = real
        except TypeError:  # an object that takes no weak reference: asked again next time
            pass
    if real:
        return GpuCommand(real, "real", f"nvidia-smi on the box's PATH ({real})")
    sandbox = f"{str(box.state_dir).rstrip('/')}/{SANDBOX_NVIDIA_SMI}"
    if box.exists(sandbox, timeout=timeout):
        return GpuCommand(sandbox, "sandbox", f"no nvidia-smi on the box's PATH; the sandbox box's GPUs ({sandbox})")
    return GpuCommand(None, "none", f"no nvidia-smi on this box (not on its PATH) and no sandbox GPUs at "
                                    f"{sandbox}: GPU checks skipped")


@dataclass(frozen=True)
class Gpu:
    """One GPU: ``index``, ``uuid``, ``name``, ``used_mib`` / ``total_mib`` (MiB; ``None``: N/A)."""

    index: int
    uuid: str
    name: str
    used_mib: Optional[int]
    total_mib: Optional[int]

    def to_dict(self) -> dict:
        return {"index": self.index, "uuid": self.uuid, "name": self.name, "used_mib": self.used_mib,
                "total_mib": self.total_mib}


@dataclass(frozen=True)
class ComputeApp:
    """One line of the compute-apps query: process ``pid`` holds ``used_mib`` MiB (``None``: N/A)
    on the GPU ``gpu_uuid``; ``process_name`` as nvidia-smi gives it."""

    pid: int
    used_mib: Optional[int]
    gpu_uuid: str
    process_name: str


def _mib(value: str) -> Optional[int]:
    v = value.strip()
    if v.startswith("[") or v in ("", "N/A"):
        return None
    if v.endswith("MiB"):  # without ``nounits``
        v = v[:-3].strip()
    return int(float(v))


def _split(line: str, n: int, free: Optional[int]) -> Optional[list[str]]:
    """``line`` split on commas into ``n`` fields, extra commas going to the free-text field at
    index ``free``; ``None`` when there are too few fields (or too many without a free-text field)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == n:
        return parts
    if len(parts) < n or free is None:
        return None
    extra = len(parts) - n
    return parts[:free] + [", ".join(parts[free:free + extra + 1])] + parts[free + extra + 1:]


def _is_header(parts: Sequence[str], fields: Sequence[str]) -> bool:
    return all(p.split(" [")[0].strip().lower() == f for p, f in zip(parts, fields))


def parse_rows(text: str, fields: Sequence[str], query: str) -> tuple[list[dict], list[GpuQueryError]]:
    """The lines of nvidia-smi's CSV output for ``fields`` (the order asked) as dicts (integers
    for ``index``/``pid``, MiB as ``int`` or ``None`` for N/A, text stripped), and one
    :class:`GpuQueryError` per line that is not such a row (``query`` names the query in it).
    Accepts a header line (``--format=csv``), units (``71772 MiB``), blank lines and
    ``No running processes found``; a comma in a process or GPU name is kept in that name."""
    free = next((i for i, f in enumerate(fields) if f in _FREE_TEXT), None)
    rows, problems = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.strip().lower().rstrip(".") == _NO_PROCESSES:
            continue
        parts = _split(line, len(fields), free)
        if parts is None:
            problems.append(GpuQueryError(f"expected {len(fields)} comma-separated fields "
                                          f"({', '.join(fields)})", query=query, line=line, lineno=lineno))
            continue
        if lineno == 1 and _is_header(parts, fields):
            continue
        row: dict = {}
        try:
            for f, v in zip(fields, parts):
                row[f] = int(v) if f in _INT_FIELDS else _mib(v) if f in _MIB_FIELDS else v
        except ValueError:
            problems.append(GpuQueryError(f"bad number: {f} is no number", query=query, line=line, lineno=lineno))
            continue
        rows.append(row)
    return rows, problems


def parse_gpu_lines(text: str) -> tuple[list[Gpu], list[GpuQueryError]]:
    """The GPUs in the output of :data:`GPU_QUERY`, and the problems of its bad lines."""
    rows, problems = parse_rows(text, GPU_FIELDS, "--query-gpu")
    return [Gpu(r["index"], r["uuid"], r["name"], r["memory.used"], r["memory.total"]) for r in rows], problems


def parse_app_lines(text: str) -> tuple[list[ComputeApp], list[GpuQueryError]]:
    """The processes in the output of :data:`APPS_QUERY`, and the problems of its bad lines."""
    rows, problems = parse_rows(text, APP_FIELDS, "--query-compute-apps")
    return [ComputeApp(r["pid"], r["used_memory"], r["gpu_uuid"], r["process_name"]) for r in rows], problems


@dataclass
class GpuSnapshot:
    """What the box's GPU query printed at ``at`` (epoch seconds): ``gpus``, ``apps`` (one per
    process and GPU; empty when not asked), ``problems`` (bad lines, kept apart), ``command``
    (:class:`GpuCommand`), ``error`` (nvidia-smi ran and failed: its message; ``None`` otherwise).
    ``available`` False: no command, or it failed — :attr:`note` says why."""

    command: GpuCommand
    gpus: list[Gpu] = field(default_factory=list)
    apps: list[ComputeApp] = field(default_factory=list)
    problems: list[GpuQueryError] = field(default_factory=list)
    error: Optional[str] = None
    at: float = 0.0
    apps_read: bool = False

    @property
    def available(self) -> bool:
        return self.command.available and self.error is None

    @property
    def note(self) -> str:
        """Why the GPUs are not (fully) known: the command's reason, its error, the bad lines."""
        if not self.command.available:
            return self.command.reason
        if self.error is not None:
            return f"{self.command.path} failed: {self.error}"
        return "; ".join(str(p) for p in self.problems)

    def gpu(self, uuid_or_index: Any) -> Optional[Gpu]:
        """The GPU with that uuid (a string) or index (an int), else ``None``."""
        for g in self.gpus:
            if g.uuid == uuid_or_index or (isinstance(uuid_or_index, int) and g.index == uuid_or_index):
                return g
        return None

    def apps_on(self, uuid: str) -> list[ComputeApp]:
        return [a for a in self.apps if a.gpu_uuid == uuid]

    def listed_mib(self, uuid: str, *, pids: Optional[set[int]] = None, exclude: Optional[set[int]] = None) -> int:
        """MiB the listed processes hold on GPU ``uuid`` (only ``pids`` when given; never ``exclude``); N/A as 0."""
        return sum(a.used_mib or 0 for a in self.apps_on(uuid)
                   if (pids is None or a.pid in pids) and not (exclude and a.pid in exclude))

    def unattributed_mib(self, uuid: str) -> Optional[int]:
        """``memory.used`` of GPU ``uuid`` that no listed process accounts for (MiB, ≥ 0), ``None``
        when its ``memory.used`` is N/A."""
        g = self.gpu(uuid)
        if g is None or g.used_mib is None:
            return None
        return max(0, g.used_mib - self.listed_mib(uuid))

    @property
    def container(self) -> bool:
        """True when the driver lists no PIDs while some GPU holds :data:`CONTAINER_MIN_MIB` or more:
        a container (only per-GPU ``memory.used`` tells)."""
        return self.apps_read and not self.apps and any((g.used_mib or 0) >= CONTAINER_MIN_MIB for g in self.gpus)

    def used(self) -> dict[str, Optional[int]]:
        """``{uuid: memory.used MiB}``."""
        return {g.uuid: g.used_mib for g in self.gpus}

    def to_dict(self) -> dict:
        return {"source": self.command.kind, "command": self.command.path, "reason": self.command.reason,
                "available": self.available, "error": self.error, "container": self.container,
                "gpus": [g.to_dict() for g in self.gpus],
                "problems": [{"query": p.query, "lineno": p.lineno, "line": p.line, "message": str(p)}
                             for p in self.problems]}


def _query(box: Any, cmd: GpuCommand, argv: list[str], timeout: float) -> str:
    return box.run([cmd.path] + argv[1:], timeout=timeout).stdout


def read_gpu_snapshot(box: Any, *, apps: bool = True, timeout: float = 10,
                      command: Optional[GpuCommand] = None) -> GpuSnapshot:
    """Run the GPU query (and, with ``apps``, the compute-apps query) on ``box``, each bounded by
    ``timeout`` seconds. No command: a snapshot with ``available`` False. nvidia-smi exiting
    non-zero (no driver, a query it refuses): ``error`` holds its message, nothing raised, so a box
    whose GPUs cannot be read fails nothing else. Raises ``remote.errors.RemoteError`` only when the
    box itself fails (time-out, connection lost)."""
    cmd = command or gpu_command(box, timeout=timeout)
    snap = GpuSnapshot(cmd, at=time.time())
    if not cmd.available:
        return snap
    try:
        snap.gpus, snap.problems = parse_gpu_lines(_query(box, cmd, GPU_QUERY, timeout))
        if apps:
            snap.apps, bad = parse_app_lines(_query(box, cmd, APPS_QUERY, timeout))
            snap.problems += bad
            snap.apps_read = True
    except CommandFailed as exc:
        res = exc.result
        snap.error = ((res.stderr or res.stdout).strip().splitlines() or [f"exit status {res.exit_code}"])[-1]
    return snap
