"""The engine side: everything the workbench knows about SGLang and reads from it on the box.

- :mod:`.launch` — launch-command parsing (``python -m sglang.launch_server …``, ``sglang serve``,
  the sandbox's launcher; ``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``): flags,
  aliases, prefixes, env prefixes, round-trip rewriting, the engine-neutral accessors;
- :mod:`.flags` — SGLang's flag table, as data (``data/sglang-<version>-flags.json``);
- :mod:`.vllm_flags` — vLLM's flag table, dumped by the box's vLLM interpreter (its own parser),
  and the shipped one (``data/vllm-0.32.0-flags.json``);
- :mod:`.vllm_spec` — vLLM's speculative method names read from the box's ``config/speculative.py``
  (``ast``), the shipped list, the method check and what vLLM does when no method is written;
- :mod:`.flag_table` — the flags of any release 0.4.6 … 0.5.23 read from the box's own source
  (``ast``), argparse's prefix rules, and the shipped flag history of 20 releases
  (``data/sglang-flag-history.json``): what a flag means in which release, what it was renamed to;
- :mod:`.modelled` — SGLang 0.5.23's facts as shipped tables, the fallback when the box's source
  cannot be read;
- :mod:`.locate` — where the engine package is on the box and which processes are its servers;
- :mod:`.source` — the engine's source read exactly (numbered lines, definitions by ``ast``, the
  target's aux-layer offset rule evaluated from the box's own code);
- :mod:`.codepath` — the EAGLE-3 code-path map (file, line, what happens there) and the swallowed
  errors on it; a package: ``ast_tools`` ← ``worker`` ← (``model``, ``landmarks``) ← (``aux_switch``,
  ``build``, ``swallowed``), its ``__init__`` re-exporting their names;
- :mod:`.codepath_vllm` — vLLM's EAGLE-3 code-path map, read from the installed ``vllm`` package
  (same :class:`CodePathMap` form, ``engine="vllm"``);
- :mod:`.recipes` — named probe recipes anchored on the map (SGLang's and vLLM's).

Layering: imports :mod:`remote`, :mod:`workbench.checkpoint`, :mod:`workbench.report` (its HTML tables),
:mod:`workbench.redact` and :mod:`workbench.errors` only (`tests/test_layering.py`).
Order inside: flags, flag_table ← launch ← source ← (modelled, locate) ← codepath ← recipes.
"""

from workbench.engine.codepath import CodePathMap, PathEntry, code_path_map, map_for_launch
from workbench.engine.codepath_vllm import map_for_engine, vllm_code_path_map, vllm_map_for_launch
from workbench.engine.flags import FLAGS, SGLANG_VERSION
from workbench.engine.launch import LaunchCommand, SpeculativeConfig, canonical_flag, normalise_method, parse_launch_command
from workbench.engine.locate import (
    LOCATE_ENGINE_SCRIPT,
    EngineInfo,
    engine_package,
    find_engine,
    is_launch_argv,
    read_environ,
    running_servers,
    choose_server,
    ServerChoiceError,
    server_python,
)
from workbench.engine.recipes import (
    RECIPES,
    VLLM_RECIPES,
    recipes_for,
    ParamsAtInit,
    ProbeSpec,
    Recipe,
    add_recipe,
    add_recipes,
    missing_required,
    params_left_at_init,
    read_recipes,
    recipe_probe,
    weights_unmatched,
)
from workbench.engine.source import CaptureRule, Definition, EngineSource, SourceExcerpt
from workbench.errors import EngineNotFound, LaunchCommandError, SourceLookupError, SpeculativeConfigError

__all__ = [
    "LaunchCommand", "LaunchCommandError", "SpeculativeConfig", "SpeculativeConfigError", "normalise_method", "canonical_flag", "parse_launch_command", "FLAGS", "SGLANG_VERSION",
    "EngineInfo", "EngineNotFound", "find_engine", "engine_package", "is_launch_argv", "read_environ",
    "running_servers", "choose_server", "ServerChoiceError", "server_python", "LOCATE_ENGINE_SCRIPT", "EngineSource", "SourceLookupError", "CaptureRule", "Definition",
    "SourceExcerpt", "CodePathMap", "PathEntry", "code_path_map", "map_for_launch", "map_for_engine",
    "vllm_code_path_map", "vllm_map_for_launch", "RECIPES", "VLLM_RECIPES", "recipes_for", "Recipe",
    "ProbeSpec", "recipe_probe", "add_recipe", "add_recipes", "read_recipes", "missing_required",
    "weights_unmatched", "ParamsAtInit", "params_left_at_init",
]
