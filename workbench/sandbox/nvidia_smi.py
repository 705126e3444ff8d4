"""The sandbox box's ``nvidia-smi``: ``python -m workbench.sandbox.nvidia_smi --gpus-dir DIR ARGS``,
run by ``<DIR>/bin/nvidia-smi`` (``workbench.sandbox.gpus.install_nvidia_smi``), never on PATH.

It prints what a real nvidia-smi prints for the two queries the workbench makes
(``workbench/lab/gpu.py``), over the sandbox GPUs of ``workbench.sandbox.gpus``:

- ``--query-gpu=F,...`` with F among ``index``, ``uuid`` (alias ``gpu_uuid``), ``name`` (alias
  ``gpu_name``), ``memory.used``, ``memory.total``, ``memory.free``, ``count``; one row per device.
- ``--query-compute-apps=F,...`` with F among ``pid``, ``used_memory`` (alias ``used_gpu_memory``),
  ``gpu_uuid``, ``process_name`` (alias ``name``), ``gpu_name``; one row per (live process,
  device) it holds memory on; none in container mode (the driver sees no PIDs from a container's
  namespace), while ``memory.used`` still counts their memory.
- ``--format=csv[,noheader][,nounits]``: values joined by ``", "``; a header line of the canonical
  field names with the unit in brackets (``memory.used [MiB]``, ``used_gpu_memory [MiB]``) unless
  ``noheader``; memory as ``1234 MiB``, or ``1234`` with ``nounits``.
- ``-i N`` / ``--id=N``: that device only ("No devices were found", exit 6, for an index it lacks).

As the real one (formats seen on real drivers, e.g. ``pid, used_gpu_memory [MiB]`` /
``3858903, 6265 MiB``): an unknown field prints ``Field "X" is not a valid field to query.`` and
exits 2; any other argument (or a query without ``--format=csv``) prints ``Invalid combination of
input arguments. Please run 'nvidia-smi -h' for help.`` and exits 2; a GPU dir that does not exist
prints the driver-not-loaded message and exits 9 (nvidia-smi's "NVIDIA driver not loaded" status).
"""

from __future__ import annotations

import sys
from typing import Dict, List, Optional, Tuple

from workbench.sandbox.gpus import SandboxGpuError, SandboxGpus, process_title

INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")
#: nvidia-smi's exit statuses (its man page, RETURN VALUE): 2 invalid argument, 9 driver not loaded
EXIT_INVALID = 2
EXIT_NO_DRIVER = 9
#: 6: the query was unsuccessful (e.g. ``-i`` names no device: "No devices were found")
EXIT_NOT_FOUND = 6

# field name -> (canonical header name, is a MiB quantity)
_GPU_FIELDS: Dict[str, Tuple[str, bool]] = {
    "index": ("index", False), "uuid": ("uuid", False), "gpu_uuid": ("uuid", False),
    "name": ("name", False), "gpu_name": ("name", False), "count": ("count", False),
    "memory.used": ("memory.used", True), "memory.total": ("memory.total", True),
    "memory.free": ("memory.free", True),
}
_APP_FIELDS: Dict[str, Tuple[str, bool]] = {
    "pid": ("pid", False), "used_memory": ("used_gpu_memory", True), "used_gpu_memory": ("used_gpu_memory", True),
    "gpu_uuid": ("gpu_uuid", False), "process_name": ("process_name", False), "name": ("process_name", False),
    "gpu_name": ("gpu_name", False),
}


class _Usage(Exception):
    """An argument nvidia-smi refuses: ``message`` is what it prints, ``status`` its exit status."""

    def __init__(self, message: str, status: int = EXIT_INVALID) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _parse(argv: List[str]) -> Tuple[Optional[str], str, List[str], Optional[int], str]:
    gpus_dir = None
    kind = fields_raw = fmt = None
    device = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in ("--gpus-dir", "--query-gpu", "--query-compute-apps", "--format", "-i", "--id") and not eq:
            if i + 1 >= len(argv):
                raise _Usage(INVALID)
            value = argv[i + 1]
            i += 1
        if name == "--gpus-dir":
            gpus_dir = value
        elif name in ("--query-gpu", "--query-compute-apps"):
            if kind is not None:
                raise _Usage(INVALID)
            kind, fields_raw = name, value
        elif name == "--format":
            fmt = value
        elif name in ("-i", "--id"):
            try:
                device = int(value)
            except ValueError:
                raise _Usage(INVALID) from None
        else:
            raise _Usage(INVALID)
        i += 1
    if kind is None or fmt is None:
        raise _Usage(INVALID)
    opts = [o.strip() for o in fmt.split(",")]
    if opts[0] != "csv" or any(o not in ("noheader", "nounits") for o in opts[1:]):
        raise _Usage(INVALID)
    table = _GPU_FIELDS if kind == "--query-gpu" else _APP_FIELDS
    fields = [f.strip() for f in fields_raw.split(",")]
    for f in fields:
        if f not in table:
            raise _Usage(f'Field "{f}" is not a valid field to query.')
    return gpus_dir, kind, fields, device, ",".join(opts)


def render(gpus: SandboxGpus, kind: str, fields: List[str], fmt: str, device: Optional[int] = None) -> str:
    """The text nvidia-smi prints for ``--query-gpu`` (``kind`` "--query-gpu") or
    ``--query-compute-apps`` over ``gpus``, ``fields`` as given, ``fmt`` the ``--format`` value.
    Raises :class:`_Usage` for a device index the box does not have."""
    opts = fmt.split(",")
    units = "nounits" not in opts
    table = _GPU_FIELDS if kind == "--query-gpu" else _APP_FIELDS
    devices = gpus.devices()
    if device is not None:
        if device not in {d.index for d in devices}:
            raise _Usage("No devices were found", EXIT_NOT_FOUND)
        devices = [d for d in devices if d.index == device]
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(table[f][0] + (" [MiB]" if table[f][1] else "") for f in fields))

    def mib(n: int) -> str:
        return f"{n} MiB" if units else str(n)

    holds = gpus.holds()
    if kind == "--query-gpu":
        used = {d.index: 0 for d in devices}
        for h in holds:
            if h.device in used:
                used[h.device] += h.mib
        for d in devices:
            values = {"index": str(d.index), "uuid": d.uuid, "name": d.name, "count": str(len(gpus.devices())),
                      "memory.used": mib(used[d.index]), "memory.total": mib(d.total_mib),
                      "memory.free": mib(d.total_mib - used[d.index])}
            lines.append(", ".join(values[table[f][0]] for f in fields))
    elif not gpus.config()["container_mode"]:
        by_index = {d.index: d for d in devices}
        for h in holds:
            if not h.alive or h.device not in by_index:
                continue
            d = by_index[h.device]
            values = {"pid": str(h.pid), "used_gpu_memory": mib(h.mib), "gpu_uuid": d.uuid,
                      "process_name": process_title(h.pid) or h.title, "gpu_name": d.name}
            lines.append(", ".join(values[table[f][0]] for f in fields))
    return "".join(line + "\n" for line in lines)


def main(argv: Optional[List[str]] = None) -> int:
    """Print the query's answer on stdout; returns the exit status (0, 2 or 9, module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        gpus_dir, kind, fields, device, fmt = _parse(argv)
        if gpus_dir is None:
            raise _Usage(NO_DRIVER, EXIT_NO_DRIVER)
        try:
            gpus = SandboxGpus(gpus_dir)
        except SandboxGpuError:
            raise _Usage(NO_DRIVER, EXIT_NO_DRIVER) from None
        sys.stdout.write(render(gpus, kind, fields, fmt, device))
        return 0
    except _Usage as e:
        print(e.message, flush=True)
        return e.status


if __name__ == "__main__":
    sys.exit(main())
