"""Faulty sandbox deployments, built on disk: the fault matrix of the tests and the benchmarks.

``build_deployment(dest, *faults)`` copies the committed sandbox target and draft
(``workbench/sandbox/models/{target,draft}``) into ``dest`` and injects any combination of the
named faults below; it returns a :class:`Deployment`: the two model directories and the launch
arguments (the algorithm and the speculative parameters), which launch-side faults change. Big
files a fault leaves alone are symbolic links to the committed ones (nothing here ever writes
through a link: a changed file is written fresh after the link is removed); the committed models
are never written (``committed_digests()`` lets a test check they stay byte-identical).

Pure file operations: ``json``, ``numpy`` and ``safetensors.numpy``; no torch, no server. Each
fault is a :class:`Fault` in :data:`FAULTS` whose docstring names the real-world report it
mirrors and what SGLang 0.5.23 does with it (file:line in the published wheel), which the sandbox
reproduces by the same mechanism.

Fault names (``FILE_FAULTS`` change files, ``LAUNCH_FAULTS`` the launch command):

============================== ==============================================================
``healthy``                    nothing (the committed deployment, copied)
``no-eagle-config``            the draft config has no ``eagle_config``: default layers [2, 4, 5]
``aux-ids-top-level``          the ids only at the top level of the draft config: default layers
``aux-ids-out-of-range``       ids [1, 3, 7]: captured [2, 4, 8] on 8 layers, 8 never fires
``aux-ids-shifted``            ids [0, 2, 5] (the other convention): captured [1, 3, 6]
``target-no-capture``          target architectures ``GraniteForCausalLM`` (no capture method)
``renamed-tensor``             ``midlayer.self_attn.q_proj.weight`` → ``...qproj.weight``
``d2t-minus-arange``           ``d2t' = d2t - arange(len)`` (offsets "fixed" into ids)
``d2t-shuffled``               ``d2t`` with the same target ids in another order
``d2t-missing``                no ``d2t`` (nor ``t2d``) in the checkpoint
``d2t-short``                  ``d2t[:32]``: fewer entries than the draft vocabulary
``d2t-float``                  ``d2t`` stored as float32
``vocab-mismatch``             draft config ``vocab_size`` 512 (the tensors stay right)
``target-hidden-mismatch``     draft config ``target_hidden_size`` 192 (the target's is 160)
``draft-hidden-size``          draft config ``hidden_size`` 128 (its own tensors say 160)
``draft-unknown-architecture`` draft architectures ``Eagle3LlamaForCausalLM`` (vLLM's name)
``fc-transposed``              ``fc.weight`` stored ``[in, out]`` = [480, 160] (a converter's layout)
``aux-ids-fewer-than-num-aux`` ``num_aux_hidden_states`` 3 with ids [1, 3]: fc 480 wide, 320 captured
``truncated-checkpoint``       the draft ``model.safetensors`` cut to half its size
``wrapper-prefix``             every tensor name under ``module.`` (a DDP/FSDP wrapper's state dict)
``stripped-prefix``            layer 0's names without ``midlayer.`` (``self_attn.q_proj.weight`` …)
``framework-naming``           Meta's Llama naming: ``layers.0.attention.wq``, ``feed_forward.w1``, ``output``
``attn-renamed``               ``self_attn`` → ``attn`` in every name (q/k/v: three tensors of one shape)
``eagle-flag``                 launch: ``--speculative-algorithm EAGLE``
``spec-params-without-steps``  launch: topk 1 + 4 draft tokens, no ``--speculative-num-steps``
``spec-steps-zero``            launch: ``--speculative-num-steps 0``
============================== ==============================================================

vLLM-spelling variants (:data:`VLLM_FAULTS`):

============================== ==============================================================
``aux-ids-top-level-stale``    nested ids [1, 3, 6] and a stale top-level [0, 2, 5] (vLLM reads the latter)
``aux-ids-unsorted``           ids [6, 3, 1] (both engines take them in layer order)
``aux-ids-duplicate``          ids [1, 3, 3]: two distinct layers for an fc built for three
``aux-capture-off``            ``eagle_config.use_aux_hidden_state: false``
``norm-flag-unread``           ``use_aux_norm: true`` (vLLM never reads it)
``draft-arch-qwen2``           draft architectures ``Qwen2ForCausalLM``
``target-no-capture-vllm``     target architectures ``SolarForCausalLM`` (no ``SupportsEagle3`` in vLLM)
``d2t-out-of-range``           the last d2t offset pushed past the target vocab
``aux-ids-strings``            ids written as strings ``["1", "3", "6"]``
``d2t-full-vocab``             a full-vocabulary draft (lm_head 256 rows) that still ships d2t/t2d
============================== ==============================================================

Combination-only faults (:data:`COMBO_FAULTS`, unit tests): ``lm-head-missing`` (no ``lm_head.weight``,
under any prefix: apply after a naming fault), ``no-tensors`` (a safetensors file with no tensor).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "workbench" / "sandbox" / "models"
TARGET = MODELS / "target"
DRAFT = MODELS / "draft"
SERVER_MODULE = "workbench.sandbox.launch_server"

#: The launch arguments of the healthy deployment (SGLang's ServerArgs field names; ``None`` =
#: the flag is left out, so the engine resolves the value itself).
HEALTHY_LAUNCH = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                  "speculative_num_draft_tokens": 4}

_FLAG_OF = {"speculative_algorithm": "--speculative-algorithm", "speculative_num_steps": "--speculative-num-steps",
            "speculative_eagle_topk": "--speculative-eagle-topk",
            "speculative_num_draft_tokens": "--speculative-num-draft-tokens"}


@dataclass(frozen=True)
class Deployment:
    """A sandbox deployment on disk: ``target_dir`` and ``draft_dir`` (under ``root``),
    ``launch_kwargs`` (SGLang ``ServerArgs`` field names → value, ``None`` = flag omitted; see
    :data:`HEALTHY_LAUNCH`) and the ``faults`` injected, in the order given."""

    root: Path
    target_dir: Path
    draft_dir: Path
    launch_kwargs: dict
    faults: tuple[str, ...] = ()

    def spec_flags(self) -> list[str]:
        """The speculative flags of ``launch_kwargs`` with the draft path: ``--speculative-algorithm
        A --speculative-draft-model-path DRAFT [--speculative-num-steps N] ...``."""
        kw = self.launch_kwargs
        flags = ["--speculative-algorithm", str(kw["speculative_algorithm"]),
                 "--speculative-draft-model-path", str(self.draft_dir)]
        for key in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
            if kw.get(key) is not None:
                flags += [_FLAG_OF[key], str(kw[key])]
        return flags

    def server_flags(self, *extra: str) -> tuple[str, ...]:
        """Flags for ``testkit.sandbox_servers.start_sandbox_server`` (whose command line starts
        with the committed target): ``--model-path TARGET_DIR`` again (argparse keeps the last
        value), the speculative flags, then ``extra``."""
        return ("--model-path", str(self.target_dir), *self.spec_flags(), *extra)

    def argv(self, port: int, *extra: str, python: str = sys.executable) -> list[str]:
        """The whole server command line: ``python -m workbench.sandbox.launch_server
        --model-path TARGET_DIR --host 127.0.0.1 --port PORT <spec flags> <extra>``."""
        return [python, "-m", SERVER_MODULE, "--model-path", str(self.target_dir), "--host", "127.0.0.1",
                "--port", str(port), *self.spec_flags(), *extra]

    def launch_command(self, port: int = 30000, *extra: str, python: str = sys.executable) -> str:
        """:meth:`argv` as one shell-quoted line (what ``workbench doctor --launch`` reads)."""
        return shlex.join(self.argv(port, *extra, python=python))


@dataclass(frozen=True)
class Fault:
    """One named fault: ``kind`` is ``"files"`` (``apply(ctx)`` edits the copies) or ``"launch"``
    (``launch`` maps launch-argument names to the values it sets). ``doc`` is the real-world report
    it mirrors and SGLang 0.5.23's behaviour; ``group`` are faults it cannot be combined with."""

    name: str
    kind: str
    doc: str
    apply: Optional[Callable[["_Build"], None]] = None
    launch: dict = field(default_factory=dict)
    group: str = ""


class _Build:
    """The copies being edited: the draft config and tensors are loaded lazily and written once."""

    def __init__(self, root: Path, aux_ids: Optional[Sequence[int]]) -> None:
        self.root = root
        self.target_dir = root / "target"
        self.draft_dir = root / "draft"
        self.aux_ids = None if aux_ids is None else [int(i) for i in aux_ids]
        self.target_config = json.loads((TARGET / "config.json").read_text())
        self.draft_config = json.loads((DRAFT / "config.json").read_text())
        self._tensors: Optional[dict] = None
        self.truncate_draft = False

    @property
    def tensors(self) -> dict:
        """The draft checkpoint's tensors (numpy arrays), loaded on first use."""
        if self._tensors is None:
            from safetensors.numpy import load_file

            self._tensors = dict(load_file(str(DRAFT / "model.safetensors")))
        return self._tensors

    def set_aux_ids(self, ids: list[int]) -> None:
        """Write ``ids`` (or the caller's ``aux_ids`` when given) into the draft's ``eagle_config``."""
        self.draft_config.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = \
            list(self.aux_ids if self.aux_ids is not None else ids)

    def write(self) -> None:
        """Write the changed files, link the unchanged ones."""
        for d in (self.target_dir, self.draft_dir):
            d.mkdir(parents=True, exist_ok=True)
        _write_json(self.target_dir / "config.json", self.target_config)
        for name in sorted(os.listdir(TARGET)):
            if name != "config.json":
                _link(TARGET / name, self.target_dir / name)
        _write_json(self.draft_dir / "config.json", self.draft_config)
        for name in sorted(os.listdir(DRAFT)):
            if name not in ("config.json", "model.safetensors"):
                _link(DRAFT / name, self.draft_dir / name)
        dst = self.draft_dir / "model.safetensors"
        if self._tensors is not None:
            from safetensors.numpy import save_file

            _unlink(dst)
            save_file({k: np.ascontiguousarray(v) for k, v in self._tensors.items()}, str(dst),
                      metadata={"format": "pt"})
        else:
            _link(DRAFT / "model.safetensors", dst)
        if self.truncate_draft:  # after any tensor edit: the file as written, cut in half
            data = dst.read_bytes()
            _write_bytes(dst, data[: len(data) // 2])


def _unlink(path: Path) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()


def _write_bytes(path: Path, data: bytes) -> None:
    _unlink(path)  # never write through a link to a committed file
    path.write_bytes(data)


def _write_json(path: Path, obj: dict) -> None:
    _write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())


def _link(src: Path, dst: Path) -> None:
    _unlink(dst)
    dst.symlink_to(src)


# ---------------------------------------------------------------------------------------------
# The faults
# ---------------------------------------------------------------------------------------------


def _no_eagle_config(b: _Build) -> None:
    """The draft config has no ``eagle_config`` at all (``lightseekorg/kimi-k2.5-eagle3`` ships
    none: sgl-project/sglang PR #21274). SGLang 0.5.23 reads the ids inside ``try: ... except
    Exception: layer_ids = None`` (``model_runner_components/spec_aux_hidden_state.py:185-196``):
    ``None.get`` raises, is swallowed, and ``srt/models/llama.py:933-936`` captures the target's
    default layers ``[2, L//2, L-3]`` = [2, 4, 5] on the sandbox's 8 layers, not the [2, 4, 7] the
    draft was trained on. No log line. Acceptance degrades (the draft reads the wrong features)."""
    b.draft_config.pop("eagle_config", None)


def _aux_ids_top_level(b: _Build) -> None:
    """The ids written at the top level of the draft config only (``eagle_aux_hidden_state_layer_ids``
    outside ``eagle_config``, as vLLM's speculators config and tokenspeed PR #526 read them). SGLang
    0.5.23 reads only the nested key (``spec_aux_hidden_state.py:187-196``): no ``eagle_config`` →
    the swallowed except → default layers [2, 4, 5], silently, as for ``no-eagle-config``."""
    ids = b.draft_config.pop("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids", [1, 3, 6])
    b.draft_config["eagle_aux_hidden_state_layer_ids"] = list(b.aux_ids if b.aux_ids is not None else ids)


def _aux_ids_out_of_range(b: _Build) -> None:
    """Ids [1, 3, 7] on the 8-layer target: an id naming the output of the LAST layer
    (sgl-project/sglang issue #32226: gpt-oss-120b's Eagle3-v3 head asks for [24, 30, 36] of 36
    blocks). SGLang 0.5.23 adds 1 (``srt/models/llama.py:941``) → [2, 4, 8]; its capture loop runs
    ``for i in range(start_layer, end_layer)`` and tests ``i in self.layers_to_capture``
    (``llama.py:486-493``), so 8 never fires: two aux states (2 × 160) reach an fc built for three
    (480) and the first draft forward fails (``llama_eagle3.py:247``, ``self.fc``; on a GPU box
    possibly earlier, copying 2 × hidden into CUDA-graph buffers sized for three): the scheduler
    dies at start-up ("Scheduler hit an exception: ... RuntimeError: mat1 and mat2 shapes cannot
    be multiplied" at the warm-up here), the server exits."""
    b.set_aux_ids([1, 3, 7])


def _aux_ids_shifted(b: _Build) -> None:
    """Ids [0, 2, 5]: the draft's layers written in the other convention (sgl-project/sglang PR
    #25454: "output of layer X" vs "input to layer X"; here the ids are one lower than the
    trained [1, 3, 6]). SGLang 0.5.23 adds 1 unconditionally (``srt/models/llama.py:941``) and
    captures [1, 3, 6] where the draft was trained on [2, 4, 7]: silent, acceptance degrades."""
    b.set_aux_ids([0, 2, 5])


#: The Granite multipliers that make transformers' ``GraniteForCausalLM`` compute exactly the
#: committed Llama target (attention scale = head_dim ** -0.5 = 32 ** -0.5).
GRANITE_AS_LLAMA = {"embedding_multiplier": 1.0, "residual_multiplier": 1.0,
                    "attention_multiplier": 32 ** -0.5, "logits_scaling": 1.0}


def _target_no_capture(b: _Build) -> None:
    """The target's architecture is a class without ``set_eagle3_layers_to_capture``: the same
    Llama-format weights declared ``GraniteForCausalLM`` (SGLang 0.5.23 ``srt/models/granite.py``
    has no capture method, nor do its bases; targets gained it one family at a time: PR #9216
    for Qwen2, PR #23569 for Qwen3.5). Under EAGLE3 SGLang raises at start-up
    (``model_runner_components/attention_backend_setup.py:55-60``: "Model GraniteForCausalLM
    does not implement set_eagle3_layers_to_capture, which EAGLE3 aux hidden-state capture
    requires."); under EAGLE it serves (no capture asked). The multipliers of
    :data:`GRANITE_AS_LLAMA` keep the target's outputs those of the committed Llama."""
    b.target_config.update({"architectures": ["GraniteForCausalLM"], "model_type": "granite", **GRANITE_AS_LLAMA})


def _renamed_tensor(b: _Build) -> None:
    """``midlayer.self_attn.q_proj.weight`` renamed ``midlayer.self_attn.qproj.weight`` (a lost
    remap: vllm-project/speculators PR #1131 and its issues #358/#360; sgl-project/sglang PR
    #27908: a draft head left at its random init, "accept len: 1.00"). SGLang 0.5.23's
    ``load_weights`` tries the name as is and with ``model.`` (``llama_eagle3.py:358-378``); a name
    matching no parameter falls through ``if param_name in params_dict:`` with no else: dropped, no
    warning. The q rows of ``qkv_proj`` keep whatever the parameter was initialised with."""
    t = b.tensors
    t["midlayer.self_attn.qproj.weight"] = t.pop("midlayer.self_attn.q_proj.weight")


def _d2t_minus_arange(b: _Build) -> None:
    """``d2t`` "fixed" by subtracting ``arange``: ``d2t' = d2t - arange(len)`` (the offset vs
    absolute-id confusion of verl-project/verl-SpeCo PR #67 and SafeAILab/EAGLE issue #222, applied
    the wrong way round). SGLang 0.5.23 adds ``arange`` back (``llama_eagle3.py:350-353``:
    ``hot_token_id = d2t + arange``), so the draft maps its ids to the OFFSETS (10..86 here), valid
    target ids but the wrong ones: silent, acceptance collapses to ~1."""
    d2t = b.tensors["d2t"]
    b.tensors["d2t"] = (d2t - np.arange(d2t.shape[0], dtype=d2t.dtype)).astype(d2t.dtype)


def _d2t_shuffled(b: _Build) -> None:
    """``d2t`` with the same target ids in another order (a fixed permutation): the map no longer
    the one the lm_head was trained with, its slots pointing at other tokens (sgl-project/SpecForge
    PR #534: a regenerated mapping silently misaligns every lm_head slot, a "catastrophic drop in
    draft acceptance"). Every id is valid and t2d still marks the same set, so SGLang 0.5.23 loads
    it without a word (``llama_eagle3.py:350-353``: ``hot_token_id = d2t + arange``) and the
    drafts are other tokens: acceptance collapses to ~1."""
    d2t = b.tensors["d2t"]
    ids = d2t.astype(np.int64) + np.arange(d2t.shape[0], dtype=np.int64)
    shuffled = np.random.default_rng(12).permutation(ids)
    b.tensors["d2t"] = (shuffled - np.arange(d2t.shape[0], dtype=np.int64)).astype(d2t.dtype)


def _d2t_missing(b: _Build) -> None:
    """No ``d2t``/``t2d`` in the checkpoint although ``draft_vocab_size`` < ``vocab_size``
    (NVIDIA-NeMo/Automodel PR #2447; vllm-project/vllm PR #18909: acceptance 1.12 instead of
    2.99). SGLang 0.5.23 leaves ``hot_token_id`` None (``llama_eagle3.py:323``) and the worker maps
    nothing (``eagle_worker_v2.py:757-758``): draft id i is used as target id i, silently."""
    b.tensors.pop("d2t")
    b.tensors.pop("t2d", None)


def _d2t_short(b: _Build) -> None:
    """A ``d2t`` with fewer entries (32) than the draft vocabulary (128), e.g. exported for another
    draft vocab size (sgl-project/SpecForge PR #76: a mapping built from fewer tokens than
    ``draft_vocab_size``). SGLang 0.5.23 takes any length (``llama_eagle3.py:352``) and indexes
    ``self.hot_token_id[topk_index]`` (``eagle_worker_v2.py:758``): the first draft id >= 32 is
    out of bounds (IndexError on CPU, a device-side assert on CUDA), the scheduler dies."""
    b.tensors["d2t"] = b.tensors["d2t"][:32].copy()


def _d2t_float(b: _Build) -> None:
    """``d2t`` stored as float32 (a converter casting every tensor to the weights' dtype: the case
    converters now guard against, mobilint/mblt-model-zoo PR #110 asserting "d2t expected int64",
    ggml-org/llama.cpp PR #18039 keeping it int64 on purpose). SGLang
    0.5.23 keeps the dtype (``d2t + arange`` is float, ``llama_eagle3.py:352``); the mapped draft
    ids are floats, and the next draft step's embedding lookup refuses them ("Expected tensor for
    argument #1 'indices' to have one of the following scalar types: Long, Int"): the scheduler
    dies at the start-up warm-up (8 tokens, ``entrypoints/http_server.py:2407``)."""
    b.tensors["d2t"] = b.tensors["d2t"].astype(np.float32)


def _vocab_mismatch(b: _Build) -> None:
    """The draft config's ``vocab_size`` (512) disagrees with the target's (256) while the
    tensors are right (SafeAILab/EAGLE issue #258: a draft paired with another tokenizer's
    target). In SGLang 0.5.23 ``vocab_size`` shapes only the draft's own ``embed_tokens``
    (``llama_eagle3.py:145-149``), which has no tensor in this checkpoint and is replaced by the
    target's (``set_embed``, ``srt/models/llama.py:910-918``); ``lm_head`` uses
    ``draft_vocab_size`` (``llama_eagle3.py:306-314``). So nothing asserts and nothing changes:
    the server starts and accepts as the healthy draft (a config fault the doctor flags, with no
    runtime effect on this draft)."""
    b.draft_config["vocab_size"] = 2 * int(b.target_config["vocab_size"])


def _target_hidden_mismatch(b: _Build) -> None:
    """The draft config's ``target_hidden_size`` (192) disagrees with the target's hidden size
    (160) and with its own ``fc.weight`` [160, 480] (sgl-project/sglang issue #7011 is the same
    key read by the draft-extend CUDA graph). SGLang 0.5.23 builds ``fc`` as Linear(192 × 3, 160)
    (``llama_eagle3.py:151-167``) and ``default_weight_loader`` asserts
    (``model_loader/weight_utils.py:1582-1585``: "Attempted to load weight (torch.Size([160, 480]))
    into parameter (torch.Size([160, 576]))"): the scheduler dies while loading."""
    b.draft_config["target_hidden_size"] = 192


def _draft_hidden_size(b: _Build) -> None:
    """The draft config's ``hidden_size`` (128) disagrees with its own tensors (160: ``fc.weight``
    [160, 480], the layer's projections) — a config exported for another size
    (deepseek-ai/DeepSpec issue #44: eagle3_qwen3_4b_ttt7, config 2560 against weights 5120).
    SGLang 0.5.23 builds the draft's config through transformers (``srt/configs/model_config.py``,
    ``get_config``), whose ``LlamaConfig`` refuses it (``ValueError: The hidden size (128) is not a
    multiple of the number of attention heads (5)``): the scheduler dies while loading. With a
    size that divides, the weight loader asserts on the first shape instead."""
    b.draft_config["hidden_size"] = 128


def _draft_unknown_architecture(b: _Build) -> None:
    """The draft declares vLLM's class name ``Eagle3LlamaForCausalLM`` (vllm-project/vllm PR
    #25961; cf. sgl-project/sglang issue #9135, a draft declaring its target's class). SGLang
    0.5.23 finds no such EntryClass and no such transformers class
    (``model_loader/utils.py:154-161``): "Cannot find model module. 'Eagle3LlamaForCausalLM' is
    not a registered model in the Transformers library ..." (ValueError), the scheduler dies."""
    b.draft_config["architectures"] = ["Eagle3LlamaForCausalLM"]


def _fc_transposed(b: _Build) -> None:
    """The draft's ``fc.weight`` stored transposed, ``[in, out]`` = [480, 160] instead of torch's
    ``nn.Linear`` layout ``[out, in]`` = [160, 480] (a converter from a framework that keeps
    kernels as ``x @ W``, e.g. Flax/JAX ``Dense`` kernels, written without the transpose; the
    kind of open-mmlab/mmdetection3d issue #2584, a checkpoint whose weights were written in
    another library's layout: ``[5, 16, 3, 3, 3]`` against ``[16, 3, 3, 3, 5]``). ONE
    fault with a consequence that shows up as another rule's symptom: the fc's input width read
    from the tensor's columns is 160 = 1 × the target's width, so the aux count (3 × 160 = 480)
    disagrees too (``aux-count-mismatch``) — the count is right, the tensor is not. SGLang 0.5.23
    builds ``fc`` as ``Linear(480, 160)`` (``llama_eagle3.py:151-167``) and
    ``default_weight_loader`` asserts on the [480, 160] tensor
    (``model_loader/weight_utils.py:1582-1585``): the scheduler dies while loading."""
    b.tensors["fc.weight"] = np.ascontiguousarray(b.tensors["fc.weight"].T)


def _aux_ids_fewer_than_num_aux(b: _Build) -> None:
    """The draft config states ``num_aux_hidden_states: 3`` next to an ``eagle_config`` that lists two
    aux layer ids, ``[1, 3]`` (an id dropped by hand, or a config merged from two exports: the count
    kept, the list edited; the two counts disagreeing is the review point of sgl-project/sglang PR
    #24620, and fewer aux states than ``fc`` takes is vllm-project/vllm PR #48259's "mat1 and mat2
    shapes cannot be multiplied (16384x4096 and 12288x4096)"). SGLang 0.5.23 sizes the draft's ``fc`` from ``num_aux_hidden_states``
    first (``srt/models/llama_eagle3.py:157-167``: Linear(160 × 3, 160), which the checkpoint's
    ``fc.weight`` [160, 480] fills: the load passes), while the target captures the layers the list
    names (``spec_aux_hidden_state.py``: [1, 3] + 1 = [2, 4], two 160-wide states): the draft's first
    forward gets a 320-wide input, the width check (``llama_eagle3.py:238``) sends it to ``fc``, and
    torch refuses the product (``RuntimeError: mat1 and mat2 shapes cannot be multiplied (Nx320 and
    480x160)``) in the draft's first forward — CUDA graph capture on a GPU, the warm-up request here
    (the sandbox's ``srt/models/llama_eagle3.py`` is the same code). The doctor's ``aux-count-mismatch``
    counts ``num_aux_hidden_states`` first (3 × 160 = 480, the fc's width: no finding), so no rule
    predicts it: a start-up death the rules do not explain, named by its engine line and step. vLLM
    0.32.0 starts with it (measured: its draft takes the ids it captures)."""
    b.draft_config["num_aux_hidden_states"] = 3
    b.set_aux_ids([1, 3])


def _truncated_checkpoint(b: _Build) -> None:
    """The draft's ``model.safetensors`` cut to half its size (an interrupted download or copy;
    the "MetadataIncompleteBuffer" reports, e.g. Comfy-Org/ComfyUI issue #6744). SGLang 0.5.23
    opens it with ``safetensors.safe_open`` (``model_loader/weight_utils.py``,
    ``safetensors_weights_iterator``), which refuses a file its header does not cover
    (``SafetensorError: Error while deserializing header: ...``): the scheduler dies at load."""
    b.truncate_draft = True


#: What the engines do with the naming faults (the kinds of naming a repair must learn, not one
#: fixture): SGLang 0.5.23 ``LlamaForCausalLMEagle3.load_weights`` (``llama_eagle3.py:358-378``) tries a
#: name as is and with ``model.``; one that matches no parameter is skipped without a word, so the
#: parameters keep their initial values and acceptance collapses, silently. vLLM 0.32.0
#: (``llama_eagle3.py`` ``Eagle3LlamaForCausalLM.load_weights`` → ``AutoWeightsLoader``,
#: ``model_executor/models/utils.py``) raises ``ValueError: There is no module or parameter named
#: '<first unknown part>' in LlamaModel`` on the first such name: the engine does not start (measured,
#: tests/integration/test_vllm_weights_truth.py).


def _rename_all(b: _Build, rename: Callable[[str], str]) -> None:
    b._tensors = {rename(k): v for k, v in b.tensors.items()}


def _wrapper_prefix(b: _Build) -> None:
    """Every tensor name under ``module.`` (the state dict of a ``DistributedDataParallel`` / FSDP
    wrapper saved as is: pytorch/pytorch issue #3805, "unexpected key module.features..."; issue #41048
    asked for a helper to strip it). SGLang 0.5.23: ``module.fc.weight`` and ``model.module.fc.weight`` match no
    parameter: every tensor is dropped silently (``module.d2t`` still contains ``d2t`` and is read,
    ``module.t2d`` skipped): the draft runs on its initial weights, accept length ~1.00. vLLM 0.32.0:
    ``ValueError: There is no module or parameter named 'module' in Eagle3LlamaForCausalLM`` at start-up
    (``module.d2t`` is renamed but not prefixed, so it reaches the top module first)."""
    _rename_all(b, lambda k: "module." + k)


def _stripped_prefix(b: _Build) -> None:
    """Layer 0's names without their ``midlayer.`` (an exporter that saved the decoder layer's own
    state dict beside ``fc``/``norm``: ``self_attn.q_proj.weight``, ``mlp.down_proj.weight``,
    ``hidden_norm.weight``; keys relative to a submodule, as sgl-project/sglang PR #33966 describes for
    community EAGLE drafts whose loader has to prepend the missing part). SGLang 0.5.23: ``model.self_attn.qkv_proj.weight`` is no parameter: the
    nine layer tensors are dropped silently, the layer keeps its initial weights (accept length
    collapses). vLLM 0.32.0: ``ValueError: There is no module or parameter named 'hidden_norm' in
    LlamaModel`` at start-up."""
    _rename_all(b, lambda k: k[len("midlayer."):] if k.startswith("midlayer.") else k)


#: Meta's Llama checkpoint naming (``llama/model.py``), as Hugging Face's converter reads it.
_META = (("self_attn.q_proj", "attention.wq"), ("self_attn.k_proj", "attention.wk"), ("self_attn.v_proj", "attention.wv"),
         ("self_attn.o_proj", "attention.wo"), ("mlp.gate_proj", "feed_forward.w1"), ("mlp.down_proj", "feed_forward.w2"),
         ("mlp.up_proj", "feed_forward.w3"), ("post_attention_layernorm", "ffn_norm"),
         ("input_layernorm", "attention_norm"), ("midlayer.", "layers.0."), ("lm_head.", "output."))


def _framework_naming(b: _Build) -> None:
    """Every name in Meta's Llama naming (a draft trained in a Meta-style codebase and exported without
    transformers' ``convert_llama_weights_to_hf.py``; meta-pytorch/gpt-fast issue #211 lists both
    namings side by side: ``layers.0.attention.wq.weight``,
    ``layers.0.feed_forward.w1.weight``, ``layers.0.attention_norm.weight``, ``output.weight``; ``fc``,
    ``norm``, ``hidden_norm``, ``d2t``/``t2d`` keep their names). SGLang 0.5.23: the attention, MLP,
    both layer norms and ``lm_head`` are dropped silently (``layers.0.hidden_norm`` loads): accept
    length ~1.00. vLLM 0.32.0: ``ValueError: There is no module or parameter named
    'layers.0.attention' in LlamaModel`` at start-up."""
    def meta(k: str) -> str:
        for hf, fb in _META:
            k = k.replace(hf, fb)
        return k
    _rename_all(b, meta)


def _attn_renamed(b: _Build) -> None:
    """``self_attn`` written ``attn`` in every name (GPT-style module naming, as litgpt's
    ``transformer.h.N.attn``: Lightning-AI/litgpt PR #88; here ``midlayer.attn.q_proj.weight``):
    ``q_proj``, ``k_proj`` and ``v_proj`` all have shape [160, 320], so pairing dropped tensors with
    missing parameters by shape is ambiguous; only the naming pattern maps them. SGLang 0.5.23: the four
    attention tensors are dropped silently, the attention keeps its initial weights. vLLM 0.32.0:
    ``ValueError: There is no module or parameter named 'layers.0.attn' in LlamaModel`` at start-up."""
    _rename_all(b, lambda k: k.replace(".self_attn.", ".attn."))


def _aux_ids_top_level_stale(b: _Build) -> None:
    """Two spellings that disagree: the nested ``eagle_config.eagle_aux_hidden_state_layer_ids`` as
    trained ([1, 3, 6]) and a stale top-level ``eagle_aux_hidden_state_layer_ids`` ([0, 2, 5]) left by
    an earlier export (the speculators format writes the top-level key, SpecForge the nested one:
    vllm-project/speculators PR #183). SGLang 0.5.23 reads only the nested key
    (``spec_aux_hidden_state.py:187-196``): as healthy. vLLM 0.32.0 reads the top-level key first
    (``v1/worker/gpu_model_runner.py`` ``_get_eagle3_aux_layers_from_config``: ``getattr(hf_config,
    "eagle_aux_hidden_state_layer_ids")``, the nested one only when that is empty): it captures the
    states after [0, 2, 5] layers, silently."""
    b.set_aux_ids([1, 3, 6])
    b.draft_config["eagle_aux_hidden_state_layer_ids"] = [0, 2, 5]


def _aux_ids_unsorted(b: _Build) -> None:
    """The trained ids written in another order ([6, 3, 1]; a hand-edited config). vLLM 0.32.0
    stores ``tuple(sorted(set(layers)))`` (``model_executor/models/interfaces.py``
    ``_set_aux_hidden_state_layers``) and concatenates the states in layer order: as healthy. SGLang
    0.5.23 keeps the order it is given for ``layers_to_capture`` but its capture loop appends in
    layer order too (``srt/models/llama.py:486-493``): as healthy. (A layout both engines normalise.)"""
    b.set_aux_ids([6, 3, 1])


def _aux_ids_duplicate(b: _Build) -> None:
    """An id written twice ([1, 3, 3]: a copy-paste slip). vLLM 0.32.0 de-duplicates
    (``interfaces.py`` ``tuple(sorted(set(layers)))``) and captures two states (2 × 160) for an fc
    built for ``len(ids)`` = 3 (``llama_eagle3.py``: ``num_aux_hidden_states = len(layer_ids)``);
    SGLang 0.5.23 captures ``layer_id in layers_to_capture`` once per layer: two states as well."""
    b.set_aux_ids([1, 3, 3])


def _aux_capture_off(b: _Build) -> None:
    """``eagle_config.use_aux_hidden_state: false`` on an EAGLE-3 draft that needs its aux states (a
    flag meant for heads that read only the last layer, nvidia/gpt-oss-120b-Eagle3-v2, copied onto
    one that does not). vLLM 0.32.0 reads it in the proposer (``v1/spec_decode/llm_base_proposer.py``
    ``_get_eagle3_use_aux_hidden_state_from_config``) and in the draft (``llama_eagle3.py``: no fc is
    built, ``combine_hidden_states`` returns the target's last hidden state, the checkpoint's
    ``fc.*`` is dropped); SGLang 0.5.23 skips the capture (``attention_backend_setup.py:54``) and its
    width check skips fc. Silent on both: the draft reads the wrong features."""
    b.draft_config.setdefault("eagle_config", {})["use_aux_hidden_state"] = False


def _norm_flag_unread(b: _Build) -> None:
    """``use_aux_norm: true`` in the draft config (an export that records a norm switch the serving
    engine may not implement). vLLM 0.32.0 never reads ``use_aux_norm`` (``llama_eagle3.py`` reads
    ``norm_before_fc``, ``fc_norm``, ``norm_before_residual``, ``norm_output``): ignored, silently;
    the sandbox draft was trained without aux norms, so acceptance stays as healthy. (SGLang's
    reading of the key is the box's: rule ``norm-flags-unsupported``.)"""
    b.draft_config["use_aux_norm"] = True


def _draft_arch_qwen2(b: _Build) -> None:
    """The draft declares ``Qwen2ForCausalLM`` (its target's class copied into the draft's config,
    cf. sgl-project/sglang issue #9135). vLLM 0.32.0 rewrites it under ``eagle3`` to
    ``Eagle3Qwen2ForCausalLM`` (``transformers_utils/configs/eagle.py``), which
    ``_SPECULATIVE_DECODING_MODELS`` does not register: vLLM refuses the config at start-up
    (measured: "Model architectures ['Eagle3Qwen2ForCausalLM'] are not supported for now"). SGLang
    0.5.23 would build its target class ``Qwen2ForCausalLM`` as the draft, whose weights do not fit
    (the ``unknown-draft-architecture`` kind of ``draft-unknown-architecture``)."""
    b.draft_config["architectures"] = ["Qwen2ForCausalLM"]


def _d2t_out_of_range(b: _Build) -> None:
    """The last ``d2t`` offset pushed past the target vocab (target id ``vocab + …``: a map exported
    against a larger tokenizer, cf. SafeAILab/EAGLE issue #222). vLLM 0.32.0 loads it
    (``llama_eagle3.py``), and ``compute_logits`` writes ``logits_new[:, targets] = logits``: an index
    outside the vocab raises in the first draft step of the first request; SGLang 0.5.23 indexes the
    target vocab with it (``eagle_worker_v2.py:758``) at its warm-up."""
    d2t = b.tensors["d2t"].copy()
    d2t[-1] += int(b.target_config["vocab_size"])
    b.tensors["d2t"] = d2t


def _aux_ids_strings(b: _Build) -> None:
    """The ids written as strings (``["1", "3", "6"]``: a config generated by a template). SGLang
    0.5.23 computes ``val + 1`` on them (``srt/models/llama.py:941``): ``TypeError`` at start-up.
    vLLM 0.32.0 stores ``tuple(sorted(set(layers)))`` and tests ``layer_idx in ...`` with int layer
    indices (``interfaces.py``): no string ever matches, no aux state is captured, and the first
    request fails on the fc's width."""
    b.set_aux_ids([1, 3, 6])
    ids = b.draft_config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    b.draft_config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [str(i) for i in ids]


def _d2t_full_vocab(b: _Build) -> None:
    """A full-vocabulary draft that still ships a ``d2t`` (a converter that always writes the map):
    ``lm_head`` widened to the target's 256 rows (row ``d2t[i] + i`` = the trained row ``i``, the others
    zero) and ``draft_vocab_size`` 256, ``d2t``/``t2d`` kept. vLLM 0.32.0 builds no
    ``draft_id_to_target_id`` when the draft vocab equals the target's (``llama_eagle3.py:339-345``) but
    renames the checkpoint's ``d2t`` to it (``:429``): its weight loader finds no such parameter and
    refuses to start. SGLang 0.5.23 loads the map and uses it (``hot_token_id = d2t + arange``)."""
    t = b.tensors
    d2t, head = t["d2t"].astype(np.int64), t["lm_head.weight"]
    vocab = int(b.target_config["vocab_size"])
    full = np.zeros((vocab, head.shape[1]), dtype=head.dtype)
    full[d2t + np.arange(len(d2t))] = head
    t["lm_head.weight"] = full
    b.draft_config["draft_vocab_size"] = vocab


#: The Solar switches that make vLLM 0.32.0's ``SolarForCausalLM`` compute exactly the committed Llama
#: target: no skip connection fires (``model_executor/models/solar.py`` ``SolarModel.forward`` tests
#: ``i in self.config.bskcn_1`` … ``bskcn_4``).
SOLAR_AS_LLAMA = {"bskcn_1": [], "bskcn_2": [], "bskcn_3": [], "bskcn_4": [], "bskcn_tv": [0.9, 0.8]}


def _target_no_capture_vllm(b: _Build) -> None:
    """The target declared ``SolarForCausalLM`` (Llama-format weights; the switches of
    :data:`SOLAR_AS_LLAMA` keep its outputs the committed Llama's): vLLM 0.32.0's class implements
    ``SupportsLoRA`` and ``SupportsPP`` but not ``SupportsEagle3`` (``model_executor/models/solar.py``),
    and under ``eagle3`` the V1 runner raises at start-up (``v1/worker/gpu_model_runner.py``
    ``_setup_eagle3_aux_hidden_state_outputs``: "Model does not support EAGLE3 interface but
    aux_hidden_state_outputs was requested"). vLLM's ``GraniteForCausalLM`` does implement it (so
    ``target-no-capture`` serves on vLLM): the vLLM spelling of the fault needs another class."""
    b.target_config.update({"architectures": ["SolarForCausalLM"], **SOLAR_AS_LLAMA})


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("healthy", "files", "The committed deployment, copied: nothing injected.", lambda b: None),
    Fault("no-eagle-config", "files", _no_eagle_config.__doc__, _no_eagle_config, group="aux"),
    Fault("aux-ids-top-level", "files", _aux_ids_top_level.__doc__, _aux_ids_top_level, group="aux"),
    Fault("aux-ids-out-of-range", "files", _aux_ids_out_of_range.__doc__, _aux_ids_out_of_range, group="aux"),
    Fault("aux-ids-shifted", "files", _aux_ids_shifted.__doc__, _aux_ids_shifted, group="aux"),
    Fault("target-no-capture", "files", _target_no_capture.__doc__, _target_no_capture),
    Fault("renamed-tensor", "files", _renamed_tensor.__doc__, _renamed_tensor),
    Fault("d2t-minus-arange", "files", _d2t_minus_arange.__doc__, _d2t_minus_arange, group="d2t"),
    Fault("d2t-shuffled", "files", _d2t_shuffled.__doc__, _d2t_shuffled, group="d2t"),
    Fault("d2t-missing", "files", _d2t_missing.__doc__, _d2t_missing, group="d2t"),
    Fault("d2t-short", "files", _d2t_short.__doc__, _d2t_short, group="d2t"),
    Fault("d2t-float", "files", _d2t_float.__doc__, _d2t_float, group="d2t"),
    Fault("vocab-mismatch", "files", _vocab_mismatch.__doc__, _vocab_mismatch),
    Fault("target-hidden-mismatch", "files", _target_hidden_mismatch.__doc__, _target_hidden_mismatch),
    Fault("draft-hidden-size", "files", _draft_hidden_size.__doc__, _draft_hidden_size),
    Fault("draft-unknown-architecture", "files", _draft_unknown_architecture.__doc__, _draft_unknown_architecture),
    Fault("fc-transposed", "files", _fc_transposed.__doc__, _fc_transposed, group="fc"),
    Fault("aux-ids-fewer-than-num-aux", "files", _aux_ids_fewer_than_num_aux.__doc__, _aux_ids_fewer_than_num_aux,
          group="aux"),
    Fault("truncated-checkpoint", "files", _truncated_checkpoint.__doc__, _truncated_checkpoint, group="weights"),
    Fault("wrapper-prefix", "files", _wrapper_prefix.__doc__, _wrapper_prefix, group="naming"),
    Fault("stripped-prefix", "files", _stripped_prefix.__doc__, _stripped_prefix, group="naming"),
    Fault("framework-naming", "files", _framework_naming.__doc__, _framework_naming, group="naming"),
    Fault("attn-renamed", "files", _attn_renamed.__doc__, _attn_renamed, group="naming"),
    Fault("eagle-flag", "launch",
          "``--speculative-algorithm EAGLE`` with the EAGLE-3 draft (sgl-project/sglang PR #21272: Kimi-K2.5 "
          "with lightseekorg/kimi-k2.5-eagle3, accept_len 1.00, no error). SGLang 0.5.23 gates aux capture on "
          "``is_eagle3()`` (strictly EAGLE3, ``srt/speculative/spec_info.py``; the gate in "
          "``spec_aux_hidden_state.py:185``): the target captures nothing, the draft receives one 160-wide state, "
          "``if hidden_states.shape[-1] != embeds.shape[-1]`` (``llama_eagle3.py:238``) skips fc, and the target's "
          "lm_head replaces the draft's (``eagle_worker_v2.py:371-378``). Silent; accept length ~1.",
          launch={"speculative_algorithm": "EAGLE"}, group="algorithm"),
    Fault("spec-params-without-steps", "launch",
          "``--speculative-eagle-topk 1 --speculative-num-draft-tokens 4`` without ``--speculative-num-steps`` "
          "(sgl-project/sglang issue #5673; gpustack/gpustack issue #3392). SGLang 0.5.23 "
          "(``arg_groups/speculative_hook.py:1159-1163``) has a bare ``assert`` that topk and draft tokens are "
          "unset when steps is: the launcher raises AssertionError before loading anything.",
          launch={"speculative_num_steps": None, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4},
          group="steps"),
    Fault("spec-steps-zero", "launch",
          "``--speculative-num-steps 0`` (a sweep's lower bound; the \"draft-0\" band that sgl-project/sglang PR "
          "#24055 and NVIDIA/TensorRT-LLM PR #18837 use on purpose for large batches). SGLang 0.5.23 accepts it (an ``Optional[int]``, "
          "``arg_groups/fields/spec.py:58-61``, no positivity check for EAGLE), forces draft tokens to steps + 1 = 1 "
          "(``speculative_hook.py:1255-1266``, a warning) and runs with drafting disabled "
          "(``eagle_worker_v2.py:1469-1472``, ``_build_trivial_verify_input``): every verify step emits the "
          "target's one token, accept length exactly 1.00, silently.",
          launch={"speculative_num_steps": 0}, group="steps"),
)}

#: Variants of the fault kinds above in the spellings vLLM reads differently (or where vLLM's own
#: normalisation decides the outcome): built by :func:`build_deployment` like :data:`FAULTS`, run on
#: real vLLM by ``tests/integration/test_vllm_fault_truth.py``. Kept out of :data:`FAULTS`, whose
#: every entry the SGLang sandbox matrix (``tests/sandbox/test_sandbox_faults.py``) and the launch
#: guard's table (``tests/workbench/test_launch_guard.py``) cover one by one.
VLLM_FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("aux-ids-top-level-stale", "files", _aux_ids_top_level_stale.__doc__, _aux_ids_top_level_stale, group="aux"),
    Fault("aux-ids-unsorted", "files", _aux_ids_unsorted.__doc__, _aux_ids_unsorted, group="aux"),
    Fault("aux-ids-duplicate", "files", _aux_ids_duplicate.__doc__, _aux_ids_duplicate, group="aux"),
    Fault("aux-capture-off", "files", _aux_capture_off.__doc__, _aux_capture_off),
    Fault("norm-flag-unread", "files", _norm_flag_unread.__doc__, _norm_flag_unread),
    Fault("draft-arch-qwen2", "files", _draft_arch_qwen2.__doc__, _draft_arch_qwen2),
    Fault("target-no-capture-vllm", "files", _target_no_capture_vllm.__doc__, _target_no_capture_vllm),
    Fault("d2t-out-of-range", "files", _d2t_out_of_range.__doc__, _d2t_out_of_range, group="d2t"),
    Fault("aux-ids-strings", "files", _aux_ids_strings.__doc__, _aux_ids_strings, group="aux"),
    Fault("d2t-full-vocab", "files", _d2t_full_vocab.__doc__, _d2t_full_vocab, group="d2t"),
)}

def _lm_head_missing(b: _Build) -> None:
    """The draft's ``lm_head.weight`` left out of the checkpoint (under whatever name an earlier fault
    gave it: combined with a naming fault, e.g. ``wrapper-prefix``, it is a second fault no rename can
    fill — an export that kept the head in another file, trial 29's ``prefix_nolmhead``). SGLang
    0.5.23 ``LlamaForCausalLMEagle3`` keeps its own head for a reduced draft vocab: it stays at its
    initial values (accept length ~1.00); vLLM 0.32.0 shares the target's head
    (``llm_base_proposer.py`` ``_maybe_share_lm_head``), whose first rows score the draft's ids."""
    for k in [k for k in b.tensors if k.endswith("lm_head.weight")]:
        del b.tensors[k]


def _no_tensors(b: _Build) -> None:
    """A valid safetensors file that holds no tensor at all (an export that wrote the header before
    the state dict was filled; trial 29's ``empty_tensors``): every parameter gets no tensor and no
    rename can supply one."""
    b._tensors = {}


#: Faults used in combinations by the unit tests only (no real-engine truth case of their own).
COMBO_FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("lm-head-missing", "files", _lm_head_missing.__doc__, _lm_head_missing, group="head"),
    Fault("no-tensors", "files", _no_tensors.__doc__, _no_tensors, group="weights"),
)}

ALL_FAULTS: dict[str, Fault] = {**FAULTS, **VLLM_FAULTS, **COMBO_FAULTS}

FILE_FAULTS = tuple(n for n, f in FAULTS.items() if f.kind == "files" and n != "healthy")
LAUNCH_FAULTS = tuple(n for n, f in FAULTS.items() if f.kind == "launch")


def build_deployment(dest: Path, *faults: str, aux_ids: Optional[Sequence[int]] = None) -> Deployment:
    """Copy the committed sandbox target and draft into ``dest`` (``dest/target``,
    ``dest/draft``; ``dest`` may exist but must not hold them yet) and inject ``faults`` (names of
    :data:`FAULTS`; none, or ``"healthy"`` alone, for the healthy deployment). ``aux_ids``: the
    draft's ``eagle_config.eagle_aux_hidden_state_layer_ids`` to write instead of the committed
    [1, 3, 6] (or instead of the ids an aux fault writes).

    Unchanged files are symbolic links to the committed ones; changed ones are written fresh.
    Returns the :class:`Deployment`. Raises ``ValueError`` for an unknown fault name, ``"healthy"``
    with other faults, two faults of the same group (two aux-id edits, two d2t edits, two
    algorithm or steps changes), ``aux_ids`` with ``no-eagle-config``, and ``FileExistsError``
    when ``dest`` already holds a deployment."""
    dest = Path(dest)
    unknown = [f for f in faults if f not in ALL_FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}; known: {sorted(ALL_FAULTS)}")
    if "healthy" in faults and len(faults) > 1:
        raise ValueError(f"'healthy' means no fault; it cannot be combined with {[f for f in faults if f != 'healthy']}")
    if len(set(faults)) != len(faults):
        raise ValueError(f"a fault is named twice: {list(faults)}")
    groups: dict[str, str] = {}
    for name in faults:
        g = ALL_FAULTS[name].group
        if g and g in groups:
            raise ValueError(f"faults {groups[g]!r} and {name!r} both change the same thing ({g}); pick one")
        groups.setdefault(g, name)
    if aux_ids is not None and "no-eagle-config" in faults:
        raise ValueError("aux_ids cannot be written into a draft without eagle_config ('no-eagle-config')")
    if (dest / "target").exists() or (dest / "draft").exists():
        raise FileExistsError(f"{dest} already holds a deployment")
    dest.mkdir(parents=True, exist_ok=True)
    b = _Build(dest, aux_ids)
    if aux_ids is not None and not groups.get("aux"):
        b.set_aux_ids(list(aux_ids))
    launch = dict(HEALTHY_LAUNCH)
    for name in faults:
        fault = ALL_FAULTS[name]
        if fault.kind == "files":
            fault.apply(b)
        else:
            launch.update(fault.launch)
    b.write()
    return Deployment(dest, b.target_dir, b.draft_dir, launch, tuple(f for f in faults if f != "healthy"))


def committed_digests() -> dict[str, str]:
    """sha256 of every committed file under ``workbench/sandbox/models`` (relative path → hex),
    to check before and after that building deployments never changed them."""
    return {str(p.relative_to(MODELS)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(MODELS.rglob("*")) if p.is_file()}
