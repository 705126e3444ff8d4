"""What a probe expression may do, checked when the probe is added: a whitelist over its syntax
tree (:func:`parse_expression`, :func:`check_expression`), the tables it reads
(:data:`PURE_FUNCTIONS`, :data:`TORCH_FUNCTIONS`, :data:`PURE_METHODS`, :data:`MODULE_METHODS`,
:data:`SAFE_DUNDERS`, the refused names) and the size bounds (:data:`MAX_POW_EXPONENT` ...
:data:`MAX_LOOP_STEPS`) with their add-time check on constant operands.

The lowest module of ``remote.probes``: imports only the standard library and ``remote.errors``.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Optional

from ..errors import ProbeError, ProbeExpressionRefused

#: Names of in-place methods are those ending in one ``_`` (PyTorch's convention); dunders are not.
_INPLACE_RE = re.compile(r"^(?!__.*__$).*[^_]_$|^_$")


# -- what a probe expression may do (a whitelist over its syntax tree) --------------------------

#: Functions a probe expression may call, by name; at run time the callee must still be that
#: builtin (``len is builtins.len``), so a frame variable called ``len`` is not called. Each is
#: pure (no I/O, changes nothing it is given): ``len``, ``repr``, ``str``, ``int``, ``float``,
#: ``bool``, ``abs``, ``round``, ``min``, ``max``, ``sum``, ``any``, ``all``, ``sorted`` (a new
#: list), ``tuple``, ``list``, ``dict``, ``set``, ``frozenset``, ``range``, ``enumerate``, ``zip``,
#: ``isinstance``, ``type`` (one argument: the class; three would create one), ``hasattr`` (a
#: constant attribute name, checked like ``x.name``). Left out: ``getattr`` / ``vars`` /
#: ``globals`` / ``locals`` (attributes by computed name), ``map`` / ``filter`` (they call what
#: they are given), ``open``, ``eval``, ``exec``, ``compile``, ``__import__``, ``print``, ``input``.
PURE_FUNCTIONS = frozenset({
    "len", "repr", "str", "int", "float", "bool", "abs", "round", "min", "max", "sum", "any", "all", "sorted",
    "tuple", "list", "dict", "set", "frozenset", "range", "enumerate", "zip", "isinstance", "type", "hasattr",
})
#: Keyword arguments those functions may be given (``key=`` is left out: it would be called).
_FUNCTION_KEYWORDS = {"sorted": {"reverse"}, "min": {"default"}, "max": {"default"}, "sum": {"start"},
                      "round": {"ndigits"}, "enumerate": {"start"}}
#: The builtins that iterate their positional arguments (an iterator read from the frame is refused
#: at run time: iterating it would consume it).
_ITERATING = frozenset({"tuple", "list", "dict", "set", "frozenset", "sorted", "sum", "min", "max", "any", "all",
                        "enumerate", "zip"})
#: Torch functions a probe may call, by dotted name from the module ``torch`` (at run time the callee
#: must be that function of the loaded torch): each returns a new tensor or a bool and writes nothing.
TORCH_FUNCTIONS = frozenset({
    "torch.linalg.vector_norm", "torch.linalg.norm", "torch.isfinite", "torch.isnan", "torch.isinf",
    "torch.equal", "torch.allclose", "torch.count_nonzero", "torch.is_tensor",
})
#: Methods a probe may call. On a tensor (``torch.Tensor``) each returns a new value, a view that
#: the probe cannot write through (in-place methods are refused), or a number: sizes (``size``,
#: ``dim``, ``numel``, ``nelement``, ``stride``, ``element_size``), reductions (``sum``, ``mean``,
#: ``std``, ``var``, ``norm``, ``abs``, ``max``, ``min``, ``amax``, ``amin``, ``argmax``,
#: ``argmin``, ``all``, ``any``, ``count_nonzero``, ``isfinite``, ``isnan``, ``isinf``,
#: ``unique``), comparisons (``eq``, ``ne``, ``lt``, ``le``, ``gt``, ``ge``, ``equal``,
#: ``allclose``), copies and views (``float``, ``double``, ``half``, ``bfloat16``, ``cpu``,
#: ``to``, ``detach``, ``clone``, ``contiguous``, ``flatten``, ``reshape``, ``view``, ``t``,
#: ``transpose``, ``permute``, ``squeeze``, ``unsqueeze``), values (``item``, ``tolist``); on a
#: module: ``named_parameters``, ``parameters``, ``named_buffers``, ``buffers``,
#: ``named_modules``, ``modules``, ``named_children``, ``children`` (fresh iterators); on dicts
#: ``keys``, ``values``, ``items``, ``get``; on strings ``startswith``, ``endswith``. Also any
#: predicate ``is_NAME()`` without arguments (``is_contiguous``, ``is_floating_point``, SGLang's
#: ``SpeculativeAlgorithm.is_eagle3``): by convention they only answer. ``float``, ``double``,
#: ``half``, ``bfloat16``, ``cpu``, ``to`` change an ``nn.Module`` in place: on a module they are
#: refused when the probe runs (``<error:...>``). Left out: ``cuda`` (allocates on the GPU),
#: ``numpy`` (shares memory), ``format`` (reads attributes by name), every method ending in ``_``.
PURE_METHODS = frozenset({
    "size", "dim", "numel", "nelement", "stride", "element_size",
    "sum", "mean", "std", "var", "norm", "abs", "max", "min", "amax", "amin", "argmax", "argmin", "all", "any",
    "count_nonzero", "isfinite", "isnan", "isinf", "unique",
    "eq", "ne", "lt", "le", "gt", "ge", "equal", "allclose",
    "float", "double", "half", "bfloat16", "cpu", "to", "detach", "clone", "contiguous", "flatten", "reshape", "view",
    "t", "transpose", "permute", "squeeze", "unsqueeze", "item", "tolist",
    "named_parameters", "parameters", "named_buffers", "buffers", "named_modules", "modules", "named_children",
    "children", "keys", "values", "items", "get", "startswith", "endswith",
})
#: Of those, the ones allowed on a ``torch.nn.Module`` when the probe runs (the others change it).
MODULE_METHODS = frozenset({
    "named_parameters", "parameters", "named_buffers", "buffers", "named_modules", "modules", "named_children",
    "children",
})
#: Methods whose result is a fresh iterator: iterating it consumes nothing of the engine's.
_FRESH_ITERATORS = MODULE_METHODS | {"keys", "values", "items"}
_PREDICATE_RE = re.compile(r"^is_[a-z0-9_]*[a-z0-9]$")
#: Dunder attributes a probe may read: plain strings naming a class or function.
SAFE_DUNDERS = frozenset({"__name__", "__qualname__"})
#: Names refused outright, with why (a clearer message than "not a function a probe may call").
_REFUSED_NAMES = {
    "getattr": "getattr (an attribute by computed name; write x.name)", "setattr": "setattr (it writes)",
    "delattr": "delattr (it writes)", "eval": "eval", "exec": "exec", "compile": "compile", "open": "open (I/O)",
    "__import__": "__import__", "globals": "globals()", "locals": "locals()", "vars": "vars()",
    "breakpoint": "breakpoint()", "input": "input()", "print": "print (the probe prints)", "exit": "exit",
    "quit": "quit",
}
#: Prefix of the probe block's own variables; a probe expression may not name them.
_BLOCK_PREFIX = "_ewb"
_EXPR_NODES = (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Set,
               ast.Dict, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.ListComp,
               ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.JoinedStr, ast.FormattedValue)


#: Bounds on what one probe expression may build, enforced when the probe runs (``<error:...>``)
#: and, where the operands are constants, when it is added: an ``int ** int`` only with an
#: exponent of at most ``MAX_POW_EXPONENT`` in absolute value and ``base.bit_length() * exponent``
#: at most ``MAX_INT_BITS``; an ``int << n`` only with ``n`` at most ``MAX_SHIFT``; a str / bytes /
#: bytearray / list / tuple times an int only up to ``MAX_SEQUENCE_LEN`` items; ``range(...)``
#: only up to ``MAX_RANGE_LEN`` items; all comprehensions of one evaluation together at most
#: ``MAX_LOOP_STEPS`` steps. (Without them ``10**10**10`` hangs the engine in one bytecode that no
#: signal interrupts, and ``'a'*10**9`` allocates 1 GB in it.)
MAX_POW_EXPONENT = 256
MAX_INT_BITS = 4096
MAX_SHIFT = 4096
MAX_SEQUENCE_LEN = 10_000
MAX_RANGE_LEN = 10_000
MAX_LOOP_STEPS = 100_000
_SIZED_OPS = {ast.Pow: "pow", ast.LShift: "lshift", ast.Mult: "mul", ast.Mod: "mod"}
#: A width or precision in a ``%`` format or a format spec: more than ``MAX_SEQUENCE_LEN`` is
#: refused (``'%0999999999d' % 1`` builds a 1 GB string), and so is ``*`` (a width from the values).
#: The ``%`` conversions as ``str %`` reads them (Python's printf-style formatting): ``%``, an
#: optional ``(key)``, flags, width, ``.precision``; in a format spec every number is a width or
#: a precision.
_PERCENT_RE = re.compile(r"%%|%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d*))?")
_SPEC_NUMBER_RE = re.compile(r"(\d+)")


def _format_refusal(fmt: Any, percent: bool) -> Optional[str]:
    """Why the format string ``fmt`` (``%``-style when ``percent``, else a format spec) could build
    an unbounded string, else ``None`` (also for what is not a str / bytes)."""
    if isinstance(fmt, bytes):
        fmt = fmt.decode("latin-1")
    if not isinstance(fmt, str):
        return None
    for m in (_PERCENT_RE if percent else _SPEC_NUMBER_RE).finditer(fmt):
        for g in m.groups():
            if g == "*":
                return "a % format with a * width or precision (taken from the values: unbounded)"
            if g and int(g) > MAX_SEQUENCE_LEN:
                return f"a format width or precision of {g} (at most {MAX_SEQUENCE_LEN})"
    return None


class _Seq:
    """A value known at add time only by its length (a constant str / list / tuple)."""

    def __init__(self, n: int) -> None:
        self.n = n


def _size_refusal(tree: ast.Expression) -> Optional[tuple[ast.AST, str]]:
    """``(node, why)`` for the first ``**`` / ``<<`` / ``*`` / ``range()`` whose operands are
    constants (ints, or str / bytes / list / tuple literals by their length) and whose result would
    exceed the bounds above; ``None`` when none does (the rest is checked when the probe runs)."""
    bad: list[tuple[ast.AST, str]] = []

    def value(node: ast.AST) -> Any:  # an int, a _Seq, or None (not known at add time)
        if bad:
            return None
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, (str, bytes)):
                return _Seq(len(v))
            return v if isinstance(v, int) else None
        if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return _Seq(len(node.elts))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            v = value(node.operand)
            if isinstance(v, int):
                return -v if isinstance(node.op, ast.USub) else (~v if isinstance(node.op, ast.Invert) else v)
            return None
        if isinstance(node, ast.BinOp):
            a, b = value(node.left), value(node.right)
            ints = isinstance(a, int) and isinstance(b, int)
            if isinstance(node.op, ast.Pow) and ints:
                if abs(b) > MAX_POW_EXPONENT or a.bit_length() * abs(b) > MAX_INT_BITS:
                    bad.append((node, f"a power too large to compute (a {a.bit_length()}-bit int ** "
                                      f"{b if b.bit_length() <= 64 else 'a ' + str(b.bit_length()) + '-bit int'}; "
                                      f"exponent at most {MAX_POW_EXPONENT}, result at most {MAX_INT_BITS} bits)"))
                    return None
                return a ** b if b >= 0 else None
            if isinstance(node.op, ast.LShift) and ints:
                if b > MAX_SHIFT:
                    bad.append((node, f"a shift too large to compute (<< {b}; at most {MAX_SHIFT})"))
                    return None
                return a << b if b >= 0 else None
            if isinstance(node.op, ast.Mult):
                if ints:
                    return a * b
                for s, n in ((a, b), (b, a)):
                    if isinstance(s, _Seq) and isinstance(n, int):
                        if s.n * n > MAX_SEQUENCE_LEN:
                            bad.append((node, f"a repetition too large to build (length {s.n} * {n}; "
                                              f"at most {MAX_SEQUENCE_LEN})"))
                            return None
                        return _Seq(max(0, s.n * n))
                return None
            if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
                why = _format_refusal(node.left.value, True)
                if why:
                    bad.append((node, why))
                return None
            if isinstance(node.op, (ast.Add, ast.Sub)) and ints:
                return a + b if isinstance(node.op, ast.Add) else a - b
            if isinstance(node.op, ast.Add) and isinstance(a, _Seq) and isinstance(b, _Seq):
                return _Seq(a.n + b.n)
            return None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            value(node)
        elif isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = node.format_spec
            parts = spec.values if isinstance(spec, ast.JoinedStr) else [spec]
            if any(not isinstance(p, ast.Constant) for p in parts):
                bad.append((spec, "a computed format spec (f'{x:{w}}': its width is unbounded; write it as a constant)"))
            else:
                why = _format_refusal("".join(str(p.value) for p in parts), False)
                if why:
                    bad.append((node, why))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" \
                and not node.keywords and 1 <= len(node.args) <= 3:
            args = [value(a) for a in node.args]
            if not bad and all(isinstance(v, int) for v in args):
                try:
                    n = len(range(*args))
                except OverflowError:
                    n = MAX_RANGE_LEN + 1
                except ValueError:  # range() arg 3 must not be zero: fails when it runs
                    n = 0
                if n > MAX_RANGE_LEN:
                    bad.append((node, f"a range of more than {MAX_RANGE_LEN} items (at most {MAX_RANGE_LEN})"))
        if bad:
            return bad[0]
    return None


def _dotted(node: ast.AST) -> Optional[str]:
    """``"torch.linalg.vector_norm"`` for that chain of attribute reads on a name, else ``None``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id] + parts[::-1])


def _refuse_name(name: str) -> Optional[str]:
    if name in _REFUSED_NAMES:
        return _REFUSED_NAMES[name]
    if name.startswith("__") and name.endswith("__"):
        return f"the dunder name {name}"
    if name.startswith(_BLOCK_PREFIX):
        return f"the name {name} (the probe block's own variables start with {_BLOCK_PREFIX})"
    return None


def _refuse_attr(attr: str) -> Optional[str]:
    if attr.startswith("__") and attr not in SAFE_DUNDERS:
        return f"the attribute .{attr} (dunder and name-mangled attributes reach the interpreter's internals)"
    return None


def _whitelist_refusal(tree: ast.Expression) -> Optional[tuple[ast.AST, str]]:
    """``(node, why)`` for the first node of ``tree`` outside the whitelist, ``None`` when it all is."""

    def check(node: ast.AST) -> Optional[tuple[ast.AST, str]]:
        if not isinstance(node, _EXPR_NODES):
            kinds = {ast.Lambda: "a lambda", ast.Starred: "unpacking (*x)", ast.NamedExpr: "an assignment (:=)",
                     ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from"}
            return node, kinds.get(type(node), f"a {type(node).__name__} expression")
        if isinstance(node, ast.Name):
            why = _refuse_name(node.id)
            return (node, why) if why else None
        if isinstance(node, ast.Attribute):
            why = _refuse_attr(node.attr)
            return (node, why) if why else check(node.value)
        if isinstance(node, ast.Call):  # what it is called on and with first: the inner fault is the clearer one
            children: list[ast.AST] = list(node.args) + [k.value for k in node.keywords]
            if isinstance(node.func, ast.Attribute) and _dotted(node.func) not in TORCH_FUNCTIONS:
                children.insert(0, node.func.value)
            elif not isinstance(node.func, (ast.Name, ast.Attribute)):
                children.insert(0, node.func)
            for child in children:
                bad = check(child)
                if bad:
                    return bad
            return call(node)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            children = []
            for gen in node.generators:
                if gen.is_async:
                    return gen, "an async comprehension"
                for target in ast.walk(gen.target):
                    if not isinstance(target, (ast.Name, ast.Tuple, ast.List, ast.Store)):
                        return target, "a comprehension target other than names"
                    if isinstance(target, ast.Name) and _refuse_name(target.id):
                        return target, _refuse_name(target.id)
                children += [gen.iter, *gen.ifs]
            children += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        elif isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                return node, "unpacking (**x)"
            children = [*node.keys, *node.values]
        else:
            children = [c for c in ast.iter_child_nodes(node)
                        if not isinstance(c, (ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop))]
        for child in children:
            bad = check(child)
            if bad:
                return bad
        return None

    def call(node: ast.Call) -> Optional[tuple[ast.AST, str]]:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return node, "a call with *args / **kwargs"
        func = node.func
        if isinstance(func, ast.Name):
            name = func.id
            if name in _REFUSED_NAMES:
                return func, _REFUSED_NAMES[name]
            if name not in PURE_FUNCTIONS:
                return func, (f"a call of {name}(): only these functions may be called: "
                              f"{', '.join(sorted(PURE_FUNCTIONS))}")
            extra = [k.arg for k in node.keywords if k.arg not in _FUNCTION_KEYWORDS.get(name, ())]
            if extra:
                return node, f"{name}() with the keyword {extra[0]}= (a probe passes no callables)"
            if name == "type" and len(node.args) != 1:
                return node, "type() with other than one argument (three would create a class)"
            if name == "hasattr":
                if len(node.args) != 2 or not (isinstance(node.args[1], ast.Constant)
                                               and isinstance(node.args[1].value, str)):
                    return node, "hasattr() without a constant attribute name"
                why = _refuse_attr(node.args[1].value)
                if why:
                    return node.args[1], why
            return None
        dotted = _dotted(func) if isinstance(func, ast.Attribute) else None
        if dotted in TORCH_FUNCTIONS:
            return None
        if isinstance(func, ast.Attribute):
            attr = func.attr
            if _INPLACE_RE.match(attr):
                return func, f"a call of .{attr}(), an in-place method (a name ending in one '_')"
            if _PREDICATE_RE.match(attr):
                return None if not node.args and not node.keywords else (node, f".{attr}() with arguments")
            if attr not in PURE_METHODS:
                return func, (f"a call of .{attr}(), not one of the pure methods a probe may call "
                              "(remote.probes.PURE_METHODS: sizes, reductions, comparisons, copies, .item(), "
                              f".tolist(), ...; is_NAME() predicates; the functions {', '.join(sorted(TORCH_FUNCTIONS))})")
            return None
        return func, "a call of a computed value (only named functions and methods may be called)"

    return check(tree.body)


def _where(expr: str, node: ast.AST) -> str:
    col = getattr(node, "col_offset", None)
    text = ast.unparse(node) if isinstance(node, ast.AST) and hasattr(node, "lineno") else ""
    text = text if len(text) <= 60 else text[:57] + "..."
    return (f" at column {col + 1}" if col is not None else "") + (f" (`{text}`)" if text else "")


def parse_expression(expr: Any, *, what: str = "expression") -> ast.Expression:
    """The syntax tree of a probe expression, once it passes the whitelist (see
    :func:`check_expression`). Raises :class:`ProbeExpressionRefused` (a ``ProbeError``) naming the
    refused node, its column (1-based) and why; ``ProbeError`` for text that is not one line of
    Python."""
    if not isinstance(expr, str) or "\n" in expr or "\r" in expr or not expr.strip():
        raise ProbeError(f"{what} must be one line of text, got {expr!r}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ProbeError(f"{what} {expr!r} is not a Python expression ({exc.msg})") from None
    bad: Optional[tuple[ast.AST, str]] = None
    for node in ast.walk(tree):  # the changes of state first: they are the likeliest slip
        if isinstance(node, ast.NamedExpr):
            bad = node, "an assignment expression (:=)"
        elif isinstance(node, ast.Await):
            bad = node, "await"
        elif isinstance(node, (ast.Yield, ast.YieldFrom)):
            bad = node, "yield"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _INPLACE_RE.match(node.func.attr):
            bad = node.func, f"a call of .{node.func.attr}(), an in-place method (a name ending in one '_')"
        if bad:
            break
    bad = bad or _whitelist_refusal(tree)
    sized = None if bad else _size_refusal(tree)
    if sized:
        node, why = sized
        raise ProbeExpressionRefused(
            f"{what} {expr!r} is refused: it contains {why}{_where(expr, node)}; a probe's expressions run inside "
            "the engine and must stay small (the same bounds are checked when the probe runs)",
            node=type(node).__name__, column=(getattr(node, "col_offset", -1) + 1) or None)
    if bad:
        node, why = bad
        raise ProbeExpressionRefused(
            f"{what} {expr!r} is refused: it contains {why}{_where(expr, node)}; a probe's expressions must only "
            "read (names, attributes, subscripts, constants, operators, comprehensions, and calls of pure "
            "functions and methods)", node=type(node).__name__, column=(getattr(node, "col_offset", -1) + 1) or None)
    return tree


def check_expression(expr: Any, *, what: str = "expression") -> None:
    """Refuse an expression a probe must not evaluate. Allowed, and nothing else: names (the
    probed frame's locals and globals; not dunders, not the block's own ``_ewb*``), attribute
    reads (not dunders other than :data:`SAFE_DUNDERS`), subscripts and slices, constants,
    tuples / lists / sets / dicts of those, f-strings, comparisons, arithmetic and boolean
    operators, ``x if c else y``, comprehensions and generator expressions (their targets plain
    names), and calls of :data:`PURE_FUNCTIONS`, :data:`TORCH_FUNCTIONS`, :data:`PURE_METHODS` and
    ``.is_NAME()`` predicates. Refused (among all else): ``:=``, ``await``, ``yield``, lambdas,
    ``*x`` / ``**x``, ``getattr``, ``__import__``, ``open``, ``eval``, in-place methods (a name
    ending in one ``_``: ``x.zero_()``, ``x.add_(1)``), ``x.__class__``.

    The probe block evaluates exactly the checked tree, with each call going through a gate that
    checks, when the probe runs, that the callee is still the builtin / torch function of that
    name, that a module is not cast or moved in place, and that an iterator read from the frame is
    not consumed (see :func:`render_block`), and that no ``**`` / ``<<`` / sequence ``*`` / ``%``
    format / ``range`` / comprehension grows past the bounds of :data:`MAX_INT_BITS` and its
    neighbours; those bounds are also checked here where the operands are constants
    (``10**10**10``, ``'a'*10**9``). ``what`` names the expression in the message.

    Raises :class:`ProbeExpressionRefused` (a ``ProbeError``: the refused node's type in
    ``.node``, its 1-based ``.column``) or ``ProbeError`` for text that is not one line of Python.
    """
    parse_expression(expr, what=what)
