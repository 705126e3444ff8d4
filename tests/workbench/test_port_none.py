"""``port = None`` with several servers running: every entry point lists the ports in its own
terms (the CLI: ``--port N``; a notebook or runbook: ``port = N in the parameters cell``; the panel:
the port field), and with one server that one is picked. Two real sandbox servers on free ports of
this machine (the local box); other engineers' servers may run too, so the tests assert that at
least ours are listed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from remote import connect
from testkit.sandbox_servers import EAGLE, models_missing_reason, running_sandbox_server, sandbox_flags
from workbench.engine import find_engine
from workbench.errors import ServerChoiceError
from workbench.lab.notebook import IN_PARAMETERS_CELL, NotebookMessage, shown_as_message
from workbench.session import Journal

pytestmark = pytest.mark.slow  # starts two sandbox servers (and, below, a kernel)

ROOT = Path(__file__).resolve().parents[2]


def _while_locked(attempt, locked=lambda result: False, *, timeout: float = 300.0, every: float = 5.0):
    """``attempt()`` again every ``every`` s while another engineer's run holds this machine's run
    lock (it raised ``RunLocked``, or ``locked(result)`` says its result shows that), at most
    ``timeout`` s; then its result, or the last ``RunLocked`` raised."""
    import time

    from workbench.session.runlock import RunLocked

    deadline = time.monotonic() + timeout
    while True:
        try:
            result = attempt()
        except RunLocked:
            if time.monotonic() > deadline:
                raise
        else:
            if not locked(result) or time.monotonic() > deadline:
                return result
        time.sleep(every)


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    reason = models_missing_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("two-servers")
    with running_sandbox_server(base / "a", *sandbox_flags(**EAGLE)) as a, \
            running_sandbox_server(base / "b", *sandbox_flags(**EAGLE)) as b:
        yield a, b


@pytest.fixture
def box():
    b = connect("local")
    yield b
    b.close()


def only(box, server):
    """``box`` restricted to ``server``'s process (the real process list, filtered): this
    machine is shared, so "exactly one server runs" is made true for the call under test."""
    real = box.find_servers

    def find_servers(**kwargs):
        return [s for s in real(**kwargs) if s.pid == server.pid]

    box.find_servers = find_servers
    return box


def test_find_engine_lists_the_ports_in_cli_terms_by_default(two_servers, box):
    a, b = two_servers
    with pytest.raises(ServerChoiceError) as err:
        find_engine(box, port=None)
    message = str(err.value)
    assert {a.port, b.port} <= set(err.value.ports)
    assert f"port {a.port} (pid {a.pid}" in message and f"port {b.port} (pid {b.pid}" in message
    assert "Pick one: set --port " in message


def test_find_engine_in_notebook_terms(two_servers, box):
    a, b = two_servers
    with pytest.raises(ServerChoiceError) as err:
        find_engine(box, port=None, how=IN_PARAMETERS_CELL)
    tail = str(err.value).split("Pick one: ")[1]
    assert tail.startswith("set port = ") and "in the parameters cell" in tail and "--port" not in tail


def test_find_engine_picks_the_port_asked_or_the_only_server(two_servers, box):
    a, b = two_servers
    engine = find_engine(box, port=b.port)
    assert engine.server_pid == b.pid and engine.port == b.port and engine.package == "workbench.sandbox"
    engine = find_engine(only(box, a), port=None, how=IN_PARAMETERS_CELL)
    assert engine.server_pid == a.pid and engine.port == a.port


def test_cli_source_locate_keeps_the_port_option_wording(two_servers, cli):
    a, b = two_servers
    code, out, err = cli("source", "locate")
    assert code == 2, (out, err)
    assert "SGLang servers run" in err and f"port {a.port} (pid {a.pid}" in err and "Pick one: set --port " in err
    code, out, err = cli("source", "locate", "--port", str(a.port), "--json")
    assert code == 0, err
    assert json.loads(out)["server_pid"] == a.pid


def test_shown_as_message_renders_one_line_and_keeps_other_errors():
    with pytest.raises(NotebookMessage) as err:
        with shown_as_message():
            raise ServerChoiceError("2 SGLang servers run: port 1 (pid 2: x …). Pick one: set port = 1 in the "
                                    "parameters cell", ports=[1])
    assert err.value._render_traceback_() == [
        "ServerChoiceError: 2 SGLang servers run: port 1 (pid 2: x …). Pick one: set port = 1 in the parameters cell"]
    assert err.value.error.ports == [1]
    with pytest.raises(KeyError):  # not a workbench error: a bug keeps its traceback
        with shown_as_message():
            raise KeyError("x")


def test_take_inventory_lists_the_ports_in_runbook_terms(two_servers, box):
    from workbench.engine import running_servers
    from workbench.sandbox_box import sandbox_launch_command
    from workbench.session import take_inventory

    a, b = two_servers
    if any(s.port == 30000 for s in running_servers(box)):
        pytest.skip("a server runs on the default port 30000 here: port None means that one")
    with pytest.raises(ServerChoiceError) as err:
        take_inventory(box, launch_command=None, port=None, default_launch=sandbox_launch_command())
    assert {a.port, b.port} <= set(err.value.ports)
    assert f"port {b.port} (pid {b.pid}" in str(err.value)
    assert "Pick one: set port = " in str(err.value) and "in the parameters cell" in str(err.value)
    # a port named (by the parameter or the launch command's --port) picks that server
    assert take_inventory(box, launch_command=None, port=a.port).server_pid == a.pid
    given = sandbox_launch_command(port=b.port)
    assert take_inventory(box, launch_command=given, port=None).server_pid == b.pid


def test_diagnosis_run_start_lists_the_ports_and_changes_nothing(two_servers, box, tmp_path):
    """Through the run lock (another engineer's run may hold this machine's: wait for it)."""
    from workbench.diagnosis import DiagnosisRun
    from workbench.engine import running_servers
    from workbench.session.runlock import box_status

    a, b = two_servers
    if any(s.port == 30000 for s in running_servers(box)):
        pytest.skip("a server runs on the default port 30000 here: port None means that one")
    def attempt():
        with pytest.raises(ServerChoiceError, match=r"Pick one: set \d+ in the port field") as err:
            DiagnosisRun.start(port=None, report_dir=tmp_path / "reports", how="N in the port field")
        return err

    err = _while_locked(attempt)
    assert {a.port, b.port} <= set(err.value.ports)
    assert not Journal(box).pending
    assert {s.pid for s in running_servers(box)} >= {a.pid, b.pid}  # neither restarted
    holder = box_status(box).holder
    assert holder is None or holder.pid != os.getpid()  # our run lock was released


def test_engine_probes_notebook_shows_the_message_without_a_traceback(two_servers, execute_notebook, tmp_path):
    import nbformat
    from papermill.exceptions import PapermillExecutionError

    a, b = two_servers
    out = tmp_path / "engine_probes.ipynb"
    with pytest.raises(PapermillExecutionError) as err:
        execute_notebook(ROOT / "notebooks" / "engine_probes.ipynb", out, parameters={"port": None},
                         cwd=str(tmp_path))
    assert err.value.ename == "NotebookMessage"
    assert f"port {a.port} (pid {a.pid}" in err.value.evalue and "in the parameters cell" in err.value.evalue
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert len(errors) == 1
    lines = errors[0]["traceback"]
    assert len(lines) == 1 and lines[0].startswith("ServerChoiceError: ") and "Pick one: set port = " in lines[0]
    assert "--port" not in lines[0].split("Pick one")[1]


def test_panel_inventory_lists_the_ports_in_port_field_terms(two_servers, box, tmp_path):
    from workbench.lab.panel import ControlPanel
    from workbench.engine import running_servers

    a, b = two_servers
    if any(s.port == 30000 for s in running_servers(box)):
        pytest.skip("a server runs on the default port 30000 here: port None means that one")

    def attempt():
        panel = ControlPanel(report_dir=tmp_path / "reports")
        assert panel.step("start") is None
        return panel

    # the panel shows a RunLocked as its error ("another run is using ..."), it does not raise it
    panel = _while_locked(attempt, locked=lambda p: "another run is using" in str(p.errors[0]))
    assert [type(e) for e in panel.errors] == [ServerChoiceError]
    assert f"port {a.port} (pid {a.pid}" in str(panel.errors[0])
    assert "in the port field" in str(panel.errors[0]).split("Pick one")[1]
    assert panel.status.value == "1 · Inventory: failed" and panel.run is None
    assert not Journal(box).pending
