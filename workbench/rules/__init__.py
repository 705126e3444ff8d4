"""The preflight rules, one module per fault family.

- :mod:`.launch_flags` — the launch command: algorithm, spec parameters, draft path, unknown flags;
- :mod:`.configs` — the draft's config against the target's;
- :mod:`.aux_layers` — aux hidden-state capture: which target layers feed the draft;
- :mod:`.weights` — the draft's tensors against what ``load_weights`` keeps, and the token map;
- :mod:`.engine_source` — what the engine source on the box does with the draft;
- :mod:`.runtime` — what the running server measures.

Each rule returns :class:`~workbench.rules.finding.Finding` objects (empty when it has nothing to
say) and never loads a model. Layering: imports :mod:`workbench.engine`, :mod:`workbench.checkpoint`
and :mod:`workbench.errors`.
"""

from workbench.errors import RuleInputError
from workbench.rules.aux_layers import aux_rules
from workbench.rules.configs import config_rules
from workbench.rules.engine_source import scan_swallowed
from workbench.rules.finding import SEVERITIES, Finding, ev
from workbench.rules.launch_flags import (
    algorithm_mismatch,
    check_algorithm_mismatch,
    draft_path_missing,
    launch_flags_unknown,
    spec_params_invalid,
)
from workbench.rules.runtime import acceptance_collapsed
from workbench.rules.weights import check_draft_weights, check_token_map, expected_parameters, map_checkpoint_name

__all__ = [
    "Finding", "SEVERITIES", "ev", "RuleInputError", "algorithm_mismatch", "check_algorithm_mismatch",
    "draft_path_missing", "launch_flags_unknown", "spec_params_invalid", "config_rules", "aux_rules",
    "check_draft_weights", "check_token_map", "expected_parameters", "map_checkpoint_name", "scan_swallowed",
    "acceptance_collapsed",
]
