"""Regenerate the SGLang flag table (``workbench/engine/data/sglang-<version>-flags.json``) from an
unpacked SGLang source tree.

Usage: ``python scripts/gen_sglang_flags.py /path/to/sglang > workbench/engine/data/sglang-0.5.23-flags.json``
where ``/path/to/sglang`` is the ``sglang/`` package directory of the published wheel
(``pip download --no-deps sglang==0.5.23``, then unzip). :mod:`workbench.engine.flags` loads it.

Reads (with ``ast``, never importing SGLang) the ``A[T, Arg(...)]`` fields declared in
``srt/arg_groups/fields/*.py`` and the manual ``parser.add_argument`` calls in
``srt/server_args.py``, and applies the rules of ``srt/arg_groups/arg_utils.py``
(``add_cli_args_from_dataclass``): ``bool`` / ``Optional[bool]`` → ``store_true``; list types →
``nargs="+"`` unless ``Arg(nargs=...)``; ``argparse.BooleanOptionalAction`` → ``--x`` / ``--no-x``;
``no_cli=True`` → no flag.
"""

from __future__ import annotations

import ast
import json
import pathlib
import sys


def _name(node: ast.AST) -> str:
    return ast.unparse(node)


def _unwrap(tp: ast.AST) -> tuple[ast.AST, bool]:
    s = _name(tp)
    if isinstance(tp, ast.Subscript) and _name(tp.value) in ("Optional", "typing.Optional"):
        return tp.slice, True
    if isinstance(tp, ast.BinOp) and isinstance(tp.op, ast.BitOr) and _name(tp.right) == "None":
        return tp.left, True
    del s
    return tp, False


def _field_flags(path: pathlib.Path) -> list[dict]:
    tree = ast.parse(path.read_text())
    out = []
    for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
        for st in cls.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            ann = st.annotation
            if not (isinstance(ann, ast.Subscript) and _name(ann.value) in ("A", "Annotated")):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            raw, meta = elts[0], elts[1:]
            arg: dict | None = None
            for m in meta:
                if isinstance(m, ast.Constant) and isinstance(m.value, str):
                    arg = {}
                    break
                if isinstance(m, (ast.JoinedStr, ast.BinOp)) and arg is None:
                    arg = {}
                    break
                if isinstance(m, ast.Call) and _name(m.func) == "Arg":
                    arg = {kw.arg: kw.value for kw in m.keywords}
                    break
            if arg is None:
                continue
            if "no_cli" in arg and _name(arg["no_cli"]) == "True":
                continue
            field = st.target.id
            cli = ast.literal_eval(arg["cli_name"]) if "cli_name" in arg else "--" + field.replace("_", "-")
            aliases = ast.literal_eval(arg["aliases"]) if "aliases" in arg else []
            inner, _ = _unwrap(raw)
            action = _name(arg["action"]) if "action" in arg else None
            nargs = ast.literal_eval(arg["nargs"]) if "nargs" in arg else None
            if "action_kwargs" in arg:
                akw = ast.literal_eval(ast.unparse(arg["action_kwargs"]).replace("str", "'str'"))
                nargs = akw.get("nargs", nargs)
            kind = "value"
            if action is not None:
                if action.endswith("BooleanOptionalAction"):
                    kind = "bool_optional"
                elif action.endswith("StoreTrueAction") or action == "'store_true'":
                    kind = "store_true"
                else:
                    kind = "value"  # custom actions (LoRAPathAction) take nargs from Arg
            elif _name(inner).startswith("Literal"):
                kind = "value"
            elif isinstance(inner, ast.Subscript) and _name(inner.value) in ("List", "list") and "type_parser" not in arg:
                nargs = nargs or "+"
            elif _name(inner) == "bool":
                kind = "store_true"
            out.append({"field": field, "flag": cli, "aliases": aliases, "kind": kind, "nargs": nargs,
                        "source": f"srt/arg_groups/fields/{path.name}"})
    return out


def _manual_flags(path: pathlib.Path) -> list[dict]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _name(node.func) == "parser.add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)]
        kw = {k.arg: k.value for k in node.keywords}
        action = _name(kw["action"]) if "action" in kw else None
        nargs = ast.literal_eval(kw["nargs"]) if "nargs" in kw and _name(kw["nargs"]) != "None" else None
        kind = "value"
        if action in ("'store_true'", "DeprecatedStoreTrueAction"):
            kind = "store_true"
        dest = _name(kw["dest"]).strip("'") if "dest" in kw else names[0].lstrip("-").replace("-", "_")
        out.append({"field": dest, "flag": names[0], "aliases": names[1:], "kind": kind, "nargs": nargs,
                    "source": "srt/server_args.py"})
    return out


def main(root: str) -> None:
    pkg = pathlib.Path(root)
    flags = []
    for p in sorted((pkg / "srt/arg_groups/fields").glob("*.py")):
        flags += _field_flags(p)
    flags += _manual_flags(pkg / "srt/server_args.py")
    version = "unknown"
    vfile = pkg / "_version.py"
    if vfile.exists():
        for line in vfile.read_text().splitlines():
            if line.startswith("__version__ = version = "):
                version = ast.literal_eval(line.rsplit("=", 1)[1].strip())
    table = {f["flag"]: {k: v for k, v in sorted(f.items()) if k != "flag"} for f in flags}
    doc = {"engine": "sglang", "version": version,
           "generated_by": f"scripts/gen_sglang_flags.py from the published sglang=={version} wheel",
           "read_from": ["srt/arg_groups/fields/*.py", "srt/server_args.py"],
           "flags": dict(sorted(table.items()))}
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
