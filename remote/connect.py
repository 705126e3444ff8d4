"""``connect(spec)``: turn a box spec into a :class:`~remote.box.Box`."""

from __future__ import annotations

import os
import re
from typing import Optional, Union

from .box import Box, PathLike
from .errors import BoxSpecError, SSHNotImplemented
from .local import LocalTransport
from .transport import Transport

#: Environment variable naming the state directory on the box when ``connect`` is given none
#: (tests and side-by-side runs keep their journals apart with it).
STATE_DIR_ENV = "EAGLE_WORKBENCH_STATE_DIR"

#: Specs that mean "this machine".
LOCAL_SPECS = ("local",)

# user@host[:port], host[:port], a ~/.ssh/config alias, [v6]:port
_SSH_LIKE = re.compile(r"^(?:[^@\s]+@)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::\d+)?$")


def connect(
    spec: Union[str, Transport] = "local",
    *,
    state_dir: Optional[PathLike] = None,
    python: str = "python3",
) -> Box:
    """Open a box.

    ``spec`` is ``"local"`` (this machine, commands as subprocesses) or a ``Transport``
    instance. SSH specs (``user@host[:port]``, ``ssh://user@host:port``, a ``~/.ssh/config``
    alias) are recognised but not implemented yet. ``state_dir`` is the directory on the box
    for the probe journal and server logs (default: ``$EAGLE_WORKBENCH_STATE_DIR`` if set, else
    ``~/.cache/eagle-workbench``); ``python`` the
    box's interpreter used for compile checks.

    Raises ``SSHNotImplemented`` for SSH specs, ``BoxSpecError`` for anything else unusable.
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
    if text.startswith("ssh://") or _SSH_LIKE.match(text):
        raise SSHNotImplemented(text)
    raise BoxSpecError(
        f"cannot understand box spec {spec!r}: expected 'local', 'user@host[:port]', 'ssh://user@host[:port]' "
        "or an ~/.ssh/config alias",
        spec=spec,
    )
