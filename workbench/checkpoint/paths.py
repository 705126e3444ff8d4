"""Where a model named in a launch command lives on the box: a directory, or a Hugging Face repo
id looked up in the box's Hugging Face cache the way ``huggingface_hub`` lays it out."""

from __future__ import annotations

import posixpath
import re
from typing import Any

__all__ = ["resolve_model_path", "box_env"]


_HF_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def box_env(box: Any, timeout: float) -> dict[str, str]:
    """The box user's ``HF_HUB_CACHE``, ``HF_HOME`` and ``HOME`` (empty strings when unset), read
    with one ``sh`` command (``timeout`` seconds): where :func:`resolve_model_path` looks."""
    res = box.run(["sh", "-c", 'printf "%s\\n%s\\n%s\\n" "$HF_HUB_CACHE" "$HF_HOME" "$HOME"'],
                  timeout=timeout, check=False)
    lines = (res.stdout.split("\n") + ["", "", ""])[:3]
    return {"HF_HUB_CACHE": lines[0], "HF_HOME": lines[1], "HOME": lines[2]}


def resolve_model_path(box: Any, value: str, *, env: dict[str, str], cwd: str | None = None,
                       timeout: float = 30) -> tuple[str | None, str]:
    """Where a ``--model-path``-style value lives on the box: ``(directory or None, how)``.

    An absolute (or ``~``) path, or a path relative to ``cwd`` that exists, is used as is. A
    Hugging Face repo id ``org/name`` is looked up as huggingface_hub lays out its cache
    (huggingface_hub ``constants.py``/``file_download.py``): ``$HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``$HOME/.cache/huggingface/hub``; then
    ``models--org--name/refs/main`` holds the revision and ``snapshots/<rev>/`` the files (one
    snapshot directory is used when ``refs/main`` is absent). ``env``: the server's environment
    (launch-command prefixes over the box's). ``how`` explains the lookup for the evidence.
    Raises the box's ``RemoteError`` only for failures other than a missing file.
    """
    if value.startswith(("/", "~")):
        path = box.expand_path(value) if value.startswith("~") else value
        return (path, "path in the launch command") if box.exists(path, timeout=timeout) else (
            None, f"{path} does not exist on {box.name}")
    if cwd:
        cand = posixpath.normpath(posixpath.join(cwd, value))
        if box.exists(cand, timeout=timeout):
            return cand, f"relative to the server's cwd {cwd}"
    if not _HF_REPO.match(value):
        return None, f"{value!r} is neither a directory on {box.name} nor a Hugging Face repo id"
    hub = env.get("HF_HUB_CACHE") or (posixpath.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else
                                      posixpath.join(env.get("HOME") or "~", ".cache/huggingface/hub"))
    repo_dir = posixpath.join(hub, "models--" + value.replace("/", "--"))
    if not box.exists(repo_dir, timeout=timeout):
        return None, f"Hugging Face repo {value} is not in the box's cache ({repo_dir} missing)"
    ref = posixpath.join(repo_dir, "refs", "main")
    rev = None
    if box.exists(ref, timeout=timeout):
        rev = box.read_text(ref, timeout=timeout).strip()
    else:
        snaps = box.listdir(posixpath.join(repo_dir, "snapshots"), timeout=timeout) \
            if box.exists(posixpath.join(repo_dir, "snapshots"), timeout=timeout) else []
        rev = snaps[0] if len(snaps) == 1 else None
    if not rev:
        return None, f"Hugging Face repo {value}: no refs/main and not exactly one snapshot in {repo_dir}"
    snap = posixpath.join(repo_dir, "snapshots", rev)
    if not box.exists(snap, timeout=timeout):
        return None, f"Hugging Face repo {value}: refs/main names {rev} but {snap} is missing"
    return snap, f"Hugging Face cache {repo_dir} (refs/main → {rev})"
