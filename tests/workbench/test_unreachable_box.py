"""A box that cannot be reached at all says so in one line, and nothing else (issue 26).

Every way of not reaching a box — a mistyped alias, a closed port, a name that does not resolve,
a server that never answers, a refused key, an unknown host key — for every command a new user
points at a box (``runbook diagnose_acceptance``, ``doctor``, ``restore``, ``probe add``), run as a
user runs them (``python -m workbench.cli``, real loopback OpenSSH server): exit 2, stdout empty,
one line on stderr ``workbench CMD: cannot reach box HOST[ (user@host:port)]: WHY; nothing was
changed``, no ``restore FAILED``, no traceback, no executed notebook, no state written on the box.
Only loopback addresses are contacted (127.0.0.1; ``nonexistent.invalid`` is a reserved name that
never resolves, RFC 2606).
"""

from __future__ import annotations

import re
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sshd import keygen

pytestmark = pytest.mark.slow  # runs the CLI as subprocesses

LAUNCH = "python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3"


def _commands(host: str, reports: Path) -> dict[str, list[str]]:
    return {
        "workbench runbook": ["runbook", "diagnose_acceptance", "--host", host, "--report-dir", str(reports)],
        "workbench doctor": ["doctor", "--host", host, "--launch", LAUNCH],
        "workbench restore": ["restore", "--host", host],
        "workbench probe add": ["probe", "add", "--host", host, "--file", "/tmp/x.py", "--line", "1", "--print", "1"],
    }


@pytest.fixture
def silent_port():
    """A TCP port on 127.0.0.1 that accepts connections (the kernel's backlog) and never says a
    word: an SSH server that does not answer, so the handshake times out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture
def boxes(sshd, tmp_path, free_port, silent_port):
    """An ssh config with one alias per way of failing, and the expected reason of each:
    ``{host spec: (destination shown or None, regex of the reason)}``; returns (config, cases)."""
    wrong = keygen(tmp_path / "id_not_authorized")
    empty_known = tmp_path / "empty_known_hosts"
    empty_known.write_text("")
    port = sshd.server.port
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.host_block("ewb-closed", free_port)
        + sshd.host_block("ewb-wrongkey", port, IdentityFile=f'"{wrong}"')
        + sshd.host_block("ewb-newkey", port, UserKnownHostsFile=f'"{empty_known}"')
        + sshd.host_block("ewb-silent", silent_port, ConnectTimeout="2")
        + sshd.host_block("ewb-nodns", 22, HostName="nonexistent.invalid")
    )
    user = sshd.user
    cases = {
        "ewb-typo": (None, r"'ewb-typo' is not a Host alias in .*ssh_config \(aliases defined: ewb-closed, "),
        f"{user}@127.0.0.1:{free_port}": (None, rf"connection refused: nothing listens on 127\.0\.0\.1:{free_port}"),
        "ewb-closed": (f"{user}@127.0.0.1:{free_port}", rf"connection refused: nothing listens on 127\.0\.0\.1:{free_port}"),
        "nonexistent.invalid": (f"{user}@nonexistent.invalid:22", r"cannot resolve host name 'nonexistent\.invalid'"),
        "ewb-nodns": (f"{user}@nonexistent.invalid:22", r"cannot resolve host name 'nonexistent\.invalid'"),
        "ewb-silent": (f"{user}@127.0.0.1:{silent_port}", r"(timed out|within ConnectTimeout 2s|no SSH banner)"),
        "ewb-wrongkey": (f"{user}@127.0.0.1:{port}", rf"authentication as {user}@127\.0\.0\.1 failed .*id_not_authorized"),
        "ewb-newkey": (f"{user}@127.0.0.1:{port}", rf"host key of \[127\.0\.0\.1\]:{port} is unknown .*`ssh-keyscan -p {port} "),
    }
    return config, cases


#: Cases whose reason another case already gives the runbook (an alias for a closed port / an
#: unresolvable name); ``ewb-silent`` waits for its ConnectTimeout.
RUNBOOK_SPARED = {"ewb-closed", "ewb-nodns", "ewb-silent"}
CASES = ["ewb-typo", "closed-port", "ewb-closed", "nonexistent.invalid", "ewb-nodns", "ewb-silent", "ewb-wrongkey",
         "ewb-newkey"]


@pytest.mark.parametrize("case", CASES)
def test_every_command_says_the_box_cannot_be_reached_in_one_line(case, boxes, sshd, free_port, tmp_path, cli):
    config, cases = boxes
    host = f"{sshd.user}@127.0.0.1:{free_port}" if case == "closed-port" else case
    shown, why = cases[host]
    state = tmp_path / "box-state"
    env = {"EAGLE_WORKBENCH_SSH_CONFIG": str(config), "EAGLE_WORKBENCH_STATE_DIR": str(state)}
    reports = tmp_path / "reports"
    commands = _commands(host, reports)
    if case in RUNBOOK_SPARED:  # the same reason as another case; the runbook driver imports papermill (~10 s)
        del commands["workbench runbook"]
    with ThreadPoolExecutor(len(commands)) as pool:
        results = dict(zip(commands, pool.map(lambda argv: cli.subprocess(*argv, env=env, timeout=120),
                                              commands.values())))
    head = f"cannot reach box {host}" + (f" ({shown})" if shown else "") + ": "
    for prog, res in results.items():
        lines = res.err.splitlines()
        assert res.code == 2, (prog, res)
        assert res.out == "", (prog, res.out)
        assert len(lines) == 1, (prog, res.err)
        line = lines[0]
        assert line.startswith(f"{prog}: {head}"), (prog, line)
        assert re.search(why, line), (prog, why, line)
        tail = "; nothing was changed" + (" (and nothing restored: run it again once the box answers)"
                                          if prog == "workbench restore" else "")
        assert line.endswith(tail), (prog, line)
        assert "restore FAILED" not in res.err and "Traceback" not in res.err
    # nothing was run, nothing written: no executed notebook, no state on the box
    assert not list(reports.glob("*")) if reports.exists() else True
    assert not state.exists() or not any(state.iterdir())


def test_a_mistyped_alias_among_other_bad_parameters_is_named_with_them(boxes, cli, tmp_path):
    """The one-line "cannot reach box" is for a host that is all that is wrong; with another bad
    ``-p`` value every problem is named at once, as the runbook's parameter check does."""
    config, _ = boxes
    res = cli.subprocess("runbook", "diagnose_acceptance", "--host", "ewb-typo", "-p", "port", "0",
                         "--report-dir", str(tmp_path / "r"),
                         env={"EAGLE_WORKBENCH_SSH_CONFIG": str(config),
                              "EAGLE_WORKBENCH_STATE_DIR": str(tmp_path / "s")})
    assert res.code == 2 and "Traceback" not in res.err
    assert "bad parameters for diagnose_acceptance" in res.err and "'ewb-typo' is not a Host alias" in res.err
    assert "port must be" in res.err and "cannot reach box" not in res.err
