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
  A quoted value that swallows a later flag (``--model-path '/m --api-key X``, an unbalanced quote
  in an error message) does not hide it.
- **environment variables** (:func:`is_secret_env`): ``*_TOKEN``, ``*_KEY``, ``*_KEYS``, ``*_PAT``,
  ``*_PASS``, ``*_PWD`` (not ``PWD``/``OLDPWD``), ``*_DSN``, ``*_AUTH``/``AUTH_*`` (not
  ``SSH_AUTH_SOCK``), names holding ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL``, ``COOKIE``
  or ``PRIVATE_KEY`` (``HF_TOKEN``,
  ``HUGGING_FACE_HUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``OPENAI_API_KEY``, ``MY_SECRET``), in an
  environment mapping, as a ``NAME=value`` prefix of a launch command, and in free text (there a
  lower-case ``name=value`` that is code is left alone: ``api_key=server_args.api_key``,
  ``api_key=key``, ``new_token=512``; ``password=hunter2`` is redacted).
- **key-value pairs** in a line for every such name (and ``token``/``auth``): ``password: v``
  (YAML), ``"token": "v"`` (JSON), ``'secret': 'v'`` (a repr), ``X-Api-Key: v`` (headers); code and
  type annotations (``api_key: Optional[str] = None``), counts (``#token: 4096``) and empty strings
  are left alone.
- **URLs with credentials**: ``scheme://user:pass@host`` -> ``scheme://user:***@host``,
  ``redis://:pass@host`` -> ``redis://:***@host``, and a userinfo with no password (a Sentry DSN's
  key) -> ``https://***@host`` (the login name of ``ssh://``/``sftp://``/``git+ssh://`` … is kept).
- **Authorization headers**: ``Authorization: Bearer|Basic|Token …`` and ``Bearer …``; ``Cookie:``
  / ``Set-Cookie:`` to the end of the line.
- **PEM private-key blocks** (``-----BEGIN … PRIVATE KEY-----`` to ``-----END … PRIVATE KEY-----``,
  multi-line; an unterminated one to the end of the text) and **JWTs** (a token shape).
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
    "is_secret_flag", "register_flag_table", "flag_tables", "is_secret_env", "is_secret_key", "redact_argv", "redact_env", "redact_text",
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
    # RFC 7519 JWT: base64url header and payload of JSON objects (``{"`` encodes as ``eyJ``), a signature
    ("jwt", r"eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
)
_SHAPES = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(f"(?:{rx})" for _, rx in TOKEN_SHAPES) + r")(?![A-Za-z0-9_])")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: A PEM private-key block (RFC 7468: ``-----BEGIN PRIVATE KEY-----``, ``RSA``/``EC``/``OPENSSH``/
#: ``ENCRYPTED`` … ``PRIVATE KEY``), multi-line; an unterminated one is redacted to the end of the text.
_PEM_BEGIN = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
_PEM_END = r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"
_PEM = re.compile(rf"(?P<begin>{_PEM_BEGIN})(?P<body>.*?)(?P<end>{_PEM_END}|\Z)", re.S)
_PEM_OPEN = re.compile(_PEM_BEGIN)
_PEM_CLOSE = re.compile(_PEM_END)


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[-_.\s]+", name.strip().lstrip("-").lower()) if w]


def _secret_name(flag: str) -> bool:
    """The kind rule on a flag's NAME alone (module docstring): its last word is a secret word and no
    earlier word makes it a count or a time. What :func:`is_secret_flag` falls back on for an option
    no engine table knows."""
    words = _words(flag.split("=", 1)[0])
    if not words:
        return False
    last = words[-1]
    if any(w in _COUNT_WORDS for w in words[:-1]):
        return False
    return last in _SECRET_WORDS or (last.endswith(_SUFFIXES) and len(last) > 6)


_TABLES_LOCK = threading.Lock()
_REGISTERED: dict[tuple, Any] = {}
_SECRET_CACHE: dict[tuple, bool] = {}
#: Why a registered table factory could not be made (redaction then uses the kind rule on names).
TABLE_ERRORS: list[str] = []


def register_flag_table(table: Any) -> None:
    """Add an engine's flag table (a :class:`workbench.engine.flag_table.FlagTable`, or a zero-argument
    callable returning one, called once when first needed) to the tables :func:`is_secret_flag`
    resolves option strings against when no table is given (free text, JSON). The engine layer
    registers its shipped SGLang and vLLM tables when :mod:`workbench.engine.launch` is imported,
    and every table it reads from a box (this module sits below the engine layer and imports
    none of it). Idempotent."""
    if table is None:
        return
    if callable(table) and not hasattr(table, "resolve"):
        key: tuple = ("factory", getattr(table, "__module__", ""), getattr(table, "__qualname__", repr(table)))
    elif hasattr(table, "resolve"):
        key = (getattr(table, "engine", ""), getattr(table, "version", ""), getattr(table, "source", ""),
               len(getattr(table, "flags", ()) or ()))
    else:
        raise TypeError(f"register_flag_table takes a FlagTable or a callable returning one, not {type(table).__name__}")
    with _TABLES_LOCK:
        if key not in _REGISTERED:
            _REGISTERED[key] = table
            _SECRET_CACHE.clear()


def flag_tables() -> list:
    """The flag tables an option string is resolved against when :func:`is_secret_flag` is given
    none: every table registered by :func:`register_flag_table` (the shipped SGLang 0.5.23 and vLLM
    tables once the engine layer is imported, and the tables read from boxes), in order."""
    made_any = True
    while made_any:  # a factory may register more tables (importing the engine layer registers both shipped ones)
        made_any = False
        with _TABLES_LOCK:
            items = list(_REGISTERED.items())
        for key, table in items:
            if hasattr(table, "resolve"):
                continue
            made_any = True
            try:  # a factory: made once
                made = table()
            except Exception as exc:  # a damaged shipped table: redaction goes on by the kind rule, the reason kept
                TABLE_ERRORS.append(f"{key[-1]}: {type(exc).__name__}: {exc}")
                made = None
            with _TABLES_LOCK:
                if made is None or not hasattr(made, "resolve"):
                    _REGISTERED.pop(key, None)
                else:
                    _REGISTERED[key] = made
                _SECRET_CACHE.clear()
    with _TABLES_LOCK:
        out, seen = [], set()
        for table in _REGISTERED.values():
            if id(table) not in seen:
                seen.add(id(table))
                out.append(table)
    return out


def _secret_in_table(name: str, table: Any) -> bool | None:
    """Whether option string ``name`` carries a secret in ``table``, argparse's way: resolved
    (exact option string, alias, or unique prefix) to a flag that takes a value and whose name (or
    an alias's) is a secret one -> ``True``; to any other flag -> ``False`` (a switch such as vLLM's
    ``--allow-credentials`` takes no value); an ambiguous prefix -> whether any of the flags it
    could match is secret; a flag the table does not know -> ``None``."""
    r = table.resolve(name)
    if r.status == "known":
        spec = table.spec(r.canon) or {}
        if r.negated or spec.get("kind") in ("store_true", "bool_optional"):
            return False
        return _secret_name(r.canon) or any(_secret_name(a) for a in spec.get("aliases") or ())
    if r.status == "ambiguous":
        flags = {table.aliases.get(c) or table.negations.get(c) for c in r.candidates} - {None}
        return any(_secret_in_table(f, table) for f in flags)
    return None


def is_secret_flag(flag: str, table: Any = None) -> bool:
    """Whether a command-line flag carries a secret value: resolved against the engines' flag
    tables the way argparse resolves it (``allow_abbrev``: an exact option string, an alias, or a
    unique prefix), then the flag it IS decides (:func:`_secret_in_table`).

    ``is_secret_flag("--api-key")``, ``is_secret_flag("--api-k")`` (a prefix of ``--api-key``) and
    ``is_secret_flag("--ssl-keyfile-password")`` are ``True``; ``is_secret_flag(
    "--speculative-num-draft-token")`` (a prefix of ``--speculative-num-draft-tokens``), ``
    is_secret_flag("--speculative-token-map")`` and ``is_secret_flag("--allow-credentials")`` (a
    switch) are ``False``.

    ``table``: the command's own flag table (its engine on the box); ``None``: every table of
    :func:`flag_tables`: a flag that some table resolves to one flag is secret when it is so in any
    of those (an ambiguous prefix counts only where no table resolves it: ``--ssl-key`` is vLLM's
    ``--ssl-keyfile``, a path, though SGLang finds it ambiguous). An option no table resolves to
    one flag gets the kind rule on its name too (:func:`_secret_name`: ``--token``, ``--db-password``
    of another tool). A vLLM dotted option (``--kv-transfer-config.kv_connector_extra_config.api_key``) is
    secret when its last key names a secret. ``flag``: the option as written, with or without
    leading dashes (an ``=value`` part is ignored)."""
    name = flag.split("=", 1)[0].strip()
    if not name.lstrip("-"):
        return False
    if not name.startswith("-"):
        name = "--" + name.replace("_", "-")
    base, dot, path = name.partition(".")
    if dot and not base.startswith("--"):
        dot = ""
    if dot:
        last = path.rstrip("+").rsplit(".", 1)[-1]
        return _is_secret_text_name(last) or is_secret_flag(base, table)
    tables = [table] if table is not None else None
    key = (name, id(table)) if table is not None else (name, None)
    with _TABLES_LOCK:
        hit = _SECRET_CACHE.get(key) if table is None else None
    if hit is not None:
        return hit
    known, ambiguous = [], []
    for t in tables or flag_tables():
        answer = _secret_in_table(name, t)
        if answer is not None:
            (known if t.resolve(name).status == "known" else ambiguous).append(answer)
    # a flag some engine resolves outright decides (a secret in any such table wins); an option
    # no engine resolves to one flag (an ambiguous prefix, which argparse refuses, or a flag of
    # another tool: `huggingface-cli login --token X`) is secret when a flag it could match is, or
    # by the kind rule on its name
    secret = any(known) if known else (any(ambiguous) or _secret_name(name))
    if table is None:
        with _TABLES_LOCK:
            if len(_SECRET_CACHE) > 4096:
                _SECRET_CACHE.clear()
            _SECRET_CACHE[key] = secret
    return secret


#: English words ending in ``PASS`` that are no password (``SKIP_BYPASS``, ``USE_COMPASS``).
_PASS_WORDS = {"BYPASS", "COMPASS", "OVERPASS", "UNDERPASS", "SURPASS", "TRESPASS", "ENCOMPASS"}
#: Words after ``AUTH`` that make a variable a location or a mode, not a credential
#: (``SSH_AUTH_SOCK`` is the ssh-agent's socket path: kept, it is what one debugs agent forwarding with).
_AUTH_NOT_SECRET = {"SOCK", "SOCKET", "URL", "URI", "HOST", "PORT", "TYPE", "METHOD", "MODE", "DOMAIN", "ENDPOINT",
                    "ENABLED", "DISABLED", "ENABLE", "DISABLE", "USER", "USERNAME", "FILE", "PATH", "DIR", "PROVIDER",
                    "SERVER", "TIMEOUT", "SCHEME", "REALM"}


def is_secret_env(name: str) -> bool:
    """Whether an environment variable holds a secret (any case), by kind of name: ``*_TOKEN``,
    ``*_KEY``, ``*_KEYS``, ``*_APIKEY``, ``*_PAT``, ``*_PASS`` (and a last word ending in ``PASS``:
    libpq's ``PGPASS``; not ``BYPASS``/``COMPASS``), ``*_PWD`` (MySQL's ``MYSQL_PWD``; not the
    shell's ``PWD``/``OLDPWD``, which are directories), ``*_DSN`` (``SENTRY_DSN``: the key is in its
    userinfo), ``*_AUTH`` / ``AUTH_*`` (not ``SSH_AUTH_SOCK``, ``*_AUTH_URL``, ``*_AUTH_TYPE``, …:
    :data:`_AUTH_NOT_SECRET`), names holding ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL``,
    ``COOKIE`` or ``PRIVATE_KEY``; also the bare ``TOKEN``, ``APIKEY``, ``API_KEY``, ``PASSWORD``.
    ``TOKENIZERS_PARALLELISM``, ``SSH_AUTH_SOCK``, ``HF_HOME``, ``PYTHONHASHSEED``, ``PATH``,
    ``XDG_RUNTIME_DIR`` are not. A ``DATABASE_URL`` is no secret by name: the URL rule redacts the
    password in its value (:meth:`Redactor.env` redacts every other value as text)."""
    n = name.upper()
    if not _ENV_NAME.match(n):
        return False
    if any(w in n for w in ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "COOKIE", "PRIVATE_KEY", "PRIVATEKEY")):
        return True
    if n in ("TOKEN", "APIKEY", "API_KEY") or n.endswith(("_TOKEN", "_KEY", "_KEYS", "_APIKEY", "_PAT")):
        return True
    words = [w for w in n.split("_") if w]
    if not words:
        return False
    last = words[-1]
    if len(words) > 1 and last in ("PASS", "PWD", "DSN"):
        return True
    if last.endswith("PASS") and last not in _PASS_WORDS and (len(words) > 1 or len(last) > 4):
        return True  # PGPASS, DB_PASS, REDIS_PASS
    for i, w in enumerate(words):
        if w == "AUTH" and (i + 1 == len(words) or words[i + 1] not in _AUTH_NOT_SECRET) and len(words) > 1:
            return True  # BASIC_AUTH, PROXY_AUTH, AUTH_HEADER; not SSH_AUTH_SOCK, AUTH_URL
    return False


def is_secret_key(key: str) -> bool:
    """Whether a JSON / dict key names a secret (``api_key``, ``hf_token``, ``Authorization``,
    ``ssl_keyfile_password``, ``HF_TOKEN``). A single-word key counts only when it is one of
    ``password``, ``passwd``, ``secret``, ``authorization``, ``apikey``, ``passphrase``,
    ``credentials`` (a ``"key"`` or ``"token"`` field is usually a tensor name or a vocabulary
    entry). A key of several words also gets the variable rule (``db_pass``, ``mysql_pwd``,
    ``session_cookie``)."""
    words = _words(key)
    if not words:
        return False
    if len(words) == 1:
        return words[0] in _SINGLE_KEY_WORDS
    return _secret_name(key) or is_secret_env(key)


# -- text rules ----------------------------------------------------------------------------------

_FLAG_NAME = r"--[A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*\+?"  # vLLM's --flag.key.sub[+] too
# --flag=value / --flag value (value: quoted or one shell word; not another option)
_FLAG_VALUE = re.compile(
    r"(?<![\w-])(?P<flag>" + _FLAG_NAME + r")(?P<sep>=|[ \t]+)(?P<value>\"[^\"]*\"|'[^']*'|['\"]?(?!-)[^\s'\"`,;)\]}]+)"
)
# the argv-list form: '--api-key', 'VALUE'  (a repr'd list in an exception message)
_FLAG_LIST = re.compile(r"(?P<q>['\"])(?P<flag>" + _FLAG_NAME + r")(?P=q)(?P<sep>\s*,\s*)(?P<q2>['\"])(?P<value>[^'\"]*)(?P=q2)")
# NAME=value (shell env prefix, env dumps)
_ENV_ASSIGN = re.compile(r"(?<![\w-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\"[^\"]*\"|'[^']*'|[^\s'\"`,;)\]}]+)")
# 'NAME': 'value' / "NAME": "value" (a repr'd or JSON dict in text)
_KEY_VALUE = re.compile(r"(?P<q>['\"])(?P<name>[A-Za-z_][A-Za-z0-9_-]*)(?P=q)(?P<sep>\s*:\s*)(?P<q2>['\"])(?P<value>[^'\"]*)(?P=q2)")
# name: value / "name": value / name = value (YAML, HTTP headers such as X-Api-Key, log lines)
_COLON_VALUE = re.compile(r"(?<![\w-])(?P<q>['\"]?)(?P<name>[A-Za-z_][A-Za-z0-9_-]*)(?P=q)(?P<sep>[ \t]*:[ \t]*)"
                          r"(?P<scheme>(?i:bearer|basic|token|digest)[ \t]+)?(?P<value>\"[^\"]*\"|'[^']*'|(?![-'\"])[^\s'\"`,;)\]}]+)")
# Cookie / Set-Cookie header: the whole rest of the line
_COOKIE_HEADER = re.compile(r"(?im)(?P<head>\b(?:set-)?cookie[ \t]*:[ \t]*)(?P<value>[^\r\n]+)")
# scheme://user:pass@host, scheme://:pass@host (an empty user: redis), scheme://key@host (no password:
# a Sentry DSN's key); the user of an ssh-family URL is a login name, kept
_URL_CREDS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'\"]*):(?P<value>[^/\s@'\"]+)@")
_URL_USER = re.compile(r"(?P<scheme>\b(?P<name>[A-Za-z][A-Za-z0-9+.-]*)://)(?P<value>[^/\s:@'\"]+)@")
_LOGIN_SCHEMES = {"ssh", "sftp", "scp", "rsync", "git+ssh", "ssh+git", "telnet"}
_AUTH_HEADER = re.compile(r"(?i)(?P<head>\bauthorization\b['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token)\s+)?)"
                          r"(?![a-z]{1,2}['\"])(?P<value>[^\s'\"`,]+)")  # not a string prefix: f"Bearer {key}" is code
_BEARER = re.compile(r"(?i)(?P<head>\bbearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})")


_CODE_VALUE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)+[A-Za-z_][A-Za-z0-9_]*\(?$|^[A-Za-z_][A-Za-z0-9_]*\($")


def _looks_like_code(name: str, value: str) -> bool:
    """``name=value`` in source code rather than a setting: a keyword argument passing an
    attribute or a call (``api_key=server_args.api_key``, ``api_key=get_key()``), a variable of
    letters only (``api_key=key``; ``password=hunter2`` is a secret), a number (``new_token=512``,
    a count in a log summary), or a constant (``None``, ``True``, ``self``). Only for lower-case names: ``HF_TOKEN=x`` is always a setting."""
    if name.upper() == name or "-" in name:  # HF_TOKEN=x, X-Api-Key: x are settings
        return False
    if re.fullmatch(r"[A-Za-z_][\w.]*\[.*|[A-Za-z_][\w.]*\s*\|.*", value):
        return True  # a type annotation: api_key: Optional[str] = None
    return (value == name or value in ("None", "True", "False", "self", "cls") or bool(_CODE_VALUE.match(value))
            or bool(re.fullmatch(r"[A-Za-z_]+", value))  # a variable (a real secret has a digit or a symbol)
            or bool(re.fullmatch(r"-?\d+(\.\d+)?", value)))  # a count: new_token=512


def _quoted_placeholder(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[0] + PLACEHOLDER + value[0]
    if value[:1] in ("'", '"'):  # an unbalanced opening quote is kept: the text still reads as written
        return value[0] + PLACEHOLDER
    return PLACEHOLDER


def _sub_secrets(pattern: re.Pattern, text: str, replace, anchor: str) -> str:
    """``pattern.sub`` that does not let a match it leaves alone swallow a secret: after a match
    ``replace`` returns ``None`` for (not a secret), the scan resumes right after its group
    ``anchor`` (the name), so ``--model-path '/m --api-key X`` (an unbalanced quote taking the rest
    of the line as the path's value) still has its ``--api-key X`` found."""
    out, pos = [], 0
    while True:
        m = pattern.search(text, pos)
        if m is None:
            out.append(text[pos:])
            return "".join(out)
        new = replace(m)
        if new is None:
            stop = max(m.end(anchor), pos + 1)
            out.append(text[pos:stop])
            pos = stop
        else:
            out.append(text[pos:m.start()] + new)
            pos = max(m.end(), pos + 1)


def _is_secret_text_name(name: str) -> bool:
    """A name whose value is a secret in a ``name=value`` / ``name: value`` text: the key rule, the
    variable rule for upper-case names, and the single words ``token``/``tokens`` (a ``"token"``
    field is a vocabulary entry in JSON data; in a setting it is a credential; a count or code
    value is left alone by :func:`_looks_like_code`)."""
    return (is_secret_key(name) or (name.isupper() and is_secret_env(name))
            or _words(name) in (["token"], ["tokens"], ["auth"]))


def _rules_text(text: str) -> str:
    """The rules that need no learned value (PEM blocks, flags, env assignments, key-value pairs,
    URLs, headers, shapes)."""
    def flag_sub(m: re.Match) -> str | None:
        if not is_secret_flag(m["flag"]):
            return None
        if m["value"] == PLACEHOLDER:
            return m.group(0)
        return f"{m['flag']}{m['sep']}{_quoted_placeholder(m['value'])}"

    def list_sub(m: re.Match) -> str:
        if not is_secret_flag(m["flag"]):
            return m.group(0)
        return f"{m['q']}{m['flag']}{m['q']}{m['sep']}{m['q2']}{PLACEHOLDER}{m['q2']}"

    def env_sub(m: re.Match) -> str | None:
        name = m["name"]
        if not _is_secret_text_name(name) or _looks_like_code(name, m["value"]):
            return None
        if m["value"] == PLACEHOLDER:
            return m.group(0)
        return f"{m['name']}={_quoted_placeholder(m['value'])}"

    def kv_sub(m: re.Match) -> str:
        if not _is_secret_text_name(m["name"]) or not m["value"]:  # "password": "" is no secret
            return m.group(0)
        return f"{m['q']}{m['name']}{m['q']}{m['sep']}{m['q2']}{PLACEHOLDER}{m['q2']}"

    def colon_sub(m: re.Match) -> str | None:
        name, value = m["name"], m["value"]
        if not _is_secret_text_name(name) or value in (PLACEHOLDER, '""', "''") or _quoted_placeholder(value) == value:
            return None
        if value[:1] not in "'\"" and not m["scheme"] and _looks_like_code(name, value):
            return None
        return f"{m['q']}{name}{m['q']}{m['sep']}{m['scheme'] or ''}{_quoted_placeholder(value)}"

    def url_user_sub(m: re.Match) -> str:
        if m["name"].lower() in _LOGIN_SCHEMES or m["value"] == PLACEHOLDER:
            return m.group(0)
        return f"{m['scheme']}{PLACEHOLDER}@"

    text = _PEM.sub(lambda m: m["begin"] + ("\n" if "\n" in m["body"] else "") + PLACEHOLDER
                    + ("\n" if "\n" in m["body"] and m["end"] else "") + m["end"], text)
    text = _sub_secrets(_FLAG_VALUE, text, flag_sub, "flag")
    text = _FLAG_LIST.sub(list_sub, text)
    text = _sub_secrets(_ENV_ASSIGN, text, env_sub, "name")
    text = _KEY_VALUE.sub(kv_sub, text)
    text = _COOKIE_HEADER.sub(lambda m: m["head"] + PLACEHOLDER, text)
    text = _sub_secrets(_COLON_VALUE, text, colon_sub, "name")
    text = _URL_CREDS.sub(lambda m: f"{m['head']}:{PLACEHOLDER}@", text)
    text = _URL_USER.sub(url_user_sub, text)
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

    def learn_argv(self, argv: Sequence[str], table: Any = None) -> None:
        """Learn the values of the secret flags (``--flag V``, ``--flag=V``; resolved as
        :func:`is_secret_flag` does, against ``table`` when given: the command's engine's flags),
        secret ``NAME=V`` env prefixes, and the values under secret-named keys of a JSON value
        (vLLM's ``--kv-transfer-config '{…"api_key": "V"…}'``) in ``argv`` (a list of tokens)."""
        tokens = [str(t) for t in argv]
        for i, tok in enumerate(tokens):
            if tok.startswith("-"):
                name, eq, inline = tok.partition("=")
                if is_secret_flag(name, table):
                    if eq:
                        self.learn_value(inline)
                    elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                        self.learn_value(tokens[i + 1])
            else:
                m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", tok, re.S)
                if m and is_secret_env(m.group(1)):
                    self.learn_value(m.group(2))
            value = tok.partition("=")[2] if tok.startswith("-") else tok
            if value.startswith("{"):  # a JSON flag's value (vLLM): its secret-named keys' values
                self._learn_json(value)
        for m in _SHAPES.finditer(" ".join(tokens)):
            self.learn_value(m.group(0))

    def _learn_json(self, text: str) -> None:
        """Learn the string values under secret-named keys of a JSON object given as a flag's value
        (vLLM's ``--kv-transfer-config '{"kv_connector_extra_config": {"api_key": "…"}}'``); text
        that is no JSON teaches nothing (the key-value rules still redact it where it stands)."""
        import json

        try:
            doc = json.loads(text)
        except ValueError:
            return
        stack = [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                for k, v in node.items():
                    if isinstance(v, str) and _is_secret_text_name(str(k)):
                        self.learn_value(v)
                    elif isinstance(v, (dict, list)):
                        stack.append(v)
            elif isinstance(node, list):
                stack.extend(node)

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
        self.learn_argv(list(argv), getattr(launch, "table", None))  # None: every registered table

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

    def argv(self, argv: Sequence[str], table: Any = None) -> list[str]:
        """A copy of ``argv`` with the values of secret flags (both forms; :func:`is_secret_flag`,
        against ``table`` when given: the command's engine's flags) and secret env prefixes
        replaced, then every token redacted as text. ``len`` is kept."""
        tokens = [str(t) for t in argv]
        out: list[str] = []
        for i, tok in enumerate(tokens):
            prev = tokens[i - 1] if i else ""
            if prev.startswith("-") and "=" not in prev and is_secret_flag(prev, table) and not tok.startswith("-"):
                out.append(PLACEHOLDER)
                continue
            if tok.startswith("-") and "=" in tok:
                name, _, _ = tok.partition("=")
                if is_secret_flag(name, table):
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


def _pem_open(text: str) -> bool:
    """Whether ``text`` has a ``BEGIN … PRIVATE KEY`` line after its last ``END`` line."""
    begins = [m.end() for m in _PEM_OPEN.finditer(text)]
    if not begins:
        return False
    ends = [m.end() for m in _PEM_CLOSE.finditer(text)]
    return not ends or begins[-1] > ends[-1]


class RedactingStream(io.TextIOBase):
    """A text stream that redacts each complete line before passing it to ``stream`` (the CLI
    wraps ``sys.stdout``/``sys.stderr`` in it). A partial line is held until its newline, a
    :meth:`flush`, or 64 KiB, so a secret split across two ``write`` calls is still caught; so are
    the lines of a PEM private-key block until its ``END`` line (its base64 lines alone are not
    recognisable).
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
            if len(self._buf) <= 65536 and _pem_open(head):
                return len(s)  # a private-key block is being printed line by line: hold it to its END line
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
