"""BoxState (workbench.lab.state): the console's shared view of the box, against real sandbox
servers on this machine (the local box)."""

from __future__ import annotations

import pytest

from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.errors import EngineNotFound, ServerChoiceError
from workbench.lab.state import BoxState


def test_bad_port_is_refused_before_connecting():
    with pytest.raises(ServerChoiceError, match="port must be a TCP port number 1-65535 or None, got 'x'"):
        BoxState("local", "x")
    with pytest.raises(ServerChoiceError, match="got True"):
        BoxState("local", True)


def test_notify_calls_every_listener_and_returns_their_errors():
    state = BoxState("local", 1234)
    seen = []

    def bad(event):
        raise ValueError(f"listener broke on {event}")

    state.listeners += [seen.append, bad, seen.append]
    errors = state.notify("started")
    assert seen == ["started", "started"]
    assert [str(e) for e in errors] == ["listener broke on started"]


def test_state_reads_the_server_on_its_port(own_sandbox_server, tmp_path):
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        state = BoxState("local", srv.port)
        try:
            server = state.server()
            assert server.pid == srv.pid and server.port == srv.port
            assert state.log_path() == str(srv.log_path)
            assert state.launch().get("--speculative-algorithm") == "EAGLE"
            engine = state.engine()
            assert engine.package == "workbench.sandbox" and engine.server_pid == srv.pid
            assert state.engine() is engine  # cached per pid
            assert state.source().root == engine.root.rstrip("/")
            cmap = state.code_path()
            assert cmap.root == state.source().root and cmap.entries
        finally:
            state.close()


def test_port_none_takes_the_only_server_or_lists_the_ports(own_sandbox_server, tmp_path, monkeypatch):
    with own_sandbox_server(tmp_path / "a", *sandbox_flags(**EAGLE)) as a, \
            own_sandbox_server(tmp_path / "b", *sandbox_flags(**EAGLE)) as b:
        state = BoxState("local")
        try:
            # other tests on this machine may run servers too: at least our two are listed
            with pytest.raises(ServerChoiceError) as err:
                state.server()
            assert {a.port, b.port} <= set(err.value.ports)
            assert "Pick one: set port = " in str(err.value) and "in the parameters cell" in str(err.value)
            assert "--port" not in str(err.value).split("Pick one")[1]
            assert state.port is None
            # only the servers of port a: the only one, and the port is kept
            monkeypatch.setattr(state, "servers", lambda: [s for s in BoxState.servers(state) if s.port == a.port])
            assert state.server().pid == a.pid and state.port == a.port
        finally:
            state.close()


def test_port_with_no_server_says_so(free_port):
    state = BoxState("local", free_port)
    try:
        with pytest.raises(ServerChoiceError, match=f"no SGLang server runs on port {free_port}"):
            state.server()
        with pytest.raises(EngineNotFound, match=f"port {free_port}"):
            state.engine()  # ServerChoiceError is an EngineNotFound
        with pytest.raises(ServerChoiceError):
            state.log_path()
        assert state.port == free_port
    finally:
        state.close()
