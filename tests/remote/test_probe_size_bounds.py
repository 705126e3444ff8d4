"""A probe expression cannot hang or exhaust the engine: results whose size the operands decide
(``**``, ``<<``, sequence ``*``, ``%`` / format widths, ``range``, comprehension loops) are bounded.

Refused when the probe is added where the operands are constants (``check_expression``), and
refused when the probe runs otherwise: the generated block is executed in-process on plain Python
values, each refused value printing ``expr=<error:ValueError('probe: ...')>`` fast, the others
their right value.
"""

from __future__ import annotations

import contextlib
import io
import time

import pytest

from remote.errors import ProbeExpressionRefused
from remote.probes import (
    MAX_INT_BITS,
    MAX_LOOP_STEPS,
    MAX_RANGE_LEN,
    MAX_SEQUENCE_LEN,
    check_expression,
    render_block,
)


@pytest.mark.parametrize("expr, column, why", [
    ("10**10**10 > 0", 1, "a power too large to compute"),
    ("2**4097", 1, "a power too large to compute"),
    ("(2**64)**65", 1, "a power too large to compute"),
    ("x + 7**-300", 5, "a power too large to compute"),
    ("len('a'*10**9)", 5, "a repetition too large to build (length 1 * 1000000000"),
    ("[0]*(10**10)", 1, "a repetition too large to build (length 1 * 10000000000"),
    ("10**10 * (1, 2)", 1, "a repetition too large to build (length 2 * 10000000000"),
    ("('ab' + 'cd') * 2501", 1, "length 4 * 2501"),
    ("b'x' * 10001", 1, "a repetition too large to build"),
    ("1 << 10**10", 1, "a shift too large to compute (<< 10000000000"),
    ("x.shape[0] + (1 << 4097)", 15, "a shift too large to compute (<< 4097"),
    ("[i for i in range(10**10)]", 13, "a range of more than 10000 items"),
    ("sum(range(0, 10**6, 2))", 5, "a range of more than 10000 items"),
    ("'%0999999999d' % 1", 1, "a format width or precision of 999999999"),
    ("'%.99999f' % x", 1, "a format width or precision of 99999"),
    ("'%*d' % (n, 1)", 1, "a * width or precision"),
    ("f'{x:>999999999}'", 1, "a format width or precision of 999999999"),
    ("f'{x:{w}}'", 1, "a computed format spec"),
])
def test_constant_results_too_large_are_refused_at_add_time_naming_the_node(expr, column, why):
    with pytest.raises(ProbeExpressionRefused) as info:
        check_expression(expr, what="--print")
    msg = str(info.value)
    assert why in msg and f"at column {column} " in msg, msg
    assert info.value.column == column and msg.startswith(f"--print {expr!r} is refused")
    assert "must stay small" in msg


@pytest.mark.parametrize("expr", [
    "2**256", "10**256 > x", "(2**15)**256", "2**-256", "1 << 4096", "'a' * 10000", "[0] * 5000 * 2",
    "(1, 2) * 5000", "x ** 10**10", "x * 10**10", "[i for i in range(10000)]", "range(10**10, 10**10 + 5)",
    "'%5d of 123456789' % x", "'%%*d' % ()", "f'{x:>10}'", "x % 10**10",
])
def test_bounded_constants_and_unknown_operands_pass_the_add_time_check(expr):
    check_expression(expr)  # the unknown ones are checked when the probe runs


def _run_block(exprs, **frame):
    """Execute the probe block for ``exprs`` inside a function called with ``frame`` as its
    locals; returns ``{expr: printed value}`` and the seconds it took."""
    import sys

    for name in ("_eagle_workbench_probes_fired",):
        sys.__dict__.get(name, set()).discard("bounds")
    args = ", ".join(frame)
    ns: dict = {}
    exec(compile(f"def f({args}):\n" + render_block("bounds", exprs, "    ") + "    return 'ran'\n",
                 "<probe>", "exec"), ns)
    err = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err):
        assert ns["f"](**frame) == "ran"
    took = time.monotonic() - start
    [line] = err.getvalue().splitlines()
    body = line.split("] ", 1)[1]
    values = {}
    for i, expr in enumerate(exprs):  # split on the known "expr=" prefixes, in order
        start_at = body.index(expr + "=") + len(expr) + 1
        end_at = body.index(" " + exprs[i + 1] + "=", start_at) if i + 1 < len(exprs) else len(body)
        values[expr] = body[start_at:end_at]
    return values, took


def test_runtime_gate_refuses_unbounded_results_and_computes_bounded_ones():
    refused = {
        "n ** big": "a 4-bit int ** 10000000000 is refused",
        "n ** e257": "** 257 is refused",
        "one << big": "an int << 10000000000 is refused",
        "s * big": "a str of length 1 * 10000000000 is refused",
        "big * s": "a str of length 1 * 10000000000 is refused",
        "lst * big": "a list of length 1 * 10000000000 is refused",
        "tup * k": f"a tuple of length 2 * {MAX_SEQUENCE_LEN} is refused",
        "bs * big": "a bytes of length 1 * 10000000000 is refused",
        "len(range(big))": f"range(0, 10000000000) is refused (a range of at most {MAX_RANGE_LEN} items)",
        "sum(range(huge))": "is refused (a range of at most",
        "[0 for a in range(k) for b in range(k)]": f"ran over {MAX_LOOP_STEPS} steps",
        "sum(1 for a in range(k) for b in range(k))": f"ran over {MAX_LOOP_STEPS} steps",
        "fmt % 1": "a format width or precision of 999999999 (at most 10000) is refused",
        "star % (big, 1)": "a % format with a * width or precision is refused",
    }
    allowed = {
        "n ** 256": repr(10 ** 256),
        "2 ** e257 if False else n ** -2": repr(10 ** -2),
        "one << 4096": repr(1 << 4096),
        "len(s * k)": repr(MAX_SEQUENCE_LEN),
        "len(lst * 5000 * 2)": repr(MAX_SEQUENCE_LEN),
        "big * big": repr(10 ** 20),
        "f * big": repr(1.5 * 10 ** 10),
        "sum(range(k))": repr(sum(range(MAX_SEQUENCE_LEN))),
        "len([a for a in range(k) for b in range(9)])": repr(MAX_SEQUENCE_LEN * 9),
        "'%5d' % n": repr("   10"),
        "big % 7": repr(10 ** 10 % 7),
    }
    frame = dict(n=10, big=10 ** 10, huge=10 ** 30, e257=257, one=1, s="a", lst=[0], tup=(1, 2),
                 k=MAX_SEQUENCE_LEN, bs=b"x", fmt="%0999999999d", star="%*d", f=1.5)
    exprs = list(refused) + list(allowed)
    values, took = _run_block(exprs, **frame)
    for expr, why in refused.items():
        assert values[expr].startswith("<error:ValueError('probe: ") and why in values[expr], (expr, values[expr])
    for expr, value in allowed.items():
        assert values[expr] == value or values[expr] == value[:2000] + "...", (expr, values[expr][:200])
    assert took < 5, took  # refused before anything large is built (10**10**10 alone would never end)
    assert MAX_INT_BITS == 4096


def test_runtime_gate_bounds_repetition_by_an_index_like_count():
    class Count:  # what str * takes for a count: any object with __index__ (a numpy int, a 0-d tensor)
        def __index__(self):
            return 10 ** 9

    class Scaled:  # no count: what it does with a list is its own (here: it scales, as a tensor would)
        def __index__(self):
            raise TypeError("only one element tensors can be converted to Python scalars")

        def __rmul__(self, other):
            return ("scaled", len(other))

    values, _ = _run_block(["s * c", "len(s * small)", "lst * t"], s="ab", c=Count(), small=3, lst=[1, 2],
                           t=Scaled())
    assert values["s * c"].startswith("<error:ValueError('probe: a str of length 2 * 1000000000 is refused")
    assert values["len(s * small)"] == "6"
    assert values["lst * t"] == repr(("scaled", 2))


def test_loop_budget_is_per_expression_not_per_process():
    """Each expression starts a fresh count: two loops of 60% of the budget each both finish."""
    n = MAX_LOOP_STEPS * 6 // 10
    per = n // MAX_RANGE_LEN
    expr_a = "len([0 for a in range(k) for b in range(per)])"
    expr_b = "len([1 for a in range(per) for b in range(k)])"
    values, _ = _run_block([expr_a, expr_b], k=MAX_RANGE_LEN, per=per)
    assert values[expr_a] == repr(MAX_RANGE_LEN * per) and values[expr_b] == repr(MAX_RANGE_LEN * per)
