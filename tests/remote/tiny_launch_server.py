"""A tiny real HTTP server for the remote tests (its name matches find_servers' default pattern).

    python tiny_launch_server.py (--port P | --listen P) [--delay S] [--die-after S] [--ignore-term]
                                 [--child] [--child-own-session] [--starting S [--slow-503 S] | --stuck]

``/health`` answers 200 once listening. ``/health_generate`` is 404 unless ``--starting S``
(503 at once for S seconds after listening, then 200, as SGLang 0.5.23 while it warms up) or
``--stuck`` (the request is accepted and never answered: a stuck generation, HTTP up);
``--slow-503 S`` answers each of those 503s only after S seconds (an event loop starved while the
models load: nothing logs "Health check failed").
``--delay`` waits before listening, ``--die-after``
prints a fatal line and exits 3 before listening, ``--ignore-term`` ignores SIGTERM,
``--child`` starts a child process (same process group) that sleeps, ``--child-own-session`` one
that leaves the group first (``setsid``: as a server's helper that detaches), its pid printed as
``detached child pid N``. ``--fork-child`` forks a child (the very argv of the server, as a forked worker),
``--mp-child`` starts a ``multiprocessing`` spawn child (and so Python's resource tracker: both run
``python -c "from multiprocessing…"``, as vLLM's helpers do), their pids printed. ``--claim-engines`` (a stand-in, named so: no engine answers like this) serves
SGLang's ``/server_info`` AND vLLM's ``/version`` at once, for the identity check's "conflicting".
While ``--starting``, ``--log-every S`` prints a "loading step N" line every S seconds and
``--spin-while-starting`` keeps a thread busy on the CPU (no line): a start that makes progress
slowly; without either a 503-answering start does nothing (stalled). ``--slow-first-503 S`` delays
the first 503 by S seconds (a busy machine delaying an "at once" answer; the next ones come at once).
``--log-lines FILE`` (with ``--log-every``): the lines printed are those of FILE in turn (an
engine's start-up lines, e.g. SGLang's shard progress), then nothing more (a start-up that hangs
after the last one, unless ``--starting`` ends first).
``--listen P`` is ``--port P`` under another name: the argv then names no
``--port``, so a finder must read the port from the listening socket.
"""

import argparse
import http.server
import os
import signal
import subprocess
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    starting_until = None  # monotonic time /health_generate turns 200 (--starting)
    slow_503 = 0.0  # seconds before each "starting" 503 is answered (--slow-503)
    stuck = False

    claim_engines = False
    slow_first_503 = 0.0

    def do_GET(self):
        if self.claim_engines and self.path in ("/server_info", "/version"):
            body = (b'{"version": "0.5.23", "model_path": "m", "internal_states": [{}]}' if self.path == "/server_info"
                    else b'{"version": "0.32.0"}')
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/health_generate" and self.stuck:
            time.sleep(3600)  # never answers while the client waits
            return
        if self.path == "/health_generate" and self.starting_until is not None:
            code = 503 if time.monotonic() < self.starting_until else 200
            if code == 503:
                time.sleep(self.slow_503)
            if code == 503 and Handler.slow_first_503:
                delay, Handler.slow_first_503 = Handler.slow_first_503, 0.0
                time.sleep(delay)
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
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--listen", type=int, default=None)
    ap.add_argument("--child-own-session", action="store_true")
    ap.add_argument("--fork-child", action="store_true")
    ap.add_argument("--mp-child", action="store_true")
    ap.add_argument("--claim-engines", action="store_true")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--die-after", type=float, default=None)
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--starting", type=float, default=None)
    ap.add_argument("--slow-503", type=float, default=0.0)
    ap.add_argument("--stuck", action="store_true")
    ap.add_argument("--log-every", type=float, default=None)
    ap.add_argument("--log-lines", default=None)
    ap.add_argument("--spin-while-starting", action="store_true")
    ap.add_argument("--slow-first-503", type=float, default=0.0)
    args = ap.parse_args()
    if (args.port is None) == (args.listen is None):
        ap.error("give exactly one of --port and --listen")
    args.port = args.port if args.port is not None else args.listen
    print(f"tiny server starting, port {args.port}", file=sys.stderr, flush=True)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(f"child pid {child.pid}", file=sys.stderr, flush=True)
    if args.child_own_session:
        detached = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        print(f"detached child pid {detached.pid}", file=sys.stderr, flush=True)
    if args.fork_child:
        pid = os.fork()
        if pid == 0:  # the forked child: same argv, sleeps until killed
            time.sleep(120)
            os._exit(0)
        print(f"fork child pid {pid}", file=sys.stderr, flush=True)
    if args.mp_child:
        import multiprocessing

        mp_child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(120,), daemon=True)
        mp_child.start()
        print(f"mp child pid {mp_child.pid}", file=sys.stderr, flush=True)
    if args.die_after is not None:
        time.sleep(args.die_after)
        print("fatal: tiny server gives up (as asked by --die-after)", file=sys.stderr, flush=True)
        return 3
    time.sleep(args.delay)
    server = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True  # a stuck request must not keep the process from exiting
    Handler.stuck = args.stuck
    Handler.slow_503 = args.slow_503
    Handler.claim_engines = args.claim_engines
    Handler.slow_first_503 = args.slow_first_503
    if args.starting is not None:
        Handler.starting_until = time.monotonic() + args.starting
        import threading

        given = open(args.log_lines).read().splitlines() if args.log_lines else None

        def log_steps():
            n = 0
            while time.monotonic() < Handler.starting_until:
                time.sleep(args.log_every)
                n += 1
                if given is None:
                    print(f"loading step {n}", file=sys.stderr, flush=True)
                elif n <= len(given):
                    print(given[n - 1], file=sys.stderr, flush=True)

        def spin():
            x = 0
            while time.monotonic() < Handler.starting_until:
                for _ in range(10000):
                    x += 1

        if args.log_every:
            threading.Thread(target=log_steps, daemon=True).start()
        if args.spin_while_starting:
            threading.Thread(target=spin, daemon=True).start()
    print(f"listening on {args.host}:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
