"""``workbench measure --start-timeout S``: how long a server still starting is waited for (0: not at
all); the value type ``non_negative_seconds`` (fast: nothing is started)."""

import argparse
import re

import pytest

from workbench.cli import build_parser
from workbench.cli.argtypes import MAX_SECONDS, non_negative_seconds


@pytest.mark.parametrize("text, value", [("0", 0.0), ("0.0", 0.0), ("2.5", 2.5), ("600", 600.0)])
def test_non_negative_seconds_takes_zero_and_positive_numbers(text, value):
    assert non_negative_seconds(text) == value


@pytest.mark.parametrize("text, message", [
    ("-1", "must be 0 or a positive number of seconds, got -1"),
    ("nan", "must be 0 or a positive number of seconds, got nan"),
    ("abc", "expected a number of seconds, got 'abc'"),
    ("inf", f"must be at most {MAX_SECONDS:g} seconds, got inf"),
])
def test_non_negative_seconds_refuses_the_rest_saying_what_it_got(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        non_negative_seconds(text)


def test_measure_start_timeout_defaults_to_600_and_takes_0():
    parser = build_parser()
    assert parser.parse_args(["measure"]).start_timeout == 600.0
    assert parser.parse_args(["measure", "--start-timeout", "0", "--timeout", "3"]).start_timeout == 0.0


def test_a_bad_start_timeout_is_a_usage_error(cli):
    code, out, err = cli("measure", "--start-timeout", "-5")
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == ("workbench measure: error: argument --start-timeout: must be 0 or a positive "
                                    "number of seconds, got -5")
