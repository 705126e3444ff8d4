"""The rank a probe line carries (issue 28, ``probe.ranks``): ``rank=R`` printed by the probed
process itself — ``torch.distributed.get_rank()`` when torch.distributed is initialised, else the
``TP<r>`` of its process title (``/proc/self/cmdline``), else none — and parsed back into
``ProbeReading.rank``.

Real processes: the probe block is compiled into a script run by a real interpreter; the process
title is argv[0] as ``exec -a`` sets it (what setproctitle overwrites, read back from
``/proc/self/cmdline``); torch.distributed is initialised for real (gloo over loopback, two
processes)."""

from __future__ import annotations

import os
import site
import subprocess
import sys

import pytest

from remote import connect
from remote.probes import read_probe_log, read_probe_output, readings_by_launch
from remote.probes.text import render_block

pytestmark = pytest.mark.slow  # it starts interpreters (and, once, a gloo process group)


def _script(tmp_path, prologue: str = "") -> str:
    block = render_block("width", ["x"], "    ")
    path = tmp_path / "probed.py"
    path.write_text(prologue + "\ndef forward(x):\n" + block + "    return x\n\nforward(7)\n")
    return str(path)


def _run_titled(tmp_path, title: str | None, prologue: str = "") -> str:
    """Run the probed script as a process whose argv[0] (its title in /proc/self/cmdline) is ``title``."""
    script = _script(tmp_path, prologue)
    cmd = f'exec -a "{title}" "{sys.executable}" "{script}"' if title else f'exec "{sys.executable}" "{script}"'
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.parametrize("title, rank", [
    ("sglang::scheduler_TP3", 3),
    ("sglang::scheduler_DP0_TP5_EP0", 5),
    ("sglang::scheduler_PP2_TP1", 1),
    ("sglang::scheduler", None),      # TP 1: SGLang's title has no rank in it, none is guessed
    ("sglang::detokenizer", None),
    (None, None),                     # a plain python process
])
def test_the_rank_comes_from_the_process_title(tmp_path, title, rank):
    err = _run_titled(tmp_path, title)
    line = next(ln for ln in err.splitlines() if ln.startswith("[probe:width "))
    assert (" rank=" in line) is (rank is not None), line
    log = tmp_path / "server.log"
    log.write_text(err)
    (reading,) = read_probe_log(connect("local"), log, "width")
    assert reading.rank == rank and reading.values == {"x": 7}
    assert reading.to_dict()["rank"] == rank


def test_torch_distributed_rank_wins_over_the_title(tmp_path, free_port):
    """Two real processes in a gloo group (world size 2): each prints its own
    ``torch.distributed.get_rank()``, whatever its title says (the title says TP7 for both)."""
    prologue = (
        "import os, torch.distributed as dist\n"
        f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port}', "
        "world_size=2, rank=int(os.environ['RANK_UNDER_TEST']))\n")
    script = _script(tmp_path, prologue)
    # argv[0] is no path then: the interpreter does not find its venv by it; its site-packages
    # are given on PYTHONPATH instead
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(site.getsitepackages()))
    procs = [subprocess.Popen(["bash", "-c", f'exec -a "sglang::scheduler_TP7" "{sys.executable}" "{script}"'],
                              env=dict(env, RANK_UNDER_TEST=str(r)), stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    log = tmp_path / "server.log"
    log.write_text("".join(errs))
    readings = read_probe_log(connect("local"), log, "width")
    assert sorted((r.rank, r.values["x"]) for r in readings) == [(0, 7), (1, 7)]


def test_lines_with_and_without_rank_parse_alike(tmp_path):
    lines = [
        "[2026-12-07 18:00:00 TP3] [probe:width pgid=40 pid=43 rank=3] x=torch.Size([1, 7168])",
        "[probe:width pgid=40 pid=41] x=torch.Size([1, 2048])",          # no rank known
        "[probe:width] x=torch.Size([1, 1])",                             # an older probe block
        "[probe:width pgid=40 pid=44 rank=12] <probe failed:ValueError('v')>",
        "print('[probe:width pgid=40 pid=41 rank=0] x=' + ...)",          # quoted source: no output
    ]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    got = read_probe_log(connect("local"), log, "width")
    assert [(r.pgid, r.pid, r.rank) for r in got] == [(40, 43, 3), (40, 41, None), (None, None, None), (40, 44, 12)]
    assert got[0].values == {"x": (1, 7168)} or got[0].raw == {"x": "torch.Size([1, 7168])"}
    assert got[3].error == "<probe failed:ValueError('v')>"
    assert list(readings_by_launch(got)) == [40, None]
    # the text reader splits the same lines (no rank in its dicts: the values only)
    assert read_probe_output(log.read_text(), "width", pgid=40)[0] == {"x": "torch.Size([1, 7168])"}
