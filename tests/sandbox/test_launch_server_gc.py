"""``python -m workbench.sandbox.launch_server`` turns the cyclic garbage collector off while the
server starts (its imports and models make objects that live as long as the process) and back on
afterwards: once the models are loaded (``load_and_warm_up``, in every served test) and whenever
``main`` returns or raises. In process here: a refused launch must not leave the caller's
collector off."""

from __future__ import annotations

import gc

import pytest

from workbench.sandbox import launch_server


@pytest.mark.parametrize("argv", [
    ["--model-path", "/nonexistent", "--port", "notaport"],
    ["--model-path", "/nonexistent", "--speculative-num-steps", "-1"],
], ids=["port", "num-steps"])
def test_a_refused_launch_leaves_the_collector_on(argv, capsys):
    assert gc.isenabled()
    with pytest.raises(SystemExit) as refused:  # argparse's error: status 2, one usage and one error line
        launch_server.main(argv)
    assert refused.value.code == 2
    assert "error: argument" in capsys.readouterr().err
    assert gc.isenabled()


def test_the_collector_is_off_while_main_runs(monkeypatch):
    """What ``main`` runs (``_serve``: flags, logging, the server) runs with the collector off."""
    seen = []
    monkeypatch.setattr(launch_server, "_serve", lambda argv: seen.append(gc.isenabled()) or 0)
    assert launch_server.main([]) == 0
    assert seen == [False] and gc.isenabled()
