"""Tensor parallelism in the sandbox (``--tp-size N``, N > 1): the launcher forks N scheduler
processes and one detokenizer, as SGLang 0.5.23's ``launch_server`` starts them
(entrypoints/engine.py ``_launch_subprocesses``), and talks to them through pipes.

- Titles (setproctitle): ``sglang::scheduler_TP{r}`` (scheduler.py:6294 ``configure_scheduler_process``:
  ``f"sglang::scheduler{prefix.replace(' ', '_')}"`` with prefix ``" TP{r}"`` when tp_size > 1) and
  ``sglang::detokenizer`` (detokenizer_manager.py:551). The launcher keeps its command line.
- Log prefix ``[date TP{r}]`` (the same prefix, ``configure_logger(server_args, prefix=...)``).
- Each rank dies with the launcher (``kill_itself_when_parent_died``: prctl PR_SET_PDEATHSIG SIGKILL,
  srt/utils/common.py:3432), except under ``--sandbox-fault orphan-ranks``.
- Each rank initialises ``torch.distributed`` (gloo over TCP, on ``--dist-init-addr`` or
  ``127.0.0.1:<nccl port>``; the port is ``--nccl-port`` or SGLang's ``get_free_port_below_ephemeral``,
  srt/utils/network.py:205), takes its sandbox GPU memory, and loads the target and the draft
  (``Scheduler(server_args, tp_rank)``). The work is replicated: every rank runs the same forward
  (so the accept length at TP N is TP 1's); after each prefill and decode step the ranks meet in a
  barrier on the rendezvous store carrying the step's token (a tensor-parallel forward's
  collective, see ``_StoreGroup``), so a rank that is gone leaves the others waiting there.
  Rank 0's tokens are returned, through the detokenizer.
- Rank 0 receives each request from the launcher and hands it to the other ranks through the
  store (SGLang: ``broadcast_pyobj`` over the CPU group).
- A rank's exception logs "Scheduler hit an exception: <traceback>" and SIGQUITs the launcher
  (scheduler.py:6369-6373), whose handler kills the whole tree.

The ranks are forked from the launcher after it imported torch and the models' modules and before
it started any thread (one thread at fork; torch starts its OpenMP pool only at the first parallel
op, and each rank sets ``torch.set_num_threads(1)`` first).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import random
import signal
import socket
import threading
import time
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, Dict, List, Optional

logger = logging.getLogger(__name__)

#: gloo's time-out for a collective: as long as NCCL's default wait in SGLang, so a rank that is gone
#: leaves the others waiting (sglang #3099), not failing after a few seconds
COLLECTIVE_TIMEOUT = timedelta(hours=2)


class RankDied(RuntimeError):
    """A scheduler process ended before it was ready (its pipe closed)."""


def get_free_port_below_ephemeral(low: int = 22000, high: int = 29999, attempts: int = 64) -> int:
    """A port nothing binds, below the kernel's ephemeral range (SGLang 0.5.23
    srt/utils/network.py:205-224), or any free port when the range is too small."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = min(high, int(f.read().split()[0]) - 1)
    except (OSError, ValueError, IndexError):
        high = min(high, 32767)
    if high - low + 1 >= attempts:
        for port in random.sample(range(low, high + 1), attempts):
            with socket.socket() as s:
                try:
                    s.bind(("0.0.0.0", port))
                    return port
                except OSError:
                    continue
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def dist_init_method(server_args, nccl_port: int) -> str:
    """``tcp://HOST:PORT`` (SGLang 0.5.23 distributed/bootstrap.py ``_resolve_dist_init_method``):
    ``--dist-init-addr`` when given, else loopback on the nccl port."""
    if server_args.dist_init_addr:
        return f"tcp://{server_args.dist_init_addr}"
    return f"tcp://127.0.0.1:{nccl_port}"


def kill_itself_when_parent_died() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills this process when its parent exits."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


class TpRanks:
    """The launcher's side: forks the ranks and the detokenizer (:meth:`start`), then stands in for
    the in-process ``Scheduler`` for the HTTP server (``generate``, ``get_internal_state``,
    ``flush_cache``, ``metrics_collector``, ``last_receive_tstamp``, ``context_length``)."""

    def __init__(self, server_args) -> None:
        self.server_args = server_args
        self.tp_size = server_args.tp_size
        self.nccl_port = server_args.nccl_port or get_free_port_below_ephemeral()
        self.pids: List[int] = []
        self.detokenizer_pid: Optional[int] = None
        self.lock = threading.Lock()
        self.last_receive_tstamp = time.time()
        self.context_length = 0
        self.exception_hook = None
        self.metrics_collector = _RemoteMetrics(self) if server_args.enable_metrics else None

    def start(self) -> None:
        """Fork the N ranks, then the detokenizer. Call with one thread running (the launcher's
        main thread, before uvicorn and the loader thread). Plain ``os.fork`` (not
        ``multiprocessing.Process``): the launcher must not join its children when it exits."""
        import multiprocessing as mp

        launcher = os.getpid()
        method = dist_init_method(self.server_args, self.nccl_port)
        self._init_readers = []
        self._requests, rank0_requests = mp.Pipe(duplex=True)
        to_detok_r, to_detok_w = mp.Pipe(duplex=False)
        self._outputs, detok_out_w = mp.Pipe(duplex=False)
        for r in range(self.tp_size):
            reader, writer = mp.Pipe(duplex=False)
            pid = _fork(_rank_main, self.server_args, r, method, launcher, writer,
                        rank0_requests if r == 0 else None, to_detok_w if r == 0 else None)
            writer.close()
            self._init_readers.append(reader)
            self.pids.append(pid)
        self.detokenizer_pid = _fork(_detokenizer_main, self.server_args, to_detok_r, detok_out_w)

    def wait_ready(self) -> List[Dict[str, Any]]:
        """Each rank's init info, in rank order (SGLang: ``scheduler_pipe_readers[i].recv()``).
        Raises :class:`RankDied` when a rank's pipe closes first (the rank died; its own
        "Scheduler hit an exception" has SIGQUIT the launcher already)."""
        infos = []
        for r, reader in enumerate(self._init_readers):
            try:
                infos.append(reader.recv())
            except EOFError:
                raise RankDied(f"Rank {r} scheduler is dead. Please check if there are relevant logs.") from None
        self.context_length = infos[0]["context_length"]
        return infos

    def _call(self, *msg) -> Any:
        with self.lock:
            self._requests.send(msg)
            return self._requests.recv()

    def generate(self, input_ids: List[int], params, decode) -> Dict:
        """One request on every rank; rank 0's output, through the detokenizer. Raises ``ValueError``
        for a request the scheduler refuses (as the in-process scheduler)."""
        with self.lock:
            self._requests.send(("generate", list(input_ids), params))
            status, payload = self._outputs.recv()
        self.last_receive_tstamp = time.time()
        if status == "refused":
            raise ValueError(payload)
        return payload

    def get_internal_state(self) -> List[Dict]:
        """Rank 0's internal state (SGLang's ``/server_info`` shows the DP ranks' states)."""
        return self._call("internal_state")

    def flush_cache(self) -> bool:
        return self._call("flush_cache")


class _RemoteMetrics:
    """The Prometheus collector of rank 0, seen from the launcher."""

    def __init__(self, ranks: TpRanks) -> None:
        self.ranks = ranks

    def render(self) -> bytes:
        return self.ranks._call("metrics_render")

    def observe_one_finished_request(self, *args, **kwargs) -> None:
        self.ranks._call("metrics_observe", args, kwargs)


def _fork(target, *args) -> int:
    """Fork a child that runs ``target(*args)`` with the default signal dispositions and leaves
    with ``os._exit`` (no atexit handler of the launcher runs in it); returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    status = 0
    try:
        for sig in (signal.SIGQUIT, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        target(*args)
    except BaseException:  # noqa: B902 -- the child must never return into the launcher's code
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        logging.shutdown()
        os._exit(status)


def decode(ids: List[int]) -> str:
    """The byte-level tokenizer's decode (as ``http_server.decode``): for the stop strings."""
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class _StoreGroup:
    """The ranks' hand-offs through the rendezvous store (``torch.distributed.TCPStore``, hosted by
    rank 0 on the nccl port, the same store the gloo process group was built on):

    - :meth:`sync` after each prefill and decode step: every rank sets its step's token and waits
      for every other rank's (a barrier). It waits as NCCL's collectives wait, with no failure
      detection: a rank that is gone leaves the others waiting (sglang #3099). (gloo's own
      collectives would notice the closed TCP pair and raise at once, which SGLang's NCCL ranks
      do not.) The tokens must agree (replicated ranks), else ``RuntimeError``.
    - :meth:`send_request` / :meth:`recv_request`: rank 0 hands each request to the others (SGLang:
      ``broadcast_pyobj`` over the CPU group); a follower blocks in ``store.get`` until it comes.
    """

    def __init__(self, store, tp_rank: int, tp_size: int) -> None:
        self.store = store
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.step = 0
        self.request = 0

    def sync(self, token: int) -> None:
        n = self.step
        self.step += 1
        keys = [f"sandbox/step/{n}/{r}" for r in range(self.tp_size)]
        self.store.set(keys[self.tp_rank], str(int(token)))
        self.store.wait(keys, COLLECTIVE_TIMEOUT)
        tokens = [int(self.store.get(k)) for k in keys]
        if len(set(tokens)) != 1:
            raise RuntimeError(f"tensor-parallel ranks diverged at step {n}: tokens {tokens}")
        if self.tp_rank == 0 and n >= 2:  # every rank has passed step n - 1's wait: step n - 2 is done
            for r in range(self.tp_size):
                self.store.delete_key(f"sandbox/step/{n - 2}/{r}")

    def send_request(self, msg) -> None:
        import pickle

        self.store.set(f"sandbox/req/{self.request}", pickle.dumps(msg))
        self.request += 1

    def recv_request(self):
        import pickle

        msg = pickle.loads(self.store.get(f"sandbox/req/{self.request}"))
        self.request += 1
        return msg


def _init_distributed(server_args, tp_rank: int, method: str):
    """The rendezvous store (rank 0 listens on the port: ``EADDRINUSE`` from torch when something
    holds it) and the gloo process group on it, so ``torch.distributed.get_rank()`` answers in the
    rank. Returns the store. ``port-held``: rank 0 binds the port itself and hands the listening
    socket to the store, after forking a holder process (own session) that keeps it open."""
    import torch.distributed as dist

    host, port = method[len("tcp://"):].rsplit(":", 1)
    listen_fd = None
    if tp_rank == 0 and server_args.sandbox_fault == "port-held":
        listen_fd = _hold_port(host, int(port))
    store = dist.TCPStore(host, int(port), server_args.tp_size, is_master=tp_rank == 0, timeout=COLLECTIVE_TIMEOUT,
                          master_listen_fd=listen_fd)
    dist.init_process_group("gloo", store=store, rank=tp_rank, world_size=server_args.tp_size,
                            timeout=COLLECTIVE_TIMEOUT)
    return store


def _hold_port(host: str, port: int) -> int:
    """``--sandbox-fault port-held``: bind and listen on the rendezvous port here, then fork a
    process in a session of its own (so a stop of the server's process group misses it; it has no
    parent-death signal) that keeps the listening socket open and sleeps. Returns the socket's fd
    for the store. After the server is gone the port stays bound: the next launch on it fails in
    its store's bind with torch's EADDRINUSE error."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    fd = sock.detach()
    first = os.fork()
    if first == 0:
        try:
            os.setsid()
            if os.fork() == 0:  # the holder: not a child of the server, in no group of it
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                while True:
                    signal.pause()
        finally:
            os._exit(0)
    os.waitpid(first, 0)
    return fd


def _rank_main(server_args, tp_rank: int, method: str, launcher_pid: int, init_writer: Connection,
               requests: Optional[Connection], to_detokenizer: Optional[Connection]) -> None:
    """A scheduler process (module docstring)."""
    import setproctitle
    import torch

    from workbench.sandbox.srt.managers.scheduler import Scheduler
    from workbench.sandbox.srt.startup import Startup, open_gpus
    from workbench.sandbox.srt.utils.common import configure_logger, get_exception_traceback

    fault = server_args.sandbox_fault or ""
    # term-ignored: the last rank ignores SIGTERM, as a rank stuck in a collective's teardown that
    # only SIGKILL ends, and (so that a SIGTERM of the launcher leaves it behind) has no
    # parent-death signal either; orphan-ranks: no rank has one
    stuck = fault == "term-ignored" and tp_rank == server_args.tp_size - 1
    if fault != "orphan-ranks" and not stuck:
        kill_itself_when_parent_died()
    setproctitle.setproctitle(f"sglang::scheduler_TP{tp_rank}")
    configure_logger(server_args, prefix=f" TP{tp_rank}")
    if stuck:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)
    try:
        startup = Startup(server_args, tp_rank, open_gpus())
        stores = []
        startup.init_parallel(lambda: stores.append(_init_distributed(server_args, tp_rank, method)))
        group = _StoreGroup(stores[0], tp_rank, server_args.tp_size)
        scheduler = Scheduler(server_args, tp_rank, startup)
        scheduler.tp_sync = group.sync
        failed = threading.Event()
        scheduler.exception_hook = failed.set
        gc.freeze()
        gc.enable()
        init_writer.send({"status": "ready", "tp_rank": tp_rank, "context_length": scheduler.context_length})
        if tp_rank == 0:
            _rank0_loop(scheduler, group, requests, to_detokenizer, failed)
        else:
            _follower_loop(scheduler, group, failed)
    except Exception:
        logger.error(f"Scheduler hit an exception: {get_exception_traceback()}")
        if stuck:  # it never gets to tell the launcher: stuck as a rank in a communicator teardown
            threading.Event().wait()
        try:
            os.kill(launcher_pid, signal.SIGQUIT)  # parent_process.send_signal(signal.SIGQUIT)
        except ProcessLookupError:
            pass


def _rank0_loop(scheduler, group: _StoreGroup, requests: Connection, to_detokenizer: Connection,
                failed: threading.Event) -> None:
    while True:
        try:
            msg = requests.recv()
        except EOFError:
            return
        kind = msg[0]
        if kind == "generate":
            group.send_request(msg)
            try:
                out = scheduler.generate(msg[1], msg[2], decode)
            except ValueError as e:
                if failed.is_set():
                    raise
                to_detokenizer.send(("refused", str(e)))
                continue
            to_detokenizer.send(("ok", out))
        elif kind == "internal_state":
            requests.send(scheduler.get_internal_state())
        elif kind == "flush_cache":
            requests.send(scheduler.flush_cache())
        elif kind == "metrics_render":
            requests.send(scheduler.metrics_collector.render() if scheduler.metrics_collector else b"")
        elif kind == "metrics_observe":
            if scheduler.metrics_collector is not None:
                scheduler.metrics_collector.observe_one_finished_request(*msg[1], **msg[2])
            requests.send(None)


def _follower_loop(scheduler, group: _StoreGroup, failed: threading.Event) -> None:
    while True:
        _, input_ids, params = group.recv_request()
        try:
            scheduler.generate(input_ids, params, decode)
        except ValueError:  # a refusal (rank 0 answers it); a failure inside the scheduler ends the rank
            if failed.is_set():
                raise


def _detokenizer_main(server_args, outputs: Connection, to_launcher: Connection) -> None:
    """The detokenizer process: forwards rank 0's outputs to the launcher (SGLang's
    ``run_detokenizer_process``: ``kill_itself_when_parent_died``, title ``sglang::detokenizer``)."""
    import setproctitle

    from workbench.sandbox.srt.utils.common import configure_logger

    kill_itself_when_parent_died()
    setproctitle.setproctitle("sglang::detokenizer")
    configure_logger(server_args)
    while True:
        try:
            msg = outputs.recv()
        except EOFError:
            return
        to_launcher.send(msg)
