"""A tiny real HTTP server for the remote tests (its name matches find_servers' default pattern).

    python tiny_launch_server.py --port P [--delay S] [--die-after S] [--ignore-term] [--child]
                                 [--starting S | --stuck]

``/health`` answers 200 once listening. ``/health_generate`` is 404 unless ``--starting S``
(503 at once for S seconds after listening, then 200, as SGLang 0.5.23 while it warms up) or
``--stuck`` (the request is accepted and never answered: a stuck generation, HTTP up).
``--delay`` waits before listening, ``--die-after``
prints a fatal line and exits 3 before listening, ``--ignore-term`` ignores SIGTERM,
``--child`` starts a child process (same process group) that sleeps.
"""

import argparse
import http.server
import signal
import subprocess
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    starting_until = None  # monotonic time /health_generate turns 200 (--starting)
    stuck = False

    def do_GET(self):
        if self.path == "/health_generate" and self.stuck:
            time.sleep(3600)  # never answers while the client waits
            return
        if self.path == "/health_generate" and self.starting_until is not None:
            code = 503 if time.monotonic() < self.starting_until else 200
        else:
            code = 200 if self.path == "/health" else 404
        body = b"ok\n" if code == 200 else b"not found\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("request: " + (fmt % args) + "\n")
        sys.stderr.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--die-after", type=float, default=None)
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--starting", type=float, default=None)
    ap.add_argument("--stuck", action="store_true")
    args = ap.parse_args()
    print(f"tiny server starting, port {args.port}", file=sys.stderr, flush=True)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(f"child pid {child.pid}", file=sys.stderr, flush=True)
    if args.die_after is not None:
        time.sleep(args.die_after)
        print("fatal: tiny server gives up (as asked by --die-after)", file=sys.stderr, flush=True)
        return 3
    time.sleep(args.delay)
    server = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True  # a stuck request must not keep the process from exiting
    Handler.stuck = args.stuck
    if args.starting is not None:
        Handler.starting_until = time.monotonic() + args.starting
    print(f"listening on {args.host}:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
