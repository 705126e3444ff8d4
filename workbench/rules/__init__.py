"""The preflight rules, as data: one :class:`~workbench.rules.registry.Rule` per id, one module
per fault family, all in :data:`REGISTRY` (the catalogue users read, ``docs/rules.md``, is
generated from it: ``python -m workbench.rules.catalogue --write``).

Families, in the order the doctor runs and the catalogue lists them:

- :mod:`.launch_flags` — the launch command: algorithm, spec parameters, draft path, unknown flags;
- :mod:`.readability` — can the models the command names be read at all;
- :mod:`.configs` — the draft's config against the target's and the engine's draft classes;
- :mod:`.aux_layers` — aux hidden-state capture: which target layers feed the draft;
- :mod:`.cross_engine` — a draft made for one engine served on the other (aux-id convention, draft
  layout, vLLM's method), and vLLM's own start-up faults;
- :mod:`.weights` — the draft's tensors against what ``load_weights`` keeps, and the token map;
- :mod:`.engine_source` — what the engine source on the box does with the draft;
- :mod:`.runtime` — what the running server measures (runtime rules, run on a measurement).
- :mod:`.gpus` — what the box's GPUs leave a launch (runtime rules, run before every launch).

:mod:`.consequences` declares which rule's finding makes which other rule fire (one fault, its
consequences: :meth:`~workbench.rules.registry.Registry.implies`), each with its mechanism and the
evidence condition under which it applies.

A static rule's check takes the :class:`~workbench.rules.facts.Facts` the doctor gathered once and
returns :class:`~workbench.rules.finding.Finding` objects of its own id (empty when it has nothing
to say); no rule loads a model. Adding a rule: one decorated function in its family's module, one
test beside its family's tests, and ``docs/rules.md`` regenerated (a test says when it is stale).

Layering: imports :mod:`workbench.engine`, :mod:`workbench.checkpoint`, :mod:`workbench.errors`
and :mod:`remote.errors`.
"""

from workbench.errors import RuleInputError
from workbench.rules import aux_layers, configs, cross_engine, engine_source, gpus, launch_flags, readability, runtime, weights
from workbench.rules.aux_layers import (
    aux_config_unread,
    aux_count_mismatch,
    aux_layer_ids_invalid,
    aux_layer_ids_out_of_range,
    aux_layer_offset_convention,
    target_no_aux_capture,
)
from workbench.rules.configs import (
    context_length_mismatch,
    draft_config_vs_tensors,
    hidden_size_mismatch,
    rope_mismatch,
    unknown_draft_architecture,
    vocab_size_mismatch,
)
from workbench.rules.cross_engine import (
    aux_id_convention,
    draft_format_unread,
    method_draft_mismatch,
    vllm_console_script_broken,
)
from workbench.rules.engine_source import norm_flags_unsupported, scan_swallowed, swallowed_config_error
from workbench.rules.facts import Facts
from workbench.rules.finding import SEVERITIES, Finding, ev
from workbench.rules.launch_flags import (
    algorithm_mismatch,
    check_algorithm_mismatch,
    draft_path_missing,
    launch_flag_unknown,
    spec_params_invalid,
)
from workbench.rules.readability import checkpoint_unreadable, model_not_on_box
from workbench.rules.registry import REGISTRY, Family, Rule, RuleFailure
from workbench.rules.runtime import acceptance_collapsed
from workbench.rules.weights import check_draft_weights, check_token_map, weight_shape_mismatch

#: The family modules, in the order the doctor runs them and the catalogue lists them.
FAMILY_MODULES = (launch_flags, readability, configs, aux_layers, cross_engine, weights, engine_source, runtime, gpus)
REGISTRY.arrange([m.FAMILY.name for m in FAMILY_MODULES])
from workbench.rules import consequences  # noqa: E402 - the links between the families' rules, once all are registered
#: Every rule id, in catalogue order.
RULE_IDS = REGISTRY.ids

__all__ = [
    "REGISTRY", "RULE_IDS", "FAMILY_MODULES", "consequences", "Rule", "Family", "RuleFailure", "Facts", "Finding", "SEVERITIES", "ev",
    "RuleInputError", "algorithm_mismatch", "check_algorithm_mismatch", "draft_path_missing", "launch_flag_unknown",
    "spec_params_invalid", "checkpoint_unreadable", "model_not_on_box", "unknown_draft_architecture",
    "draft_config_vs_tensors", "aux_layer_ids_invalid", "weight_shape_mismatch", "hidden_size_mismatch", "vocab_size_mismatch", "context_length_mismatch", "rope_mismatch", "target_no_aux_capture",
    "aux_config_unread", "aux_layer_ids_out_of_range", "aux_layer_offset_convention", "aux_count_mismatch",
    "check_draft_weights", "check_token_map", "norm_flags_unsupported", "swallowed_config_error", "scan_swallowed",
    "acceptance_collapsed", "aux_id_convention", "draft_format_unread", "method_draft_mismatch",
    "vllm_console_script_broken",
]
