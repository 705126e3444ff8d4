"""The fault matrix on the sandbox box (issue 12): every silent fault family, reproduced by
SGLang 0.5.23's own mechanism, built with ``testkit.faults.build_deployment``.

Three parts:

- fast (no server): the builder (names, combinations, links, the committed models left
  byte-identical); the mechanism in process (the layers the target captures, the parameter a
  dropped tensor leaves at its initialisation, the token map the draft worker holds, the weight
  loader's assert, the model registry); the doctor on each deployment, naming the fault's rule of
  ``docs/rules.md``;
- slow (real servers on loopback, the ``matrix`` fixture: one server per fault, started once,
  two at a time): a silent fault serves the healthy target's tokens exactly but accepts fewer
  drafts than the healthy draft measured in the same run (``/generate`` meta_info, accept length =
  completion tokens / spec_verify_ct over the sandbox's own bench prompts); a start-up fault
  exits non-zero (SIGKILL: SGLang's launcher kills itself) with the exception in its log, and
  ``remote``'s ``wait_healthy`` sees ``ServerDied``, never a server hanging at 503. The launch
  guard's table (``testkit.matrix.GUARD_REFUSES``) against the same launches: every fault of
  ``testkit.faults`` is launched here as is (no guard), and it dies while starting up exactly when
  the guard refuses it.
"""

from __future__ import annotations

import json
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

import httpx
import numpy as np
import pytest

from sandbox_helpers import ROOT
from testkit import faults as fk
from testkit.faults import FAULTS, build_deployment, committed_digests
from testkit.matrix import GUARD_REFUSES, UNMODELLED_DEATHS
from testkit.ports import free_port
from testkit.sandbox_servers import start_sandbox_server
from testkit.engine_copy import checkout_dir

pytestmark = pytest.mark.usefixtures("models_present")

BENCH = ROOT / "workbench" / "sandbox" / "prompts" / "bench.jsonl"
PROMPTS = [json.loads(line)["text"] for line in BENCH.read_text().splitlines()[:4]]
N_NEW = 64
LOADING = "Received sigquit from a child process. It usually means the child failed."  # launch-phase handler
SERVING = "SIGQUIT received. signum=None, frame=None. It usually means one child failed."  # running phase


# ---------------------------------------------------------------------------------------------
# The builder
# ---------------------------------------------------------------------------------------------


def test_every_fault_has_a_docstring_naming_its_report_and_sglang_source():
    for name, fault in FAULTS.items():
        assert fault.doc and fault.kind in ("files", "launch"), name
        doc = " ".join(fault.doc.split())
        if name != "healthy":
            assert "SGLang 0.5.23" in doc, name
            assert re.search(r"(issue|PR) #\d+", doc), f"{name}: no public report named"


def test_healthy_deployment_links_the_committed_files(tmp_path):
    before = committed_digests()
    dep = build_deployment(tmp_path / "d")
    assert dep.faults == () and dep.launch_kwargs == fk.HEALTHY_LAUNCH
    for sub, src in (("target", fk.TARGET), ("draft", fk.DRAFT)):
        for p in (tmp_path / "d" / sub).iterdir():
            if p.name == "config.json":
                assert not p.is_symlink() and json.loads(p.read_text()) == json.loads((src / p.name).read_text())
            else:
                assert p.is_symlink() and p.resolve() == (src / p.name).resolve()
    assert build_deployment(tmp_path / "h", "healthy").faults == ()
    assert committed_digests() == before


def test_every_fault_builds_and_leaves_the_committed_models_byte_identical(tmp_path):
    before = committed_digests()
    assert len(before) >= 8
    for name in FAULTS:
        dep = build_deployment(tmp_path / name, name)
        assert (dep.target_dir / "config.json").is_file() and (dep.draft_dir / "model.safetensors").exists()
    # and a stack of faults on one deployment (faults stack in the field too)
    build_deployment(tmp_path / "stack", "eagle-flag", "no-eagle-config", "renamed-tensor", "d2t-missing")
    assert committed_digests() == before


def test_faults_change_what_they_name(tmp_path):
    from safetensors import safe_open

    def draft_cfg(dep):
        return json.loads((dep.draft_dir / "config.json").read_text())

    def tensors(dep):
        with safe_open(str(dep.draft_dir / "model.safetensors"), "np") as f:
            return {k: f.get_tensor(k) for k in f.keys()}

    healthy = tensors(build_deployment(tmp_path / "h"))
    assert "eagle_config" not in draft_cfg(build_deployment(tmp_path / "a", "no-eagle-config"))
    top = draft_cfg(build_deployment(tmp_path / "b", "aux-ids-top-level"))
    assert "eagle_config" not in top and top["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6]
    ids = {n: draft_cfg(build_deployment(tmp_path / n, n))["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
           for n in ("aux-ids-out-of-range", "aux-ids-shifted")}
    assert ids == {"aux-ids-out-of-range": [1, 3, 7], "aux-ids-shifted": [0, 2, 5]}
    assert draft_cfg(build_deployment(tmp_path / "c", aux_ids=[2, 4, 6]))["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]
    g = build_deployment(tmp_path / "g", "target-no-capture")
    tcfg = json.loads((g.target_dir / "config.json").read_text())
    assert tcfg["architectures"] == ["GraniteForCausalLM"] and tcfg["model_type"] == "granite"
    assert (g.target_dir / "model.safetensors").is_symlink()
    r = tensors(build_deployment(tmp_path / "r", "renamed-tensor"))
    assert "midlayer.self_attn.q_proj.weight" not in r and (r["midlayer.self_attn.qproj.weight"] ==
                                                             healthy["midlayer.self_attn.q_proj.weight"]).all()
    m = tensors(build_deployment(tmp_path / "m", "d2t-minus-arange"))
    assert (m["d2t"] + np.arange(128) == healthy["d2t"]).all()
    assert "d2t" not in tensors(build_deployment(tmp_path / "n", "d2t-missing"))
    assert tensors(build_deployment(tmp_path / "s", "d2t-short"))["d2t"].shape == (32,)
    assert tensors(build_deployment(tmp_path / "f", "d2t-float"))["d2t"].dtype.kind == "f"
    assert draft_cfg(build_deployment(tmp_path / "v", "vocab-mismatch"))["vocab_size"] == 512
    t = build_deployment(tmp_path / "t", "truncated-checkpoint").draft_dir / "model.safetensors"
    assert not t.is_symlink() and t.stat().st_size == (fk.DRAFT / "model.safetensors").stat().st_size // 2
    # launch-side faults change only the launch arguments
    e = build_deployment(tmp_path / "e", "eagle-flag")
    assert e.spec_flags()[:2] == ["--speculative-algorithm", "EAGLE"]
    w = build_deployment(tmp_path / "w", "spec-params-without-steps")
    assert "--speculative-num-steps" not in w.spec_flags() and w.spec_flags()[-4:] == [
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    z = build_deployment(tmp_path / "z", "spec-steps-zero")
    assert z.argv(1234)[-6:-4] == ["--speculative-num-steps", "0"]
    assert z.launch_command(1234).startswith(f"{fk.sys.executable} -m workbench.sandbox.launch_server --model-path ")


@pytest.mark.parametrize("faults, kwargs, error", [
    (("no-such-fault",), {}, "unknown fault"),
    (("healthy", "eagle-flag"), {}, "cannot be combined"),
    (("d2t-missing", "d2t-minus-arange"), {}, "both change the same thing"),
    (("no-eagle-config", "aux-ids-shifted"), {}, "both change the same thing"),
    (("eagle-flag", "eagle-flag"), {}, "named twice"),
    (("no-eagle-config",), {"aux_ids": [1, 2, 3]}, "without eagle_config"),
])
def test_build_deployment_refuses(tmp_path, faults, kwargs, error):
    with pytest.raises(ValueError, match=error):
        build_deployment(tmp_path / "d", *faults, **kwargs)


def test_build_deployment_refuses_an_existing_deployment(tmp_path):
    build_deployment(tmp_path / "d")
    with pytest.raises(FileExistsError):
        build_deployment(tmp_path / "d", "eagle-flag")


# ---------------------------------------------------------------------------------------------
# The mechanism, in process (no server)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One deployment per fault (built once for the module) and the committed models' digests
    taken before any was built."""
    before = committed_digests()
    root = tmp_path_factory.mktemp("faults")
    deps = {name: build_deployment(root / name, name) for name in FAULTS}
    deps["granite-eagle"] = build_deployment(root / "granite-eagle", "target-no-capture", "eagle-flag")
    deps["granite-plain"] = deps["target-no-capture"]
    return deps, before


@pytest.fixture(scope="module")
def target_worker():
    """The committed Llama target, loaded once (fp32, one thread)."""
    import torch

    from workbench.sandbox.srt.speculative.eagle_worker import TargetWorker

    torch.set_num_threads(1)
    return TargetWorker(str(fk.TARGET))


def _server_args(dep, *extra):
    from workbench.sandbox.srt.server_args import prepare_server_args

    return prepare_server_args(["--model-path", str(dep.target_dir), *dep.spec_flags(), *extra])


def _draft_worker(dep, target_worker):
    """An EAGLE worker for ``dep``'s draft on the shared target (its capture set as the launch asks)."""
    from workbench.sandbox.srt.speculative.eagle_worker import EAGLEWorker
    from workbench.sandbox.srt.speculative.spec_info import SpeculativeAlgorithm

    args = _server_args(dep)
    target_worker.model.capture_aux_hidden_states = False
    target_worker.model.layers_to_capture = []
    return EAGLEWorker(args, target_worker, SpeculativeAlgorithm.from_string(args.speculative_algorithm))


@pytest.mark.parametrize("name, layers", [
    ("healthy", [2, 4, 7]),  # [1, 3, 6] + 1: what the draft was trained on
    ("no-eagle-config", [2, 4, 5]),  # swallowed except -> the default [2, L//2, L-3]
    ("aux-ids-top-level", [2, 4, 5]),  # only the nested key is read
    ("aux-ids-shifted", [1, 3, 6]),  # [0, 2, 5] + 1
])
def test_captured_layers_follow_sglangs_resolution(built, target_worker, name, layers):
    worker = _draft_worker(built[0][name], target_worker)
    model = target_worker.model
    assert model.capture_aux_hidden_states and model.layers_to_capture == layers
    _, hidden = target_worker.forward(list(b"def f():\n"), 0, target_worker.new_cache())
    assert hidden.shape[-1] == 3 * model.config.hidden_size  # three states reach fc
    assert worker.draft_model.model.fc.in_features == hidden.shape[-1]


def test_out_of_range_id_never_fires_and_fc_fails(built, target_worker):
    worker = _draft_worker(built[0]["aux-ids-out-of-range"], target_worker)
    assert target_worker.model.layers_to_capture == [2, 4, 8]  # layer 8 does not exist on 8 layers
    _, hidden = target_worker.forward(list(b"def f():\n"), 0, target_worker.new_cache())
    assert hidden.shape[-1] == 2 * 160  # two aux states, not three
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(\d+x320 and 480x160\)"):
        worker.prefill(list(b"def f():\n"))


def test_eagle_flag_captures_nothing(built, target_worker):
    worker = _draft_worker(built[0]["eagle-flag"], target_worker)
    assert not target_worker.model.capture_aux_hidden_states
    assert worker.hot_token_id is None and worker.draft_model.lm_head.weight.shape[0] == 256  # the target's head


def test_renamed_tensor_leaves_q_rows_at_their_initialisation(built, target_worker):
    import torch
    from safetensors.torch import load_file

    worker = _draft_worker(built[0]["renamed-tensor"], target_worker)
    attn = worker.draft_model.model.layers[0].self_attn
    qkv = attn.qkv_proj.weight.detach()
    ckpt = load_file(str(fk.DRAFT / "model.safetensors"))
    q, k, v = qkv.split([attn.q_size, attn.kv_size, attn.kv_size])
    assert torch.equal(k, ckpt["midlayer.self_attn.k_proj.weight"]) and torch.equal(v, ckpt["midlayer.self_attn.v_proj.weight"])
    assert not torch.equal(q, ckpt["midlayer.self_attn.q_proj.weight"])
    # nn.Linear's own init (kaiming uniform, bound 1/sqrt(in_features)), not zeros, not the checkpoint
    bound = 1 / qkv.shape[1] ** 0.5
    assert q.abs().max() <= bound and q.std() == pytest.approx(bound / 3 ** 0.5, rel=0.1)
    assert (q == 0).float().mean() < 0.01


def test_token_map_faults(built, target_worker):
    import torch
    from safetensors.torch import load_file

    d2t = load_file(str(fk.DRAFT / "model.safetensors"))["d2t"]
    minus = _draft_worker(built[0]["d2t-minus-arange"], target_worker)
    assert torch.equal(minus.hot_token_id, d2t)  # offsets used as ids: valid ids, the wrong ones
    assert 0 <= int(minus.hot_token_id.min()) and int(minus.hot_token_id.max()) < 256
    missing = _draft_worker(built[0]["d2t-missing"], target_worker)
    assert missing.hot_token_id is None and missing.draft_model.lm_head.weight.shape[0] == 128  # id i = target i
    short = _draft_worker(built[0]["d2t-short"], target_worker)
    assert short.hot_token_id.shape == (32,)
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 32"):
        short.hot_token_id[torch.tensor(100)]
    flt = _draft_worker(built[0]["d2t-float"], target_worker)
    assert flt.hot_token_id.dtype == torch.float32
    state, _ = flt.prefill(list(b"def main():\n    "))
    with pytest.raises(RuntimeError, match="Expected tensor for argument #1 'indices'"):
        flt.decode(state)


def test_vocab_mismatch_changes_nothing_the_draft_computes(built, target_worker):
    worker = _draft_worker(built[0]["vocab-mismatch"], target_worker)
    embed = worker.draft_model.model.embed_tokens.weight
    assert embed.data_ptr() == target_worker.model.get_embed().data_ptr() and embed.shape[0] == 256


def test_config_shape_faults_fail_in_the_weight_loader(built, target_worker):
    with pytest.raises(AssertionError, match=re.escape(
            "Attempted to load weight (torch.Size([160, 480])) into parameter (torch.Size([160, 576]))")):
        _draft_worker(built[0]["target-hidden-mismatch"], target_worker)
    with pytest.raises(ValueError, match="Cannot find model module. 'Eagle3LlamaForCausalLM' is not a registered"):
        _draft_worker(built[0]["draft-unknown-architecture"], target_worker)


def test_registry_resolves_architectures_as_sglang():
    from types import SimpleNamespace

    from workbench.sandbox.srt.model_loader.utils import get_model_architecture
    from workbench.sandbox.srt.models.registry import ModelRegistry

    assert {"LlamaForCausalLM", "GraniteForCausalLM", "LlamaForCausalLMEagle3"} <= set(ModelRegistry.get_supported_archs())
    cls, arch = get_model_architecture(SimpleNamespace(architectures=["GraniteForCausalLM"]))
    assert arch == "GraniteForCausalLM" and not hasattr(cls, "set_eagle3_layers_to_capture")
    assert not hasattr(cls, "get_embed_and_head")  # as SGLang 0.5.23's srt/models/granite.py
    with pytest.raises(ValueError, match="Cannot find model module. 'NoSuchForCausalLM'"):
        get_model_architecture(SimpleNamespace(architectures=["NoSuchForCausalLM"]))
    with pytest.raises(ValueError, match="Transformers backend"):
        get_model_architecture(SimpleNamespace(architectures=["MistralForCausalLM"]))  # in transformers, not here


def test_granite_target_computes_the_llama_target_exactly(built, target_worker):
    import torch

    from workbench.sandbox.srt.speculative.eagle_worker import TargetWorker

    granite = TargetWorker(str(built[0]["target-no-capture"].target_dir))
    assert type(granite.model).__name__ == "GraniteForCausalLM"
    ids = list(b"import os\nimport sys\n")
    target_worker.model.capture_aux_hidden_states = False
    a, ha = target_worker.forward(ids, 0, target_worker.new_cache())
    b, hb = granite.forward(ids, 0, granite.new_cache())
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(ha, hb, atol=1e-5)


def test_zero_steps_disable_drafting(built, target_worker):
    worker = _draft_worker(built[0]["spec-steps-zero"], target_worker)
    assert (worker.num_steps, worker.num_draft_tokens) == (0, 1)  # draft tokens forced to steps + 1
    state, _ = worker.prefill(list(b"def main():\n    "))
    step = worker.decode(state)
    assert worker.draft(state) == [] and step.is_verify and step.num_correct_drafts == 0 and len(step.tokens) == 1


# ---------------------------------------------------------------------------------------------
# The doctor names each fault's rule (docs/rules.md)
# ---------------------------------------------------------------------------------------------

DOCTOR_RULE = {
    "no-eagle-config": "aux-config-unread",
    "aux-ids-top-level": "aux-config-unread",
    "aux-ids-out-of-range": "aux-layer-ids-out-of-range",
    "aux-ids-shifted": "aux-layer-offset-convention",
    "target-no-capture": "target-no-aux-capture",
    "renamed-tensor": "weights-dropped",
    "d2t-minus-arange": "token-map-invalid",
    "d2t-shuffled": "token-map-unordered",
    "d2t-missing": "token-map-missing",
    "d2t-short": "token-map-invalid",
    "d2t-float": "token-map-invalid",
    "vocab-mismatch": "vocab-size-mismatch",
    "target-hidden-mismatch": "hidden-size-mismatch",
    "draft-unknown-architecture": "unknown-draft-architecture",
    "draft-hidden-size": "draft-config-vs-tensors",
    "truncated-checkpoint": "checkpoint-unreadable",
    "eagle-flag": "algorithm-mismatch",
    "spec-params-without-steps": "spec-params-invalid",
    "spec-steps-zero": "spec-params-invalid",
}


@pytest.fixture(scope="module")
def doctor_reports(built):
    from remote import connect

    from workbench.doctor import run_doctor

    box = connect("local")
    try:
        return {name: run_doctor(box, dep.launch_command(30000), cwd=str(checkout_dir())) for name, dep in built[0].items()}
    finally:
        box.close()


def test_doctor_finds_nothing_serious_on_the_healthy_deployment(doctor_reports):
    rep = doctor_reports["healthy"]
    assert [f.rule for f in rep.findings if f.severity in ("error", "warning")] == [] and rep.exit_code == 0


@pytest.mark.parametrize("name", sorted(DOCTOR_RULE))
def test_doctor_names_the_faults_rule(doctor_reports, name):
    rep = doctor_reports[name]
    assert DOCTOR_RULE[name] in {f.rule for f in rep.findings}, [(f.rule, f.severity) for f in rep.findings]


def test_doctor_does_not_predict_the_unmodelled_deaths(doctor_reports):
    """The faults the engine dies on that no rule models (``testkit.matrix.UNMODELLED_DEATHS``): the
    doctor reports no error that says the server would not start (the guard launches them; the
    diagnosis then names the death from the engine's own line)."""
    for name in UNMODELLED_DEATHS:
        stops = [f.rule for f in doctor_reports[name].findings if f.severity == "error" and f.prevents_start]
        assert stops == [], (name, stops)


def test_doctor_evidence_shows_the_captured_layers(doctor_reports):
    def captured(name, rule):
        (f,) = [f for f in doctor_reports[name].findings if f.rule == rule]
        return f.evidence["captured_layers"]["value"]

    assert captured("healthy", "aux-layer-offset-convention") == [2, 4, 7]
    assert captured("aux-ids-shifted", "aux-layer-offset-convention") == [1, 3, 6]
    assert captured("no-eagle-config", "aux-config-unread") == [2, 4, 5]


# ---------------------------------------------------------------------------------------------
# Real servers: the matrix (slow)
# ---------------------------------------------------------------------------------------------

#: faults the server starts and serves with (measured on the bench prompts)
SILENT = ("healthy", "no-eagle-config", "aux-ids-top-level", "aux-ids-shifted", "renamed-tensor", "d2t-minus-arange",
          "d2t-shuffled", "d2t-missing", "vocab-mismatch", "eagle-flag", "spec-steps-zero",
          # the naming faults: every name the loader cannot place is skipped without a word
          "wrapper-prefix", "stripped-prefix", "framework-naming", "attn-renamed")
#: start-up faults: the exception in the log, and which launcher handler killed the process
DEATHS = {
    "aux-ids-out-of-range": (r"RuntimeError: mat1 and mat2 shapes cannot be multiplied \(\d+x320 and 480x160\)", SERVING),
    "target-no-capture": (re.escape("ValueError: Model GraniteForCausalLM does not implement "
                                    "set_eagle3_layers_to_capture, which EAGLE3 aux hidden-state capture requires."),
                          LOADING),
    "granite-eagle": (re.escape("AttributeError: 'GraniteForCausalLM' object has no attribute 'get_embed_and_head'"),
                      LOADING),
    "d2t-short": (r"IndexError: index \d+ is out of bounds for dimension 0 with size 32", SERVING),
    "d2t-float": (re.escape("RuntimeError: Expected tensor for argument #1 'indices' to have one of the following "
                            "scalar types: Long, Int; but got torch.FloatTensor"), SERVING),
    "target-hidden-mismatch": (re.escape("AssertionError: Attempted to load weight (torch.Size([160, 480])) into "
                                         "parameter (torch.Size([160, 576]))"), LOADING),
    "draft-unknown-architecture": (re.escape("ValueError: Cannot find model module. 'Eagle3LlamaForCausalLM' is not a "
                                             "registered model in the Transformers library"), LOADING),
    "truncated-checkpoint": (r"SafetensorError: Error while deserializing header", LOADING),
    "fc-transposed": (re.escape("AssertionError: Attempted to load weight (torch.Size([480, 160])) into "
                                "parameter (torch.Size([160, 480]))"), LOADING),
    "draft-hidden-size": (re.escape("ValueError: The hidden size (128) is not a multiple of the number of attention "
                                    "heads (5)."), LOADING),
    "aux-ids-fewer-than-num-aux": (r"RuntimeError: mat1 and mat2 shapes cannot be multiplied \(\d+x320 and 480x160\)",
                                   SERVING),
}


@dataclass
class Outcome:
    """What one server did: started (and answered ``metas``/``outputs`` for the prompts), or
    exited (``returncode``, ``statuses`` seen on /health) with ``log``."""

    name: str
    started: bool = False
    returncode: Optional[int] = None
    log: str = ""
    statuses: list = field(default_factory=list)
    metas: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    @property
    def accept_length(self) -> float:
        """Accept length over all prompts: completion tokens / verify steps (bonus included)."""
        return sum(m["completion_tokens"] for m in self.metas) / sum(m["spec_verify_ct"] for m in self.metas)


def _serve_and_measure(name, dep, log_dir, own_sandbox_server) -> Outcome:
    out = Outcome(name)
    with own_sandbox_server(log_dir, *dep.server_flags()) as srv:
        out.started, out.statuses = True, list(srv.statuses)
        with httpx.Client(timeout=120, trust_env=False) as client:
            for prompt in PROMPTS:
                r = client.post(srv.url + "/generate", json={
                    "text": prompt, "sampling_params": {"max_new_tokens": N_NEW, "temperature": 0}})
                r.raise_for_status()
                out.metas.append(r.json()["meta_info"])
                out.outputs.append(r.json()["output_ids"])
        out.log = srv.log()
    return out


def _expect_death(name, dep, log_dir) -> Outcome:
    out = Outcome(name)
    try:
        srv = start_sandbox_server(log_dir, *dep.server_flags())
    except AssertionError as exc:  # start_sandbox_server: "server exited RC:\n<log>", group already stopped
        m = re.match(r"server exited (-?\d+):", str(exc))
        assert m, f"{name}: the server did not exit: {exc}"
        out.returncode = int(m.group(1))
        (log,) = log_dir.glob("server_*.log")
        out.log = log.read_text()
        return out
    srv.stop()
    raise AssertionError(f"{name}: the server started although the fault should kill it:\n{srv.log()}")


def _box_wait_healthy(dep, log_dir):
    """The fault through the box layer: ``Box.launch_server`` + ``wait_healthy`` -> the exception."""
    from remote import ServerDied, connect

    box = connect("local")
    port = free_port()
    handle = box.launch_server(dep.argv(port), port=port, log_path=log_dir / "box.log", cwd=checkout_dir())
    try:
        box.wait_healthy(handle, timeout=240)
    except ServerDied as exc:
        return exc
    finally:
        box.stop_server(handle)
        box.close()
    return None


#: the start-up fault the launcher itself refuses, before loading anything (argparse-level)
LAUNCHER_REFUSES = "spec-params-without-steps"


@pytest.fixture(scope="module")
def matrix(built, own_sandbox_server, tmp_path_factory):
    """Every fault's server, each started once, two at a time (one torch thread each on this
    2-core machine): ``{name: Outcome}`` for every fault of ``testkit.faults`` (:data:`SILENT`
    served and measured, :data:`DEATHS` and :data:`LAUNCHER_REFUSES` dead while starting) and
    ``granite-eagle``, plus ``"box"`` (``ServerDied`` from ``wait_healthy``: aux-ids-out-of-range
    once more, through the box layer)."""
    deps, _ = built
    logs = tmp_path_factory.mktemp("matrix")
    jobs = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for name in SILENT:
            jobs[name] = pool.submit(_serve_and_measure, name, deps[name], logs / name, own_sandbox_server)
        for name in (*DEATHS, LAUNCHER_REFUSES):
            jobs[name] = pool.submit(_expect_death, name, deps[name], logs / name)
        (logs / "box").mkdir()
        jobs["box"] = pool.submit(_box_wait_healthy, deps["aux-ids-out-of-range"], logs / "box")
    return {name: job.result() for name, job in jobs.items()}


def test_healthy_draft_accepts(matrix):
    healthy = matrix["healthy"]
    assert healthy.accept_length >= 1.8 and all(len(o) == N_NEW for o in healthy.outputs)


#: silent fault -> how far below the healthy accept length it must fall (same prompts, same run)
DEGRADES_BY = {"no-eagle-config": 0.3, "aux-ids-top-level": 0.3, "aux-ids-shifted": 0.2, "renamed-tensor": 0.25}
COLLAPSES = ("d2t-minus-arange", "d2t-missing", "eagle-flag")


@pytest.mark.parametrize("name", sorted(DEGRADES_BY) + list(COLLAPSES))
def test_silent_fault_serves_the_same_tokens_and_accepts_less(matrix, name):
    healthy, faulty = matrix["healthy"], matrix[name]
    assert faulty.started and "Scheduler hit an exception" not in faulty.log
    assert faulty.outputs == healthy.outputs  # lossless: the target decides every token
    if name in DEGRADES_BY:
        assert faulty.accept_length <= healthy.accept_length - DEGRADES_BY[name], (faulty.accept_length,
                                                                                    healthy.accept_length)
    else:  # the draft's proposals are garbage: accept length collapses to ~1
        assert faulty.accept_length <= 1.35 < healthy.accept_length


def test_both_unread_configs_capture_the_same_default_layers(matrix):
    assert [m["spec_accept_length"] for m in matrix["aux-ids-top-level"].metas] == \
        [m["spec_accept_length"] for m in matrix["no-eagle-config"].metas]


def test_vocab_mismatch_accepts_exactly_as_healthy(matrix):
    healthy, faulty = matrix["healthy"], matrix["vocab-mismatch"]
    assert faulty.outputs == healthy.outputs
    assert [m["spec_num_correct_drafts"] for m in faulty.metas] == [m["spec_num_correct_drafts"] for m in healthy.metas]


def test_zero_steps_serve_with_drafting_disabled(matrix):
    out = matrix["spec-steps-zero"]
    assert out.outputs == matrix["healthy"].outputs
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in out.log
    for m in out.metas:
        assert m["spec_num_correct_drafts"] == 0 and m["spec_verify_ct"] == m["completion_tokens"] - 1
        assert m["spec_correct_drafts_histogram"] == [m["spec_verify_ct"]]


@pytest.mark.parametrize("name", sorted(DEATHS))
def test_startup_fault_kills_the_server_with_the_exception_in_its_log(matrix, name):
    out = matrix[name]
    exception, handler = DEATHS[name]
    assert out.returncode == -signal.SIGKILL  # SGLang's kill_process_tree(os.getpid()) SIGKILLs the launcher
    log = out.log
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert re.search(exception, log), log[-3000:]
    assert handler in log and "kill_process_tree called: parent_pid=" in log
    assert "The server is fired up and ready to roll!" not in log
    assert log.index("Scheduler hit an exception") < log.index(handler)


def test_wait_healthy_sees_server_died(matrix):
    exc = matrix["box"]
    assert exc is not None, "wait_healthy returned: the server became healthy"
    tail = "\n".join(exc.log_tail)
    assert re.search(DEATHS["aux-ids-out-of-range"][0], tail) and SERVING in tail


def test_spec_params_without_steps_refused_before_loading(matrix):
    out = matrix[LAUNCHER_REFUSES]
    assert out.returncode == 2 and "AssertionError" in out.log and "Load weight begin" not in out.log


def test_every_fault_is_launched_by_the_matrix_and_in_the_guard_table():
    """Each fault of ``testkit.faults`` has one launch of its own in ``matrix`` (served, or dead while
    starting), and a row in the guard's table."""
    launched = [*SILENT, *DEATHS, LAUNCHER_REFUSES]
    assert len(launched) == len(set(launched)) and set(FAULTS) <= set(launched)
    assert set(GUARD_REFUSES) == set(FAULTS)


@pytest.mark.parametrize("fault", sorted(GUARD_REFUSES))
def test_the_guard_refuses_exactly_what_the_engine_dies_on(matrix, fault):
    """The launch guard's table (``testkit.matrix.GUARD_REFUSES``) against the real engine: the
    matrix launched each fault's deployment as is (the sandbox launcher on loopback, no guard): it
    died while starting up (exited before answering /health 200) exactly when the guard refuses it,
    and served otherwise. The decision is the mechanism's, not a list of examples."""
    out = matrix[fault]
    started = out.started
    expected = not GUARD_REFUSES[fault] and fault not in UNMODELLED_DEATHS  # those die although launched
    assert started == expected, (fault, started, out.returncode, GUARD_REFUSES[fault], out.log[-2000:])


def test_matrix_left_the_committed_models_byte_identical(matrix, built):
    assert committed_digests() == built[1]


def test_no_server_is_left_running(matrix, built):
    from remote import connect

    root = str(built[0]["healthy"].root.parent)
    with connect("local") as box:
        left = [s for s in box.find_servers() if root in " ".join(s.argv)]
    assert left == []
