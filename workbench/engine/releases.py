"""Published SGLang releases' source, for reading only: the wheel from the package registry
(``pip download --no-deps sglang==V``), cached, its ``sglang/`` package unpacked next to it.

Never installed and never imported: the workbench reads the unpacked files with :mod:`ast` and
``grep`` exactly as it reads a box's engine (a local box over the unpacked tree is a box whose
engine is that release). Used by the tests (the code-path map, the flag tables and the draft
classes of every covered release, asserted against lines found by hand), the benchmarks and
``scripts/gen_sglang_flags.py``.

Cache: ``$EAGLE_WORKBENCH_SGLANG_CACHE``, else ``~/.cache/eagle-workbench/sglang-releases``;
``wheels/`` holds the downloaded wheels, ``<version>/sglang/`` each unpacked package. Safe for
concurrent callers (pytest-xdist workers): one ``flock`` per version.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from workbench.errors import WorkbenchError

__all__ = ["COVERED_RELEASES", "ReleaseUnavailable", "release_cache", "release_source"]

#: The SGLang releases the workbench is tested on (each one's code-path map, flag table and draft
#: classes are asserted against the published wheel): spread over 0.4.6 … 0.5.23 at the releases
#: where the EAGLE-3 path changed.
COVERED_RELEASES = ("0.4.6", "0.4.8", "0.4.10", "0.5.2", "0.5.4", "0.5.9", "0.5.12", "0.5.18", "0.5.23")


class ReleaseUnavailable(WorkbenchError):
    """A release's wheel could not be downloaded or unpacked (the message has pip's last words)."""


def release_cache() -> Path:
    """The cache directory (``$EAGLE_WORKBENCH_SGLANG_CACHE``, else
    ``~/.cache/eagle-workbench/sglang-releases``); created if missing."""
    base = os.environ.get("EAGLE_WORKBENCH_SGLANG_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "eagle-workbench", "sglang-releases")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def release_source(version: str, *, cache: str | Path | None = None, timeout: float = 600) -> Path:
    """The unpacked ``sglang/`` package directory of release ``version`` (e.g. ``"0.5.9"``):
    downloaded once with ``pip download --no-deps sglang==<version>`` (``timeout`` seconds at
    most), unpacked once, then served from the cache.

    Raises :class:`ReleaseUnavailable` naming the version and pip's error when the wheel cannot be
    had (no registry, no such release), ``ValueError`` for a version that is not ``N.N.N[.postN]``."""
    if not version or not all(part.isalnum() for part in version.split(".")) or not version[0].isdigit():
        raise ValueError(f"not an SGLang release number: {version!r} (expected e.g. 0.5.9)")
    root = Path(cache) if cache is not None else release_cache()
    root.mkdir(parents=True, exist_ok=True)
    dest = root / version
    pkg = dest / "sglang"
    done = dest / ".unpacked"
    if done.exists() and pkg.is_dir():
        return pkg
    wheels = root / "wheels"
    wheels.mkdir(exist_ok=True)
    with open(root / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists() and pkg.is_dir():
            return pkg
        found = _wheel(wheels, version)
        if found is None:
            try:
                proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                                       "--disable-pip-version-check", f"sglang=={version}", "-d", str(wheels)],
                                      capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                raise ReleaseUnavailable(f"sglang=={version}: pip download did not finish in {timeout:.0f} s") from exc
            found = _wheel(wheels, version)
            if proc.returncode != 0 or found is None:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                raise ReleaseUnavailable(f"sglang=={version}: pip download failed (exit {proc.returncode}): "
                                         + " | ".join(tail))
        if dest.exists():
            shutil.rmtree(dest)
        tmp = root / f".{version}.partial"
        if tmp.exists():
            shutil.rmtree(tmp)
        try:
            with zipfile.ZipFile(found) as zf:
                zf.extractall(tmp, [n for n in zf.namelist() if n.startswith("sglang/")])
        except zipfile.BadZipFile as exc:
            found.unlink()
            raise ReleaseUnavailable(f"sglang=={version}: {found.name} is not a wheel ({exc}); removed, try again") from exc
        tmp.rename(dest)
        done.write_text(found.name + "\n")
    return pkg


def _wheel(wheels: Path, version: str) -> Path | None:
    hits = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    return hits[0] if hits else None
