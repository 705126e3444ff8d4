"""Secrets never leave the box: redaction of API keys, tokens and passwords in everything the
workbench shows or writes (reports, verdicts, notebooks, terminal output).

Placeholder: every secret value becomes :data:`PLACEHOLDER` (``***``); the flag, variable or
header that carried it is kept, so a reader knows it was there (``--api-key ***``,
``HF_TOKEN=***``, ``https://user:***@host/``, ``Authorization: Bearer ***``).

What is recognised, BY KIND (not by a list of known names):

- **flags** (:func:`is_secret_flag`): a flag whose LAST word (split on ``-``/``_``) is ``key``,
  ``keys``, ``token``, ``secret(s)``, ``password(s)``, ``passwd``, ``passphrase``,
  ``credential(s)``, ``apikey``, or a compound ending in one (``--hftoken``): ``--api-key``,
  ``--admin-api-key``, ``--hf-token``, ``--ssl-keyfile-password``. The last-word rule keeps the
  flags that merely mention tokens or keys out (SGLang 0.5.23 has 30 such flags:
  ``--max-total-tokens``, ``--speculative-token-map`` (a path), ``--ssl-keyfile`` (a path),
  ``--tokenizer-path``, ``--speculative-eagle-topk``, ``--kv-cache-dtype``) and so does a
  word that makes it a count or a time before it (``per``, ``max``, ``first``, …:
  ``--kt-max-deferred-experts-per-token``, ``--bucket-time-to-first-token``).
  Both ``--flag VALUE`` and ``--flag=VALUE``.
- **environment variables** (:func:`is_secret_env`): ``*_TOKEN``, ``*_KEY``, ``*_KEYS``, ``*_PAT``,
  names holding ``SECRET``, ``PASSWORD``, ``PASSWD`` or ``CREDENTIAL`` (``HF_TOKEN``,
  ``HUGGING_FACE_HUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``OPENAI_API_KEY``, ``MY_SECRET``), in an
  environment mapping, as a ``NAME=value`` prefix of a launch command, and in free text (there a
  lower-case ``name=value`` that is code is left alone: ``api_key=server_args.api_key``,
  ``api_key=key``, ``new_token=512``; ``password=hunter2`` is redacted).
- **URLs with credentials**: ``scheme://user:pass@host`` -> ``scheme://user:***@host``.
- **Authorization headers**: ``Authorization: Bearer|Basic|Token …`` and ``Bearer …``.
- **well-known token shapes** anywhere in text (:data:`TOKEN_SHAPES`): Hugging Face ``hf_…``,
  OpenAI-style ``sk-…``, GitHub ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_…``,
  AWS access key ids ``AKIA…``/``ASIA…``, Slack ``xox?-…``, GitLab ``glpat-…``.
- **learned values**: a :class:`Redactor` learns the concrete values of the secret flags and
  variables of a launch command or environment (:meth:`Redactor.learn_launch`,
  :meth:`Redactor.learn_env`) and replaces them wherever they appear in any text (a key found in
  ``--api-key X`` is redacted in a log line too). Values shorter than
  :data:`MIN_LEARNED_LENGTH` characters are redacted only in their own slot, never in free text
  (``MY_KEY=1`` must not turn every ``1`` into ``***``).

Nested JSON (:meth:`Redactor.obj`): every string is redacted as text; a value under a key named
like a secret (``api_key``, ``hf_token``, ``Authorization``, ``ssl_keyfile_password``: the flag rule
on the key, single words only ``password``, ``passwd``, ``secret``, ``authorization``, ``apikey``)
becomes ``***`` when it is a string (``None`` stays ``None``: SGLang's ``/server_info`` reports
``"api_key": null`` when no key is set; numbers stay: ``"new_token": 12`` is a count); an
upper-case key gets the variable rule (an environment mapping).

The process-wide :data:`REDACTOR` is what the sinks use by default: the inventory, the doctor and
the runbook driver teach it the values of the box they look at.

HTML reports (:func:`workbench.report.html.export_html`): the text gets every rule, ``<script>`` and
``<style>`` bodies only the learned values and token shapes (:meth:`Redactor.values_text`: a rule
such as ``NAME=value`` would rewrite code), the inlined plotly.js none.
"""

from __future__ import annotations

import io
import re
import threading
from typing import Any, Iterable, Mapping, Sequence

__all__ = [
    "PLACEHOLDER", "MIN_LEARNED_LENGTH", "TOKEN_SHAPES", "Redactor", "REDACTOR", "RedactingStream",
    "is_secret_flag", "is_secret_env", "is_secret_key", "redact_argv", "redact_env", "redact_text",
    "redact_obj", "redact_shell",
]

#: What a secret value is replaced with (documented in README.md, "Secrets stay on the box").
PLACEHOLDER = "***"

#: Learned values shorter than this are not searched for in free text (too likely to be ordinary
#: text); they are still redacted where they stand (after their flag, as their variable's value).
MIN_LEARNED_LENGTH = 6

_SECRET_WORDS = ("key", "keys", "token", "secret", "secrets", "password", "passwords", "passwd",
                 "passphrase", "credential", "credentials", "apikey")
_SUFFIXES = ("key", "token", "secret", "password", "passwd", "passphrase")
#: A word before the last that makes a name a count or a time, not a credential
#: (``--kt-max-deferred-experts-per-token``, ``--bucket-time-to-first-token``).
_COUNT_WORDS = {"per", "max", "min", "num", "first", "last", "next", "each", "to"}
_SINGLE_KEY_WORDS = {"password", "passwd", "secret", "authorization", "apikey", "passphrase", "credentials"}

#: Token shapes recognised in any text: (name, regex). Sources: Hugging Face user access tokens
#: (``hf_`` + 34 letters/digits; 20+ accepted), OpenAI keys (``sk-``, ``sk-proj-``), GitHub token
#: prefixes (github.blog 2021-04-05 "Behind GitHub's new authentication token formats"), AWS access
#: key ids (IAM docs: ``AKIA``/``ASIA`` + 16 upper-case letters/digits), Slack (``xoxb-`` …), GitLab
#: personal access tokens (``glpat-``).
TOKEN_SHAPES: tuple[tuple[str, str], ...] = (
    ("huggingface", r"hf_[A-Za-z0-9]{20,}"),
    ("openai", r"sk-[A-Za-z0-9_-]{16,}"),
    ("github", r"gh[pousr]_[A-Za-z0-9]{20,}"),
    ("github-pat", r"github_pat_[A-Za-z0-9_]{22,}"),
    ("aws-access-key-id", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    ("slack", r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("gitlab", r"glpat-[A-Za-z0-9_-]{20,}"),
)
_SHAPES = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(f"(?:{rx})" for _, rx in TOKEN_SHAPES) + r")(?![A-Za-z0-9_])")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[-_.\s]+", name.strip().lstrip("-").lower()) if w]


def is_secret_flag(flag: str) -> bool:
    """Whether a command-line flag carries a secret value (module docstring: its last word).

    ``is_secret_flag("--api-key") is True``; ``is_secret_flag("--ssl-keyfile-password") is True``;
    ``is_secret_flag("--speculative-token-map") is False``; ``is_secret_flag("--max-total-tokens")
    is False``. ``flag``: the option as written, with or without leading dashes (an ``=value`` part
    is ignored)."""
    words = _words(flag.split("=", 1)[0])
    if not words:
        return False
    last = words[-1]
    if len(words) > 1 and words[-2] in _COUNT_WORDS:
        return False
    return last in _SECRET_WORDS or (last.endswith(_SUFFIXES) and len(last) > 6)


def is_secret_env(name: str) -> bool:
    """Whether an environment variable holds a secret: ``*_TOKEN``, ``*_KEY``, ``*_KEYS``, or a name
    holding ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL`` (any case); also ``TOKEN``,
    ``API_KEY``-style bare names. ``TOKENIZERS_PARALLELISM``, ``SSH_AUTH_SOCK``, ``HF_HOME``,
    ``PYTHONHASHSEED`` are not."""
    n = name.upper()
    if not _ENV_NAME.match(n):
        return False
    if any(w in n for w in ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")):
        return True
    return n in ("TOKEN", "APIKEY", "API_KEY") or n.endswith(("_TOKEN", "_KEY", "_KEYS", "_APIKEY", "_PAT"))


def is_secret_key(key: str) -> bool:
    """Whether a JSON / dict key names a secret (``api_key``, ``hf_token``, ``Authorization``,
    ``ssl_keyfile_password``, ``HF_TOKEN``). A single-word key counts only when it is one of
    ``password``, ``passwd``, ``secret``, ``authorization``, ``apikey``, ``passphrase``,
    ``credentials`` (a ``"key"`` or ``"token"`` field is usually a tensor name or a vocabulary
    entry)."""
    words = _words(key)
    if not words:
        return False
    if len(words) == 1:
        return words[0] in _SINGLE_KEY_WORDS
    return is_secret_flag(key) or (key.isupper() and is_secret_env(key))


# -- text rules ----------------------------------------------------------------------------------

_FLAG_NAME = r"--[A-Za-z][A-Za-z0-9_-]*"
# --flag=value / --flag value (value: quoted or one shell word; not another option)
_FLAG_VALUE = re.compile(
    r"(?<![\w-])(?P<flag>" + _FLAG_NAME + r")(?P<sep>=|[ \t]+)(?P<value>\"[^\"]*\"|'[^']*'|(?!-)[^\s'\"`,;)\]}]+)"
)
# the argv-list form: '--api-key', 'VALUE'  (a repr'd list in an exception message)
_FLAG_LIST = re.compile(r"(?P<q>['\"])(?P<flag>" + _FLAG_NAME + r")(?P=q)(?P<sep>\s*,\s*)(?P<q2>['\"])(?P<value>[^'\"]*)(?P=q2)")
# NAME=value (shell env prefix, env dumps)
_ENV_ASSIGN = re.compile(r"(?<![\w-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\"[^\"]*\"|'[^']*'|[^\s'\"`,;)\]}]+)")
# 'NAME': 'value' / "NAME": "value" (a repr'd or JSON dict in text)
_KEY_VALUE = re.compile(r"(?P<q>['\"])(?P<name>[A-Za-z_][A-Za-z0-9_-]*)(?P=q)(?P<sep>\s*:\s*)(?P<q2>['\"])(?P<value>[^'\"]*)(?P=q2)")
_URL_CREDS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'\"]+):(?P<value>[^/\s@'\"]+)@")
_AUTH_HEADER = re.compile(r"(?i)(?P<head>\bauthorization\b['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token)\s+)?)"
                          r"(?![a-z]{1,2}['\"])(?P<value>[^\s'\"`,]+)")  # not a string prefix: f"Bearer {key}" is code
_BEARER = re.compile(r"(?i)(?P<head>\bbearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})")


_CODE_VALUE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)+[A-Za-z_][A-Za-z0-9_]*\(?$|^[A-Za-z_][A-Za-z0-9_]*\($")


def _looks_like_code(name: str, value: str) -> bool:
    """``name=value`` in source code rather than a setting: a keyword argument passing an
    attribute or a call (``api_key=server_args.api_key``, ``api_key=get_key()``), a variable of
    letters only (``api_key=key``; ``password=hunter2`` is a secret), a number (``new_token=512``,
    a count in a log summary), or a constant (``None``, ``True``, ``self``). Only for lower-case names: ``HF_TOKEN=x`` is always a setting."""
    if name.upper() == name:
        return False
    return (value == name or value in ("None", "True", "False", "self", "cls") or bool(_CODE_VALUE.match(value))
            or bool(re.fullmatch(r"[A-Za-z_]+", value))  # a variable (a real secret has a digit or a symbol)
            or bool(re.fullmatch(r"-?\d+(\.\d+)?", value)))  # a count: new_token=512


def _quoted_placeholder(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[0] + PLACEHOLDER + value[0]
    return PLACEHOLDER


def _rules_text(text: str) -> str:
    """The rules that need no learned value (flags, env assignments, URLs, headers, shapes)."""
    def flag_sub(m: re.Match) -> str:
        if not is_secret_flag(m["flag"]) or m["value"] == PLACEHOLDER:
            return m.group(0)
        return f"{m['flag']}{m['sep']}{_quoted_placeholder(m['value'])}"

    def list_sub(m: re.Match) -> str:
        if not is_secret_flag(m["flag"]):
            return m.group(0)
        return f"{m['q']}{m['flag']}{m['q']}{m['sep']}{m['q2']}{PLACEHOLDER}{m['q2']}"

    def env_sub(m: re.Match) -> str:
        name = m["name"]
        if not ((name.isupper() and is_secret_env(name)) or is_secret_key(name)) or m["value"] == PLACEHOLDER \
                or _looks_like_code(m["name"], m["value"]):
            return m.group(0)
        return f"{m['name']}={_quoted_placeholder(m['value'])}"

    def kv_sub(m: re.Match) -> str:
        if not (is_secret_key(m["name"]) or (m["name"].isupper() and is_secret_env(m["name"]))):
            return m.group(0)
        return f"{m['q']}{m['name']}{m['q']}{m['sep']}{m['q2']}{PLACEHOLDER}{m['q2']}"

    text = _FLAG_VALUE.sub(flag_sub, text)
    text = _FLAG_LIST.sub(list_sub, text)
    text = _ENV_ASSIGN.sub(env_sub, text)
    text = _KEY_VALUE.sub(kv_sub, text)
    text = _URL_CREDS.sub(lambda m: f"{m['head']}:{PLACEHOLDER}@", text)
    text = _AUTH_HEADER.sub(lambda m: m["head"] + (m["value"] if m["value"] == PLACEHOLDER else PLACEHOLDER), text)
    text = _BEARER.sub(lambda m: m["head"] + PLACEHOLDER, text)
    text = _SHAPES.sub(PLACEHOLDER, text)
    return text


class Redactor:
    """Redacts secrets in text, argv lists, environments and nested JSON (module docstring).

    Starts with no learned values (the kind rules always apply); :meth:`learn_argv`,
    :meth:`learn_env`, :meth:`learn_launch` and :meth:`learn_value` add the concrete values of a
    run, which are then replaced in every text. Thread-safe. Never raises for any input: a value
    of an unknown type in :meth:`obj` is returned as is.
    """

    def __init__(self, values: Iterable[str] = ()):
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._pattern: re.Pattern | None = None
        for v in values:
            self.learn_value(v)

    # -- learning -------------------------------------------------------------------------------

    def learn_value(self, value: Any) -> None:
        """Remember one secret value; values shorter than :data:`MIN_LEARNED_LENGTH` (and the
        placeholder itself) are ignored for free text."""
        if not isinstance(value, str):
            return
        value = value.strip()
        if len(value) < MIN_LEARNED_LENGTH or value == PLACEHOLDER:
            return
        with self._lock:
            if value not in self._values:
                self._values.add(value)
                # longest first, so a value containing another is replaced whole
                ordered = sorted(self._values, key=len, reverse=True)
                self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def learn_argv(self, argv: Sequence[str]) -> None:
        """Learn the values of the secret flags (``--flag V``, ``--flag=V``) and secret
        ``NAME=V`` env prefixes in ``argv`` (a list of tokens)."""
        tokens = [str(t) for t in argv]
        for i, tok in enumerate(tokens):
            if tok.startswith("-"):
                name, eq, inline = tok.partition("=")
                if is_secret_flag(name):
                    if eq:
                        self.learn_value(inline)
                    elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                        self.learn_value(tokens[i + 1])
            else:
                m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", tok, re.S)
                if m and is_secret_env(m.group(1)):
                    self.learn_value(m.group(2))
        for m in _SHAPES.finditer(" ".join(tokens)):
            self.learn_value(m.group(0))

    def learn_env(self, env: Mapping[str, str] | None) -> None:
        """Learn the values of the secret variables of an environment mapping."""
        for name, value in (env or {}).items():
            if is_secret_env(str(name)):
                self.learn_value(value)

    def learn_launch(self, launch: Any) -> None:
        """Learn from a :class:`workbench.engine.launch.LaunchCommand` (its env prefix and
        arguments), or from shell text / an argv list."""
        if isinstance(launch, str):
            import shlex
            try:
                self.learn_argv(shlex.split(launch))
            except ValueError:
                self.learn_argv(launch.split())
            return
        argv = getattr(launch, "argv", launch)
        self.learn_argv(list(argv))

    @property
    def learned(self) -> int:
        """How many values were learned (never the values)."""
        return len(self._values)

    # -- redacting ------------------------------------------------------------------------------

    def text(self, text: Any) -> Any:
        """``text`` with every secret replaced by :data:`PLACEHOLDER` (non-strings returned as
        they are)."""
        if not isinstance(text, str) or not text:
            return text
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(PLACEHOLDER, text)
        return _rules_text(text)

    def values_text(self, text: Any) -> Any:
        """Only the learned values and the token shapes replaced (no flag / variable / header rule):
        for code such as a report's scripts, where ``credentials=e.credentials`` is no secret."""
        if not isinstance(text, str) or not text:
            return text
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(PLACEHOLDER, text)
        return _SHAPES.sub(PLACEHOLDER, text)

    def argv(self, argv: Sequence[str]) -> list[str]:
        """A copy of ``argv`` with the values of secret flags (both forms) and secret env
        prefixes replaced, then every token redacted as text. ``len`` is kept."""
        tokens = [str(t) for t in argv]
        out: list[str] = []
        for i, tok in enumerate(tokens):
            prev = tokens[i - 1] if i else ""
            if prev.startswith("-") and "=" not in prev and is_secret_flag(prev) and not tok.startswith("-"):
                out.append(PLACEHOLDER)
                continue
            if tok.startswith("-") and "=" in tok:
                name, _, _ = tok.partition("=")
                if is_secret_flag(name):
                    out.append(f"{name}={PLACEHOLDER}")
                    continue
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", tok, re.S)
            if m and not tok.startswith("-") and is_secret_env(m.group(1)):
                out.append(f"{m.group(1)}={PLACEHOLDER}")
                continue
            out.append(self.text(tok))
        return out

    def env(self, env: Mapping[str, str] | None) -> dict[str, str] | None:
        """A copy of ``env`` with the secret variables' values replaced and the others redacted
        as text (a ``PATH`` holding a URL with a password)."""
        if env is None:
            return None
        return {str(k): (PLACEHOLDER if is_secret_env(str(k)) and v else self.text(v)) for k, v in env.items()}

    def obj(self, obj: Any) -> Any:
        """A redacted deep copy of nested JSON-like data (dicts, lists, tuples, strings): strings
        redacted as text, values under secret-named keys replaced (module docstring)."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, Mapping):
            out = {}
            for k, v in obj.items():
                key = str(k)
                secret = is_secret_key(key) or (key.isupper() and is_secret_env(key))
                if secret and isinstance(v, str) and v:
                    out[k] = PLACEHOLDER
                elif secret and isinstance(v, (list, tuple)) and v and all(isinstance(x, str) for x in v):
                    out[k] = [PLACEHOLDER for _ in v]
                else:
                    out[k] = self.obj(v)
            return out
        if isinstance(obj, list):
            return [self.obj(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.obj(v) for v in obj)
        return obj

    def shell(self, argv: Sequence[str]) -> str:
        """``argv`` as shell text (``shlex.join``) with its secrets redacted."""
        import shlex
        return shlex.join(self.argv(argv))


#: The process-wide redactor every sink uses by default (learned values accumulate: a run teaches
#: it the values of the servers it inspected).
REDACTOR = Redactor()


def redact_text(text: Any, redactor: Redactor | None = None) -> Any:
    """:meth:`Redactor.text` with ``redactor`` (default :data:`REDACTOR`)."""
    return (redactor or REDACTOR).text(text)


def redact_argv(argv: Sequence[str], redactor: Redactor | None = None) -> list[str]:
    """:meth:`Redactor.argv` with ``redactor`` (default :data:`REDACTOR`)."""
    return (redactor or REDACTOR).argv(argv)


def redact_env(env: Mapping[str, str] | None, redactor: Redactor | None = None) -> dict[str, str] | None:
    """:meth:`Redactor.env` with ``redactor`` (default :data:`REDACTOR`)."""
    return (redactor or REDACTOR).env(env)


def redact_obj(obj: Any, redactor: Redactor | None = None) -> Any:
    """:meth:`Redactor.obj` with ``redactor`` (default :data:`REDACTOR`)."""
    return (redactor or REDACTOR).obj(obj)


def redact_shell(argv: Sequence[str], redactor: Redactor | None = None) -> str:
    """:meth:`Redactor.shell` with ``redactor`` (default :data:`REDACTOR`)."""
    return (redactor or REDACTOR).shell(argv)


class RedactingStream(io.TextIOBase):
    """A text stream that redacts each complete line before passing it to ``stream`` (the CLI
    wraps ``sys.stdout``/``sys.stderr`` in it). A partial line is held until its newline, a
    :meth:`flush`, or 64 KiB, so a secret split across two ``write`` calls is still caught.
    ``fileno``, ``isatty`` and ``encoding`` are the wrapped stream's."""

    def __init__(self, stream: Any, redactor: Redactor | None = None):
        super().__init__()
        self._stream = stream
        self._redactor = redactor
        self._buf = ""

    def write(self, s: str) -> int:
        self._buf += s
        if "\n" in self._buf or len(self._buf) > 65536:
            head, sep, tail = self._buf.rpartition("\n")
            if not sep:
                head, tail = self._buf, ""
            self._stream.write((self._redactor or REDACTOR).text(head + sep))
            self._buf = tail
        return len(s)

    def flush(self) -> None:
        if self._buf:
            self._stream.write((self._redactor or REDACTOR).text(self._buf))
            self._buf = ""
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")

    def writable(self) -> bool:
        return True
