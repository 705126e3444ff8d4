"""Shared by the doctor's and the rule families' tests: public model-card facts of real targets,
SpecForge-shaped draft configs and sparse checkpoints, a deployment written to disk, and small
readers of a DoctorReport."""

from __future__ import annotations

import json
import pathlib

import numpy as np

from workbench.checkpoint import read_draft_facts, read_target_facts
from workbench.doctor import DoctorReport, run_doctor
from workbench.rules.weights import check_draft_weights
from workbench_test_helpers import write_raw, write_sparse_safetensors


# Public model-card facts of the targets: (architectures, hidden, layers, vocab, max positions, rope theta).
KIMI_K25 = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
            "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
                            "vocab_size": 163840, "max_position_embeddings": 262144, "rope_theta": 50000.0}}
KIMI_K2 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
           "vocab_size": 163840, "max_position_embeddings": 131072, "rope_theta": 50000.0}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
               "vocab_size": 129280, "max_position_embeddings": 163840, "rope_theta": 10000}
LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
             "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0}
LLAMA31_8B = {**LLAMA3_8B, "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
LLAMA33_70B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "num_hidden_layers": 80,
               "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
GPT_OSS_20B = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "num_hidden_layers": 24,
               "vocab_size": 201088, "max_position_embeddings": 131072, "rope_theta": 150000}
GPT_OSS_120B = {**GPT_OSS_20B, "num_hidden_layers": 36}
QWEN3_30B = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
             "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0}
QWEN3_14B = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 40,
             "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0}
QWEN3_8B = {**QWEN3_14B, "hidden_size": 4096, "num_hidden_layers": 36}
# The verifier of the speculators config (a private Mistral 123B): its facts as the speculators
# export copied them into transformer_layer_config (hidden, vocab, context), 88 layers.
MISTRAL_LARGE = {"architectures": ["Mistral3ForConditionalGeneration"],
                 "text_config": {"hidden_size": 12288, "num_hidden_layers": 88, "vocab_size": 131072,
                                 "max_position_embeddings": 32768, "rope_theta": 1000000.0}}


def draft_cfg(**over) -> dict:
    """A SpecForge-style LlamaForCausalLMEagle3 config; ``over`` replaces keys (``None`` removes)."""
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
           "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 131072,
           "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
           "tie_word_embeddings": False}
    return with_keys(cfg, **over)


def with_keys(cfg: dict, **over) -> dict:
    """``cfg`` with ``over``'s keys replaced (a ``None`` value removes the key); returns ``cfg``."""
    for k, v in over.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def deploy(root: pathlib.Path, target: dict, draft: dict, spec: dict | None = None, *, token_map_data: bool = True,
           name: str = "d") -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``root/name/{target,draft}``: configs and a sparse draft checkpoint (SpecForge's
    names and shapes for ``draft`` unless ``spec`` is given; a valid d2t/t2d when it has them)."""
    base = root / name
    (base / "target").mkdir(parents=True, exist_ok=True)
    (base / "draft").mkdir(parents=True, exist_ok=True)
    (base / "target" / "config.json").write_text(json.dumps(target))
    (base / "draft" / "config.json").write_text(json.dumps(draft))
    spec = specforge_spec(draft) if spec is None else spec
    data = {}
    if token_map_data and "d2t" in spec and "t2d" in spec:
        data["d2t"], data["t2d"] = token_map(spec["t2d"][1][0], spec["d2t"][1][0])
    write_sparse_safetensors(base / "draft" / "model.safetensors", spec, data=data)
    return base / "target", base / "draft"


def launch(target, draft, algo="EAGLE3", extra="") -> str:
    return (f"python -m sglang.launch_server --model-path {target} --speculative-algorithm {algo} "
            f"--speculative-draft-model-path {draft} --speculative-num-steps 3 --speculative-eagle-topk 1 "
            f"--speculative-num-draft-tokens 4 --tp 8 {extra}").strip()


def doctor(box, cmd, engine, version="0.5.23") -> DoctorReport:
    return run_doctor(box, cmd, engine_root=str(engine), engine_version=version)


def serious(report: DoctorReport) -> list[tuple[str, str]]:
    return sorted((f.rule, f.severity) for f in report.findings if f.severity != "info")


def by_rule(report: DoctorReport, rule: str):
    hits = [f for f in report.findings if f.rule == rule]
    assert hits, f"{rule} not in {report.rules}"
    return hits[0]


def hf_cache(root: pathlib.Path, repo: str, files: pathlib.Path, rev: str = "0123abcd") -> None:
    """Lay ``files`` (a model dir) out as huggingface_hub's cache under ``root/hub``."""
    repo_dir = root / "hub" / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(rev)
    snap = repo_dir / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in files.iterdir():  # the hub's snapshots are symlinks into blobs/
        (snap / f.name).symlink_to(f)


def eagle1_spec(h: int, heads: int, kv: int, inter: int, vocab: int) -> dict:
    hd = h // heads
    return {"fc.weight": ("F16", (h, 2 * h)), "layers.0.self_attn.q_proj.weight": ("F16", (heads * hd, h)),
            "layers.0.self_attn.k_proj.weight": ("F16", (kv * hd, h)),
            "layers.0.self_attn.v_proj.weight": ("F16", (kv * hd, h)),
            "layers.0.self_attn.o_proj.weight": ("F16", (h, heads * hd)),
            "layers.0.mlp.gate_proj.weight": ("F16", (inter, h)), "layers.0.mlp.up_proj.weight": ("F16", (inter, h)),
            "layers.0.mlp.down_proj.weight": ("F16", (h, inter)),
            "layers.0.post_attention_layernorm.weight": ("F16", (h,))}


def corrupt(path: pathlib.Path, kind: str) -> None:
    if kind == "truncated":
        with open(path, "r+b") as f:
            f.truncate(5)
    elif kind == "huge-header":
        write_raw(path, b"{}", length=200_000_000)
    elif kind == "not-json":
        write_raw(path, b"{not json at all}")
    elif kind == "unknown-dtype":
        write_raw(path, json.dumps({"fc.weight": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}}).encode(), extra=b"xx")
    elif kind == "offsets-past-end":
        write_raw(path, json.dumps({"fc.weight": {"dtype": "U8", "shape": [64], "data_offsets": [0, 64]}}).encode())
    elif kind == "missing":
        path.unlink()


KIMI = "sgl-project__SpecForge__configs_kimi-k2-eagle3.json"
DEEPSEEK = "sgl-project__SpecForge__configs_deepseek-v3-671b-eagle3.json"
QWEN3 = "sgl-project__SpecForge__configs_qwen3-30B-eagle3.json"
GPT_OSS = "sgl-project__SpecForge__configs_gpt-oss-20B-eagle3.json"
SPECFORGE_CONFIGS = [KIMI, DEEPSEEK, QWEN3, GPT_OSS]

def hot_ids(vocab: int, dv: int, seed: int = 0) -> np.ndarray:
    """A draft vocab: ``dv`` distinct target ids in ascending order (SpecForge sorts them)."""
    return np.sort(np.random.default_rng(seed).choice(vocab, size=dv, replace=False)).astype(np.int64)


def token_map(vocab: int, dv: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """SpecForge's export: ``d2t = hot - arange`` (I64 offsets), ``t2d[hot] = True`` (BOOL [vocab])."""
    hot = hot_ids(vocab, dv, seed)
    t2d = np.zeros(vocab, dtype=np.bool_)
    t2d[hot] = True
    return hot - np.arange(dv, dtype=np.int64), t2d


def specforge_spec(cfg: dict) -> dict:
    """``{name: (dtype, shape)}`` of a SpecForge EAGLE-3 export for draft config ``cfg``."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    inter = cfg["intermediate_size"]
    th = cfg.get("target_hidden_size") or h
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    n_aux = len(ids) if ids else 3  # the engine's default when no ids are given (qwen3-30B config)
    spec = {
        "fc.weight": ("BF16", (h, th * n_aux)),
        "midlayer.self_attn.q_proj.weight": ("BF16", (heads * hd, 2 * h)),
        "midlayer.self_attn.k_proj.weight": ("BF16", (kv * hd, 2 * h)),
        "midlayer.self_attn.v_proj.weight": ("BF16", (kv * hd, 2 * h)),
        "midlayer.self_attn.o_proj.weight": ("BF16", (h, heads * hd)),
        "midlayer.mlp.gate_proj.weight": ("BF16", (inter, h)),
        "midlayer.mlp.up_proj.weight": ("BF16", (inter, h)),
        "midlayer.mlp.down_proj.weight": ("BF16", (h, inter)),
        "midlayer.input_layernorm.weight": ("BF16", (h,)),
        "midlayer.post_attention_layernorm.weight": ("BF16", (h,)),
        "midlayer.hidden_norm.weight": ("BF16", (h,)),
        "norm.weight": ("BF16", (h,)),
    }
    if not cfg.get("tie_word_embeddings"):
        spec["lm_head.weight"] = ("BF16", (cfg.get("draft_vocab_size") or cfg["vocab_size"], h))
    if cfg.get("draft_vocab_size"):
        spec["d2t"] = ("I64", (cfg["draft_vocab_size"],))
        spec["t2d"] = ("BOOL", (cfg["vocab_size"],))
    return spec


def make_draft(root: pathlib.Path, cfg: dict, spec: dict | None = None, data: dict | None = None,
               *, drop: tuple = (), rename: dict | None = None, shapes: dict | None = None) -> pathlib.Path:
    """Write ``root/draft/{config.json, model.safetensors}`` and ``root/target/config.json``.

    ``spec`` defaults to :func:`specforge_spec`; ``drop`` removes tensors, ``rename`` renames
    them, ``shapes`` overrides shapes. ``data`` defaults to a valid d2t/t2d when the spec has them.
    """
    spec = dict(specforge_spec(cfg) if spec is None else spec)
    for name in drop:
        del spec[name]
    for old, new in (rename or {}).items():
        spec[new] = spec.pop(old)
    for name, shape in (shapes or {}).items():
        spec[name] = (spec[name][0], shape)
    if data is None:
        data = {}
        if "d2t" in spec and "t2d" in spec:
            data["d2t"], data["t2d"] = token_map(spec["t2d"][1][0], spec["d2t"][1][0])
    draft = root / "draft"
    draft.mkdir(parents=True, exist_ok=True)
    (draft / "config.json").write_text(json.dumps(cfg))
    write_sparse_safetensors(draft / "model.safetensors", spec, data={k: v for k, v in data.items() if k in spec})
    target = root / "target"
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": cfg.get("target_hidden_size") or cfg["hidden_size"],
        "vocab_size": cfg["vocab_size"], "num_hidden_layers": 61}))
    return root


def run(box, root: pathlib.Path):
    draft = read_draft_facts(box, str(root / "draft"))
    target = read_target_facts(box, str(root / "target"))
    return check_draft_weights(box, draft, target)


def rules(findings) -> list[str]:
    return sorted(f.rule for f in findings)


def sandbox_deployment(root: pathlib.Path, algorithm: str = "EAGLE3", **config) -> str:
    """The real sandbox target and draft copied to ``root`` with the draft's ``config.json`` keys
    ``config`` replaced (``eagle_aux_hidden_state_layer_ids=...`` goes into ``eagle_config``);
    returns the sandbox launch command pointing at the copies."""
    import shutil

    from workbench.engine.launch import LaunchCommand
    from workbench.sandbox_box import sandbox_launch_command, sandbox_models_dir

    for name in ("target", "draft"):
        shutil.copytree(sandbox_models_dir() / name, root / name)
    path = root / "draft" / "config.json"
    cfg = json.loads(path.read_text())
    for key, value in config.items():
        if key == "eagle_aux_hidden_state_layer_ids":
            cfg["eagle_config"][key] = value
        else:
            cfg[key] = value
    path.write_text(json.dumps(cfg))
    return (LaunchCommand.parse(sandbox_launch_command(algorithm=algorithm))
            .with_flag("--model-path", str(root / "target"))
            .with_flag("--speculative-draft-model-path", str(root / "draft")).to_string())


def facts_of(box, cmd: str, engine=None):
    """The :class:`Facts` the doctor gathers for ``cmd`` (for the families' fix derivers)."""
    from workbench.doctor.run import gather_facts
    from workbench.engine.launch import LaunchCommand

    return gather_facts(box, LaunchCommand.parse(cmd), engine_root=str(engine) if engine else None,
                        engine_version="0.5.23" if engine else None)
