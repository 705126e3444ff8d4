"""The test harness's engine checkout (``testkit.engine_copy``): on every transport, the sandbox box's
engine that this pytest process finds, probes and launches is its own copy, never the project's
``workbench/sandbox``, so two pytest-xdist workers probing "the" engine never meet in one file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from testkit.engine_copy import ENV, ROOT, sandbox_engine_dir
from testkit.xdist_scopes import COPIES_ENV, engine_copies_on
from workbench.engine import find_engine


@pytest.mark.skipif(not engine_copies_on(), reason=f"engine copies are off (set {COPIES_ENV}=1)")
def test_the_sandbox_engine_found_on_the_box_is_this_processs_copy(box):
    found = find_engine(box, package="workbench.sandbox", python=sys.executable)
    assert os.environ.get(ENV), "tests/conftest.py did not set up the engine checkout"
    assert found.root == str(sandbox_engine_dir()) == os.path.join(os.environ[ENV], "workbench", "sandbox")
    assert Path(found.root).resolve() != (ROOT / "workbench" / "sandbox").resolve()
    # a copy, not a link to the project's files (a probe written there would reach the project)
    assert not Path(found.root).is_symlink() and not (Path(found.root) / "srt").is_symlink()
    assert (Path(found.root) / "srt" / "models" / "llama_eagle3.py").read_bytes() == \
        (ROOT / "workbench" / "sandbox" / "srt" / "models" / "llama_eagle3.py").read_bytes()
    # the committed models are the project's (a symlink: no test may change them)
    assert (Path(found.root) / "models").resolve() == (ROOT / "workbench" / "sandbox" / "models").resolve()
