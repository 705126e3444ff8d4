"""The box console's Status tab as HTML (:class:`workbench.lab.console.BoxConsole`): the facts of
``BoxConsole.status()`` (host, server, health, engine, log, the other servers, the GPUs) rendered."""

from __future__ import annotations

import html
from typing import Any

from workbench.lab.gpu_pane import gpu_rows

__all__ = ["status_html", "server_html"]


def _esc(x: Any) -> str:
    return html.escape(str(x))


def status_html(f: dict) -> str:
    """The Status tab: :func:`server_html` of the facts ``f`` (``BoxConsole.status()``) with the GPU rows."""
    gpus = "".join(f"<tr><th style='text-align:left;vertical-align:top;padding-right:1em'>{k}</th>"
                   f"<td style='text-align:left'>{v}</td></tr>" for k, v in gpu_rows(f.get("gpu"), f.get("gpu_error")))
    server = server_html(f)  # the GPUs are the box's: shown whether or not a server was chosen
    if server.endswith("</table>"):
        return server[: -len("</table>")] + gpus + "</table>"
    return server + f"<table class='wb-console-gpus'>{gpus}</table>"

def server_html(f: dict) -> str:
    """The server part of the Status tab from the facts ``f`` (``BoxConsole.status()``): a table, or why
    no server was chosen, or the end of the log of the server that exited."""
    rows = [("host", _esc(f["host"]))]
    gone = f.get("gone")
    if gone is not None:
        log = (f"its log {_esc(gone.log_path)} ends with:<pre class='wb-console-log-tail' "
               f"style='white-space:pre-wrap'>{_esc(chr(10).join(gone.log_tail))}</pre>") if gone.log_path \
            else "its output went to no log file."
        return (f"<p class='wb-console-gone'><b>The server on port {gone.port} (pid {gone.pid}) is not running "
                f"any more</b> — {log}</p><p>This console stays on port {gone.port}: start a server there in the "
                f"Server tab. Other servers running: {_esc(', '.join(f'port {p}' for p in f.get('others') or []) or 'none')}</p>")
    if f.get("error"):
        return (f"<p><b>No server chosen:</b> {_esc(f['error'])}</p>"
                f"<p>Other servers running: {_esc(f.get('others') or 'none')}</p>")
    if f.get("pid") is None:
        rows.append(("server", "no SGLang or vLLM server is running"
                     + (f" on port {f['port']}" if f.get("port") else "") + " — start one in the Server tab"))
    else:
        health = f.get("health")
        word = "healthy" if health == "ready" else health
        rows += [("port", _esc(f["port"])), ("pid", f"{f['pid']} (process group {f.get('pgid')})"),
                 ("health", f"<b>{_esc(word)}</b> — {_esc(f.get('health_detail'))}"),
                 ("uptime", f"{f['uptime_s']} s" if f.get("uptime_s") is not None else "?"),
                 ("command", f"<pre class='wb-console-cmdline' style='white-space:pre-wrap;word-break:break-all;"
                             f"user-select:all'>{_esc(f['command'])}</pre>"),
                 ("engine", f"{_esc(f.get('engine'))} {_esc(f.get('engine_version') or '?')} at "
                            f"{_esc(f.get('engine_root') or f.get('engine_error'))}"
                            + (f"<br><b class='wb-console-engine-note'>{_esc(f['engine_note'])}</b>"
                               if f.get("engine_note") else "")),
                 ("log", _esc(f.get("log_path") or "(not a file)"))]
    rows.append(("other servers", _esc(", ".join(f"port {p}" for p in f.get("others") or []) or "none")))
    body = "".join(f"<tr><th style='text-align:left;vertical-align:top;padding-right:1em'>{k}</th>"
                   f"<td style='text-align:left'>{v}</td></tr>" for k, v in rows)
    return f"<table class='wb-console-facts'>{body}</table>"
