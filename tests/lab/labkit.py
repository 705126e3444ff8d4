"""The real-JupyterLab browser harness: a JupyterLab 4 server and a Playwright page driving it.

- :class:`LabServer` — ``python -m jupyterlab`` (this venv's interpreter) on ``127.0.0.1``, a free
  port, a random token, ``--allow-root`` when root, ``--no-browser``; root dir, config, user
  settings, workspaces, runtime files and checkpoints all inside one temp directory (none of the
  user's settings leak in, nothing is written next to the notebooks); nothing fetched from the
  network (news, update checks and the announcements plugin off). Kernel: the venv's ``python3``
  kernelspec (installed with ``ipykernel install --sys-prefix --name python3``). Stopped with its
  whole process group (the kernels are in it).
- :class:`Lab` — one Playwright page on that server: ``open``, ``run_all``, ``wait_idle``,
  ``click``, ``fill``, ``wait_for_text``, ``text``, ``errors``, ``screenshot``, ``close``.

Selectors are CSS selectors; the workbench's widgets carry ``wb-<pane>-<thing>`` classes
(``widget.add_class``), so tests select ``.wb-console-restart`` and never by position.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Sequence

import nbformat

from testkit import ports
from workbench.lab.clicks import SETTLE_S, SLACK_S

REPO = Path(__file__).resolve().parents[2]

#: Seconds :meth:`Lab.click` waits after a button is enabled before clicking it: past the click
#: guard's window for queued clicks (``workbench.lab.clicks``: ``SLACK_S`` 0.25 s after an action's
#: end on the browser's clock, ``SETTLE_S`` 0.3 s for a click with no send time).
CLICK_AFTER_ENABLED_S = max(SLACK_S, SETTLE_S) + 0.3

#: Settings written into the temp user-settings dir (JupyterLab 4 plugin ids): every cell in the
#: DOM (no windowing, so ``[*]`` prompts and outputs of off-screen cells can be read) and no
#: news or update checks.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}
#: Extensions disabled through ``labconfig/page_config.json`` (the announcements plugin fetches news).
DISABLED_EXTENSIONS = {"@jupyterlab/apputils-extension:announcements": True}


class LabError(RuntimeError):
    """The lab server or the page did not do what the harness waited for (the message says what,
    with the server's log tail or the page's state)."""


def missing_reason() -> str | None:
    """Why the browser tests cannot run here (``None`` when they can): no ``chromium`` on PATH,
    no ``jupyterlab`` or ``playwright`` module in this interpreter."""
    if shutil.which("chromium") is None:
        return "no chromium binary (install: apt-get install -y --no-install-recommends chromium fonts-dejavu-core)"
    for mod in ("jupyterlab", "playwright"):
        try:
            __import__(mod)
        except ImportError:
            return f"no {mod} module in {sys.executable} (pip install -c constraints.txt -e '.[test]')"
    return None


def artifact_dir() -> Path:
    """Where screenshots go: ``$WORKBENCH_ARTIFACTS``, else ``<repo>/reports/screenshots/`` (created)."""
    d = Path(os.environ.get("WORKBENCH_ARTIFACTS") or REPO / "reports" / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


class LabServer:
    """A real JupyterLab 4 server for the tests (see the module docstring).

    Attributes: ``url`` (``http://127.0.0.1:<port>``), ``port``, ``token``, ``root`` (the lab's root
    dir: notebooks opened by :meth:`Lab.open` are copied here), ``base`` (the temp directory),
    ``log_path``, ``state_dir`` (``$EAGLE_WORKBENCH_STATE_DIR`` of its kernels). The kernels'
    working directory is ``root`` (a copy's relative paths resolve there, as in JupyterLab).
    """

    def __init__(self, base: Path):
        self.base = Path(base)
        self.root = self.base / "root"
        self.port = ports.free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.base / "jupyterlab.log"
        #: the workbench's state dir (journal, probe records) of the lab's kernels:
        #: ``$EAGLE_WORKBENCH_STATE_DIR`` when the tests set it, else ``<base>/state``; a test that
        #: checks the box in-process (``list_probes``, the journal) sets the variable to this.
        self.state_dir = Path(os.environ.get("EAGLE_WORKBENCH_STATE_DIR") or self.base / "state")
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        """The command line: JupyterLab from this interpreter with everything kept in ``base``."""
        b = self.base
        argv = [
            sys.executable, "-m", "jupyterlab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
            f"--LabApp.user_settings_dir={b / 'user-settings'}", f"--LabApp.workspaces_dir={b / 'workspaces'}",
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.expose_app_in_browser=True",
            f"--FileCheckpoints.checkpoint_dir={b / 'checkpoints'}",
            "--MappingKernelManager.default_kernel_name=python3",
        ]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        return argv

    def env(self) -> dict[str, str]:
        b = self.base
        env = dict(os.environ)
        env.update(JUPYTER_CONFIG_DIR=str(b / "config"), JUPYTER_RUNTIME_DIR=str(b / "runtime"),
                   JUPYTERLAB_SETTINGS_DIR=str(b / "user-settings"), JUPYTERLAB_WORKSPACES_DIR=str(b / "workspaces"),
                   JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1", EAGLE_WORKBENCH_STATE_DIR=str(self.state_dir))
        env.pop("JUPYTER_PATH", None)
        return env

    def start(self, timeout: float = 90.0) -> "LabServer":
        """Start the server and wait until ``/api/status`` answers 200 (``LabError`` with the log
        tail after ``timeout`` s or when it exits)."""
        for d in ("root", "config/labconfig", "runtime", "workspaces", "checkpoints"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        (self.base / "config/labconfig/page_config.json").write_text(
            json.dumps({"disabledExtensions": DISABLED_EXTENSIONS}))
        for rel, value in LAB_SETTINGS.items():
            p = self.base / "user-settings" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(value))
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv(), env=self.env(), cwd=self.base, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LabError(f"jupyterlab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status", timeout=2)
                return self
            except (OSError, LabError):
                time.sleep(0.3)
        self.stop()
        raise LabError(f"jupyterlab did not answer /api/status within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError as exc:
            return f"(no log: {exc})"

    def api(self, method: str, path: str, body=None, timeout: float = 10.0):
        """One REST call with the token; the decoded JSON (``None`` for an empty body).
        Raises ``LabError`` on an HTTP error status, ``OSError`` when nothing answers."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise LabError(f"{method} {path}: HTTP {exc.code} {exc.read()[:300]!r}") from exc
        return json.loads(raw) if raw else None

    def session_for(self, name: str) -> dict | None:
        """The lab session whose notebook path is ``name`` (relative to ``root``), or ``None``."""
        for s in self.api("GET", "/api/sessions") or []:
            if s.get("path") == name:
                return s
        return None

    def kernel_state(self, kernel_id: str) -> str:
        """``execution_state`` of a kernel (``idle``, ``busy``, ``starting``...)."""
        return self.api("GET", f"/api/kernels/{kernel_id}")["execution_state"]

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the server's process group (its kernels included), SIGKILL what is left after
        ``timeout`` s; raises ``LabError`` if a process of the group survives."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self.proc.poll()
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
            else:
                continue
            break
        self.proc.wait(timeout=5)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            self.proc = None
            return
        raise LabError(f"process group {pgid} of jupyterlab still has processes after SIGKILL")


_PROMPTS_JS = """() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')).map(e => e.textContent.trim())"""


class Lab:
    """One browser page on a :class:`LabServer` (the ``lab`` fixture). Times are seconds.

    ``open(path, parameters=None)`` → the copied notebook's path; ``run_all(timeout=300)``;
    ``wait_idle(timeout=60)``; ``click(selector)``; ``fill(selector, text)``;
    ``wait_for_text(selector, text, timeout=30)`` → the text found; ``text(selector)`` → str;
    ``errors()`` → list of str; ``screenshot(name)`` → Path. ``page`` is the Playwright page and
    ``page_errors`` the uncaught page exceptions seen.
    """

    def __init__(self, server: LabServer, page):
        self.server = server
        self.page = page
        self.page_errors: list[str] = []
        page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))
        self.name: str | None = None
        self.kernel_id: str | None = None

    # -- notebook -------------------------------------------------------------------------------
    def open(self, notebook_path, parameters: dict | None = None, timeout: float = 120.0) -> Path:
        """Copy ``notebook_path`` into the lab root (``parameters`` injected the way papermill does:
        ``papermill.parameterize.parameterize_notebook``, a cell tagged ``injected-parameters``
        after the one tagged ``parameters``), open it at ``/lab/tree/<name>`` and wait until its
        kernel is idle. Returns the copy's path. ``LabError`` when the kernel does not come up."""
        src = Path(notebook_path)
        if parameters:
            from papermill.iorw import load_notebook_node
            from papermill.parameterize import parameterize_notebook

            nb = load_notebook_node(str(src))  # adds the metadata papermill's parameterize reads
            nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
            nb = parameterize_notebook(nb, parameters)
        else:
            nb = nbformat.read(src, as_version=4)
            nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
        name = f"{src.stem}-{uuid.uuid4().hex[:8]}.ipynb"
        dest = self.server.root / name
        nbformat.write(nb, dest)
        self.name = name
        self.page.goto(f"{self.server.url}/lab/tree/{name}?token={self.server.token}", timeout=timeout * 1000)
        self.page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=timeout * 1000)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.server.session_for(name)
            if s and s.get("kernel"):
                self.kernel_id = s["kernel"]["id"]
                break
            time.sleep(0.3)
        else:
            raise LabError(f"no kernel session for {name} after {timeout:.0f} s")
        self.wait_idle(max(1.0, deadline - time.monotonic()))
        # the page knows the kernel too (the status shows Idle, not Connecting)
        self.page.wait_for_function(
            "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " return !!(w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
            " && w.sessionContext.session.kernel.connectionStatus === 'connected'); }",
            timeout=max(1.0, deadline - time.monotonic()) * 1000)
        return dest

    def _prompts(self) -> list[str]:
        return self.page.evaluate(_PROMPTS_JS)

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until the notebook's kernel is ``idle`` (REST) and no cell shows ``[*]``, twice in a
        row 0.3 s apart. ``LabError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        calm = 0
        while time.monotonic() < deadline:
            idle = self.kernel_id is None or self.server.kernel_state(self.kernel_id) == "idle"
            calm = calm + 1 if idle and not any("*" in p for p in self._prompts()) else 0
            if calm >= 2:
                return
            time.sleep(0.3)
        raise LabError(f"kernel not idle after {timeout:.0f} s (prompts: {self._prompts()})")

    def run_all(self, timeout: float = 300.0) -> None:
        """Run every cell (the app command ``notebook:run-all-cells``, what Run ▸ Run All Cells
        does) and wait until all ran: the kernel idle and no ``[*]``, after the run was seen to
        start (a ``[*]`` or every code cell numbered). A cell that raises stops the run (as in
        JupyterLab); :meth:`errors` shows its traceback."""
        before = self._prompts()
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        deadline = time.monotonic() + timeout
        started = False
        while time.monotonic() < deadline:
            prompts = self._prompts()
            if any("*" in p for p in prompts) or (prompts != before and prompts):
                started = True
            if all(p.strip("[]: ").isdigit() for p in prompts) and prompts != before:
                started = True
            if started:
                break
            time.sleep(0.1)
        if not started:
            raise LabError(f"run all did not start within {timeout:.0f} s (prompts: {self._prompts()})")
        self.wait_idle(max(1.0, deadline - time.monotonic()))

    # -- widgets --------------------------------------------------------------------------------
    def _one(self, selector: str, inner: str):
        loc = self.page.locator(selector).first
        loc.wait_for(state="attached", timeout=30_000)
        tag = loc.evaluate("e => e.tagName.toLowerCase()")
        if tag in inner.split(", "):
            return loc
        sub = self.page.locator(selector).locator(inner).first
        return sub if sub.count() else loc

    def click(self, selector: str, timeout: float = 30.0) -> None:
        """Click the widget ``selector`` names: the element itself when it is a ``<button>`` (an
        ipywidgets Button's class sits on the button), else the first button inside it.

        Clicks as a person does: once the button is enabled, and not within the first instant
        after (:data:`CLICK_AFTER_ENABLED_S`). The console's click guard (``workbench.lab.clicks``)
        drops a click sent less than its slack after the last action ended as one queued during
        it; Playwright clicks within milliseconds of the button coming back, which under load fell
        inside that window (the restore click of the console test, CI stop 23)."""
        loc = self._one(selector, "button")
        deadline = time.monotonic() + timeout
        loc.wait_for(state="visible", timeout=timeout * 1000)
        while not loc.is_enabled():
            if time.monotonic() > deadline:
                raise LabError(f"{selector} stayed disabled for {timeout:.0f} s")
            time.sleep(0.1)
        time.sleep(CLICK_AFTER_ENABLED_S)
        loc.click(timeout=max(1.0, deadline - time.monotonic()) * 1000)

    def fill(self, selector: str, text: str, timeout: float = 30.0) -> None:
        """Type ``text`` into the Text/Textarea widget ``selector`` names (its ``input`` or
        ``textarea``), then blur it so a widget with ``continuous_update=False`` syncs too."""
        loc = self._one(selector, "input, textarea")
        loc.fill(text, timeout=timeout * 1000)
        loc.blur()

    def wait_for_text(self, selector: str, text: str, timeout: float = 30.0, *, also: Sequence[str] = ()) -> str:
        """Wait until an element matching ``selector`` contains ``text``; returns that element's
        text. ``LabError`` naming what was there after ``timeout``, and the text of each selector in
        ``also`` (e.g. the pane's status line: what the widget was doing when the wait ran out)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t in self.page.locator(selector).all_inner_texts():
                if text in t:
                    return t
            time.sleep(0.2)
        context = "".join(f"; {s}: {self.page.locator(s).all_inner_texts()!r}" for s in also)
        raise LabError(f"{text!r} not in {selector} after {timeout:.0f} s: "
                       f"{self.page.locator(selector).all_inner_texts()!r}{context}")

    def text(self, selector: str) -> str:
        """The visible text of every element matching ``selector``, joined by newlines ('' when none)."""
        return "\n".join(self.page.locator(selector).all_inner_texts())

    def errors(self) -> list[str]:
        """The notebook's error outputs: stderr streams and tracebacks (JupyterLab renders both as
        ``application/vnd.jupyter.stderr``) and widgets that failed to render."""
        sel = ('.jp-NotebookPanel:not(.lm-mod-hidden) [data-mime-type="application/vnd.jupyter.stderr"],'
               ' .jp-NotebookPanel:not(.lm-mod-hidden) .jupyter-widgets.widget-error')
        found = self.page.locator(sel).all_inner_texts()
        found += [t for t in self.page.locator(".jp-NotebookPanel .jp-OutputArea-output").all_inner_texts()
                  if "Error displaying widget" in t]
        return found

    def screenshot(self, name: str) -> Path:
        """A full-page PNG ``<artefact dir>/<name>`` (``.png`` added when missing); its path."""
        if not name.endswith(".png"):
            name += ".png"
        path = artifact_dir() / name
        self.page.screenshot(path=str(path), full_page=True)
        return path

    # -- teardown -------------------------------------------------------------------------------
    def close(self) -> None:
        """Shut the notebook's kernel down (REST ``DELETE`` of its session and kernel), close the
        page and remove the copy (and its checkpoints)."""
        problems = []
        if self.name is not None:
            try:
                s = self.server.session_for(self.name)
                if s:
                    self.server.api("DELETE", f"/api/sessions/{s['id']}")
                if self.kernel_id and any(k["id"] == self.kernel_id for k in self.server.api("GET", "/api/kernels")):
                    self.server.api("DELETE", f"/api/kernels/{self.kernel_id}")
            except (OSError, LabError) as exc:
                problems.append(f"kernel shutdown: {type(exc).__name__}: {exc}")
        try:
            self.page.context.close()
        except Exception as exc:  # the page may already be gone: report, do not hide
            problems.append(f"page close: {type(exc).__name__}: {exc}")
        if self.name is not None:
            (self.server.root / self.name).unlink(missing_ok=True)
            shutil.rmtree(self.server.root / ".ipynb_checkpoints", ignore_errors=True)
        if problems:
            raise LabError("; ".join(problems))


def console_tab(lab: "Lab", title: str) -> None:
    """Select the box console's tab ``title`` ("Status", "Server", "Log", …) in ``lab``'s page."""
    lab.page.locator(".wb-console .lm-TabBar-tab", has_text=title).first.click()
