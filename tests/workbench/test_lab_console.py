"""The box console (workbench.lab.console) in-process, against real sandbox servers on the local
box: status, restart with an edited command, a refused launch, "Put the box back"; and the GPU
section with nvidia-smi's CSV (a fake nvidia-smi script: no GPU here)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from remote import connect
from testkit.sandbox_servers import EAGLE, sandbox_flags
from workbench.errors import LaunchRefused
from workbench.lab.console import BoxConsole, _panes, box_console
from workbench.lab.gpu import GpuQueryError, parse_compute_apps, parse_gpus
from workbench.lab.state import BoxState

# In the format `nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total
# --format=csv,noheader,nounits` prints (an 8-GPU H100 box, two shown), and the compute apps query
# with a container's [N/A] memory.
GPU_CSV = ("0, GPU-5e1c7a2b-3f4d-11ee-9c1a-0242ac120002, NVIDIA H100 80GB HBM3, 73215, 81559\n"
           "1, GPU-6a2d8b3c-4e5f-11ee-9c1a-0242ac120002, NVIDIA H100 80GB HBM3, 4, 81559\n")
APPS_CSV = ("412771, 72340, GPU-5e1c7a2b-3f4d-11ee-9c1a-0242ac120002, /usr/bin/python3\n"
            "398120, [N/A], GPU-6a2d8b3c-4e5f-11ee-9c1a-0242ac120002, python3\n")


def test_parse_nvidia_smi_csv():
    gpus = parse_gpus(GPU_CSV)
    assert [(g.index, g.name, g.used_mib, g.total_mib) for g in gpus] == [
        (0, "NVIDIA H100 80GB HBM3", 73215, 81559), (1, "NVIDIA H100 80GB HBM3", 4, 81559)]
    apps = parse_compute_apps(APPS_CSV)
    assert [(a.pid, a.used_mib, a.name) for a in apps] == [(412771, 72340, "/usr/bin/python3"), (398120, None, "python3")]
    assert apps[0].gpu_uuid == gpus[0].uuid
    assert parse_compute_apps("") == []
    with pytest.raises(GpuQueryError, match="expected 4 comma-separated fields"):
        parse_compute_apps("No devices were found\n")
    with pytest.raises(GpuQueryError, match="bad number"):
        parse_gpus("x, GPU-1, A100, 1, 2\n")


def test_the_panes_are_built_and_a_missing_one_is_a_placeholder(monkeypatch):
    import workbench.lab.console as console_module

    state = BoxState("local", 1)
    built = _panes(state)
    assert [(t, type(pane).__name__) for t, pane, _ in built] == [
        ("Log", "LogPane"), ("Accept length", "AcceptPane"), ("Source", "SourcePane"), ("Probes", "ProbesPane")]
    monkeypatch.setattr(console_module, "PANES", [("Nope", "workbench.lab.no_such_pane", "NoPane")])
    [(title, pane, widget)] = _panes(state)
    assert (title, pane) == ("Nope", None) and "not installed" in widget.value


def test_no_server_offers_the_sandbox_command(free_port):
    c = box_console(port=free_port)
    try:
        assert f"no SGLang server runs on port {free_port}" in c.status_html.value
        assert "workbench.sandbox.launch_server" in c.command.value
        c2 = BoxConsole(port=free_port, launch_command="python -m sglang.launch_server --model-path m --port 1")
        assert c2.command.value == "python -m sglang.launch_server --model-path m --port 1"
    finally:
        c.close()


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """This test's own journal and run lock (the workbench's state directory on the local box)."""
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_status_with_fake_nvidia_smi(own_sandbox_server, tmp_path, monkeypatch, state_dir):
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        script = bin_dir / "nvidia-smi"
        apps = f"{srv.pid}, 72340, GPU-a, python3\n{os.getpid()}, 1024, GPU-a, python3\n"
        script.write_text("#!/bin/sh\ncase \"$1\" in\n"
                          f"  --query-gpu=*) printf '%s' '0, GPU-a, NVIDIA H100 80GB HBM3, 73364, 81559\n' ;;\n"
                          f"  --query-compute-apps=*) printf '%s' '{apps}' ;;\n  *) exit 2 ;;\nesac\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        time.sleep(1.1)  # uptime is whole seconds
        c = BoxConsole(port=srv.port)
        try:
            f = c.status()
            assert f["pid"] == srv.pid and f["port"] == srv.port and f["health"] == "ready"
            assert f["uptime_s"] >= 1
            assert f["engine_root"].endswith("workbench/sandbox")
            holders = {h.pid: h.leftover for h in f["gpu"].holders}
            assert holders == {srv.pid: False, os.getpid(): True}
            page = c.status_html.value
            assert "healthy" in page and str(srv.port) in page and "73364 / 81559 MiB" in page
            assert page.count("LEFTOVER") == 1
        finally:
            c.close()


def test_status_without_nvidia_smi_says_so(own_sandbox_server, tmp_path, monkeypatch, state_dir):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        c = BoxConsole(port=srv.port)
        try:
            if c.status()["gpu"].available:
                pytest.skip("this machine has nvidia-smi")
            assert "no nvidia-smi on this box" in c.status_html.value
        finally:
            c.close()


def test_restart_refuse_and_put_the_box_back(own_sandbox_server, tmp_path, state_dir):
    box = connect("local")
    relaunched = None
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        c = BoxConsole(port=srv.port, server_start_timeout=120)
        heard = []
        c.state.listeners.append(heard.append)
        try:
            original = tuple(c.state.server().argv)
            assert "EAGLE" in original and c.command.value == c.state.server().command_line
            # restart with the edited command: EAGLE -> EAGLE3
            edited = c.command.value.replace("--speculative-algorithm EAGLE ", "--speculative-algorithm EAGLE3 ")
            assert edited != c.command.value
            handle = c.restart(edited)
            assert handle is not None, c.status_line.value
            now = c.state.server()
            assert now.pid == handle.pid != srv.pid
            assert now.argv[now.argv.index("--speculative-algorithm") + 1] == "EAGLE3"
            assert heard == ["started"]
            assert "healthy" in c.status_html.value and "EAGLE3" in c.status_html.value
            # the start-up progress widget followed that launch (workbench.lab.start_progress)
            assert c.start_progress.text.startswith("console: ready after"), c.start_progress.text
            assert c.start_progress.updates >= 2 and "load-draft" in c.start_progress.widget.value
            assert any("stopped the original server" in x for x in c.journal_lines())
            assert any(f"started pid {handle.pid}" in x for x in c.journal_lines())
            # a command the doctor says will not start: refused, nothing changed
            bad = edited.replace(str(tmp_path), str(tmp_path)).replace(
                now.argv[now.argv.index("--speculative-draft-model-path") + 1], str(tmp_path / "no-such-draft"))
            assert c.restart(bad) is None
            assert isinstance(c.last_error, LaunchRefused)
            assert "Launch refused" in c.status_line.value and c.force_button.layout.display is None
            assert c.last_error.findings and c.last_error.findings[0].rule in c.findings_html.value
            assert c.state.server().pid == handle.pid  # nothing stopped or started
            # put the box back: the original argv runs again, the journal is clean
            report = c.restore()
            assert report is not None and report.clean, c.restore_html.value
            back = c.state.server()
            relaunched = back
            assert tuple(back.argv) == original and back.pid != handle.pid
            assert not box.is_alive(handle.pid)
            assert c.journal_lines() == [] and "as found" in c.journal_html.value
            assert heard[-1] == "restored" and "relaunched" in c.restore_html.value
            assert c.start_progress.text.startswith("restore: ready after"), c.start_progress.text
            assert c.command.value == back.command_line
            again = c.restore()
            assert again.actions == [] and "Nothing to restore" in c.restore_html.value
        finally:
            c.close()
            if relaunched is not None:
                box.stop_server(relaunched.pid, grace=10)
    from remote.probes import list_probes
    assert list_probes(box) == []
    box.close()


def test_several_servers_are_listed_in_notebook_terms(own_sandbox_server, tmp_path, state_dir):
    with own_sandbox_server(tmp_path / "a", *sandbox_flags(**EAGLE)) as a, \
            own_sandbox_server(tmp_path / "b", *sandbox_flags(**EAGLE)) as b:
        c = BoxConsole()  # port = None, as the notebook's default
        try:
            page = c.status_html.value
            assert "No server chosen" in page and "Pick one: set port = " in page and "in the parameters cell" in page
            assert f"port {a.port}" in page and f"port {b.port}" in page and "Traceback" not in page
            assert "--port N" not in page
        finally:
            c.close()


@pytest.mark.slow  # starts a kernel
def test_box_console_notebook_runs_on_the_server(own_sandbox_server, tmp_path, execute_notebook, state_dir):
    """The notebook builds the console (no traceback) on the port given, and changes nothing."""
    import nbformat

    from workbench.session.journal import Journal

    root = Path(__file__).resolve().parents[2]
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        out = tmp_path / "out.ipynb"
        execute_notebook(root / "notebooks" / "box_console.ipynb", out, parameters={"port": srv.port},
                         cwd=str(tmp_path))
        nb = nbformat.read(str(out), as_version=4)
        last = nb.cells[-1]
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in last.outputs), last.outputs
        errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
                  if o.get("output_type") == "error"]
        assert errors == []
        box = connect("local")
        try:
            assert [s.pid for s in BoxState("local", srv.port, box=box).servers() if s.port == srv.port] == [srv.pid]
            assert not Journal(box).pending
        finally:
            box.close()


def test_box_session_launch_refuses_another_port_and_stop_with_nothing_running(free_port, state_dir):
    """BoxSession.launch / stop (used by the console): a command for another port is refused
    before anything is checked or started; stop with nothing running stops nothing; the run lock
    is released by the restore."""
    from workbench.engine.launch import LaunchCommand
    from workbench.errors import DiagnosisError
    from workbench.sandbox_box import sandbox_launch_command
    from workbench.session.box_session import BoxSession, open_box

    box, inv, journal = open_box("local", launch_command=sandbox_launch_command(port=free_port), port=free_port)
    session = BoxSession(box, inv, journal, server_start_timeout=60)
    try:
        other = LaunchCommand.parse(sandbox_launch_command(port=free_port + 1))
        with pytest.raises(DiagnosisError, match=f"--port {free_port + 1} is not the session's port {free_port}"):
            session.launch(other, "console")
        assert session.guard.checks == [] and session.current is None
        assert session.stop() is False
    finally:
        report = session.restore()
        session.finished = True
    assert report.clean and report.actions == [] and not journal.pending
