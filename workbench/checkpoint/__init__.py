"""Model directories on the box, read without loading a model: ``config.json``, safetensors
headers and single tensors by byte range (:mod:`.readers`), the facts the rules need about a
draft and a target (:mod:`.facts`), and where a ``--model-path`` value lives on the box
(:mod:`.paths`: a directory, or a Hugging Face repo id in the box's cache).

Layering: imports only :mod:`workbench.errors` and :mod:`remote.errors`.
"""

from workbench.checkpoint.facts import (
    DraftFacts,
    TargetFacts,
    draft_facts_from,
    read_draft_facts,
    read_target_facts,
    target_facts_from,
)
from workbench.checkpoint.paths import box_env, resolve_model_path
from workbench.checkpoint.readers import (
    DTYPE_BITS,
    MAX_HEADER_SIZE,
    SafetensorsHeader,
    TensorInfo,
    find_checkpoint_files,
    read_checkpoint_index,
    read_checkpoint_tensors,
    read_json_config,
    read_safetensors_header,
    read_tensor,
    read_tensor_data,
)
from workbench.errors import CheckpointError, CheckpointUnreadable, ConfigUnreadable, TensorNotFound

__all__ = [
    "CheckpointError", "ConfigUnreadable", "CheckpointUnreadable", "TensorNotFound", "TensorInfo",
    "SafetensorsHeader", "DTYPE_BITS", "MAX_HEADER_SIZE", "read_json_config", "read_safetensors_header",
    "read_checkpoint_index", "read_checkpoint_tensors", "read_tensor", "read_tensor_data", "find_checkpoint_files",
    "DraftFacts", "TargetFacts", "draft_facts_from", "read_draft_facts", "target_facts_from", "read_target_facts",
    "resolve_model_path", "box_env",
]
