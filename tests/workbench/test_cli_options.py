"""What every ``workbench`` subcommand shares (``workbench.cli.common``): the box options, the TCP
port and time-out types, the exit codes, and ``main`` turning the errors a subcommand raises into
one line on stderr and an exit code.

The parser itself is walked, so a subcommand added later without ``--host`` / ``--timeout`` (or
with a ``--port`` of its own type) fails here until this file's table names it.
"""

from __future__ import annotations

import argparse

import pytest

from workbench.cli import build_parser
from workbench.cli.argtypes import positive_seconds, tcp_port
from workbench.cli.common import CliError, ExitCode

pytestmark = pytest.mark.usefixtures("state_dir")

#: Every runnable subcommand that talks to a box, with the least argv that parses.
BOX_COMMANDS = {
    "runbook": ["runbook", "diagnose_acceptance"],
    "restore": ["restore"],
    "status": ["status"],
    "doctor": ["doctor", "--running"],
    "probe add": ["probe", "add", "--recipe", "draft-input-width"],
    "probe list": ["probe", "list"],
    "probe revert": ["probe", "revert", "--all"],
    "probe read": ["probe", "read", "--tag", "t"],
    "source locate": ["source", "locate"],
    "source show": ["source", "show", "srt/models/llama_eagle3.py"],
    "source find": ["source", "find", "load_weights"],
    "source map": ["source", "map"],
    "source scan": ["source", "scan"],
    "logs": ["logs", "server.log"],
    "measure": ["measure"],
}
#: The ones that never touch a box.
LOCAL_COMMANDS = {"report", "probe recipes"}
#: The ones with --port.
PORT_COMMANDS = ["doctor", "probe add", "probe read", "source locate", "source show", "source find", "source map",
                 "source scan", "measure"]


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    """``{"probe add": parser, ...}``: every parser of the tree that has no subcommands of its own."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {" ".join(path): parser}
    out = {}
    for name, child in subs[0].choices.items():
        out.update(_leaves(child, (*path, name)))
    return out


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


LEAVES = _leaves(build_parser())


def test_the_table_names_every_subcommand():
    assert set(LEAVES) == set(BOX_COMMANDS) | LOCAL_COMMANDS
    assert set(PORT_COMMANDS) == {name for name, p in LEAVES.items() if _option(p, "--port")}


@pytest.mark.parametrize("name", sorted(BOX_COMMANDS))
def test_box_subcommands_take_host_and_timeout(name):
    parser = LEAVES[name]
    host, timeout = _option(parser, "--host"), _option(parser, "--timeout")
    assert host is not None and timeout is not None, name
    assert host.help.startswith("the box: local (this machine), an ~/.ssh/config alias or user@host[:port]")
    assert host.default == (None if name == "runbook" else "local")  # the runbook's -p host decides
    assert timeout.type is positive_seconds and timeout.default > 0
    assert parser.get_default("func") is not None and parser.get_default("prog") == f"workbench {name}"


@pytest.mark.parametrize("name", sorted(LOCAL_COMMANDS))
def test_local_subcommands_take_no_box_options(name):
    assert _option(LEAVES[name], "--host") is None and _option(LEAVES[name], "--timeout") is None


@pytest.mark.parametrize("name", PORT_COMMANDS)
def test_every_port_is_a_tcp_port(name):
    assert _option(LEAVES[name], "--port").type is tcp_port


@pytest.mark.parametrize("value, message", [
    ("0", "must be >= 1 and <= 65535 (a TCP port number), got 0"),
    ("70000", "must be >= 1 and <= 65535 (a TCP port number), got 70000"),
    ("abc", "must be a TCP port number (an integer 1-65535), got 'abc'"),
])
@pytest.mark.parametrize("name", PORT_COMMANDS)
def test_a_bad_port_is_refused_everywhere(cli, name, value, message):
    code, out, err = cli(*BOX_COMMANDS[name], "--port", value)
    assert (code, out) == (2, "")
    assert err.startswith(f"usage: workbench {name}")
    assert err.splitlines()[-1] == f"workbench {name}: error: argument --port: {message}"


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf", "3e6"])
@pytest.mark.parametrize("name", sorted(BOX_COMMANDS))
def test_a_bad_timeout_is_refused_everywhere(cli, name, value):
    # inf and anything over MAX_SECONDS overflow the waits underneath (select's C int of milliseconds)
    code, out, err = cli(*BOX_COMMANDS[name], "--timeout", value)
    assert (code, out) == (2, "")
    expected = (f"expected a number of seconds, got {value!r}" if value == "soon" else
                f"must be at most 1e+06 seconds, got {value}" if value in ("inf", "3e6") else
                f"must be a positive number of seconds, got {value}")
    assert err.splitlines()[-1] == f"workbench {name}: error: argument --timeout: {expected}"


def test_a_good_port_and_timeout_parse():
    args = build_parser().parse_args(["doctor", "--running", "--port", "65535", "--timeout", "2.5"])
    assert (args.port, args.timeout, args.connect_timeout) == (65535, 2.5, 2.5)
    args = build_parser().parse_args(["probe", "read", "--tag", "t", "--port", "1"])
    assert (args.port, args.timeout, args.connect_timeout) == (1, 60.0, None)  # connect: the ssh config's


# -- errors raised inside a subcommand -----------------------------------------------------------------


def _raises(exc: BaseException):
    def raiser(*args, **kwargs):
        raise exc
    return raiser


def test_main_maps_errors_raised_inside_a_subcommand(cli, monkeypatch):
    import workbench.engine
    import workbench.session.journal as journal
    from remote.errors import ProbeConflict, RemoteError, SSHConnectFailed
    from workbench.errors import DoctorError, WorkbenchError

    assert [int(c) for c in ExitCode] == [0, 1, 2, 130]
    monkeypatch.setattr(journal, "restore_box", _raises(WorkbenchError("the journal says no")))
    assert cli("restore") == (2, "", "workbench restore: the journal says no\n")
    monkeypatch.setattr(journal, "restore_box", _raises(RemoteError("the box went away", box="local")))
    assert cli("restore") == (2, "", "workbench restore: [local] the box went away\n")
    monkeypatch.setattr(journal, "restore_box", _raises(SSHConnectFailed("connection refused", where="me@h:22")))
    assert cli("restore") == (2, "", "workbench restore: me@h:22: cannot connect: connection refused\n")
    # a subcommand's own code, a WorkbenchError's exit_code, and a probe conflict: a failure found (1)
    monkeypatch.setattr(journal, "restore_box", _raises(CliError("half undone", ExitCode.FAILURE)))
    assert cli("restore") == (1, "", "workbench restore: half undone\n")

    class Refused(WorkbenchError):
        exit_code = 1

    monkeypatch.setattr(journal, "restore_box", _raises(Refused("refused")))
    assert cli("restore") == (1, "", "workbench restore: refused\n")
    monkeypatch.setattr(journal, "restore_box", _raises(ProbeConflict("edited by someone else", path="/f.py")))
    assert cli("restore") == (1, "", "workbench restore: edited by someone else: /f.py\n")
    # a nested subcommand is named in full
    monkeypatch.setattr(workbench.engine, "find_engine", _raises(DoctorError("no engine", where="local")))
    assert cli("source", "locate") == (2, "", "workbench source locate: no engine (local)\n")
    # an error nobody raises on purpose is a bug: its traceback is kept
    monkeypatch.setattr(journal, "restore_box", _raises(ZeroDivisionError("division by zero")))
    with pytest.raises(ZeroDivisionError):
        cli("restore")


def test_cli_error_refuses_a_code_that_is_no_exit_code():
    assert CliError("x").exit_code is ExitCode.CANNOT_RUN
    with pytest.raises(ValueError):
        CliError("x", 3)


# -- --timeout reaches every box call ----------------------------------------------------------------


@pytest.fixture
def connects(monkeypatch):
    """Every ``remote.connect`` call's (spec, connect_timeout); the real connect is still made."""
    import remote

    calls = []
    real = remote.connect

    def spy(spec="local", **kwargs):
        calls.append((spec, kwargs.get("connect_timeout")))
        return real(spec, **kwargs)

    monkeypatch.setattr(remote, "connect", spy)
    return calls


def test_restore_passes_its_timeout_to_the_box(cli, connects, monkeypatch):
    import workbench.session.journal as journal

    seen = []
    real = journal.restore_box

    def spy(box, **kwargs):
        seen.append(kwargs.get("timeout"))
        return real(box, **kwargs)

    monkeypatch.setattr(journal, "restore_box", spy)
    assert cli("restore", "--timeout", "7") == (0, "nothing to restore\n", "")
    assert cli("restore") == (0, "nothing to restore\n", "")
    assert (seen, connects) == ([7.0, 30.0], [("local", 7.0), ("local", None)])


@pytest.mark.parametrize("failure, code, said", [
    (KeyboardInterrupt, 130, "workbench runbook: interrupted: Ctrl-C (SIGINT); the box was restored (see above)"),
    (RuntimeError("the kernel died"), None, None),
])
def test_runbook_restores_with_its_timeout_when_the_run_fails(cli, connects, monkeypatch, tmp_path, failure, code,
                                                               said):
    """Interrupted: restored (each box call with --timeout), exit 130. Any other failure of the
    run is restored the same way, then propagates (it is not a papermill cell failure)."""
    import papermill

    import workbench.cli.runbook as runbook
    import workbench.session.journal as journal

    seen = []
    real = journal.restore_box

    def spy(box, **kwargs):
        seen.append(kwargs.get("timeout"))
        return real(box, **kwargs)

    monkeypatch.setattr(journal, "restore_box", spy)
    monkeypatch.setattr(runbook, "_kill_kernels", lambda: [])
    monkeypatch.setattr(papermill, "execute_notebook", _raises(failure))
    argv = ["runbook", "diagnose_acceptance", "--report-dir", str(tmp_path), "--timeout", "9"]
    if code is None:
        with pytest.raises(RuntimeError, match="the kernel died"):
            cli(*argv)
    else:
        got, out, err = cli(*argv)
        assert (got, out) == (code, "") and err.splitlines()[-1] == said
    # connected twice: once before the run (a pending run looked for, the box's servers read: their
    # secrets are redacted in the report), once to restore (and, interrupted, to check the journal
    # after, over the same connection)
    assert seen == [9.0] and connects == [("local", 9.0)] * 2


def test_the_installed_entry_point(cli):
    """The ``workbench`` script (``workbench.cli:main``) is the same command, exit codes included."""
    try:
        res = cli.subprocess("probe", "recipes", entry_point=True, timeout=60)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert res.code == 0 and "draft-input-width" in res.out, res.err
    res = cli.subprocess("doctor", "--running", "--port", "0", entry_point=True, timeout=60)
    assert res.code == 2 and res.err.splitlines()[-1].endswith("argument --port: must be >= 1 and <= 65535 "
                                                                   "(a TCP port number), got 0")
