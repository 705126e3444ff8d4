"""Prompt sets: the built-in ones (``workbench/measure/prompt_sets/``: ``default``, ``chat``,
``code``, ``math``; sources and licences in its README) and user JSONL files, through one loader."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from workbench.errors import PromptSetError

__all__ = ["BUILTIN_PROMPT_SETS", "load_prompts", "PromptSetError"]


BUILTIN_PROMPT_SETS = ("default", "chat", "code", "math")
def load_prompts(name_or_path: str | Path | None = None) -> list[dict]:
    """The prompts of a built-in set (``default``, ``chat``, ``code``, ``math``: files in
    ``workbench/measure/prompt_sets/``, sources and licences in its README; ``None`` is
    ``default``) or of a user JSONL file.

    Format: one JSON object per line with a non-empty string ``text`` (optional ``id``, ``kind``,
    ``source``, ``license``, any other keys kept); blank lines and lines starting with ``//`` are
    skipped. Returns the objects in file order (list of dicts).

    Raises :class:`PromptSetError` naming the file and line: not a built-in name and no such file,
    a directory, unreadable, a line that is not UTF-8 or not JSON, not an object, without a string
    ``text`` or with an empty one, a non-string ``id``/``source``, or no prompt at all.
    """
    name = "default" if name_or_path is None else str(name_or_path)
    if name in BUILTIN_PROMPT_SETS and not Path(name).exists():
        data = resources.files("workbench.measure").joinpath(f"prompt_sets/{name}.jsonl").read_bytes()
        label = f"workbench/measure/prompt_sets/{name}.jsonl"
    else:
        path = Path(name).expanduser()
        if not path.exists():
            raise PromptSetError(name, None, f"no such file, and not a built-in prompt set "
                                             f"({', '.join(BUILTIN_PROMPT_SETS)})")
        if path.is_dir():
            raise PromptSetError(name, None, "is a directory, not a JSONL file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PromptSetError(name, None, f"cannot be read: {exc.strerror or exc}") from exc
        label = name
    prompts: list[dict] = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise PromptSetError(label, n, f"not UTF-8 (byte {exc.start})") from exc
        if not line or line.startswith("//"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptSetError(label, n, f"not JSON ({exc.msg} at column {exc.colno})") from exc
        if not isinstance(obj, dict):
            raise PromptSetError(label, n, f"expected a JSON object with a string 'text', got {type(obj).__name__}")
        text = obj.get("text")
        if not isinstance(text, str):
            raise PromptSetError(label, n, "missing a string 'text'" if text is None
                                 else f"'text' must be a string, got {type(text).__name__}")
        if not text.strip():
            raise PromptSetError(label, n, "'text' is empty")
        for key in ("id", "source", "kind"):
            value = obj.get(key)
            if key in obj and (isinstance(value, bool) or not isinstance(value, (str, int))):
                raise PromptSetError(label, n, f"'{key}' must be a string, got {type(value).__name__}")
        prompts.append(obj)
    if not prompts:
        raise PromptSetError(label, None, "holds no prompt (every line is blank or a // comment)")
    return prompts
