"""``connect(spec)``: turn a box spec into a :class:`~remote.box.Box`."""

from __future__ import annotations

import os
from typing import Optional, Union

from .box import Box, PathLike
from .errors import BoxSpecError
from .local import LocalTransport
from .transport import Transport

#: Environment variable naming the state directory on the box when ``connect`` is given none
#: (tests and side-by-side runs keep their journals apart with it).
STATE_DIR_ENV = "EAGLE_WORKBENCH_STATE_DIR"

#: Specs that mean "this machine". Only the literal ``local``: ``localhost`` is an SSH host.
LOCAL_SPECS = ("local",)


def connect(
    spec: Union[str, Transport] = "local",
    *,
    state_dir: Optional[PathLike] = None,
    python: str = "python3",
    ssh_config: Optional[PathLike] = None,
    trust_unknown_hosts: bool = False,
    allow_agent: bool = True,
    look_for_keys: bool = True,
    connect_timeout: Optional[float] = None,
) -> Box:
    """Open a box.

    ``spec`` is ``"local"`` (this machine, commands as subprocesses), a ``Transport`` instance, or
    an SSH destination: an ``~/.ssh/config`` alias, ``user@host[:port]``, ``host`` or
    ``ssh://[user@]host[:port]`` (``localhost`` is an SSH destination too). SSH options come from
    the ssh client config: ``ssh_config`` if given, else ``$EAGLE_WORKBENCH_SSH_CONFIG``, else
    ``~/.ssh/config`` (see :mod:`remote.ssh` for the options honoured). Host keys are checked
    against known_hosts; ``trust_unknown_hosts=True`` opts in to trust on first use (the new key is
    appended to known_hosts; a changed key is refused regardless). Authentication uses key files
    and, when ``allow_agent`` / ``look_for_keys``, ssh-agent keys and ``~/.ssh/id_*``; never a
    password. ``connect_timeout`` (seconds) overrides the config's ``ConnectTimeout`` (default 15).

    ``state_dir`` is the directory on the box for the probe journal and server logs (default:
    ``$EAGLE_WORKBENCH_STATE_DIR`` if set, else ``~/.cache/eagle-workbench`` on the box);
    ``python`` the box's interpreter used for compile checks.

    Raises ``BoxSpecError`` for an unusable spec (``UnknownSSHHost`` for a bare name that is no
    alias, ``SSHConfigError`` for an option that cannot be honoured), and for SSH the
    ``SSHError`` family: ``SSHConnectFailed``, ``HostKeyUnknown``, ``HostKeyChanged``,
    ``AuthenticationFailed``.
    """
    if state_dir is None and os.environ.get(STATE_DIR_ENV):
        state_dir = os.environ[STATE_DIR_ENV]
    if isinstance(spec, Transport):
        return Box(spec, state_dir=state_dir, python=python)
    if not isinstance(spec, str):
        raise BoxSpecError(f"box spec must be a string or a Transport, got {type(spec).__name__}", spec=spec)
    text = spec.strip()
    if text in LOCAL_SPECS:
        return Box(LocalTransport(), state_dir=state_dir, python=python)
    from .ssh import SSHTransport, parse_spec  # paramiko is imported only when an SSH box is opened

    parse_spec(text)  # BoxSpecError before any file or network access
    transport = SSHTransport.open(
        text,
        ssh_config=None if ssh_config is None else os.fspath(ssh_config),
        trust_unknown_hosts=trust_unknown_hosts,
        allow_agent=allow_agent,
        look_for_keys=look_for_keys,
        connect_timeout=connect_timeout,
    )
    try:
        return Box(transport, state_dir=state_dir, python=python)
    except BaseException:
        transport.close()
        raise
