"""The run-time half of the whitelist: :func:`guarded_source` rewrites a checked expression so
that every call, operator and loop goes through the gate ``_ewb_g``, and :data:`_GATE_LINES` is
the source of that gate (defined once per process, kept in ``sys`` under :data:`GATE_NAME`),
which enforces the tables and bounds of :mod:`remote.probes.whitelist` when the probe runs.

Imports only the standard library and :mod:`remote.probes.whitelist`.
"""

from __future__ import annotations

import ast

from .whitelist import (
    _FRESH_ITERATORS,
    _ITERATING,
    _PERCENT_RE,
    _SIZED_OPS,
    _SPEC_NUMBER_RE,
    MAX_INT_BITS,
    MAX_LOOP_STEPS,
    MAX_POW_EXPONENT,
    MAX_RANGE_LEN,
    MAX_SEQUENCE_LEN,
    MAX_SHIFT,
    MODULE_METHODS,
    TORCH_FUNCTIONS,
    _dotted,
    parse_expression,
)


class _Guard(ast.NodeTransformer):
    """Rewrites a checked tree for the probe block: ``f(a)`` -> ``_ewb_g.f(f, 'f')(a)``,
    ``x.m(a)`` -> ``_ewb_g.m(x, 'm')(a)``, each value iterated that the expression did not
    create -> ``_ewb_g.it(v)``, ``a ** b`` / ``a << b`` / ``a * b`` -> ``_ewb_g.b('pow'|'lshift'|'mul',
    a, b)`` (size-checked), and each comprehension's iterable -> ``_ewb_g.lp(...)`` (step-counted)."""

    @staticmethod
    def _gate(kind: str, *args: ast.expr) -> ast.expr:
        return ast.Call(ast.Attribute(ast.Name("_ewb_g", ast.Load()), kind, ast.Load()), list(args), [])

    def _iterated(self, node: ast.expr) -> ast.expr:
        # a generator expression of the probe's own is fresh too (its loops are counted by lp)
        fresh = isinstance(node, ast.GeneratorExp) or isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Attribute) and node.func.attr in _FRESH_ITERATORS)
            or (isinstance(node.func, ast.Name) and node.func.id in ("range", "enumerate", "zip")))
        node = self.visit(node)
        return node if fresh else self._gate("it", node)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        func = node.func
        dotted = _dotted(func) if isinstance(func, ast.Attribute) else None
        if isinstance(func, ast.Name):
            iterating = func.id in _ITERATING
            args = [self._iterated(a) if iterating else self.visit(a) for a in node.args]
            new_func = self._gate("f", func, ast.Constant(func.id))
        elif dotted in TORCH_FUNCTIONS:
            args = [self.visit(a) for a in node.args]
            new_func = self._gate("f", func, ast.Constant(dotted))
        else:
            args = [self.visit(a) for a in node.args]
            new_func = self._gate("m", self.visit(func.value), ast.Constant(func.attr))
        keywords = [ast.keyword(k.arg, self.visit(k.value)) for k in node.keywords]
        return ast.Call(new_func, args, keywords)

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        kind = _SIZED_OPS.get(type(node.op))
        left, right = self.visit(node.left), self.visit(node.right)
        if kind is None:
            return ast.BinOp(left, node.op, right)
        return self._gate("b", ast.Constant(kind), left, right)

    def _comp(self, node):
        for gen in node.generators:
            gen.iter = self._gate("lp", self._iterated(gen.iter))
            gen.ifs = [self.visit(i) for i in gen.ifs]
        for name in ("elt", "key", "value"):
            if hasattr(node, name):
                setattr(node, name, self.visit(getattr(node, name)))
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comp


def guarded_source(expr: str, *, what: str = "expression") -> str:
    """The Python source the probe block evaluates for the probe expression ``expr``: its checked
    tree (:func:`parse_expression`) with every call through the block's gate ``_ewb_g`` (see
    :func:`render_block`), in parentheses. Comments and layout of ``expr`` are not kept. Raises as
    :func:`parse_expression`."""
    tree = _Guard().visit(parse_expression(expr, what=what))
    return "(" + ast.unparse(ast.fix_missing_locations(tree)) + ")"


#: The gate the probe block defines once per process (kept in ``sys`` under this name) and calls
#: for every call a probe expression makes: ``f(fn, name)`` returns ``fn`` only when it is the
#: builtin (or ``torch.`` function) of that name; ``m(obj, name)`` returns ``obj.name`` unless
#: ``obj`` is a ``torch.nn.Module`` and ``name`` is not in :data:`MODULE_METHODS`; ``it(v)``
#: returns ``v`` unless it is an iterator (iterating it would consume the engine's); ``f(range,
#: 'range')`` returns a ``range`` refusing more than :data:`MAX_RANGE_LEN` items; ``b(op, a, b)``
#: computes ``a ** b`` / ``a << b`` / ``a * b`` unless its result would be unbounded (see
#: :data:`MAX_INT_BITS`); ``lp(it)`` yields ``it``'s items, at most :data:`MAX_LOOP_STEPS` over all
#: comprehensions of one evaluation (``z()`` starts the count, per thread). A refusal raises
#: ``TypeError`` or ``ValueError``: that expression prints ``<error:...(...)>``. The ``_2`` in the
#: name: a process whose blocks came from an older version (its gate lacks ``b``/``lp``/``z``)
#: keeps that gate under the old name.
GATE_NAME = "_eagle_workbench_probe_gate_2"
_GATE_LINES = [
    f"_ewb_g = _ewb_sys.__dict__.get({GATE_NAME!r})",
    "if _ewb_g is None:",
    "    import types as _ewb_t",
    "    def _ewb_gf(fn, name, _b=_ewb_b, _s=_ewb_sys):",
    "        if name.startswith('torch.'):",
    "            want = _s.modules.get('torch')",
    "            for part in name.split('.')[1:]:",
    "                want = _b.getattr(want, part, None)",
    "        else:",
    "            want = _b.getattr(_b, name, None)",
    "        if want is None or fn is not want:",
    "            raise _b.TypeError('probe: %s here is %r, not the function of that name; not called' % (name, fn))",
    "        return _ewb_gr if name == 'range' else fn",
    "    def _ewb_gm(obj, name, _b=_ewb_b, _s=_ewb_sys, _ok=" + repr(tuple(sorted(MODULE_METHODS))) + "):",
    "        _t = _s.modules.get('torch')",
    "        if _t is not None and _b.isinstance(obj, _t.nn.Module) and name not in _ok:",
    "            raise _b.TypeError('probe: .%s() would change the module in place; not called' % name)",
    "        return _b.getattr(obj, name)",
    "    def _ewb_git(value, _b=_ewb_b):",
    "        if _b.hasattr(_b.type(value), '__next__'):",
    "            raise _b.TypeError('probe: %s is an iterator; iterating it would consume it' % _b.type(value).__name__)",
    "        return value",
    "    import threading as _ewb_th, re as _ewb_re, operator as _ewb_op",
    f"    _ewb_pc, _ewb_sp = _ewb_re.compile({_PERCENT_RE.pattern!r}), _ewb_re.compile({_SPEC_NUMBER_RE.pattern!r})",
    "    def _ewb_fr(fmt, percent, _b=_ewb_b, _pc=_ewb_pc, _sp=_ewb_sp):",
    "        fmt = fmt.decode('latin-1') if _b.isinstance(fmt, _b.bytes) else fmt",
    "        for m in (_pc if percent else _sp).finditer(fmt):",
    "            for g in m.groups():",
    "                if g == '*':",
    "                    return 'a % format with a * width or precision'",
    f"                if g and _b.int(g) > {MAX_SEQUENCE_LEN}:",
    f"                    return 'a format width or precision of %s (at most {MAX_SEQUENCE_LEN})' % g",
    "        return None",
    "    _ewb_tl = _ewb_th.local()",
    "    def _ewb_gz(_tl=_ewb_tl):",
    "        _tl.n = 0",
    "    def _ewb_glp(it, _b=_ewb_b, _tl=_ewb_tl):",
    "        for v in it:",
    "            _tl.n = _b.getattr(_tl, 'n', 0) + 1",
    f"            if _tl.n > {MAX_LOOP_STEPS}:",
    f"                raise _b.ValueError('probe: comprehensions of one expression ran over {MAX_LOOP_STEPS} steps; stopped')",
    "            yield v",
    "    def _ewb_gb(op, a, b, _b=_ewb_b, _fr=_ewb_fr, _op=_ewb_op):",
    "        _int = _b.isinstance(a, _b.int) and _b.isinstance(b, _b.int)",
    "        if op == 'pow':",
    f"            if _int and (_b.abs(b) > {MAX_POW_EXPONENT} or a.bit_length() * _b.abs(b) > {MAX_INT_BITS}):",
    "                raise _b.ValueError('probe: a %d-bit int ** %d is refused (exponent at most "
    f"{MAX_POW_EXPONENT}, result at most {MAX_INT_BITS} bits)' % (a.bit_length(), b))",
    "            return a ** b",
    "        if op == 'lshift':",
    f"            if _int and b > {MAX_SHIFT}:",
    f"                raise _b.ValueError('probe: an int << %d is refused (shift at most {MAX_SHIFT})' % b)",
    "            return a << b",
    "        if op == 'mod':",
    "            if _b.isinstance(a, (_b.str, _b.bytes)):",
    "                why = _fr(a, True)",
    "                if why:",
    "                    raise _b.ValueError('probe: %s is refused' % why)",
    "            return a % b",
    "        for s, n in ((a, b), (b, a)):  # n: an int or what repetition takes for one (__index__)",
    "            if _b.isinstance(s, (_b.str, _b.bytes, _b.bytearray, _b.list, _b.tuple)):",
    "                try:",
    "                    k = _op.index(n)",
    "                except _b.TypeError:  # not a count (a float, a tensor of many values): not a repetition",
    "                    continue",
    f"                if _b.len(s) * k > {MAX_SEQUENCE_LEN}:",
    "                    raise _b.ValueError('probe: a %s of length %d * %d is refused (result length at most "
    f"{MAX_SEQUENCE_LEN})' % (_b.type(s).__name__, _b.len(s), k))",
    "        return a * b",
    "    def _ewb_gr(*args, _b=_ewb_b):",
    "        r = _b.range(*args)",
    "        try:",
    "            n = _b.len(r)",
    "        except _b.OverflowError:",
    "            n = None",
    f"        if n is None or n > {MAX_RANGE_LEN}:",
    f"            raise _b.ValueError('probe: %r is refused (a range of at most {MAX_RANGE_LEN} items)' % (r,))",
    "        return r",
    "    _ewb_g = _ewb_t.SimpleNamespace(f=_ewb_gf, m=_ewb_gm, it=_ewb_git, b=_ewb_gb, lp=_ewb_glp, z=_ewb_gz)",
    f"    _ewb_sys.__dict__[{GATE_NAME!r}] = _ewb_g",
]
