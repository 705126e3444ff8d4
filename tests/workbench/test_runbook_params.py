"""Every runbook parameter checked up front (``workbench.runbook_params``): one schema per runbook,
the same check in ``workbench runbook`` (before any kernel starts, exit 2) and in each runbook's
first cell (a papermill run without the CLI), every bad value named at once with what it must be."""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill
import psutil
import pytest

from workbench.cli.runbook import coerce_parameter, runbooks_dir
from workbench.errors import RunbookParameterError
from workbench.runbook_params import (KINDS, SCHEMAS, check_runbook_parameters, injected_unknown, parse_layer_ids,
                                      runbook_parameter_problems)
from workbench.sandbox_box import sandbox_launch_command
from workbench.session.box_session import check_run_parameters
from testkit.engine_copy import checkout_dir

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = sorted(p.stem for p in runbooks_dir().glob("*.ipynb"))
#: Parameters in a schema that a notebook does not have yet (none: force_launch, which issue 13's
#: launch guard added, is in every notebook that launches).
AWAITED: set[str] = set()


def problems(runbook: str, **values) -> list[str]:
    return runbook_parameter_problems(runbook, values)


# -- the schema and the notebooks ---------------------------------------------------------------

@pytest.mark.parametrize("runbook", RUNBOOKS)
def test_the_schema_is_exactly_the_notebooks_parameters_cell(runbook):
    in_notebook = set(papermill.inspect_notebook(str(runbooks_dir() / f"{runbook}.ipynb")))
    in_schema = set(SCHEMAS[runbook])
    assert in_notebook - in_schema == set(), f"{runbook}: parameters with no kind in workbench.runbook_params"
    assert in_schema - in_notebook <= AWAITED, f"{runbook}: schema parameters the notebook does not have"
    assert set(SCHEMAS) == set(RUNBOOKS)


@pytest.mark.parametrize("runbook", RUNBOOKS)
def test_each_notebooks_defaults_pass_its_own_schema(runbook):
    defaults = {name: ast.literal_eval(p["default"])
                for name, p in papermill.inspect_notebook(str(runbooks_dir() / f"{runbook}.ipynb")).items()}
    assert runbook_parameter_problems(runbook, defaults) == []


@pytest.mark.parametrize("runbook", RUNBOOKS)
def test_each_runbooks_first_cell_checks_its_parameters_before_anything_else(runbook):
    """The first code cell after ``parameters`` starts with the schema check of that runbook."""
    nb = nbformat.read(str(runbooks_dir() / f"{runbook}.ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    first = [line for line in code[1].source.splitlines() if line.strip()]
    assert first[:2] == ["from workbench.runbook_params import check_runbook_parameters",
                         f'check_runbook_parameters("{runbook}", globals(), kernel_namespace=True)  # every parameter, before anything '
                         "touches the box"]


@pytest.mark.parametrize("runbook", RUNBOOKS)
def test_a_name_papermill_injected_that_the_runbook_lacks_is_refused_in_the_kernel(runbook):
    """Papermill only warns about an unknown ``-p`` name and runs on with the defaults: in the
    kernel, a plain value bound to a name the schema lacks is refused; functions, modules and
    IPython's own names are not parameters."""
    namespace = {name: None for name in SCHEMAS[runbook]}
    namespace.update({"In": [""], "Out": {}, "_": None, "__name__": "__main__", "math": math,
                      "check_runbook_parameters": check_runbook_parameters, "get_ipython": object()})
    # None is valid for some parameters only: compare with the problems the values alone have
    alone = runbook_parameter_problems(runbook, namespace)
    with pytest.raises(RunbookParameterError) as caught:
        check_runbook_parameters(runbook, {**namespace, "num_promts": 2}, kernel_namespace=True)
    assert caught.value.problems[0].startswith(f"{runbook} has no parameter 'num_promts' (its parameters: ")
    assert caught.value.problems[1:] == alone
    assert injected_unknown(runbook, namespace) == []
    # without kernel_namespace (the CLI's call: it refuses unknown names itself) the name is ignored
    assert runbook_parameter_problems(runbook, {**namespace, "num_promts": 2}) == alone


def test_force_launch_is_a_flag_of_the_three_runbooks_that_launch():
    for runbook in ("diagnose_acceptance", "measure_acceptance", "compare_drafts"):
        assert SCHEMAS[runbook]["force_launch"] == "flag"
        assert problems(runbook, force_launch=False) == problems(runbook, force_launch=True) == []
        assert problems(runbook, force_launch="no") == ["force_launch must be True or False, got 'no'"]
    assert "force_launch" not in SCHEMAS["preflight"]


def test_reclaim_gpus_is_a_flag_of_the_three_runbooks_that_launch():
    for runbook in ("diagnose_acceptance", "measure_acceptance", "compare_drafts"):
        assert SCHEMAS[runbook]["reclaim_gpus"] == "flag"
        assert problems(runbook, reclaim_gpus=True) == []
        assert problems(runbook, reclaim_gpus=1) == ["reclaim_gpus must be True or False, got 1"]
    assert "reclaim_gpus" not in SCHEMAS["preflight"]


def test_a_schema_parameter_the_values_lack_is_skipped_and_an_unknown_name_ignored():
    assert check_runbook_parameters("diagnose_acceptance", {}) is None
    assert problems("preflight", port=30000, something_else="x") == []


def test_a_runbook_with_no_schema_is_refused():
    with pytest.raises(RunbookParameterError, match="no parameter schema for runbook 'nosuch'"):
        check_runbook_parameters("nosuch", {"port": 1})


# -- each kind: the good accepted, the bad named with its value and what it must be ---------------

@pytest.mark.parametrize("value", [True, False])
def test_flag_accepts_true_and_false(value):
    assert problems("diagnose_acceptance", allow_restart=value) == []


@pytest.mark.parametrize("value", ["no", "False", 0, 1, None, "yes"])
def test_flag_refuses_anything_else(value):
    assert problems("diagnose_acceptance", apply_fix=value) == [f"apply_fix must be True or False, got {value!r}"]


@pytest.mark.parametrize("value", [1, 8, 10_000])
def test_counts_accept_whole_numbers_from_1(value):
    assert problems("measure_acceptance", max_new_tokens=value, num_prompts=value) == []


@pytest.mark.parametrize("value", [0, -3, True, 1.0, "abc", "8", None])
def test_count_refuses_zero_negatives_bools_floats_and_text(value):
    assert problems("diagnose_acceptance", max_new_tokens=value) == [
        f"max_new_tokens must be a whole number ≥ 1, got {value!r}"]


@pytest.mark.parametrize("value", [0, -3, True, False, "abc", 2.5])
def test_optional_count_refuses_zero_negatives_bools_and_text(value):
    assert problems("compare_drafts", num_prompts=value) == [
        f"num_prompts must be None (all) or a whole number ≥ 1, got {value!r}"]


def test_optional_count_takes_none():
    assert problems("compare_drafts", num_prompts=None) == []


@pytest.mark.parametrize("value, ok", [(0, True), (3, True), (-1, False), (True, False), ("1", False)])
def test_warmup_is_a_whole_number_from_0(value, ok):
    expected = [] if ok else [f"warmup must be a whole number ≥ 0, got {value!r}"]
    assert problems("measure_acceptance", warmup=value) == expected


@pytest.mark.parametrize("value", [0.5, 1, 600, 300.0, 1_000_000])
def test_seconds_accept_positive_numbers(value):
    assert problems("diagnose_acceptance", server_start_timeout=value) == []


@pytest.mark.parametrize("value", [-1, -5, 0, 0.0, math.inf, math.nan, True, "600", None, 1_000_001])
def test_seconds_refuse_non_positive_infinite_bool_and_text(value):
    assert problems("measure_acceptance", server_start_timeout=value) == [
        f"server_start_timeout must be a number of seconds > 0 (at most 1000000), got {value!r}"]


@pytest.mark.parametrize("value", [None, 1, 30000, 65535])
def test_port_accepts_none_and_1_to_65535(value):
    assert problems("preflight", port=value) == []


@pytest.mark.parametrize("value", [0, 65536, -1, True, "abc", "30000", 30000.0])
def test_port_refuses_0_out_of_range_bool_and_text(value):
    assert problems("preflight", port=value) == [
        f"port must be None or a TCP port number 1-65535, got {value!r}"]


@pytest.mark.parametrize("value, ids", [(None, None), ("1,3,6", [1, 3, 6]), ("[1, 3, 6]", [1, 3, 6]),
                                        ([2, 30, 58], [2, 30, 58]), (" 0 , 1 ", [0, 1]), ((1, 3), [1, 3])])
def test_aux_layer_ids_as_text_or_list(value, ids):
    assert parse_layer_ids(value) == ids
    assert problems("diagnose_acceptance", aux_layer_ids=value) == []


@pytest.mark.parametrize("value", ["1,-3,6", "a,b", "", [], [1, True], [1.0, 3], 3, True, "[1, 3", {"a": 1}])
def test_aux_layer_ids_refuses_what_is_no_list_of_ids(value):
    with pytest.raises(ValueError):
        parse_layer_ids(value)
    assert problems("diagnose_acceptance", aux_layer_ids=value) == [
        f"aux_layer_ids must be None or non-negative layer ids: \"1,3,6\" or a list such as [1, 3, 6], got {value!r}"]


@pytest.mark.parametrize("value", [None, 1, 1.0, 2.5, 4])
def test_expected_accept_length_none_or_at_least_1(value):
    assert problems("diagnose_acceptance", expected_accept_length=value) == []


@pytest.mark.parametrize("value, detail", [(0.5, ": accept length counts the bonus token: it is never below 1"),
                                           (0, ": accept length counts the bonus token: it is never below 1"),
                                           (-2, ": accept length counts the bonus token: it is never below 1"),
                                           (True, ""), ("2.5", ""), (math.inf, ""), (math.nan, "")])
def test_expected_accept_length_refuses_below_1_bools_text_and_non_finite(value, detail):
    assert problems("diagnose_acceptance", expected_accept_length=value) == [
        "expected_accept_length must be None or an accept length ≥ 1 (tokens per verify step, bonus token "
        f"included), got {value!r}{detail}"]


PROMPTS_WHAT = "prompts must be None, a built-in prompt set (default, chat, code, math) or the path of a JSONL file of prompts"


@pytest.mark.parametrize("value", [None, "default", "chat", "code", "math"])
def test_prompts_accepts_the_built_in_sets(value):
    assert problems("measure_acceptance", prompts=value) == []


def test_prompts_accepts_a_jsonl_file_and_names_the_line_of_a_bad_one(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text('{"text": "def f():"}\n// a comment\n{"text": "x = 1"}\n')
    assert problems("compare_drafts", prompts=str(good)) == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no text"}\n')
    assert problems("compare_drafts", prompts=str(bad)) == [
        f"{PROMPTS_WHAT}, got {str(bad)!r}: {bad}:2: missing a string 'text'"]


@pytest.mark.parametrize("value, detail", [
    ("nosuch.jsonl", ": nosuch.jsonl: no such file, and not a built-in prompt set (default, chat, code, math)"),
    ("chats", ": chats: no such file, and not a built-in prompt set (default, chat, code, math)"),
    (5, ""), ("", ""), (["chat"], "")])
def test_prompts_refuses_unknown_sets_missing_files_and_other_types(value, detail):
    assert problems("diagnose_acceptance", prompts=value) == [f"{PROMPTS_WHAT}, got {value!r}{detail}"]


HOST_WHAT = "host must be a box: 'local', an ~/.ssh/config alias, user@host[:port] or ssh://user@host[:port]"


@pytest.fixture
def ssh_config(tmp_path, monkeypatch):
    """An ssh config with one alias, ``gpu-box`` (read only: nothing connects)."""
    path = tmp_path / "ssh_config"
    path.write_text("Host gpu-box\n  HostName 127.0.0.1\n  Port 2222\n  User me\n")
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(path))
    return path


@pytest.mark.parametrize("value", ["local", " local ", "gpu-box", "me@127.0.0.1:2222", "ssh://me@example.org",
                                   "example.org", "localhost"])
def test_host_accepts_local_an_alias_and_user_at_host(ssh_config, value):
    assert problems("preflight", host=value) == []


def test_host_refuses_a_mistyped_alias_naming_the_config_read(ssh_config):
    (problem,) = problems("preflight", host="gpu-bx")
    assert problem.startswith(f"{HOST_WHAT}, got 'gpu-bx': ")
    assert "'gpu-bx' is not a Host alias" in problem and str(ssh_config) in problem and "gpu-box" in problem


@pytest.mark.parametrize("value, detail", [("me@host:70000", "is not a TCP port"), ("a b", "cannot understand box spec"),
                                           ("", None), (None, None), (3, None)])
def test_host_refuses_what_is_no_box_spec(ssh_config, value, detail):
    (problem,) = problems("diagnose_acceptance", host=value)
    if detail is None:
        assert problem == f"{HOST_WHAT}, got {value!r}"
    else:
        assert problem.startswith(f"{HOST_WHAT}, got {value!r}: ") and detail in problem


def test_host_refuses_an_alias_whose_config_uses_proxycommand(tmp_path, monkeypatch):
    path = tmp_path / "ssh_config"
    path.write_text("Host viaproxy\n  ProxyCommand nc %h %p\n")
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(path))
    (problem,) = problems("preflight", host="viaproxy")
    assert "ProxyCommand" in problem and "not supported" in problem


LAUNCH_WHAT = ("launch_command must be None or an SGLang or vLLM launch command (python -m sglang.launch_server ..., "
               "sglang serve ..., vllm serve MODEL ..., python -m vllm.entrypoints.openai.api_server ...)")


@pytest.mark.parametrize("value", [None, sandbox_launch_command(algorithm="EAGLE"),
                                   "python -m sglang.launch_server --model-path /m --port 30000",
                                   "CUDA_VISIBLE_DEVICES=0 sglang serve --model-path 'a b'"])
def test_launch_command_accepts_none_and_sglang_commands(value):
    assert problems("diagnose_acceptance", launch_command=value) == []


@pytest.mark.parametrize("value, detail", [
    ("python -m sglang.launch_server --model-path 'a b", "unbalanced"),
    ("python -m foo --port 1", "not an SGLang launch command"),
    ("", "empty launch command"),
    (42, None), (["python", "-m", "sglang.launch_server"], None)])
def test_launch_command_refuses_unparseable_commands_and_other_types(value, detail):
    (problem,) = problems("measure_acceptance", launch_command=value)
    if detail is None:
        assert problem == f"{LAUNCH_WHAT}, got {value!r}"
    else:
        assert problem.startswith(f"{LAUNCH_WHAT}, got {value!r}: ") and detail.lower() in problem.lower()


GRID_WHAT = 'grid must be a sweep grid such as "steps:1,2,3 topk:1 draft_tokens:auto" (or a dict of lists)'


@pytest.mark.parametrize("value", ["steps:1,2,3,4 topk:1 draft_tokens:auto", "steps:2", {"steps": [1, 3], "topk": 2}])
def test_grid_accepts_what_the_sweep_parses(value):
    assert problems("measure_acceptance", grid=value) == []


@pytest.mark.parametrize("value, detail", [
    ("steps:0", ": grid steps=0 must be >= 1"),
    ("topk:1", ": the grid has no speculative setting: give steps (e.g. steps:1,3,5)"),
    ("steps:1 depth:3", ": unknown grid key(s) ['depth'] (keys: steps, topk, draft_tokens)"),
    ("steps:a", ": grid steps='a' is not a positive integer"),
    (["steps:1"], ""), (3, ""), (None, "")])
def test_grid_refuses_what_the_sweep_cannot_run(value, detail):
    assert problems("measure_acceptance", grid=value) == [f"{GRID_WHAT}, got {value!r}{detail}"]


@pytest.mark.parametrize("value, ok", [(None, True), ("/models/draft", True), ("draft-b", True), ("", False),
                                       ("  ", False), (3, False), (["/a", "/b"], False)])
def test_drafts_are_none_or_a_path_on_the_box(value, ok):
    expected = [] if ok else [f"draft_a must be None or a path on the box, got {value!r}",
                              f"draft_b must be None or a path on the box, got {value!r}"]
    assert problems("compare_drafts", draft_a=value, draft_b=value) == expected


def test_report_dir_is_a_directory_or_missing(tmp_path):
    assert problems("preflight", report_dir=str(tmp_path)) == []
    assert problems("preflight", report_dir=str(tmp_path / "new" / "deeper")) == []
    afile = tmp_path / "a-file"
    afile.write_text("x")
    assert problems("preflight", report_dir=str(afile)) == [
        f"report_dir must be a directory (made when missing), got {str(afile)!r}: {afile} exists and is not a directory"]
    assert problems("preflight", report_dir="") == ["report_dir must be a directory (made when missing), got ''"]
    assert problems("preflight", report_dir=None) == ["report_dir must be a directory (made when missing), got None"]


def test_every_bad_parameter_is_named_at_once_in_schema_order():
    with pytest.raises(RunbookParameterError) as info:
        check_runbook_parameters("diagnose_acceptance", {
            "num_prompts": -3, "port": "abc", "allow_restart": "no", "server_start_timeout": -1,
            "aux_layer_ids": "1,3,6", "max_new_tokens": 96})
    err = info.value
    assert err.runbook == "diagnose_acceptance" and err.exit_code == 2 and isinstance(err, ValueError)
    assert [p.split(" ")[0] for p in err.problems] == ["port", "allow_restart", "num_prompts", "server_start_timeout"]
    assert str(err) == "bad parameters for diagnose_acceptance: " + "; ".join(err.problems)
    assert "\n" not in str(err)


def test_a_check_that_breaks_is_that_parameters_problem_and_hides_no_other(monkeypatch):
    """A kind whose check raises (a bug, an unreadable file) is reported as its parameter's
    problem; the other parameters are still checked."""
    from workbench import runbook_params

    def broken(value):
        raise OSError("disk gone")

    monkeypatch.setitem(runbook_params.KINDS, "prompts", runbook_params.Kind("a prompt set", broken))
    assert problems("measure_acceptance", prompts="chat", port=0) == [
        "port must be None or a TCP port number 1-65535, got 0",
        "prompts must be a prompt set, got 'chat': could not be checked: OSError: disk gone"]


def test_every_kind_of_the_schemas_is_defined():
    assert {kind for schema in SCHEMAS.values() for kind in schema.values()} <= set(KINDS)


def test_check_run_parameters_keeps_its_messages_for_its_other_callers():
    from workbench.errors import DiagnosisError

    with pytest.raises(DiagnosisError) as info:
        check_run_parameters(flags={"include_baseline": "no"}, counts={"max_new_tokens": 0},
                             optional_counts={"num_prompts": 0}, non_negative={"warmup": -1},
                             seconds={"server_start_timeout": math.inf})
    assert str(info.value) == (
        "bad parameters: include_baseline must be True or False, got 'no'; max_new_tokens must be a whole number "
        "≥ 1, got 0; num_prompts must be None (all) or a whole number ≥ 1, got 0; warmup must be a whole number "
        "≥ 0, got -1; server_start_timeout must be a number of seconds > 0 (at most 1000000), got inf")
    assert check_run_parameters(flags={"a": True}, counts={"b": 1}, optional_counts={"c": None},
                                non_negative={"d": 0}, seconds={"e": 0.5}) is None


# -- the CLI: refused before any kernel starts --------------------------------------------------

def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


#: what a runbook run starts (its kernel, a server): a child of this pytest process whose command
#: line names one of these and was not there before is one the refused command started
RUN_CHILDREN = ("ipykernel", "papermill", "launch_server", "vllm")


def _run_children_since(before: set[int]) -> list[str]:
    """The children of this process started since ``before`` (pids) that a runbook run starts
    (:data:`RUN_CHILDREN`), as ``pid: command line``. Others are not counted: this worker's own
    housekeeping (a detached clean-up, a shared server's helper) may start one at any moment."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        if proc.pid in before:
            continue
        try:
            cmdline = " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue  # gone already: it left nothing running
        if any(kind in cmdline for kind in RUN_CHILDREN):
            found.append(f"{proc.pid}: {cmdline[:200]}")
    return found


@pytest.mark.parametrize("runbook, key, value, problem", [
    ("diagnose_acceptance", "num_prompts", "-3", "num_prompts must be None (all) or a whole number ≥ 1, got -3"),
    ("measure_acceptance", "num_prompts", "abc", "num_prompts must be None (all) or a whole number ≥ 1, got 'abc'"),
    ("diagnose_acceptance", "server_start_timeout", "-1",
     "server_start_timeout must be a number of seconds > 0 (at most 1000000), got -1"),
    ("compare_drafts", "server_start_timeout", "-5",
     "server_start_timeout must be a number of seconds > 0 (at most 1000000), got -5"),
    ("preflight", "port", "abc",
     "port must be None or a TCP port number 1-65535, got 'abc'"),
    ("diagnose_acceptance", "port", "0",
     "port must be None or a TCP port number 1-65535, got 0"),
    ("diagnose_acceptance", "allow_restart", "no", "allow_restart must be True or False, got 'no'"),
    ("diagnose_acceptance", "max_new_tokens", "true", "max_new_tokens must be a whole number ≥ 1, got True"),
    ("measure_acceptance", "grid", "steps:0", "got 'steps:0': grid steps=0 must be >= 1"),
])
def test_cli_refuses_a_bad_value_with_exit_2_and_starts_no_kernel(tmp_path, cli, state_dir, runbook, key, value,
                                                                   problem):
    before = _children()
    reports = tmp_path / "reports"
    code, out, err = cli("runbook", runbook, "--report-dir", str(reports), "-p", key, value)
    assert code == 2, err
    assert err.startswith(f"workbench runbook: bad parameters for {runbook}: ") and problem in err, err
    assert "Traceback" not in err and out == ""
    assert not reports.exists()  # run_runbook makes it first: it was never reached, no notebook written
    assert _run_children_since(before) == []
    assert not state_dir.exists()  # nothing on the box: no journal


def test_cli_names_every_problem_at_once_with_the_unknown_parameter(tmp_path, cli, state_dir):
    code, _, err = cli("runbook", "diagnose_acceptance", "--report-dir", str(tmp_path / "r"), "-p", "hots", "x",
                       "-p", "num_prompts", "-3", "-p", "port", "abc", "-p", "server_start_timeout", "-1",
                       "--host", "a b")
    assert code == 2
    assert err.count("\n") == 1  # one line
    for part in ("no parameter 'hots'", "num_prompts must be", "got -3", "port must be", "got 'abc'",
                 "server_start_timeout must be", "host must be a box", "got 'a b'"):
        assert part in err, (part, err)
    assert not (tmp_path / "r").exists()


def test_cli_message_is_the_schemas_message(tmp_path, cli, state_dir):
    code, _, err = cli("runbook", "measure_acceptance", "--report-dir", str(tmp_path), "-p", "warmup", "-1",
                       "-p", "include_baseline", "no")
    assert code == 2
    with pytest.raises(RunbookParameterError) as info:
        check_runbook_parameters("measure_acceptance", {"warmup": -1, "include_baseline": "no",
                                                        "report_dir": str(tmp_path)})
    assert err == f"workbench runbook: {info.value}\n"


def test_cli_passes_good_values_on_unchanged_to_a_fake_papermill(tmp_path, cli, state_dir, monkeypatch):
    """Good values (edge cases included) pass the check and reach papermill as given. papermill is
    replaced here by a stand-in that records its parameters and fails the first cell (a real
    kernel is the slow test's): the driver then reports the cell (exit 1), not the parameters."""
    from papermill.exceptions import PapermillExecutionError

    import workbench.cli.runbook as runbook

    seen = {}

    def fake_execute(source, output, *, parameters, **kwargs):
        seen.update(parameters)
        raise PapermillExecutionError(2, 1, "check", "RuntimeError", "stand-in", [])

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    monkeypatch.setattr(runbook, "_kill_kernels", lambda: [])
    given = {"port": "65535", "aux_layer_ids": "1,3,6", "num_prompts": "1", "prompts": "code",
             "allow_restart": "False", "expected_accept_length": "1", "server_start_timeout": "0.5",
             "launch_command": sandbox_launch_command(algorithm="EAGLE")}
    argv = [a for key, value in given.items() for a in ("-p", key, value)]
    code, _, err = cli("runbook", "diagnose_acceptance", "--report-dir", str(tmp_path / "r"), *argv)
    assert code == 1 and "cell 2 failed: RuntimeError: stand-in" in err, err
    assert {key: seen[key] for key in given} == {key: coerce_parameter(value) for key, value in given.items()}
    assert seen["port"] == 65535 and seen["allow_restart"] is False and seen["aux_layer_ids"] == "1,3,6"


# -- a papermill run without the CLI: the first cell refuses, before the box is touched ------------

@pytest.mark.slow  # starts a notebook kernel (the papermill command line)
def test_papermill_without_the_cli_fails_in_the_first_cell_with_the_same_message(tmp_path):
    state = tmp_path / "box-state"
    out = tmp_path / "out.ipynb"
    papermill_cli = Path(sys.executable).with_name("papermill")
    proc = subprocess.run([str(papermill_cli), str(ROOT / "runbooks" / "diagnose_acceptance.ipynb"), str(out),
                           "-k", "python3", "-p", "num_prompts", "-3", "-p", "port", "abc",
                           "-p", "report_dir", str(tmp_path / "reports")],
                          capture_output=True, text=True, cwd=checkout_dir(), timeout=300,
                          env={**os.environ, "EAGLE_WORKBENCH_STATE_DIR": str(state)})
    assert proc.returncode != 0
    nb = json.loads(out.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    tags = [c["metadata"].get("tags", []) for c in code]
    assert "parameters" in tags[0] and "injected-parameters" in tags[1]
    errors = [(i, o) for i, c in enumerate(code) for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert len(errors) == 1
    index, error = errors[0]
    assert index == 2  # the first cell after the parameters: nothing else ran
    assert all(c.get("execution_count") is None for c in code[3:])
    with pytest.raises(RunbookParameterError) as info:
        check_runbook_parameters("diagnose_acceptance", {"num_prompts": -3, "port": "abc"})
    assert error["ename"] == "RunbookParameterError" and error["evalue"] == str(info.value)
    assert not state.exists()  # the box was never touched: no journal, no state dir
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("params, message", [
    ({"expected_accept_length": 0.5}, "bad parameters: expected_accept_length must be None or an accept length ≥ 1 "
                                      "(tokens per verify step, bonus token included), got 0.5"),
    ({"aux_layer_ids": "1,-3"}, "aux_layer_ids must be non-negative layer ids such as [1, 3, 6], got '1,-3'"),
    ({"aux_layer_ids": 3}, "aux_layer_ids must be non-negative layer ids such as [1, 3, 6], got 3"),
])
def test_diagnosis_started_without_the_runbook_refuses_what_the_schema_refuses(tmp_path, state_dir, params, message):
    """``DiagnosisRun.start`` (scripts, the control panel) reads ``aux_layer_ids`` and
    ``expected_accept_length`` as the schema does, before anything connects."""
    from workbench.diagnosis import DiagnosisRun
    from workbench.errors import DiagnosisError

    with pytest.raises(DiagnosisError) as info:
        DiagnosisRun.start(launch_command="python -m sglang.launch_server --model-path /nonexistent",
                           report_dir=tmp_path / "reports", **params)
    assert str(info.value).startswith(message)
    assert not state_dir.exists()
