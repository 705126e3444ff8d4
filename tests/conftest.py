"""Fixtures shared by every test folder: a free port, the loopback OpenSSH server of the SSH tests,
the shared sandbox servers, the notebook runner, the SGLang source; the automatic ``slow`` marks
and the guard of ``make test-fast``.

Markers: ``slow`` = the test starts something (a server, sshd, a notebook kernel, a browser).
Tests get it automatically from the fixtures they use (``STARTS_BY_FIXTURE`` below), by hand when
they start things themselves. ``make test-fast`` runs ``pytest -m "not slow"``; whenever a run
deselects ``slow`` the guard of ``testkit.fast_guard`` is on and a test that starts anything fails.
"""

import os
import tempfile

import pytest

from sshd import LoopbackSSHD, keygen, make_client, sshd_missing_reason
from testkit import ports
from testkit.fast_guard import FastGuard
from testkit.sandbox_servers import SandboxServers, models_missing_reason, running_sandbox_server
from testkit.vllm_servers import VllmServers, require_vllm, running_vllm_server

# fixture -> what a test using it (directly or through another fixture) starts
STARTS_BY_FIXTURE = {
    "sshd": "sshd",
    "ssh_env": "sshd",
    "sandbox_server": "a sandbox server",
    "own_sandbox_server": "a sandbox server",
    "vllm_server": "a vLLM server",
    "own_vllm_server": "a vLLM server",
    "tiny_server_argv": "a tiny HTTP server",
    "execute_notebook": "a notebook kernel",
    "lab_server": "a JupyterLab server",
    "lab": "a JupyterLab server and a Chromium page",
}


def _isolate_worker_state() -> None:
    """Give this pytest process (one xdist worker, or the only process) box state of its own: the
    workbench's state dir (``$EAGLE_WORKBENCH_STATE_DIR``: run lock, journals, probe records, server
    logs) under a fresh temporary directory, so that two workers never take each other's run lock or
    see each other's journal, and no test touches the user's ``~/.cache/eagle-workbench``. Tests
    that need a state dir of their own still set it themselves (``state_dir`` fixtures)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    base = tempfile.mkdtemp(prefix=f"ewb-tests-{worker}-")
    os.environ["EAGLE_WORKBENCH_STATE_DIR"] = os.path.join(base, "state")
    # Sandbox GPUs made by the tests' servers free a stopped server's memory 0.2 s after it is gone
    # (the sandbox's default is 2 s: every stop of the suite would wait that long); a test of the
    # delay sets its own (SandboxGpus.create(release_delay_s=...), testkit.gpu_holders).
    os.environ.setdefault("SANDBOX_GPU_RELEASE_DELAY_S", "0.2")
    return base


def _runs_tests(config) -> bool:
    """Whether this pytest process runs tests: an xdist worker, or a run without ``-n``; not the
    xdist controller, which only schedules them."""
    return "PYTEST_XDIST_WORKER" in os.environ or not getattr(config.option, "numprocesses", None)


def pytest_configure(config):
    config._ewb_guard = None
    config._ewb_fast_guard = "not slow" in (config.getoption("markexpr") or "").replace("  ", " ")
    config._ewb_state_base = _isolate_worker_state()
    if "PYTEST_XDIST_WORKER" not in os.environ:
        # the boxes' python3 without pyenv's shim (testkit.plain_python); workers inherit PATH
        from testkit.plain_python import plain_python_dir

        plain_python_dir(config._ewb_state_base)
    if not _runs_tests(config):
        # the xdist controller, before its workers start: pytest's rewritten test modules cached
        # once for all of them (under PYTHONDONTWRITEBYTECODE each rewrote every file itself)
        from testkit.rewrite_cache import precompile_rewritten

        precompile_rewritten(config)
    if _runs_tests(config) and engine_copies_on():
        # the sandbox box's engine of this process (testkit.engine_copy): its servers, kernels and
        # CLIs import a copy of `workbench`, so probes of two workers never meet in one file
        from pathlib import Path

        from testkit.engine_copy import make_engine_checkout, use_engine_checkout, venv_of
        from testkit.vllm_servers import vllm_python

        use_engine_checkout(make_engine_checkout(Path(config._ewb_state_base), vllm_venv=venv_of(vllm_python())))


def remove_detached(path) -> None:
    """Remove ``path`` (this process's state dir and engine checkout: ~60,000 entries with the vLLM
    venv's hard links) with ``rm -rf`` in a session of its own, not waited for. Removed in this
    process, it was cut short: pytest-xdist kills a worker still running 10 s after the session ends
    (``NodeManager.EXIT_TIMEOUT``), and on a busy machine the removal took longer, leaving a partial
    checkout in the temp dir after each run. Servers are stopped by now; ``rm``'s complaints go to
    ``path + ".cleanup.log"`` (next to it: a leftover then says why)."""
    import subprocess

    with open(f"{path}.cleanup.log", "w") as log:
        subprocess.Popen(["sh", "-c", 'rm -rf -- "$1" && rm -f -- "$1.cleanup.log"', "sh", str(path)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def pytest_unconfigure(config):
    base = getattr(config, "_ewb_state_base", None)
    if base:
        os.chdir(config.invocation_params.dir)  # out of the engine checkout before it is removed
        remove_detached(base)
    config._ewb_fast_guard = "not slow" in (config.getoption("markexpr") or "").replace("  ", " ")


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test whose fixture closure starts something (``STARTS_BY_FIXTURE``);
    a test that starts something itself carries ``@pytest.mark.slow`` in its file (the guard of
    ``make test-fast`` fails one that does not)."""
    for item in items:
        if any(name in STARTS_BY_FIXTURE for name in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items[:] = longest_files_first(items)


from testkit.xdist_scopes import engine_copies_on, run_after, shared_vllm_files_in_order, xdist_scope_of  # noqa: E402  (the groups and file-scoped files are listed there)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: no error where it is not installed
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduler for this suite: each group of :func:`xdist_group_of` and each file
    of :data:`FILE_SCOPED_FILES` is one unit of work for one worker, every other test a unit of its
    own (:func:`xdist_scope_of`); the groups go first (the most tests
    first), then the rest in collection order (longest files first). Built on xdist's
    ``LoadScopeScheduling``; the ``xdist_group`` mark is not used because pytest-xdist 3.8 tags it
    onto ``item._nodeid``, which pytest 9.2's ``nodeid`` no longer reads."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope_of(nodeid)

    return GroupScheduling(config, log)


#: seconds per test file of the last measured run (``scripts/test_durations.py``); a file it does not
#: list counts as this many seconds when one of its tests is ``slow``, as none when none is
UNMEASURED_SLOW_FILE_S = 60.0


def longest_files_first(items):
    """``items`` reordered file by file, the files that took longest (``tests/durations.json``)
    first, each file's own order kept: under pytest-xdist the long files then start at once and the
    short ones fill the gaps, rather than a long file starting last while the other workers idle.
    The readers of the shared vLLM servers keep their order among themselves
    (``testkit.xdist_scopes.shared_vllm_files_in_order``); then the explicit rules of
    ``testkit.xdist_scopes.RUN_AFTER`` (a file that uses another's published runs goes after it,
    whatever the durations say). Deterministic (every worker must collect the same order)."""
    import json
    import pathlib

    path = pathlib.Path(__file__).with_name("durations.json")
    seconds = json.loads(path.read_text()) if path.exists() else {}
    by_file: dict = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(name):
        if name in seconds:
            return float(seconds[name])
        return UNMEASURED_SLOW_FILE_S if any(i.get_closest_marker("slow") for i in by_file[name]) else 0.0

    order = run_after(shared_vllm_files_in_order(sorted(by_file, key=lambda name: (-cost(name), name))))
    return [item for name in order for item in by_file[name]]


@pytest.fixture(scope="session", autouse=True)
def _fast_run_guard(request):
    """Under a run that deselects ``slow`` (``make test-fast``): refuse to start servers, sshd,
    kernels and browsers for the whole session (``testkit.fast_guard``)."""
    if not request.config._ewb_fast_guard:
        yield None
        return
    guard = FastGuard()
    with pytest.MonkeyPatch.context() as mp:
        guard.install(mp)
        request.config._ewb_guard = guard
        try:
            yield guard
        finally:
            request.config._ewb_guard = None


@pytest.fixture(scope="session", autouse=True)
def _no_watchdog_outlives_the_session(request, tmp_path_factory):
    """At the end of the session, stop every run watchdog (``workbench.session.watchdog``) still
    watching a state dir of this session's temporary directories: a test that left a run's lock
    behind must not have its watchdog restore that box after the tests ended. Only those: a
    watchdog of another pytest process (another state dir) is left alone."""
    yield
    from testkit.watchdogs import stop_watchdogs_under

    stop_watchdogs_under(str(tmp_path_factory.getbasetemp()))
    base = getattr(request.config, "_ewb_state_base", None)  # this process's own state dir
    if base:
        stop_watchdogs_under(str(base))


def pytest_runtest_setup(item):
    """A test marked ``vllm`` reads or runs vLLM's CPU build (``.venv-vllm``, ``make vllm``): skipped
    without it, failed under ``WORKBENCH_REQUIRE_VLLM=1`` (as ``make test`` runs)."""
    if item.get_closest_marker("vllm") is not None:
        require_vllm()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    guard = getattr(item.config, "_ewb_guard", None)
    item._ewb_violations_before = 0 if guard is None else len(guard.violations)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under the guard, a test that tried to start something fails even when the code under test
    caught the refusal."""
    outcome = yield
    report = outcome.get_result()
    guard = getattr(item.config, "_ewb_guard", None)
    if guard is not None and report.when == "call" and report.passed:
        refused = guard.violations[getattr(item, "_ewb_violations_before", 0):]
        if refused:
            report.outcome = "failed"
            report.longrepr = "\n".join(refused)


_SHARED_SUMMARY: list = []  # filled when the shared sandbox servers stop, printed at the end


@pytest.fixture
def free_port():
    """A TCP port nothing listens on right now (``testkit.ports.free_port``)."""
    return ports.free_port()


@pytest.fixture(scope="session")
def sandbox_server(tmp_path_factory):
    """The shared sandbox servers: ``sandbox_server(algorithm=None, *, draft="draft",
    decode_log_interval=None, extra=())`` returns the session's server for that configuration
    (``testkit.sandbox_servers.SandboxServer``: ``url``, ``port``, ``log_path``, ``log()``,
    ``startup``), started on first use and shared by every test asking for the same one. For tests
    that only read from a server; a test that stops, restarts, probe-patches or kills its server,
    or checks its start-up, starts its own (``own_sandbox_server``).
    Every server is stopped at the end of the session, its whole process group."""
    reason = models_missing_reason()
    if reason:
        pytest.skip(reason)
    servers = SandboxServers(tmp_path_factory.mktemp("sandbox-servers"))
    try:
        yield servers.get
    finally:
        request_summary = servers.summary()
        servers.close()
        _SHARED_SUMMARY.extend(request_summary)


@pytest.fixture(scope="session")
def own_sandbox_server():
    """For a test (or module fixture) that owns its sandbox server: the context manager
    ``own_sandbox_server(log_dir, *flags)`` starts one on a free port, waits for /health 200 and
    stops its whole process group when the block ends (``testkit.sandbox_servers``)."""
    reason = models_missing_reason()
    if reason:
        pytest.skip(reason)
    return running_sandbox_server


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """The shared real vLLM servers (vLLM's CPU build, ``make vllm``): ``vllm_server(*,
    aux_layer_ids=None, method="eagle3", num_speculative_tokens=3, speculative=True, extra=())``
    returns the session's server for that configuration (``testkit.vllm_servers.VllmServer``: ``url``,
    ``port``, ``pid``, ``log_path``, ``log()``, ``argv``, ``env``, ``spec``), the sandbox target with
    the sandbox draft as shipped (SGLang's aux-id convention) or a copy with other aux layer ids.
    At most two run at once. For tests that only read from a server; one that stops, restarts,
    patches or kills its server starts its own (``own_vllm_server``). Skips when vLLM is not
    installed (fails under ``WORKBENCH_REQUIRE_VLLM=1``, as ``make test`` runs)."""
    require_vllm()
    servers = VllmServers(tmp_path_factory.mktemp("vllm-servers"))
    try:
        yield servers.get
    finally:
        summary = servers.summary()
        servers.close()
        _SHARED_SUMMARY.extend(summary)


@pytest.fixture(scope="session")
def own_vllm_server():
    """For a test that owns its vLLM server: the context manager ``own_vllm_server(log_dir, *,
    spec, extra=(), env=None)`` (``testkit.vllm_servers.running_vllm_server``) starts one on a free
    port, waits for /health 200 and stops its whole process group when the block ends."""
    require_vllm()
    return running_vllm_server


def pytest_terminal_summary(terminalreporter):
    if _SHARED_SUMMARY:
        terminalreporter.write_line(f"shared sandbox servers: {len(_SHARED_SUMMARY)} launched")
        for line in _SHARED_SUMMARY:
            terminalreporter.write_line(f"  {line}")


@pytest.fixture(scope="session")
def execute_notebook():
    """``papermill.execute_notebook`` with the kernel ``python3`` (this venv's, installed by
    ``make setup``) and no progress bar; other keyword arguments passed on."""
    papermill = pytest.importorskip("papermill")

    def run(source, out, **kwargs):
        kwargs.setdefault("kernel_name", "python3")
        kwargs.setdefault("progress_bar", False)
        return papermill.execute_notebook(str(source), str(out), **kwargs)

    return run


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real OpenSSH server on 127.0.0.1 serving this machine for the whole session, and a
    client side for it (``sshd.ClientSide``: key, known_hosts, an ssh config with the alias
    ``ewb-loopback``). Skipped only when ``/usr/sbin/sshd`` is not installed."""
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("sshd")
    (base / "client").mkdir()
    key = keygen(base / "client" / "id_ed25519")
    server = LoopbackSSHD(base / "server", authorized=[key]).start()
    try:
        yield make_client(base / "client", server, key)
    finally:
        server.stop()


@pytest.fixture
def ssh_env(sshd, monkeypatch):
    """``$EAGLE_WORKBENCH_SSH_CONFIG`` pointing at the loopback client config (child processes
    inherit it); returns the ``ClientSide``."""
    monkeypatch.setenv("EAGLE_WORKBENCH_SSH_CONFIG", str(sshd.config))
    return sshd


@pytest.fixture(scope="session")
def sglang_source():
    """The unpacked SGLang 0.5.23 package directory (``.../sglang``): ``$SGLANG_SRC``, else
    ``/tmp/sglang_src/sglang``, else the published wheel (:func:`workbench.engine.releases.release_source`:
    ``pip download --no-deps sglang==0.5.23``, cached, unpacked, never installed). Fails, saying
    why, when none can be had (the package registry is reachable wherever the tests run)."""
    import os
    import pathlib

    for cand in (os.environ.get("SGLANG_SRC"), "/tmp/sglang_src/sglang"):
        if cand and (pathlib.Path(cand) / "srt/models/llama_eagle3.py").exists():
            return pathlib.Path(cand)
    return sglang_release_path("0.5.23")


def sglang_release_path(version):
    """The unpacked ``sglang/`` of the published release ``version`` (cached; see
    :mod:`workbench.engine.releases`); the test fails with pip's error when it cannot be had."""
    from workbench.engine.releases import ReleaseUnavailable, release_source

    try:
        return release_source(version)
    except ReleaseUnavailable as exc:
        pytest.fail(f"SGLang {version} source unavailable: {exc}")


@pytest.fixture(scope="session")
def sglang_release():
    """``sglang_release("0.5.9")`` → the unpacked ``sglang/`` package of that published release
    (``pathlib.Path``; downloaded once, cached under ``$EAGLE_WORKBENCH_SGLANG_CACHE`` or
    ``~/.cache/eagle-workbench/sglang-releases``). The releases the tests cover:
    :data:`workbench.engine.releases.COVERED_RELEASES`."""
    return sglang_release_path


@pytest.fixture
def nobody():
    """``(uid, gid)`` of the unprivileged ``nobody`` user and its group (``nogroup`` or ``nobody``),
    for the ownership tests; skipped when the system has neither group."""
    import grp
    import pwd

    uid = pwd.getpwnam("nobody").pw_uid
    for group in ("nogroup", "nobody"):
        try:
            return uid, grp.getgrnam(group).gr_gid
        except KeyError:
            continue
    pytest.skip("no nogroup/nobody group")


@pytest.fixture
def cli(capsys):
    """The ``workbench`` command line (``tests/cli_runner.py``): ``cli("doctor", ...)`` runs
    ``workbench.cli.main`` in this process and returns ``(code, out, err)``;
    ``cli.subprocess("probe", "list", env=...)`` runs ``python -m workbench.cli`` as a user does."""
    from cli_runner import CliRunner

    return CliRunner(capsys)
