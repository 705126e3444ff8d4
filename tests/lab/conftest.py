"""Fixtures of the real-JupyterLab browser tests (``tests/lab/labkit.py``): ``lab_server`` (one
JupyterLab 4 per session) and ``lab`` (one Playwright page per test on the system Chromium). Both
are in ``STARTS_BY_FIXTURE`` (tests/conftest.py), so their tests are ``slow``; skipped, saying
why, when Chromium, JupyterLab or Playwright is missing. A failing test leaves
``FAILED-<test>.png`` in the artefact dir (``$WORKBENCH_ARTIFACTS`` or ``reports/screenshots/``).
"""

from __future__ import annotations

import re
import shutil

import pytest

from lab import labkit


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"_lab_rep_{rep.when}", rep)


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory):
    """A real JupyterLab 4 on 127.0.0.1 (``labkit.LabServer``: ``url``, ``port``, ``token``,
    ``root``, ``api(method, path)``), stopped with its kernels at the end of the session."""
    reason = labkit.missing_reason()
    if reason:
        pytest.skip(reason)
    server = labkit.LabServer(tmp_path_factory.mktemp("jupyterlab")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _lab_browser(lab_server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def lab(request, lab_server, _lab_browser):
    """A :class:`labkit.Lab` on a fresh browser context (1400x1000): ``open``, ``run_all``,
    ``wait_idle``, ``click``, ``fill``, ``wait_for_text``, ``text``, ``errors``, ``screenshot``.
    At the end: ``FAILED-<test>.png`` when the test failed, the kernel shut down, the copy removed."""
    context = _lab_browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    session = labkit.Lab(lab_server, page)
    try:
        yield session
    finally:
        rep = getattr(request.node, "_lab_rep_call", None)
        if rep is not None and rep.failed:
            try:
                session.screenshot("FAILED-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name))
            except Exception as exc:  # the page may be gone; say so rather than hide the test's failure
                print(f"no failure screenshot: {type(exc).__name__}: {exc}")
        session.close()
