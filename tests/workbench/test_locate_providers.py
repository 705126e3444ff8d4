"""The distributions the locate scripts name for a package (``PROVIDERS_SNIPPET``, in
``LOCATE_ENGINE_SCRIPT`` and ``workbench.rules.vllm_engine``'s script) are exactly those of
``importlib.metadata.packages_distributions()``, which it no longer calls where this Python has the
per-distribution helpers: for every top-level name of this venv, and for distributions made here
that say what they provide only through their file lists (a ``RECORD``, an egg-info's
``SOURCES.txt``), which is where it reads less than ``packages_distributions`` does."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

from workbench.engine.locate import LOCATE_ENGINE_SCRIPT, PROVIDERS_SNIPPET


def _providers():
    ns: dict = {}
    exec(PROVIDERS_SNIPPET, ns)
    return ns["providers"]


def test_every_top_level_name_of_this_venv_gets_the_distributions_packages_distributions_gives():
    providers = _providers()
    full = importlib.metadata.packages_distributions()
    assert len(full) > 100  # the venv's packages, not an empty search path
    differ = {top: (providers(importlib.metadata, top), dists) for top, dists in sorted(full.items())
              if providers(importlib.metadata, top) != dists}
    assert differ == {}
    assert providers(importlib.metadata, "no_such_package_anywhere") == []


def _dist_info(site: Path, name: str, files: list[str], top_level: str | None = None) -> None:
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files + [f"{info.name}/METADATA", f"{info.name}/RECORD"]))
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)


def test_distributions_known_only_by_their_file_lists(tmp_path):
    site = tmp_path / "site"
    (site / "mypkg").mkdir(parents=True)
    (site / "mypkg" / "__init__.py").write_text("__version__ = '2.5'\n")
    _dist_info(site, "my-dist", ["mypkg/__init__.py"])  # no top_level.txt: inferred from RECORD
    _dist_info(site, "other-dist", ["other/__init__.py", "notes/mypkg.txt"])  # names mypkg, provides none
    _dist_info(site, "plugin-dist", ["mypkg/plugins/x.py"], top_level="")  # an empty top_level.txt
    _dist_info(site, "declared-dist", [], top_level="mypkg\n")  # says so without a file
    egg = site / "old_dist.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: old-dist\nVersion: 0.1\n")
    (egg / "SOURCES.txt").write_text("mypkg/legacy.py\nsetup.py\n")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    snippet = ("import importlib.metadata as m, json, sys\n" + PROVIDERS_SNIPPET
               + "print(json.dumps([providers(m, 'mypkg'), m.packages_distributions().get('mypkg')]))\n")
    res = subprocess.run([sys.executable, "-B", "-c", snippet], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    fast, full = json.loads(res.stdout)
    assert fast == full
    assert sorted(fast) == ["declared-dist", "my-dist", "old-dist", "plugin-dist"]

    res = subprocess.run([sys.executable, "-B", "-c", LOCATE_ENGINE_SCRIPT, "mypkg"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert found["root"] == str(site / "mypkg") and found["version"] == "2.5"
    # the first (in the search order) whose files hold mypkg/: declared-dist lists none
    assert found["dist"] == next(d for d in fast if d != "declared-dist")
    assert found["error"] is None and "dist_error" not in found
