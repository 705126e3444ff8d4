"""choose_server: the one server a port (or the only one running) names, else a ServerChoiceError
that lists the servers in the caller's own terms."""

import pytest

from remote.result import ServerProcess
from workbench.engine import ServerChoiceError, choose_server
from workbench.errors import EngineNotFound


def server(pid, port):
    return ServerProcess(pid=pid, pgid=pid, argv=("python3", "-m", "sglang.launch_server", "--port", str(port)),
                         cwd="/", exe=None, port=port, log_path=None)


def test_the_only_server_is_chosen_and_none_when_none_runs():
    only = server(11, 30000)
    assert choose_server([only], None) is only
    assert choose_server([], None) is None


def test_a_port_picks_its_server():
    a, b = server(11, 30000), server(12, 31555)
    assert choose_server([a, b], 31555) is b


def test_several_servers_are_listed_in_the_notebooks_terms():
    with pytest.raises(ServerChoiceError) as err:
        choose_server([server(11, 30000), server(12, 31555)], None, how="port = N in the parameters cell")
    message = str(err.value)
    assert err.value.ports == [30000, 31555]
    assert "2 SGLang servers run" in message and "port 30000 (pid 11" in message and "port 31555 (pid 12" in message
    assert message.endswith("Pick one: set port = 30000 in the parameters cell")
    assert "--port" not in message.replace("sglang.launch_server --port", "")
    assert isinstance(err.value, EngineNotFound)  # callers catching the old error still catch it


def test_a_port_with_no_server_lists_what_runs():
    with pytest.raises(ServerChoiceError, match=r"no SGLang server runs on port 1234; running: port 30000 \(pid 11"):
        choose_server([server(11, 30000)], 1234, how="--port N")
    with pytest.raises(ServerChoiceError, match="no SGLang server runs on port 1234, and no other runs either"):
        choose_server([], 1234)
