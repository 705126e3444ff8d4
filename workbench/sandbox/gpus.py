"""The sandbox box's GPUs: devices whose memory processes take, released only after the process is
gone plus a delay, read through the sandbox ``nvidia-smi`` (``workbench.sandbox.nvidia_smi``).

There is no GPU here; what stands in for one is a directory (the *GPU dir*):

- ``$SANDBOX_GPUS_DIR`` if set, else ``<state dir>/sandbox-gpus``, the state dir following
  ``remote/connect.py``'s rule on the box: ``$EAGLE_WORKBENCH_STATE_DIR`` if set, else
  ``~/.cache/eagle-workbench`` (:func:`default_gpus_dir`). So the workbench finds it at
  ``<box.state_dir>/sandbox-gpus``, and parallel tests (own state dirs) never share devices.
- ``devices.json``: ``{"devices": [{"index", "uuid", "name", "total_mib"}, ...]}`` (default 8 x
  "NVIDIA H100 80GB HBM3", 81559 MiB each, as a real H100 SXM reports ``memory.total``).
- ``config.json``: ``{"container_mode": bool, "release_delay_s": float}``. Container mode: the
  compute-apps query lists no processes (the driver does not know the container's PID namespace)
  while ``memory.used`` still counts their memory.
- ``holds/<pid>-<starttime>-<device>.json``: one record per hold, ``{"pid", "start_time", "device",
  "mib", "uid", "title"}``; ``start_time`` is field 22 of ``/proc/PID/stat`` (clock ticks since
  boot), so a reused pid is not a holder. ``holds/<same name>.gone`` holds the epoch second the hold's
  process was first seen gone; the hold counts until ``release_delay_s`` after that, then its files
  are removed (as a real driver frees a dead process's memory only once its contexts are torn down).
  ``holds/`` is world-writable with the sticky bit (like ``/tmp``), so another user's process can
  hold memory here too (tests run one as ``nobody``); ``lock`` (mode 0666) serialises takes.
- ``bin/nvidia-smi``: the sandbox's nvidia-smi (:func:`install_nvidia_smi`), never put on PATH.

CLI (for tests and by hand; run as any user the GPU dir admits):
``python -m workbench.sandbox.gpus hold --device 0 --mib 30000 [--gpus-dir DIR]`` takes the memory
as this process and holds it until killed (prints ``holding ...`` once taken);
``python -m workbench.sandbox.gpus init [--gpus-dir DIR] [--count N] [--container-mode]
[--release-delay S]``.

Standard library only (the sandbox stands alone from the rest of the workbench).
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import signal
import sys
import time
import uuid as uuid_mod
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

__all__ = [
    "GPUS_DIR_ENV", "STATE_DIR_ENV", "DEFAULT_DEVICE_COUNT", "DEFAULT_DEVICE_NAME", "DEFAULT_TOTAL_MIB",
    "DEFAULT_RELEASE_DELAY_S", "RELEASE_DELAY_ENV", "SandboxGpuError", "NoSuchDevice", "OutOfDeviceMemory", "Device", "Hold",
    "SandboxGpus", "default_gpus_dir", "process_start_time", "process_title", "install_nvidia_smi", "main",
]

GPUS_DIR_ENV = "SANDBOX_GPUS_DIR"
#: remote/connect.py's ``STATE_DIR_ENV`` (the same name; the sandbox does not import remote)
STATE_DIR_ENV = "EAGLE_WORKBENCH_STATE_DIR"
DEFAULT_DEVICE_COUNT = 8
#: what ``nvidia-smi --query-gpu=name`` prints for an H100 SXM5 80 GB
DEFAULT_DEVICE_NAME = "NVIDIA H100 80GB HBM3"
#: what ``nvidia-smi --query-gpu=memory.total`` prints (MiB) for an H100 SXM5 80 GB
DEFAULT_TOTAL_MIB = 81559
DEFAULT_RELEASE_DELAY_S = 2.0
#: Environment variable that sets the release delay of a GPU dir created without one (seconds,
#: a float >= 0): the test suite sets it small, so that a stop does not wait 2 s for its memory.
RELEASE_DELAY_ENV = "SANDBOX_GPU_RELEASE_DELAY_S"


class SandboxGpuError(RuntimeError):
    """A sandbox GPU operation that cannot be done (the message says what and where)."""


class NoSuchDevice(SandboxGpuError):
    """A device index the GPU dir does not have."""


class OutOfDeviceMemory(SandboxGpuError):
    """A take of more MiB than the device has free (``device``, ``free_mib``, ``asked_mib``)."""

    def __init__(self, message: str, device: int, free_mib: int, asked_mib: int) -> None:
        super().__init__(message)
        self.device = device
        self.free_mib = free_mib
        self.asked_mib = asked_mib


@dataclass(frozen=True)
class Device:
    """One sandbox GPU: ``index``, ``uuid`` ("GPU-" + 36 hex/dash chars, as NVML's), ``name``,
    ``total_mib`` (MiB)."""

    index: int
    uuid: str
    name: str
    total_mib: int


@dataclass(frozen=True)
class Hold:
    """Memory a process holds on one device: ``pid``, ``start_time`` (/proc/PID/stat field 22, clock
    ticks), ``device`` (index), ``mib``, ``uid`` (the holder's user id), ``title`` (its process title
    when taken), ``alive`` (the process still runs), ``gone_since`` (epoch seconds it was first seen
    gone, None while alive)."""

    pid: int
    start_time: int
    device: int
    mib: int
    uid: int
    title: str
    alive: bool
    gone_since: Optional[float]


def default_gpus_dir(environ: Optional[Dict[str, str]] = None) -> Path:
    """The GPU dir of this box (module docstring): ``$SANDBOX_GPUS_DIR``, else
    ``$EAGLE_WORKBENCH_STATE_DIR/sandbox-gpus``, else ``~/.cache/eagle-workbench/sandbox-gpus``."""
    env = os.environ if environ is None else environ
    if env.get(GPUS_DIR_ENV):
        return Path(env[GPUS_DIR_ENV])
    state = env.get(STATE_DIR_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "eagle-workbench")
    return Path(state) / "sandbox-gpus"


def _stat_fields(pid: int) -> Optional[List[str]]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: the fields after it follow the last ')'
    return raw[raw.rindex(")") + 2:].split()


def process_start_time(pid: int) -> Optional[int]:
    """Field 22 of ``/proc/PID/stat`` (start time, clock ticks after boot), or None when no such
    process runs or it is a zombie (exited: a real driver frees its memory at exit, not at reaping)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_title(pid: int) -> str:
    """What ``nvidia-smi``'s ``process_name`` shows for a pid: the first NUL-separated word of
    ``/proc/PID/cmdline`` (after ``setproctitle`` the title, e.g. ``sglang::scheduler_TP0``; for a
    plain interpreter its path), or ``""`` when unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()


def _write_json(path: Path, data, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


class SandboxGpus:
    """The GPU dir at ``path`` (module docstring for the layout). Every read sweeps the holds: a
    hold whose process is gone gets its ``.gone`` time, and is dropped ``release_delay_s`` later.

    Raises :class:`SandboxGpuError` when ``path`` is not an initialised GPU dir (see :meth:`create`).
    """

    def __init__(self, path) -> None:
        self.path = Path(path)
        if not (self.path / "devices.json").is_file():
            raise SandboxGpuError(f"{self.path} is not a sandbox GPU dir (no devices.json); create it with "
                                  "SandboxGpus.create() or `python -m workbench.sandbox.gpus init`")

    @classmethod
    def create(cls, path, count: int = DEFAULT_DEVICE_COUNT, *, name: str = DEFAULT_DEVICE_NAME,
               total_mib: int = DEFAULT_TOTAL_MIB, release_delay_s: Optional[float] = None,
               container_mode: bool = False) -> "SandboxGpus":
        """Initialise the GPU dir at ``path`` with ``count`` devices of ``total_mib`` MiB (new uuids),
        unless it already is one (then it is returned unchanged). ``release_delay_s`` ``None``:
        ``$SANDBOX_GPU_RELEASE_DELAY_S`` when set, else :data:`DEFAULT_RELEASE_DELAY_S`. Raises
        ``ValueError`` for a count < 1, a total < 1 MiB or a delay that is no number >= 0."""
        if release_delay_s is None:
            raw = os.environ.get(RELEASE_DELAY_ENV, "").strip()
            try:
                release_delay_s = float(raw) if raw else DEFAULT_RELEASE_DELAY_S
            except ValueError:
                raise ValueError(f"${RELEASE_DELAY_ENV} must be seconds (a number >= 0), got {raw!r}") from None
        if not release_delay_s >= 0:
            raise ValueError(f"release_delay_s must be >= 0, got {release_delay_s}")
        if count < 1 or total_mib < 1:
            raise ValueError(f"a sandbox GPU dir needs >= 1 device of >= 1 MiB, got count={count}, "
                             f"total_mib={total_mib}")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        holds = path / "holds"
        holds.mkdir(exist_ok=True)
        os.chmod(holds, 0o1777)
        lock = os.open(path / "lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            os.fchmod(lock, 0o666)
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (path / "config.json").exists():
                _write_json(path / "config.json", {"container_mode": container_mode,
                                                   "release_delay_s": float(release_delay_s)})
            if not (path / "devices.json").exists():
                devices = [{"index": i, "uuid": f"GPU-{uuid_mod.uuid4()}", "name": name, "total_mib": int(total_mib)}
                           for i in range(count)]
                _write_json(path / "devices.json", {"devices": devices})
        finally:
            os.close(lock)
        return cls(path)

    # -- configuration ------------------------------------------------------------------------
    def devices(self) -> List[Device]:
        """The devices, by index."""
        with open(self.path / "devices.json", encoding="utf-8") as f:
            return [Device(**d) for d in json.load(f)["devices"]]

    def config(self) -> dict:
        """``{"container_mode": bool, "release_delay_s": float}`` (defaults when config.json is absent)."""
        try:
            with open(self.path / "config.json", encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            raw = {}
        return {"container_mode": bool(raw.get("container_mode", False)),
                "release_delay_s": float(raw.get("release_delay_s", DEFAULT_RELEASE_DELAY_S))}

    def configure(self, *, container_mode: Optional[bool] = None, release_delay_s: Optional[float] = None) -> dict:
        """Change the container-mode switch and/or the release delay (seconds >= 0); returns the new
        config. Raises ``ValueError`` for a negative delay."""
        config = self.config()
        if container_mode is not None:
            config["container_mode"] = bool(container_mode)
        if release_delay_s is not None:
            if release_delay_s < 0:
                raise ValueError(f"release_delay_s must be >= 0, got {release_delay_s}")
            config["release_delay_s"] = float(release_delay_s)
        _write_json(self.path / "config.json", config)
        return config

    # -- holds --------------------------------------------------------------------------------
    def _lock(self) -> int:
        fd = os.open(self.path / "lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def holds(self, now: Optional[float] = None) -> List[Hold]:
        """The holds that count now (alive, or gone for less than the release delay), sorted by
        (device, pid). Sweeps: marks newly gone holders, removes released ones (a file another user
        owns that this user may not remove is left, and no longer counted)."""
        now = time.time() if now is None else now
        delay = self.config()["release_delay_s"]
        out = []
        for rec_path in sorted((self.path / "holds").glob("*.json")):
            try:
                with open(rec_path, encoding="utf-8") as f:
                    rec = json.load(f)
            except FileNotFoundError:  # released by a concurrent sweep
                continue
            except ValueError as e:
                raise SandboxGpuError(f"{rec_path}: not a hold record ({e})") from e
            alive = process_start_time(rec["pid"]) == rec["start_time"]
            gone_since = None
            if not alive:
                gone_since = self._gone_since(rec_path, now)
                if now - gone_since >= delay:
                    self._remove(rec_path)
                    continue
            out.append(Hold(pid=rec["pid"], start_time=rec["start_time"], device=rec["device"], mib=rec["mib"],
                            uid=rec.get("uid", -1), title=rec.get("title", ""), alive=alive, gone_since=gone_since))
        return sorted(out, key=lambda h: (h.device, h.pid))

    @staticmethod
    def _gone_since(rec_path: Path, now: float) -> float:
        marker = rec_path.with_suffix(".gone")
        try:
            with open(marker, encoding="utf-8") as f:
                # empty: another sweep created the marker (O_EXCL) and has not written its time yet
                return float(f.read().strip() or now)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:  # another sweep marked it first
            with open(marker, encoding="utf-8") as f:
                return float(f.read().strip() or now)
        with os.fdopen(fd, "w") as f:
            f.write(repr(now))
        return now

    @staticmethod
    def _remove(rec_path: Path) -> None:
        for p in (rec_path, rec_path.with_suffix(".gone")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except PermissionError:  # another user's record in the sticky holds/: no longer counted
                continue

    def used_mib(self, now: Optional[float] = None) -> Dict[int, int]:
        """MiB used per device index (every device present, 0 when nothing holds it)."""
        used = {d.index: 0 for d in self.devices()}
        for h in self.holds(now):
            used[h.device] = used.get(h.device, 0) + h.mib
        return used

    def take(self, device: int, mib: int, pid: Optional[int] = None, *, wait_released: bool = False) -> Hold:
        """Take ``mib`` MiB of ``device`` for ``pid`` (default: this process), under the dir's lock.
        The hold lasts until the process is gone plus the release delay. Raises :class:`NoSuchDevice`,
        :class:`OutOfDeviceMemory` (free < mib), ``ValueError`` for mib < 1, :class:`SandboxGpuError`
        when ``pid`` does not run.

        ``wait_released``: when the memory is short only because of holds whose processes are gone
        (still within their release delay), wait for their release (at most the delay, plus 1 s)
        and take it then; memory of live processes is never waited for."""
        deadline = time.time() + self.config()["release_delay_s"] + 1.0
        while True:
            try:
                return self._take(device, mib, pid)
            except OutOfDeviceMemory as e:
                pending = sum(h.mib for h in self.holds() if h.device == device and not h.alive)
                if not wait_released or e.free_mib + pending < mib or time.time() > deadline:
                    raise
                time.sleep(0.05)

    def _take(self, device: int, mib: int, pid: Optional[int]) -> Hold:
        if mib < 1:
            raise ValueError(f"a hold takes >= 1 MiB, got {mib}")
        pid = os.getpid() if pid is None else pid
        devices = {d.index: d for d in self.devices()}
        if device not in devices:
            raise NoSuchDevice(f"no sandbox GPU {device} in {self.path} (devices 0..{len(devices) - 1})")
        start = process_start_time(pid)
        if start is None:
            raise SandboxGpuError(f"pid {pid} does not run: it cannot hold sandbox GPU memory")
        fd = self._lock()
        try:
            free = devices[device].total_mib - self.used_mib()[device]
            if mib > free:
                raise OutOfDeviceMemory(
                    f"sandbox GPU {device}: {mib} MiB asked, {free} MiB free of {devices[device].total_mib} MiB",
                    device=device, free_mib=free, asked_mib=mib)
            rec_path = self.path / "holds" / f"{pid}-{start}-{device}.json"
            existing = 0
            if rec_path.exists():
                with open(rec_path, encoding="utf-8") as f:
                    existing = json.load(f)["mib"]
            rec = {"pid": pid, "start_time": start, "device": device, "mib": existing + mib,
                   "uid": os.stat(f"/proc/{pid}").st_uid, "title": process_title(pid)}
            _write_json(rec_path, rec)
        finally:
            os.close(fd)
        return Hold(pid=pid, start_time=start, device=device, mib=rec["mib"], uid=rec["uid"], title=rec["title"],
                    alive=True, gone_since=None)

    def free_mib(self, device: int) -> int:
        """MiB free on ``device`` now. Raises :class:`NoSuchDevice`."""
        devices = {d.index: d for d in self.devices()}
        if device not in devices:
            raise NoSuchDevice(f"no sandbox GPU {device} in {self.path} (devices 0..{len(devices) - 1})")
        return devices[device].total_mib - self.used_mib()[device]


def install_nvidia_smi(path, python: Optional[str] = None) -> Path:
    """Write ``<path>/bin/nvidia-smi`` (mode 0755): a shell script running ``python -m
    workbench.sandbox.nvidia_smi --gpus-dir <path> "$@"`` with ``python`` (default: this
    interpreter) and this checkout of the workbench on ``PYTHONPATH``, run from ``/`` (``-m`` puts
    the current directory first on ``sys.path``: a shell inside another checkout would import that
    one's ``workbench``). Returns the script's path.
    Never put on PATH: it is the sandbox box's, found at ``<state dir>/sandbox-gpus/bin/nvidia-smi``."""
    import shlex

    path = Path(path)
    bin_dir = path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[2]
    script = bin_dir / "nvidia-smi"
    text = ("#!/bin/sh\n"
            "# the sandbox box's nvidia-smi (eagle-workbench, workbench/sandbox/nvidia_smi.py): not a real GPU's\n"
            "# from /: `python -m` puts the current directory first on sys.path (another checkout's workbench)\n"
            f"cd / && PYTHONPATH={shlex.quote(str(root))}${{PYTHONPATH:+:$PYTHONPATH}} exec "
            f"{shlex.quote(python or sys.executable)} -m workbench.sandbox.nvidia_smi "
            f"--gpus-dir {shlex.quote(str(path))} \"$@\"\n")
    tmp = bin_dir / f".nvidia-smi.{os.getpid()}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o755)
    os.replace(tmp, script)
    return script


def _hold_forever(gpus: SandboxGpus, device: int, mib: int) -> int:
    try:
        hold = gpus.take(device, mib)
    except SandboxGpuError as e:
        print(f"gpus: error: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"holding {hold.mib} MiB of sandbox GPU {device} as pid {hold.pid}", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        signal.pause()


def main(argv: Optional[List[str]] = None) -> int:
    """The CLI (module docstring). Returns the exit status (2 for bad flags, 1 when a take fails)."""
    p = argparse.ArgumentParser(prog="python -m workbench.sandbox.gpus", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus-dir", default=None, help="the GPU dir (default: $SANDBOX_GPUS_DIR or <state dir>/sandbox-gpus)")
    sub = p.add_subparsers(dest="cmd", required=True)
    init = sub.add_parser("init", help="create the GPU dir (if absent) and install its bin/nvidia-smi")
    init.add_argument("--count", type=int, default=DEFAULT_DEVICE_COUNT)
    init.add_argument("--container-mode", action="store_true")
    init.add_argument("--release-delay", type=float, default=None)
    hold = sub.add_parser("hold", help="take MiB of a device as this process and hold them until killed")
    hold.add_argument("--device", type=int, required=True)
    hold.add_argument("--mib", type=int, required=True)
    args = p.parse_args(argv)
    path = Path(args.gpus_dir) if args.gpus_dir else default_gpus_dir()
    try:
        if args.cmd == "init":
            gpus = SandboxGpus.create(path, args.count, container_mode=args.container_mode)
            gpus.configure(container_mode=args.container_mode, release_delay_s=args.release_delay)
            print(install_nvidia_smi(path), flush=True)
            return 0
        return _hold_forever(SandboxGpus(path), args.device, args.mib)
    except (SandboxGpuError, ValueError) as e:
        print(f"gpus: error: {e}", file=sys.stderr, flush=True)
        return 1
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM):
            print(f"gpus: error: {path}: {e.strerror} (the GPU dir must admit this user)", file=sys.stderr, flush=True)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
