"""The box's GPUs as the workbench reads them (``workbench.session.gpus``, ``.gpu_holders``,
``.gpu_release``, ``.gpu_guard``): the parser on nvidia-smi's own format, a box with no
nvidia-smi, and — through the sandbox's GPUs and its ``nvidia-smi`` (there is no GPU here: those
tests say so in their names) — real processes holding memory: named with title, user and MiB,
stopped and waited for, refused, reclaimed."""

from __future__ import annotations

import json
import os
import pwd
import socket
import sys
import time

import pytest

from remote import connect
from remote.errors import PortInUse
from testkit.gpu_holders import SERVER_SCRIPT, env, hold, kill, sandbox_gpus
from workbench.engine.launch import LaunchCommand
from workbench.errors import GpuQueryError, GpusHeld, GpusNotFreed
from workbench.session.gpu_guard import (RendezvousPortInUse, check_before_launch, launch_devices,
                                         rendezvous_ports)
from workbench.session.box_view import gpu_lines
from workbench.session.gpu_holders import read_box_gpus
from workbench.session.gpu_release import GpuBaseline, stop_and_release
from workbench.session.gpus import GpuCommand, GpuSnapshot, gpu_command, parse_app_lines, parse_gpu_lines, read_gpu_snapshot

# What `nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total --format=csv,noheader,nounits`
# prints on an 8 x H100 box (three shown), with one line cut in the middle.
U0, U1, U2 = (f"GPU-{c * 8}-3f4d-11ee-9c1a-0242ac120002" for c in "abc")
GPU_LINES = (f"0, {U0}, NVIDIA H100 80GB HBM3, 73215, 81559\n"
             f"1, {U1}, NVIDIA H100 80GB HBM3, 4\n"
             f"2, {U2}, NVIDIA H100 80GB HBM3, 71772, 81559\n")


def test_one_bad_line_hides_nothing_and_is_named():
    gpus, problems = parse_gpu_lines(GPU_LINES)
    assert [(g.index, g.used_mib) for g in gpus] == [(0, 73215), (2, 71772)]
    [p] = problems
    assert isinstance(p, GpuQueryError) and (p.query, p.lineno, p.line) == (
        "--query-gpu", 2, f"1, {U1}, NVIDIA H100 80GB HBM3, 4")
    assert str(p).startswith("nvidia-smi --query-gpu line 2: expected 5 comma-separated fields")
    apps, problems = parse_app_lines(f"412771, 72340, {U0}, sglang::scheduler_TP0\n"
                                     f"x, 1, {U2}, python\n"
                                     f"398120, [N/A], {U2}, python3, with, commas\n")
    assert [(a.pid, a.used_mib, a.process_name) for a in apps] == [
        (412771, 72340, "sglang::scheduler_TP0"), (398120, None, "python3, with, commas")]
    assert [(p.lineno, "bad number" in str(p)) for p in problems] == [(2, True)]
    # the header and units of --format=csv, and the line the real one prints when nothing runs
    gpus, problems = parse_gpu_lines("index, uuid, name, memory.used [MiB], memory.total [MiB]\n"
                                     f"0, {U0}, NVIDIA H100 80GB HBM3, 30000 MiB, 81559 MiB\n")
    assert ([(g.index, g.used_mib, g.total_mib) for g in gpus], problems) == ([(0, 30000, 81559)], [])
    assert parse_app_lines("No running processes found\n") == ([], [])


def test_launch_devices_follow_sglangs_rank_to_gpu_rule():
    snap = GpuSnapshot(GpuCommand("nvidia-smi", "real", "test"), gpus=parse_gpu_lines(GPU_LINES)[0])  # GPUs 0, 2

    def devices(cmd, **env):
        return launch_devices(LaunchCommand.parse(cmd), env or None, snap)[0]

    sg = "python -m sglang.launch_server --model-path m "
    assert devices(sg) == [0]
    assert devices(sg + "--tp 4") == [0, 1, 2, 3]
    assert devices(sg + "--tp-size 2 --base-gpu-id 4 --gpu-id-step 2") == [4, 6]
    assert devices(sg + "--tp 2 --pp-size 2") == [0, 1, 2, 3]
    assert devices(sg + "--tp 2 --dp-size 2") == [0, 1, 2, 3]
    assert devices(sg + "--tp 2 --dp-size 2 --enable-dp-attention") == [0, 1]
    assert devices(sg + "--tp 2", CUDA_VISIBLE_DEVICES="2,0") == [0, 2]
    assert devices(sg + "--tp 2", CUDA_VISIBLE_DEVICES=f"{U2[:12]},0") == [0, 2]
    assert devices(sg + "--tp 2", CUDA_VISIBLE_DEVICES="5") is None  # no device 1 visible: all checked
    assert devices(sg + "--tp 8 --nnodes 2") is None
    assert devices("vllm serve m -tp 2 --pipeline-parallel-size 2") == [0, 1, 2, 3]


def test_rendezvous_ports_of_a_launch():
    sg = "python -m sglang.launch_server --model-path m "
    assert rendezvous_ports(LaunchCommand.parse(sg + "--tp 2")) == []
    assert rendezvous_ports(LaunchCommand.parse(sg + "--nccl-port 42100 --dist-init-addr 10.0.0.1:42101")) == [
        ("--nccl-port", 42100), ("--dist-init-addr", 42101)]
    assert rendezvous_ports(LaunchCommand.parse(sg + "--nccl-init-addr 10.0.0.1:42101 --node-rank 1")) == []
    assert rendezvous_ports(LaunchCommand.parse("vllm serve m --master-port 42102")) == [("--master-port", 42102)]


@pytest.mark.slow
def test_a_box_with_no_nvidia_smi_skips_the_gpu_checks_and_says_why(tmp_path, monkeypatch):
    if os.system("command -v nvidia-smi >/dev/null 2>&1") == 0:
        pytest.skip("this machine has nvidia-smi")
    box = connect("local", state_dir=tmp_path / "state")
    commands = []
    run = box.run
    monkeypatch.setattr(box, "run", lambda cmd, **kw: (commands.append(cmd), run(cmd, **kw))[1])
    cmd = gpu_command(box)
    assert (cmd.kind, cmd.path) == ("none", None)
    assert cmd.reason == (f"no nvidia-smi on this box (not on its PATH) and no sandbox GPUs at "
                          f"{tmp_path}/state/sandbox-gpus/bin/nvidia-smi: GPU checks skipped")
    proc = box.launch_server([sys.executable, "-c", "import time; time.sleep(60)"], port=None)
    stopped, release = stop_and_release(box, proc)
    assert stopped.how == "terminated" and not box.is_alive(proc.pid)
    assert (release.basis, release.note) == ("skipped", cmd.reason)
    check = check_before_launch(box, LaunchCommand.parse("python -m sglang.launch_server --model-path m --tp 8"))
    assert (check.devices, check.note) == (None, cmd.reason)
    assert read_gpu_snapshot(box).note == cmd.reason
    from workbench.session.gpus import FIND_REAL

    assert [c for c in commands if "nvidia-smi" in str(c)] == [["sh", "-c", FIND_REAL]]  # once, cached
    assert FIND_REAL.startswith("command -v nvidia-smi || ") and "/usr/local/nvidia/bin/nvidia-smi" in FIND_REAL


@pytest.fixture
def gpu_box(tmp_path_factory):
    """The local box with 2 sandbox GPUs (release delay 0.3 s) under its own state dir."""
    state = tmp_path_factory.mktemp("gpus", numbered=True) / "state"
    state.mkdir()
    gpus = sandbox_gpus(state, 2, release_delay_s=0.3)
    box = connect("local", state_dir=state)
    box.gpus_dir = gpus
    return box


@pytest.fixture
def pids(gpu_box):
    """Pids to kill at the end (holders), and ``pids.servers``: launched trees to stop."""
    started = _Started()
    yield started
    for handle in started.servers:
        gpu_box.stop_server(handle, grace=1)
    for pid in started:
        kill(pid)


class _Started(list):
    def __init__(self):
        super().__init__()
        self.servers = []


def test_holders_are_named_with_title_user_and_mib_sandbox_gpus(gpu_box, pids, nobody):
    cmd = gpu_command(gpu_box)
    assert cmd.kind == "sandbox" and cmd.path == f"{gpu_box.state_dir}/sandbox-gpus/bin/nvidia-smi"
    pids.append(hold(gpu_box.gpus_dir, [(0, 30000), (1, 20000)], title="sglang::scheduler_TP0", orphan=True))
    pids.append(hold(gpu_box.gpus_dir, [(1, 10000)], user="nobody"))
    named = read_box_gpus(gpu_box)
    assert [(g.index, g.used_mib) for g in named.snapshot.gpus] == [(0, 30000), (1, 30000)]
    mine, theirs = named.holders
    me = pwd.getpwuid(os.getuid()).pw_name
    assert (mine.pid, mine.title, mine.user, mine.ppid, mine.mib, mine.orphan) == (
        pids[0], "sglang::scheduler_TP0", me, mine.ppid, {0: 30000, 1: 20000}, True)
    assert mine.ppid != os.getpid() and mine.server is None
    assert (theirs.pid, theirs.user, theirs.own, theirs.orphan, theirs.mib) == (pids[1], "nobody", False, False,
                                                                                {1: 10000})
    assert theirs.title.startswith(sys.executable + " -c")
    text = "\n".join(gpu_lines(named.to_dict()))
    assert f"holder pid {pids[0]} sglang::scheduler_TP0 (user {me}, ppid {mine.ppid}) GPU0 30000 MiB, GPU1 20000 MiB " \
           "[ORPHAN]" in text and "GPUs: 2 (the sandbox box's GPUs)" in text
    assert f"GPU 1 NVIDIA H100 80GB HBM3: 30000 / 81559 MiB — pid {pids[0]} 20000 MiB (ORPHAN), pid {pids[1]} 10000 MiB " \
           "(user nobody)" in text


def test_a_holder_that_exits_while_being_read_is_kept_as_gone_sandbox_gpus(gpu_box, pids):
    pid = hold(gpu_box.gpus_dir, [(0, 1000)], title="sglang::scheduler_TP0")
    pids.append(pid)
    snap = read_gpu_snapshot(gpu_box)  # listed here ...
    kill(pid)  # ... and gone before its /proc is read
    [h] = read_box_gpus(gpu_box, snapshot=snap).holders
    assert (h.pid, h.gone, h.user, h.orphan, h.mib) == (pid, True, None, False, {0: 1000})
    assert h.title  # nvidia-smi's process name


def _server(box, n: int, mib: int, started):
    handle = box.launch_server([sys.executable, "-c", SERVER_SCRIPT, str(box.gpus_dir), str(mib), str(n)],
                               port=None, env=env())
    started.servers.append(handle)
    deadline = time.time() + 30
    while len(box.tail(handle.log_path, 10)) < n + 1 or "ready" not in "".join(box.tail(handle.log_path, 10)):
        assert time.time() < deadline, box.tail(handle.log_path, 20)
        time.sleep(0.05)
    deadline = time.time() + 30
    while sum(g.used_mib for g in read_gpu_snapshot(box, apps=False).gpus) < n * mib:
        assert time.time() < deadline
        time.sleep(0.05)
    return handle


@pytest.mark.slow
def test_a_stop_waits_for_the_gpus_back_at_baseline_sandbox_gpus(gpu_box, pids, nobody):
    pids.append(hold(gpu_box.gpus_dir, [(1, 5000)], user="nobody"))  # another user's, stays
    server = _server(gpu_box, 2, 40000, pids)
    named = read_box_gpus(gpu_box)
    ranks = [h for h in named.holders if h.ppid == server.pid]
    assert sorted(h.title for h in ranks) == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    assert not any(h.orphan for h in ranks)  # their launcher lives (a python -c: no engine's, so no server tree)
    stopped, release = stop_and_release(gpu_box, server)
    assert release.error is None and release.basis == "others"
    assert [(g["index"], g["before_stop_mib"], g["baseline_mib"], g["used_mib"]) for g in release.gpus] == [
        (0, 40000, 0, 0), (1, 45000, 5000, 5000)]
    assert release.waited_s >= 0.3  # the sandbox frees a gone process's memory 0.3 s later, as a driver does later
    assert [g.used_mib for g in read_gpu_snapshot(gpu_box).gpus] == [0, 5000]


@pytest.mark.slow
def test_ranks_that_escape_the_stop_are_named_sandbox_gpus(gpu_box, pids):
    server = _server(gpu_box, 1, 30000, pids)
    # a rank that left the tree (reparented, own session) keeps its memory, as SGLang's orphans do
    escaped = hold(gpu_box.gpus_dir, [(1, 20000)], title="sglang::scheduler_TP1", orphan=True)
    pids.append(escaped)
    before = read_gpu_snapshot(gpu_box)
    _stopped, release = stop_and_release(gpu_box, server, timeout=1.0)
    assert release.error is None  # GPU 0 back; the escaped rank was never in the tree
    # the same, for a server whose tree the stop could not see: its GPU is named as still held
    from workbench.session.gpu_release import wait_released
    with pytest.raises(GpusNotFreed) as exc:
        wait_released(gpu_box, before, {escaped}, timeout=0.5, server="the TP 2 server")
    e = exc.value
    assert [(g["index"], g["used_mib"]) for g in e.gpus] == [(1, 20000)]
    assert [(h["pid"], h["title"], h["orphan"]) for h in e.holders] == [(escaped, "sglang::scheduler_TP1", True)]
    assert f"pid {escaped} sglang::scheduler_TP1 (user " in str(e) and e.waited_s >= 0.5
    assert f"after {e.waited_s:.1f} s: GPU1 20000 MiB, baseline 0 MiB" in str(e)


@pytest.mark.slow
def test_container_mode_waits_for_memory_used_sandbox_gpus(gpu_box, pids):
    from workbench.sandbox.gpus import SandboxGpus

    SandboxGpus(gpu_box.gpus_dir).configure(container_mode=True)
    baseline = GpuBaseline(read_gpu_snapshot(gpu_box).used(), time.time())
    server = _server(gpu_box, 2, 40000, pids)
    assert read_gpu_snapshot(gpu_box).container
    _stopped, release = stop_and_release(gpu_box, server, baseline=baseline)
    assert (release.basis, [(g["index"], g["used_mib"]) for g in release.gpus]) == (
        "before-launch", [(0, 0), (1, 0)])
    server = _server(gpu_box, 1, 40000, pids)
    _stopped, release = stop_and_release(gpu_box, server)  # found running: nothing known from before it
    assert release.basis == "settled" and release.waited_s >= 2.0 and [g["index"] for g in release.gpus] == [0]


def test_another_users_gpus_refuse_the_launch_and_are_never_killed_sandbox_gpus(gpu_box, pids, nobody):
    theirs = hold(gpu_box.gpus_dir, [(1, 30000)], user="nobody")
    pids.append(theirs)
    launch = LaunchCommand.parse("python -m workbench.sandbox.launch_server --model-path m --tp-size 2")
    assert check_before_launch(gpu_box, LaunchCommand.parse("python -m workbench.sandbox.launch_server "
                                                             "--model-path m")).devices == [0]  # GPU 0 is free
    for reclaim in (False, True):
        with pytest.raises(GpusHeld) as exc:
            check_before_launch(gpu_box, launch, label="fix", reclaim=reclaim)
        e = exc.value
        assert [(h["pid"], h["user"], h["mib"]) for h in e.holders] == [(theirs, "nobody", {"1": 30000})]
        assert e.orphans == [] and [f.rule for f in e.findings] == ["gpus-held"]
        assert f"pid {theirs}" in str(e) and "user nobody" in str(e) and "GPU1 30000 MiB" in str(e)
        assert "another user's processes are never killed" in str(e)
    assert os.path.exists(f"/proc/{theirs}")


def test_own_orphans_are_refused_then_reclaimed_sandbox_gpus(gpu_box, pids):
    orphans = [hold(gpu_box.gpus_dir, [(r, 70000)], title=f"sglang::scheduler_TP{r}", orphan=True) for r in (0, 1)]
    pids.extend(orphans)
    launch = LaunchCommand.parse("python -m workbench.sandbox.launch_server --model-path m --tp-size 2")
    with pytest.raises(GpusHeld) as exc:
        check_before_launch(gpu_box, launch, label="fix")
    assert exc.value.orphans == orphans and "reclaim_gpus=True cleans them up" in str(exc.value)
    assert all(os.path.exists(f"/proc/{p}") for p in orphans)
    check = check_before_launch(gpu_box, launch, label="fix", reclaim=True)
    assert [h["pid"] for h in check.reclaimed] == orphans and check.devices == [0, 1]
    assert not any(os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split(") ")[1][0] not in "ZX"
                   for p in orphans)
    assert check.baseline is not None and set(check.baseline.used.values()) == {0}


def test_a_rendezvous_port_in_use_is_named_before_the_launch(gpu_box, free_port):
    sock = socket.socket()
    sock.bind(("127.0.0.1", free_port))
    sock.listen()
    try:
        launch = LaunchCommand.parse(f"python -m sglang.launch_server --model-path m --nccl-port {free_port}")
        with pytest.raises(RendezvousPortInUse) as exc:
            check_before_launch(gpu_box, launch)
        e = exc.value
        assert isinstance(e, PortInUse) and (e.port, e.flag) == (free_port, "--nccl-port")
        assert e.owner.startswith(f"pid {os.getpid()} ") and f"port {free_port} is already in use" in str(e)
    finally:
        sock.close()
    assert check_before_launch(gpu_box, launch).ports == [("--nccl-port", free_port)]


def test_status_shows_servers_orphans_and_gpus_sandbox_gpus(gpu_box, pids, nobody, own_sandbox_server, tmp_path,
                                                            monkeypatch, cli, ssh_env):
    """``workbench status`` on a box with a live sandbox server, two orphaned ranks of this user and
    another user's holder: text on the local box, JSON over the loopback SSH box."""
    from testkit.sandbox_servers import EAGLE, sandbox_flags

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(gpu_box.state_dir))
    orphans = [hold(gpu_box.gpus_dir, [(r, 30000)], title=f"sglang::scheduler_TP{r}", orphan=True) for r in (0, 1)]
    pids.extend(orphans)
    theirs = hold(gpu_box.gpus_dir, [(1, 2000)], user="nobody")
    pids.append(theirs)
    with own_sandbox_server(tmp_path / "s", *sandbox_flags(**EAGLE)) as srv:
        code, out, _ = cli("status", "--host", "local")
        assert code == 0
        assert f"server pid {srv.pid} (sglang, port {srv.port}, " in out
        for r, pid in enumerate(orphans):
            assert f"pid {pid} (ppid " in out and f"sglang::scheduler_TP{r}: ORPHAN" in out
        assert "GPUs: 2 (the sandbox box's GPUs)" in out
        assert f"GPU 1 NVIDIA H100 80GB HBM3: 32000 / 81559 MiB — pid {orphans[1]} 30000 MiB (ORPHAN), pid {theirs} " \
               "2000 MiB (user nobody)" in out
        code, out, _ = cli("status", "--host", ssh_env.alias, "--json")
        assert code == 0
        doc = json.loads(out)
        [server] = [s for s in doc["servers"] if s["pid"] == srv.pid]
        assert (server["engine"], server["port"], server["processes"][0]["ports"]) == ("sglang", srv.port, [srv.port])
        # this user's orphans on the whole box: ours, and no rank of the live server (another test of this
        # machine may leave its own, which the box rightly lists too)
        listed = {o["pid"] for o in doc["orphans"] if o["orphan"]}
        assert set(orphans) <= listed and srv.pid not in listed and theirs not in listed
        gpus = doc["gpus"]
        assert (gpus["source"], [g["used_mib"] for g in gpus["gpus"]]) == ("sandbox", [30000, 32000])
        assert [(h["pid"], h["orphan"], h["user"], h["mib"]) for h in gpus["holders"]] == [
            (orphans[0], True, pwd.getpwuid(os.getuid()).pw_name, {"0": 30000}),
            (orphans[1], True, pwd.getpwuid(os.getuid()).pw_name, {"1": 30000}),
            (theirs, False, "nobody", {"1": 2000})]


def test_status_on_a_box_with_no_nvidia_smi_says_the_gpus_were_skipped(cli, tmp_path, monkeypatch):
    if os.system("command -v nvidia-smi >/dev/null 2>&1") == 0:
        pytest.skip("this machine has nvidia-smi")
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    code, out, _ = cli("status", "--host", "local")
    assert code == 0 and "run lock: free" in out
    assert f"GPUs: skipped — no nvidia-smi on this box (not on its PATH) and no sandbox GPUs at {tmp_path}/state/" \
           "sandbox-gpus/bin/nvidia-smi: GPU checks skipped" in out
    code, out, _ = cli("status", "--host", "local", "--json")
    gpus = json.loads(out)["gpus"]
    assert (code, gpus["available"], gpus["source"], gpus["gpus"]) == (0, False, "none", [])


def test_the_console_reclaims_my_orphans_never_another_users_sandbox_gpus(gpu_box, pids, nobody, free_port,
                                                                           monkeypatch):
    from workbench.lab.console import BoxConsole

    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(gpu_box.state_dir))
    mine = hold(gpu_box.gpus_dir, [(0, 50000)], title="sglang::scheduler_TP0", orphan=True)
    theirs = hold(gpu_box.gpus_dir, [(1, 50000)], title="sglang::scheduler_TP0", user="nobody", orphan=True)
    pids.extend([mine, theirs])
    c = BoxConsole(port=free_port)
    try:
        page = c.status_html.value
        assert f"pid {mine} sglang::scheduler_TP0 (user " in page and "ORPHAN: left by a launcher" in page
        assert page.count("wb-console-orphan") == 1  # nobody's is no orphan of this user
        result = c.reclaim_gpus()
        assert [h["pid"] for h in result["reclaimed"]] == [mine] and result["survivors"] == []
        assert result["release"]["basis"] == "others" and [(g["index"], g["used_mib"]) for g in
                                                           result["release"]["gpus"]] == [(0, 0)]
        assert f"Reclaimed</b> pid {mine} sglang::scheduler_TP0" in c.gpu_pane.outcome.value
        assert os.path.exists(f"/proc/{theirs}") and [g.used_mib for g in read_gpu_snapshot(gpu_box).gpus] == [0, 50000]
        assert "ORPHAN: left by a launcher" not in c.status_html.value  # refreshed after the action
        again = c.reclaim_gpus()
        assert again["reclaimed"] == [] and "Nothing to reclaim" in c.gpu_pane.outcome.value
    finally:
        c.close()


def test_sandbox_gpu_env_names_the_box_state_dir_only_for_the_sandbox_server(tmp_path):
    """A sandbox launch gets ``SANDBOX_GPUS_DIR`` under the box's state dir (where gpu_command
    looks); a launch that sets its own, and a real engine's launch, are left as they are."""
    from remote import connect
    from workbench.engine.launch import LaunchCommand
    from workbench.session.gpus import sandbox_gpu_env

    box = connect("local", state_dir=tmp_path / "state")
    sandbox = LaunchCommand.parse("python -m workbench.sandbox.launch_server --model-path /m --port 30000")
    sglang = LaunchCommand.parse("python -m sglang.launch_server --model-path /m --port 30000")
    assert sandbox_gpu_env(box, sandbox, None) == {"SANDBOX_GPUS_DIR": f"{box.state_dir}/sandbox-gpus"}
    assert sandbox_gpu_env(box, sandbox, {"A": "1"}) == {"A": "1", "SANDBOX_GPUS_DIR": f"{box.state_dir}/sandbox-gpus"}
    assert sandbox_gpu_env(box, sandbox, {"SANDBOX_GPUS_DIR": "/x"}) == {"SANDBOX_GPUS_DIR": "/x"}
    assert sandbox_gpu_env(box, sglang, None) is None
    assert sandbox_gpu_env(box, sglang, {"A": "1"}) == {"A": "1"}


def test_a_tp_size_the_gpus_cannot_hold_is_refused_before_the_launch_sandbox_gpus(gpu_box):
    """--tp-size 4 on a box with 2 GPUs (as its nvidia-smi lists them): refused with the indices it
    needs and the count the box has; --tp-size 2 from --base-gpu-id 1 needs GPU 2 too: refused."""
    from workbench.errors import GpusTooFew, LaunchRefused

    with pytest.raises(GpusTooFew) as exc:
        check_before_launch(gpu_box, LaunchCommand.parse("python -m sglang.launch_server --model-path m --tp 4"),
                            label="fix")
    e = exc.value
    assert isinstance(e, LaunchRefused) and (e.needed, e.available) == ([0, 1, 2, 3], 2)
    assert [f.rule for f in e.findings] == ["gpus-too-few"] and e.findings[0].prevents_start
    assert "the box has 2 GPUs" in str(e) and "no GPU2, GPU3" in str(e)
    with pytest.raises(GpusTooFew) as exc:
        check_before_launch(gpu_box, LaunchCommand.parse("python -m sglang.launch_server --model-path m --tp-size 2 "
                                                         "--base-gpu-id 1"))
    assert (exc.value.needed, exc.value.available) == ([1, 2], 2)
    assert check_before_launch(gpu_box, LaunchCommand.parse("python -m sglang.launch_server --model-path m "
                                                            "--tp-size 2")).devices == [0, 1]


def test_a_holder_the_launch_fits_beside_does_not_refuse_it_sandbox_gpus(gpu_box, pids, nobody):
    """Another user's 5000 MiB on GPU1 leaves a launch its 0.88 of 81559 MiB: it goes ahead, the
    holder listed as beside it (never killed); 30000 MiB does not leave it, unless the launch
    reserves less (--mem-fraction-static 0.5)."""
    small = hold(gpu_box.gpus_dir, [(1, 5000)], user="nobody")
    pids.append(small)
    launch = LaunchCommand.parse("python -m sglang.launch_server --model-path m --tp-size 2")
    check = check_before_launch(gpu_box, launch, label="fix")
    assert check.devices == [0, 1] and [h["pid"] for h in check.beside] == [small]
    big = hold(gpu_box.gpus_dir, [(0, 30000)], user="nobody")
    pids.append(big)
    with pytest.raises(GpusHeld) as exc:
        check_before_launch(gpu_box, launch, label="fix")
    assert [h["pid"] for h in exc.value.holders] == [small, big] or big in [h["pid"] for h in exc.value.holders]
    roomy = LaunchCommand.parse("python -m sglang.launch_server --model-path m --tp-size 2 --mem-fraction-static 0.5")
    assert sorted(h["pid"] for h in check_before_launch(gpu_box, roomy).beside) == sorted([small, big])
    assert os.path.exists(f"/proc/{small}") and os.path.exists(f"/proc/{big}")


def test_what_the_stop_cannot_change_refuses_before_the_stop(gpu_box, pids, nobody, free_port):
    """check_before_stop: a rendezvous port held outside the serving server's tree, and another
    user's memory that leaves no room, refuse before anything is stopped; the same port held by
    the serving server itself (its stop frees it) and the serving server's own memory do not."""
    from workbench.session.gpu_guard import check_before_stop

    sock = socket.socket()
    sock.bind(("127.0.0.1", free_port))
    sock.listen()
    try:
        launch = LaunchCommand.parse(f"python -m sglang.launch_server --model-path m --nccl-port {free_port}")
        with pytest.raises(RendezvousPortInUse):
            check_before_stop(gpu_box, launch, serving_pid=None)
        check_before_stop(gpu_box, launch, serving_pid=os.getpid())  # held by the serving tree: not refused
    finally:
        sock.close()
    mine = hold(gpu_box.gpus_dir, [(0, 70000)], title="sglang::scheduler")  # the serving server's memory
    pids.append(mine)
    launch = LaunchCommand.parse("python -m sglang.launch_server --model-path m")
    check_before_stop(gpu_box, launch, serving_pid=mine)
    theirs = hold(gpu_box.gpus_dir, [(0, 11000)], user="nobody")
    pids.append(theirs)
    with pytest.raises(GpusHeld) as exc:
        check_before_stop(gpu_box, launch, serving_pid=mine, label="fix")
    assert [h["pid"] for h in exc.value.holders] == [theirs] and "nothing was stopped" in str(exc.value)
    assert os.path.exists(f"/proc/{mine}") and os.path.exists(f"/proc/{theirs}")
