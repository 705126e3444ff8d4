"""The probed file's neighbours on the box: the compile check's snippet (``_COMPILE_SNIPPET``), its
owner kept across a rename (``_parse_owner``, ``_keep_owner``), and its bytecode caches
(:func:`bytecode_caches`; an unchecked-hash cache is moved aside by ``add_probe`` and put back by
``_restore_bytecode``).

Imports only the standard library, ``remote.box``, ``remote.errors`` and
:mod:`remote.probes.record`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Optional, Sequence

from ..box import Box, PathLike
from ..errors import ProbeConflict, ProbeError, RemoteFileNotFound
from .record import Probe

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
