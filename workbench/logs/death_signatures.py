"""Known start-up death signatures of SGLang and vLLM servers: the final exception line a server
logs when it dies, mapped to the kind of fault that causes it and the doctor's rules that model
that fault (rule ids of :data:`workbench.rules.REGISTRY`).

Each :class:`Signature` was read from the engines' own sources — the text they raise, with the
file and line of every release it was read in (SGLang wheels 0.4.6, 0.5.1, 0.5.23; vLLM 0.32.0,
the CPU build's ``vllm`` package) — or, for the tensor errors every engine lets through, torch's
own message (ATen C++, the text ``torch==2.13`` raises: the tests produce it by running torch).
A signature maps to the rules whose fault raises it (several faults raise one text: a weight of
another shape is the draft's config, the target's width or a head size); which of them explains a
given death is what the doctor found on that launch (:func:`workbench.logs.deaths.attribute`).
An empty ``rules`` says the doctor models no such fault (a GPU the driver refuses, a port). Pure
data and one matcher: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["Signature", "SIGNATURES", "match_signature"]

_BOTH = ("sglang", "vllm")


@dataclass(frozen=True)
class Signature:
    """One known death: ``id`` (a slug), ``engines`` it is read for (``"sglang"``, ``"vllm"``; the
    sandbox box speaks SGLang's), ``pattern`` (a regex searched in the final exception text:
    ``Type: message`` and its continuation lines), ``frames`` (a regex one traceback frame's
    function or file must match too, or None: a bare ``AssertionError`` is a weight loader's only
    when a loader frame raised it), ``fault`` (the kind of fault, one sentence), ``rules`` (the
    doctor's rule ids that model that fault, most specific first; empty when none does) and
    ``sources`` (where the text was read: ``"sglang 0.5.23 srt/model_loader/weight_utils.py:1582"``)."""

    id: str
    engines: tuple
    pattern: str
    fault: str
    rules: tuple = ()
    sources: tuple = ()
    frames: Optional[str] = None

    def matches(self, text: str, frames: list, engine: Optional[str]) -> bool:
        """Whether the final exception ``text`` (and, with :attr:`frames`, one of ``frames``:
        ``"function file"`` strings) is this death on ``engine`` (None: any engine)."""
        if engine is not None and engine not in self.engines and not (engine == "sandbox" and "sglang" in self.engines):
            return False
        if not re.search(self.pattern, text):
            return False
        return self.frames is None or any(re.search(self.frames, f) for f in frames)


_SHAPE_RULES = ("draft-config-vs-tensors", "hidden-size-mismatch", "head-dim-mismatch", "aux-count-mismatch",
                "lm-head-shape-mismatch", "weight-shape-mismatch", "token-map-invalid")

#: The table, most specific first (the first that matches names the death).
SIGNATURES: tuple[Signature, ...] = (
    # --- the weight loaders -------------------------------------------------------------------
    Signature("weight-loader-shape-assert", _BOTH,
              r"AssertionError: Attempted to load weight \(.*\) into parameter \(.*\)",
              "a checkpoint tensor of another shape than the parameter the engine built from the config "
              "(default_weight_loader's assert)", _SHAPE_RULES,
              ("sglang 0.4.6 srt/model_loader/weight_utils.py:535-538",
               "sglang 0.5.1 srt/model_loader/weight_utils.py:649-652",
               "sglang 0.5.23 srt/model_loader/weight_utils.py:1582-1585",
               "vllm 0.32.0 model_executor/model_loader/weight_utils.py:1485-1488")),
    Signature("vllm-linear-shape-assert", ("vllm",),
              r"AssertionError: Tried to load weights of size .* ?to a parameter of size",
              "a checkpoint tensor of another shape than the linear layer the engine built from the config "
              "(a replicated linear layer's weight_loader asserts: the draft's fc, its lm_head)", _SHAPE_RULES,
              ("vllm 0.32.0 model_executor/layers/linear.py:405-408 (ReplicatedLinear.weight_loader)",)),
    Signature("linear-shard-shape-assert", _BOTH,
              r"^AssertionError(?::\s*(?:param_data\.shape=|param\.shape=|\(?torch\.Size).*)?\s*$",
              "a q/k/v or gate/up checkpoint tensor of another shape than its shard of the stacked parameter "
              "(the linear layers' weight_loader asserts)", _SHAPE_RULES,
              ("sglang 0.4.6 srt/layers/linear.py:419,568,657 (bare assert)",
               "sglang 0.5.23 srt/layers/linear.py:376-378,579-581,894,1547-1549",
               "vllm 0.32.0 model_executor/layers/linear.py:592,781,866 (bare assert)"),
              frames=r"weight_loader|load_weights|linear\.py"),
    Signature("load-weights-unknown-name", ("sglang",), r"^KeyError: '[^']+'",
              "a checkpoint tensor name that matches no parameter, looked up unguarded (params_dict[name])",
              ("weights-dropped",),
              ("sglang 0.4.6 srt/models/llama.py:517,529 (params_dict[name])",),
              frames=r"load_weights"),
    Signature("vllm-no-module-or-parameter", ("vllm",), r"There is no module or parameter named '[^']*' in \w+",
              "a checkpoint tensor name the model's loader maps to no module or parameter",
              ("weights-dropped",),
              ("vllm 0.32.0 model_executor/models/utils.py:443-448 (AutoWeightsLoader)",)),
    Signature("vllm-weights-not-initialized", ("vllm",), r"Following weights were not initialized from checkpoint",
              "parameters of the model that no checkpoint tensor filled", ("weights-missing",),
              ("vllm 0.32.0 model_executor/model_loader/default_loader.py:563-567",)),
    Signature("safetensors-unreadable", _BOTH,
              r"SafetensorError: Error while deserializing header|HeaderTooLarge|MetadataIncompleteBuffer"
              r"|InvalidHeaderDeserialization",
              "a safetensors file whose header is truncated or not JSON", ("checkpoint-unreadable",),
              ("safetensors (Rust) SafetensorError, raised by safe_open in sglang 0.5.23 "
               "srt/model_loader/weight_utils.py safetensors_weights_iterator",)),
    # --- the model class ----------------------------------------------------------------------
    Signature("architecture-not-supported", _BOTH, r"Model architectures \[.*\] are not supported for now",
              "an architecture name the engine's model registry does not hold", ("unknown-draft-architecture",),
              ("sglang 0.4.6 srt/models/registry.py:32-35", "sglang 0.5.1 srt/models/registry.py:32-35",
               "sglang 0.5.23 srt/models/registry.py:63-66",
               "vllm 0.32.0 model_executor/models/registry.py:1205-1208")),
    Signature("model-module-not-found", _BOTH, r"Cannot find model module\. .* is not a registered model",
              "an architecture name neither the engine nor transformers registers", ("unknown-draft-architecture",),
              ("sglang 0.5.1 srt/model_loader/utils.py:52", "sglang 0.5.23 srt/model_loader/utils.py:156,164",
               "vllm 0.32.0 model_executor/models/registry.py:1274")),
    Signature("target-no-aux-capture", ("sglang",),
              r"does not implement set_eagle3_layers_to_capture|has no attribute 'set_eagle3_layers_to_capture'",
              "a target model class without EAGLE-3 aux hidden-state capture", ("target-no-aux-capture",),
              ("sglang 0.5.23 srt/model_executor/model_runner_components/attention_backend_setup.py:55-60",
               "sglang 0.4.6 srt/model_executor/model_runner.py:229 (the call: AttributeError)")),
    # --- the configs --------------------------------------------------------------------------
    Signature("hidden-not-multiple-of-heads", _BOTH,
              r"The hidden size \(\d+\) is not a multiple of the number of attention heads \(\d+\)",
              "a draft hidden_size its head count does not divide (transformers refuses the config)",
              ("draft-config-vs-tensors", "head-dim-mismatch"),
              ("transformers 5.x models/llama/configuration_llama.py LlamaConfig.validate_architecture",)),
    Signature("heads-not-divisible-by-kv-heads", ("vllm",),
              r"num_heads \(\d+\) is not divisible by num_kv_heads \(\d+\)",
              "a draft num_attention_heads its num_key_value_heads does not divide (the config's head counts "
              "disagree with its tensors): vLLM asserts while building the draft's attention, before any weight "
              "is loaded", ("draft-config-vs-tensors", "head-dim-mismatch"),
              ("vllm 0.32.0 model_executor/layers/attention/attention.py:329-331 (Attention.__init__)",
               "vllm 0.32.0 model_executor/layers/attention/mm_encoder_attention.py:341-343")),
    Signature("rope-odd-head-dim", _BOTH, r"RoPE requires an even rotary dimension",
              "an odd rotary dimension (head_dim × partial_rotary_factor): transformers refuses the config", (),
              ("transformers 5.x modeling_rope_utils.py validate_rope (huggingface_hub "
               "StrictDataclassClassValidationError)",)),
    Signature("speculative-config-invalid", ("vllm",),
              r"ValidationError: \d+ validation errors? for (?:SpeculativeConfig|VllmConfig)",
              "a --speculative-config vLLM's pydantic config refuses", ("speculative-config-invalid",
                                                                        "method-draft-mismatch"),
              ("vllm 0.32.0 config/speculative.py:387 (SpeculativeConfig, a pydantic dataclass)",)),
    # --- the first forward: tensor shapes torch refuses --------------------------------------
    Signature("matmul-shape", _BOTH, r"mat1 and mat2 shapes cannot be multiplied \(\d+x\d+ and \d+x\d+\)",
              "an activation of another width than the layer that takes it (the draft's fc fed another number "
              "of aux hidden states, or states of another width, than it was built for)",
              ("aux-layer-ids-out-of-range", "aux-count-mismatch", "hidden-size-mismatch", "aux-layer-ids-invalid",
               "algorithm-mismatch"),
              ("torch aten/src/ATen/native/LinearAlgebra.cpp (addmm/mm size check)",)),
    Signature("view-shape-invalid", _BOTH, r"shape '\[[-\d, ]*\]' is invalid for input of size \d+",
              "a reshape to heads × head size (or aux count × width) the activation does not hold",
              ("head-dim-mismatch", "draft-config-vs-tensors", "aux-count-mismatch"),
              ("torch aten/src/ATen/InferSize.h (infer_size_impl)",)),
    Signature("broadcast-size", _BOTH,
              r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\) at non-singleton dimension \d+",
              "two activations of sizes that do not broadcast (a head size or a table built for another size)",
              ("head-dim-mismatch", "draft-config-vs-tensors"),
              ("torch aten/src/ATen/ExpandUtils.cpp (infer_size_impl)",)),
    Signature("index-out-of-range", _BOTH,
              r"index \d+ is out of bounds for dimension \d+ with size \d+|index out of range in self",
              "a token id beyond a table (a token map shorter than the draft vocabulary, a vocab of another size)",
              ("token-map-invalid", "vocab-size-mismatch", "lm-head-shape-mismatch"),
              ("torch aten/src/ATen/native/TensorAdvancedIndexing.cpp / Indexing (IndexError)",)),
    Signature("indices-dtype", _BOTH, r"Expected tensor for argument #1 'indices' to have one of the following scalar types",
              "token ids of a float dtype (a token map stored as floats)", ("token-map-invalid",),
              ("torch aten/src/ATen/native/Embedding.cpp (checkScalarTypes)",)),
    # --- memory, devices, ports ---------------------------------------------------------------
    Signature("not-enough-memory", ("sglang",), r"Not enough memory\. Please try to increase --mem-fraction-static",
              "no room left for the KV cache pool (GPU memory held elsewhere or too low a --mem-fraction-static)",
              ("gpus-held",),
              ("sglang 0.4.6 srt/model_executor/model_runner.py:788-791",
               "sglang 0.5.1 srt/model_executor/model_runner.py:1241-1244",
               "sglang 0.5.23 srt/model_executor/pool_configurator.py:95-99")),
    Signature("vllm-no-kv-memory", ("vllm",),
              r"No available memory for the cache blocks|cache is needed, which is larger than the available KV cache"
              r"|Free memory on device .* is less than",
              "no room left for the KV cache (GPU memory held elsewhere or too low a --gpu-memory-utilization)",
              ("gpus-held",),
              ("vllm 0.32.0 v1/core/kv_cache_utils.py:1010-1016,1031-1034", "vllm 0.32.0 v1/worker/utils.py:742,763")),
    Signature("cuda-out-of-memory", _BOTH, r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError",
              "the GPU ran out of memory (held by another process, or too large a share asked for)", ("gpus-held",),
              ("torch c10/cuda/CUDACachingAllocator.cpp (OutOfMemoryError: CUDA out of memory. Tried to allocate)",)),
    Signature("nccl-error", _BOTH, r"NCCL error|DistBackendError|nccl(?:Unhandled|System|Internal|Invalid)\w*Error",
              "NCCL / torch.distributed could not set the ranks up (a GPU or network fault, too few GPUs)",
              ("gpus-too-few",),
              ("torch torch/csrc/distributed/c10d/NCCLUtils.hpp (C10D_NCCL_CHECK: NCCL error in: ...)",)),
    Signature("address-in-use", _BOTH,
              r"Address already in use|\[Errno 98\]|Port is already in use|port \d+ is in use|is already in use",
              "a port the server binds (HTTP, NCCL, ZMQ) is held by another process", (),
              ("sglang 0.5.23 srt/server_args.py:886", "sglang 0.5.1 srt/utils.py:522-528",
               "OSError [Errno 98] from the socket bind (uvicorn, zmq.error.ZMQError)")),
)


def match_signature(text: str, frames: Optional[list] = None, engine: Optional[str] = None) -> Optional[Signature]:
    """The first :data:`SIGNATURES` entry that ``text`` (a final exception: ``Type: message`` and its
    continuation lines) matches, given the traceback's ``frames`` (``"function file"`` strings, may
    be empty) and the ``engine`` (``"sglang"``, ``"vllm"``, ``"sandbox"`` or None: any); None when
    no known death has that text."""
    for sig in SIGNATURES:
        if sig.matches(text, frames or [], engine):
            return sig
    return None
