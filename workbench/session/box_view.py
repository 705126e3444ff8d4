"""What runs on a box now, for ``workbench status``: its servers as process trees (the launcher and
its ranks with their titles and listening ports), the SGLang processes no live launcher owns
(orphans), and its GPUs with their memory and holders (:mod:`workbench.session.gpu_holders`).

Each part is read on its own: a part that cannot be read says why in its place and the others are
still shown (a box with no nvidia-smi: the GPU part says it was skipped and why).
"""

from __future__ import annotations

import shlex
from typing import Any, Optional

from remote import engines
from remote.errors import RemoteError
from workbench.errors import WorkbenchError
from workbench.session.gpu_holders import left_behind_by_launcher, is_sglang_process, live_launchers, read_box_gpus, title_of

__all__ = ["box_view", "box_view_lines", "gpu_lines"]


def _socket_ports(box: Any, pids: list[int], timeout: float) -> dict[int, list[int]]:
    """``{pid: [TCP ports it listens on]}`` for ``pids``: their ``/proc/PID/fd`` socket inodes (one
    shell command for all) matched with the LISTEN sockets of ``/proc/net/tcp*``."""
    if not pids:
        return {}
    listening = {str(inode): port for inode, port in box.listening_sockets(timeout=timeout).items()}
    dirs = [f"/proc/{int(p)}/fd" for p in pids]
    res = box.run(["find", *dirs, "-maxdepth", "1", "-lname", "socket:*", "-printf", "%h %l\\n"], check=False,
                  timeout=timeout)
    out: dict[int, list[int]] = {}
    for line in res.stdout.splitlines():
        fd_dir, _, sock = line.partition(" ")
        pid = fd_dir.split("/")[2] if fd_dir.count("/") >= 3 else ""
        inode = sock[len("socket:["):-1]
        if pid.isdigit() and inode in listening:
            out.setdefault(int(pid), []).append(listening[inode])
    return {p: sorted(set(v)) for p, v in out.items()}


def _tree(root: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        if pid not in out:
            out.append(pid)
            todo.extend(sorted(kids.get(pid, ())))
    return out


def box_view(box: Any, *, timeout: float = 10) -> dict:
    """The box now as plain JSON: ``servers`` (one per live engine launcher: ``pid``, ``pgid``,
    ``engine``, ``port``, ``command``, ``processes`` — the launcher and every descendant with
    ``pid``, ``ppid``, ``title``, ``ports``), ``orphans`` (SGLang processes in no live launcher's
    tree: ``pid``, ``ppid``, ``pgid``, ``title``), ``gpus``
    (:meth:`workbench.session.gpu_holders.BoxGpus.to_dict`: GPUs, holders with ``server`` and
    ``orphan``); a part that could not be read is ``{"error": why}`` (``gpus`` without a query
    command: ``available`` False and ``reason``). Raises nothing for the box's failures."""
    view: dict = {}
    try:
        procs = [p for p in box.transport.processes(argv=True, timeout=timeout) if not p.exited]
        by_pid = {p.pid: p for p in procs}
        kids: dict[int, list[int]] = {}
        for p in procs:
            kids.setdefault(p.ppid, []).append(p.pid)
        launchers = live_launchers(procs)
        trees = {pid: _tree(pid, kids) for pid in sorted(launchers)}
        owned = {pid for tree in trees.values() for pid in tree}
        orphans = [p for p in procs if p.pid not in owned and is_sglang_process(p.argv)]
        ports = _socket_ports(box, sorted(owned) + [p.pid for p in orphans], timeout)
        view["servers"] = [{
            "pid": pid, "pgid": by_pid[pid].pgid, "engine": engines.launcher_engine(by_pid[pid].argv),
            "port": next(iter(ports.get(pid, [])), None), "command": shlex.join(by_pid[pid].argv),
            "processes": [{"pid": q, "ppid": by_pid[q].ppid, "title": title_of(by_pid[q].argv), "ports": ports.get(q, [])}
                          for q in tree if q in by_pid]} for pid, tree in trees.items()]
        view["orphans"] = [{"pid": p.pid, "ppid": p.ppid, "pgid": p.pgid, "title": title_of(p.argv),
                            "ports": ports.get(p.pid, []), "orphan": left_behind_by_launcher(p, by_pid)} for p in orphans]
    except RemoteError as exc:
        view["servers"] = {"error": str(exc)}
        view["orphans"] = []
    try:
        view["gpus"] = read_box_gpus(box, sglang_candidates=True, timeout=timeout).to_dict()
    except (RemoteError, WorkbenchError) as exc:
        view["gpus"] = {"error": str(exc)}
    return view


def _short(text: str, n: int = 110) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def box_view_lines(view: dict) -> list[str]:
    """:func:`box_view` as text lines."""
    out: list[str] = []
    servers = view.get("servers")
    if isinstance(servers, dict):
        out.append(f"servers: could not be read ({servers['error']})")
    elif not servers:
        out.append("servers: none running")
    else:
        for s in servers:
            out.append(f"server pid {s['pid']} ({s['engine']}, port {s['port'] if s['port'] is not None else '?'}, "
                       f"{len(s['processes'])} processes): {_short(s['command'])}")
            for p in s["processes"][1:]:
                out.append(f"  pid {p['pid']} (ppid {p['ppid']}) {_short(p['title'], 80)}"
                           + (f" listening on {', '.join(map(str, p['ports']))}" if p["ports"] else ""))
    for p in view.get("orphans") or []:
        what = ("ORPHAN: an SGLang process its launcher left behind (reparented, or its process group's leader gone)"
                if p["orphan"] else f"an SGLang process under pid {p['ppid']}, which is no engine launcher")
        out.append(f"pid {p['pid']} (ppid {p['ppid']}, process group {p['pgid']}) {_short(p['title'], 80)}: {what}")
    return out + gpu_lines(view.get("gpus"))


def gpu_lines(gpus: Optional[dict]) -> list[str]:
    """The GPU part of :func:`box_view` (:meth:`BoxGpus.to_dict`) as text lines: each GPU's memory
    and who holds it, then each holder (pid, title, user, parent, MiB per GPU; orphans flagged)."""
    out: list[str] = []
    if gpus is None or "error" in gpus and "gpus" not in gpus:
        out.append(f"GPUs: could not be read ({(gpus or {}).get('error')})")
        return out
    if not gpus.get("available"):
        out.append(f"GPUs: skipped — {gpus.get('error') or gpus.get('reason')}")
        return out
    src = " (the sandbox box's GPUs)" if gpus.get("source") == "sandbox" else ""
    out.append(f"GPUs: {len(gpus['gpus'])}{src}" + ("; nvidia-smi lists no PIDs (container): memory.used only"
                                                     if gpus.get("container") else ""))
    for g in gpus["gpus"]:
        held = [h for h in gpus["holders"] if str(g["index"]) in h["mib"]]
        who = ", ".join(f"pid {h['pid']} {h['mib'][str(g['index'])]} MiB"
                        + (" (ORPHAN)" if h["orphan"] else f" (server {h['server']})" if h["server"] else
                           f" (user {h['user']})") for h in held)
        rest = (gpus.get("unattributed_mib") or {}).get(str(g["index"]))
        if rest:
            who = (who + ", " if who else "") + f"{rest} MiB held by no listed process"
        out.append(f"  GPU {g['index']} {g['name']}: {g['used_mib']} / {g['total_mib']} MiB" + (f" — {who}" if who else ""))
    for h in gpus["holders"]:
        tags = (["ORPHAN"] if h["orphan"] else []) + ([f"server pid {h['server']}"] if h["server"] else []) + \
            (["gone"] if h["gone"] else [])
        mib = ", ".join(f"GPU{i} {m} MiB" for i, m in h["mib"].items()) or "GPU memory unknown"
        out.append(f"  holder pid {h['pid']} {_short(h['title'], 80)} (user {h['user']}, ppid {h['ppid']}) {mib}"
                   + (f" [{', '.join(tags)}]" if tags else ""))
    out += [f"  unparsed: {p['message']}" for p in gpus.get("problems") or []]
    return out
