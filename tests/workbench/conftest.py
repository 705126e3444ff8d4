import re
import shutil

import pytest


@pytest.fixture(scope="session")
def box():
    """The local box, through the real ``remote`` API."""
    from remote import connect

    return connect("local")


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """The box's workbench state (diagnosis journal, probe journal) for this test only, also for
    the ``workbench`` commands the test runs (``$EAGLE_WORKBENCH_STATE_DIR``)."""
    path = tmp_path / "box-state"
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(path))
    return path


@pytest.fixture(scope="module")
def older_engine(sglang_source, tmp_path_factory):
    """A copy of the SGLang 0.5.23 files the rules read, with what older releases lacked put back:
    ``gpt_oss.py`` adding +1 to every explicit id and never capturing the final boundary (before
    PR #32334), ``deepseek_v2.py`` adding +1 unconditionally (before PR #25454), and
    ``llama_eagle3.py`` without ``norm_before_fc``."""
    root = tmp_path_factory.mktemp("sglang-old") / "sglang"
    for rel in ("srt/models/llama.py", "srt/models/llama_eagle3.py", "srt/models/llama_eagle.py",
                "srt/models/gpt_oss.py", "srt/models/deepseek_v2.py", "srt/models/kimi_k25.py",
                "srt/models/kimi_k25_eagle3.py", "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sglang_source / rel, root / rel)
    gpt = (root / "srt/models/gpt_oss.py").read_text()
    gpt = gpt.replace("if layer_ids and max(layer_ids) == num_layers:", "if False:")
    gpt = re.sub(r"self\.end_layer in self\.layers_to_capture", "False", gpt)
    (root / "srt/models/gpt_oss.py").write_text(gpt)
    ds = (root / "srt/models/deepseek_v2.py").read_text()
    assert "if layer_ids and layer_ids[0] == 1:" in ds
    (root / "srt/models/deepseek_v2.py").write_text(ds.replace("if layer_ids and layer_ids[0] == 1:", "if True:"))
    le = (root / "srt/models/llama_eagle3.py").read_text()
    le = le.replace('"norm_before_fc"', '"_removed_"').replace("config, \"norm_before_fc\"", "config, \"_removed_\"")
    assert "norm_before_fc\"" not in le
    (root / "srt/models/llama_eagle3.py").write_text(le)
    return root


@pytest.fixture
def probe_state(own_sandbox_server, tmp_path):
    """A :class:`workbench.lab.state.BoxState` on a sandbox server (EAGLE3) of this test's own; no
    probe before, none left after (reverted here if the test failed half-way)."""
    from remote import probes as remote_probes
    from testkit.sandbox_servers import EAGLE, sandbox_flags
    from workbench.lab.state import BoxState

    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        state = BoxState("local", srv.port)
        assert remote_probes.list_probes(state.box) == []
        try:
            yield state
        finally:
            left = remote_probes.list_probes(state.box)
            for p in reversed(left):
                remote_probes.revert_probe(state.box, p.tag)
            state.close()
            assert not left, f"the test left probes: {[p.tag for p in left]}"
