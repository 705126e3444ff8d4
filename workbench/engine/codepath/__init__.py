"""The EAGLE-3 code path in the box's engine source: a map of (file, line, what happens there),
a scan of that path for swallowed errors and silent fallbacks, and named probe recipes.

Every entry is *found* in the box's own source with :mod:`ast` (a statement of a given shape, in
the files where SGLang 0.5.23 keeps it, else in the files a ``grep -F`` for a token names); its
line is the line it names in that version (the statement's first line, or the line of the test
inside it: :attr:`PathEntry.probe_line` is where a probe goes). An entry that is not found says
where it was looked for and is never given a line. Tested on the published wheels of 0.4.6,
0.4.8, 0.4.10, 0.5.2, 0.5.4, 0.5.9, 0.5.12, 0.5.18 and 0.5.23 (``tests/workbench/test_codepath_releases.py``).

The landmarks follow the kinds of change those releases made: code moved to another file (the aux
capture from ``model_runner.py`` to ``model_runner_components/``), a function inlined (the token
map and lm_head tests in ``EAGLEWorker.__init__`` before ``init_token_map`` / ``init_lm_head``
existed), a wrapper model (the capture test followed through the target's forward into the
classes it delegates to), a base class doing the work (the draft's ``super().load_weights``), and
two workers (the entries of the draft worker are read in the one the server runs:
:func:`eagle_worker`).

The path, in the order a request meets it (SGLang 0.5.23 file in brackets):

1. ``spec-algorithm-is-eagle3``: ``SpeculativeAlgorithm.is_eagle3`` is ``== EAGLE3`` only
   (``srt/speculative/spec_info.py``).
2. ``aux-capture-gate``: ``if spec_algorithm.is_eagle3():`` around the aux capture set-up
   (``model_runner_components/spec_aux_hidden_state.py``, ``_resolve_eagle_aux_hidden_state``).
3. ``eagle-config-read``: the draft's ``eagle_config`` read inside ``try: ... except
   Exception:`` that falls back to default layers (same function).
4. ``capture-configured``: ``model.set_eagle3_layers_to_capture(ids)`` outside the model files
   (``model_runner_components/attention_backend_setup.py``).
5. ``target-offset-rule``: the target class's ``set_eagle3_layers_to_capture`` (``srt/models/llama.py``:
   ``[val + 1 for val in layer_ids]``).
6. ``target-capture-point``: the target forward's ``i in self.layers_to_capture`` test.
7. ``draft-fc-defined`` / 8. ``draft-fc-width-check``: the draft's ``self.fc = Linear(...)`` and
   ``if hidden_states.shape[-1] != embeds.shape[-1]:`` (``srt/models/llama_eagle3.py``).
9. ``draft-params-dict`` / 10. ``draft-weight-renames`` / 11. ``draft-weight-drop`` /
   12. ``draft-d2t-read``: the draft's ``load_weights``: ``params_dict =
   dict(self.named_parameters())`` (its first statement: nothing is loaded yet), the legacy-name
   map, the ``if param_name in params_dict:`` without ``else`` (silent drop), ``hot_token_id = d2t
   + arange``.
13. ``token-map-init`` / 14. ``lm-head-shared`` / 15. ``d2t-use``: the draft worker's
    ``if ...is_eagle3():`` on ``--speculative-token-map`` (in ``init_token_map``), the
    ``is_eagle3()`` test in ``init_lm_head`` and ``self.hot_token_id[...]``
    (``srt/speculative/eagle_worker_v2.py``; ``eagle_worker.py`` where the server runs ``EAGLEWorker``).

The sandbox box's engine (``workbench/sandbox/srt``) mirrors those names, so the same map and
recipes work on it.

The package's modules, lowest first; each imports only modules before it, never one after:
:mod:`.ast_tools` (AST and source-text helpers, vLLM's map's too) ← :mod:`.worker` (which EAGLE
worker the server runs: :func:`eagle_worker`, :class:`WorkerChoice`, :func:`server_worker_inputs`)
← :mod:`.model` (:class:`PathEntry`, :class:`CodePathMap`) and :mod:`.landmarks` (:class:`Landmark`,
the matchers and describers, :data:`LANDMARKS`) ← :mod:`.aux_switch` (:func:`aux_capture_switch`),
:mod:`.build` (:func:`code_path_map`, :func:`map_for_launch`) and :mod:`.swallowed`
(:func:`swallowed_on_path`). This ``__init__`` imports them and :mod:`workbench.engine.modelled`
only, and re-exports the old single module's names (also the private helpers
:mod:`workbench.engine.codepath_vllm` once imported from here).
"""

from workbench.engine.codepath.ast_tools import _first_line, _function_of, _in_order, _probe_note, _seg
from workbench.engine.codepath.aux_switch import AuxSwitch, aux_capture_switch
from workbench.engine.codepath.build import code_path_map, map_for_launch
from workbench.engine.codepath.landmarks import LANDMARKS, MODEL_RUNNER_FILE, SPEC_AUX_FILE, WORKER_FILES, Landmark
from workbench.engine.codepath.model import CodePathMap, PathEntry
from workbench.engine.codepath.swallowed import Swallowed, swallowed_on_path
from workbench.engine.codepath.worker import (
    SPEC_V2_ENV,
    WORKER_V1,
    WORKER_V2,
    WorkerChoice,
    eagle_worker,
    server_worker_inputs,
)
from workbench.engine.modelled import DRAFT_CLASS_FILES

__all__ = ["PathEntry", "CodePathMap", "LANDMARKS", "code_path_map", "DRAFT_CLASS_FILES", "map_for_launch",
           "AuxSwitch", "aux_capture_switch", "WorkerChoice", "eagle_worker", "server_worker_inputs",
           "Swallowed", "swallowed_on_path"]
