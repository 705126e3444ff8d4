"""The local transport: the box is this machine, commands are subprocesses.

Local file system calls are not interruptible, so the ``timeout`` of file primitives is accepted
for API compatibility and not enforced; command time-outs are enforced.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import stat as _stat
import subprocess
import time
from typing import Mapping, Optional

from .errors import (
    RemoteFileError,
    RemoteFileNotFound,
    RemoteIsADirectory,
    RemotePermissionError,
)
from .result import FileStat, ProcessInfo, Result
from .transport import CHUNK, Transport, parse_proc_stat, proc_stat_threads, timed_out

#: Seconds to wait for the pipes to close after the process group was killed on time-out.
_DRAIN_AFTER_KILL_S = 2.0


def _file_error(exc: OSError, path: str, box: str, doing: str) -> RemoteFileError:
    """Translate an ``OSError`` into the matching typed error, naming the path and the action."""
    what = f"{doing} failed ({exc.strerror or exc})"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return RemoteFileNotFound(f"{doing}: no such file or directory", path=path, box=box)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return RemotePermissionError(f"{doing}: permission denied", path=path, box=box)
    if exc.errno == errno.EISDIR:
        return RemoteIsADirectory(f"{doing}: is a directory", path=path, box=box)
    err = RemoteFileError(what, path=path, box=box)
    err.errno = exc.errno  # type: ignore[attr-defined]
    return err


class LocalTransport(Transport):
    """Run commands and touch files on this machine."""

    name = "local"

    # -- commands -------------------------------------------------------------------------------

    def run(
        self,
        command: str,
        *,
        timeout: float,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[bytes] = None,
    ) -> Result:
        full_env = None if env is None else {**os.environ, **{str(k): str(v) for k, v in env.items()}}
        if cwd is not None and not os.path.isdir(cwd):
            raise RemoteFileNotFound("working directory for the command does not exist", path=cwd, box=self.name)
        start = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=full_env,
            start_new_session=True,  # its own session and process group: killable as a whole
        )
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = self._kill_and_drain(proc)
            raise timed_out(
                command, out, err, proc.returncode, time.monotonic() - start, timeout, self.name
            ) from None
        except BaseException:  # KeyboardInterrupt and the like: leave nothing running behind
            self._kill_and_drain(proc)
            raise
        return Result(
            command=command,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            exit_code=proc.returncode,
            duration_s=time.monotonic() - start,
            box=self.name,
        )

    @staticmethod
    def _kill_and_drain(proc: subprocess.Popen) -> tuple[bytes, bytes]:
        """SIGKILL the process group of ``proc``; collect what it printed before it died."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group is already gone: nothing left to kill
        try:
            out, err = proc.communicate(timeout=_DRAIN_AFTER_KILL_S)
        except subprocess.TimeoutExpired as exc:
            # A process that left the group (its own session) still holds the pipes: give up on
            # them and keep what was read so far.
            out, err = exc.output or b"", exc.stderr or b""
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait(timeout=_DRAIN_AFTER_KILL_S)
        return out or b"", err or b""

    # -- files ----------------------------------------------------------------------------------

    def read_range(self, path: str, offset: int = 0, length: Optional[int] = None, *, timeout: float = 30) -> bytes:
        try:
            with open(path, "rb") as f:
                if offset:
                    f.seek(offset)
                return f.read() if length is None else f.read(length)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "read") from None

    def stat(self, path: str, *, timeout: float = 30) -> FileStat:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "stat") from None
        return FileStat(
            path=path,
            size=st.st_size,
            mode=_stat.S_IMODE(st.st_mode),
            mtime=st.st_mtime,
            is_file=_stat.S_ISREG(st.st_mode),
            is_dir=_stat.S_ISDIR(st.st_mode),
        )

    def listdir(self, path: str, *, timeout: float = 30) -> list[str]:
        try:
            return os.listdir(path)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "list directory") from None

    def readlink(self, path: str, *, timeout: float = 30) -> str:
        try:
            return os.readlink(path)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "readlink") from None

    def write_new(self, path: str, data: bytes, *, mode: int, timeout: float = 30) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "create") from None
        try:
            os.fchmod(fd, mode)  # os.open's mode is filtered by the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "write") from None
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str, *, timeout: float = 30) -> None:
        try:
            os.replace(src, dst)
        except OSError as exc:
            raise _file_error(exc, dst, self.name, f"rename from {src}") from None
        try:
            dir_fd = os.open(os.path.dirname(dst) or ".", os.O_RDONLY)
        except OSError as exc:
            raise _file_error(exc, dst, self.name, "open directory to fsync") from None
        try:
            os.fsync(dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EBADF):  # some file systems cannot fsync a dir
                raise _file_error(exc, dst, self.name, "fsync directory") from None
        finally:
            os.close(dir_fd)

    def remove(self, path: str, *, timeout: float = 30) -> None:
        try:
            os.remove(path)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "remove") from None

    def makedirs(self, path: str, *, mode: int = 0o755, timeout: float = 30) -> None:
        try:
            os.makedirs(path, mode=mode, exist_ok=True)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "create directory") from None

    def expanduser(self, path: str) -> str:
        return os.path.expanduser(path)

    # -- faster local versions of the defaults ---------------------------------------------------

    def sha256(self, path: str, *, timeout: float = 60) -> str:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(CHUNK), b""):
                    h.update(block)
        except OSError as exc:
            raise _file_error(exc, path, self.name, "read for sha256") from None
        return h.hexdigest()

    def process(self, pid: int, *, argv: bool = True, timeout: float = 10) -> Optional[ProcessInfo]:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat_text = f.read().decode("utf-8", "replace")
            parsed = parse_proc_stat(stat_text)
            args: tuple[str, ...] = ()
            if argv:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = tuple(a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a)
        except OSError:  # vanished (ENOENT / ESRCH) or not ours to read: not a process we can see
            return None
        if parsed is None:
            return None
        state, ppid, pgid = parsed
        return ProcessInfo(pid=pid, ppid=ppid, pgid=pgid, state=state, argv=args, threads=proc_stat_threads(stat_text))

    def kill(self, pid: int, sig: int, *, group: bool = False, timeout: float = 10) -> bool:
        try:
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def realpath(self, path: str, *, timeout: float = 10) -> str:
        return os.path.realpath(path)

    def protected_pgids(self) -> set[int]:
        return {os.getpgrp()}
