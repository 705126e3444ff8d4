"""Debug probes: a debug print injected into a Python source file on a box, and reverted.

A probe is a managed block (as Ansible's ``blockinfile``) inserted before an anchor line, at the
anchor's indentation, between marker comments::

    # >>> eagle-workbench probe TAG >>>
    ...prints once per process (or once per distinct key, see below), to stderr, flushed:
    [probe:TAG pgid=1234 pid=1240] expr1=repr(value1) expr2=repr(value2)
    # <<< eagle-workbench probe TAG <<<

Each expression is evaluated on its own; one that raises prints ``expr=<error:Type('msg')>``
instead, and nothing the probe does can raise into the patched code.

Which launch printed a line: ``pgid`` is the printing process's process group. A server started
by ``Box.launch_server`` is its own group (pid == pgid) and the processes it spawns (SGLang's
scheduler and TP workers) inherit it, so a log appended to by several launches can be split by
launch: ``read_probe_log(..., pgid=handle)`` returns only the lines of that launch. ``pid`` tells
the processes of one launch apart (one line per TP rank). Lines printed by the probe blocks of
earlier versions, ``[probe:TAG] ...``, are still read, as of unknown launch (``pgid`` ``None``).
A pid can in principle be reused by a later launch into the same log; within one box's uptime
that needs the pid counter to wrap around between the two launches.

Conditional: with ``when=EXPR`` a call prints only when ``EXPR`` is true (``"param_name not in
params_dict"`` prints only the checkpoint names ``load_weights`` drops).

One shot per distinct key: with ``once_per=EXPR`` the probe prints the first time each distinct
``repr(EXPR)`` is seen in the process, at most ``max_prints`` lines per process. SGLang captures
CUDA graphs at startup, running the draft's forward on a 1x-wide zeros buffer before any request:
a once-per-process probe shows only that call, while ``once_per="hidden_states.shape[-1]"`` shows
each width (the aux-wide draft-extend call under EAGLE3 too).

Expressions (and ``once_per``, ``when``) only read: ``check_expression`` accepts only a whitelist
of their syntax tree (names, attribute reads without dunders, subscripts, constants, containers,
operators, comprehensions, calls of :data:`PURE_FUNCTIONS`, :data:`TORCH_FUNCTIONS` and
:data:`PURE_METHODS`) and refuses anything else (``__import__``, ``open``, ``getattr``, ``eval``,
lambdas, ``:=``, in-place methods such as ``zero_``), naming the node and its column
(:class:`ProbeExpressionRefused`). The inserted block evaluates exactly the checked tree
(:func:`guarded_source`): each call goes through a gate that checks, when the probe runs, that the
callee is still the builtin or torch function of that name, that no ``nn.Module`` is cast or moved
in place, and that no iterator of the frame is consumed. The file is resolved on the box (every
symlink) and, given the engine's root, must stay inside it (:func:`resolve_probe_path`,
:class:`ProbePathOutside`).

Safety, in order: only a ``.py`` file is probed, and only when the original compiles with the
box's python; the original bytes are backed up next to the journal with their sha256; a journal
entry (JSON, ``STATE_DIR/probes/TAG.json`` on the box) is written as ``pending``; the patched text
goes to a temporary file in the source's directory (the original's mode, and its owner when the
box user may set it) and is compiled there with the box's python; the original's sha256 is
checked again; then one atomic rename replaces it (so the file gets a new inode) and the entry
becomes ``active``. A process killed at any point leaves either the original or the patched file,
never half of one, and ``revert_all`` (``workbench probe revert --all``, from any later session)
cleans up.

Bytecode: Python may run the engine from a cached ``__pycache__/NAME.cpython-XY[.opt-N].pyc``
(:func:`bytecode_caches` asks the box's python where, ``importlib.util.cache_from_source``). A
timestamp cache (pip's default) or a checked-hash one is invalidated by the patched file (new
mtime and size; new hash) and recompiled by the next import; an *unchecked-hash* cache (``py_compile
--invalidation-mode unchecked-hash``, used by some distributions and container builds, e.g. with
``SOURCE_DATE_EPOCH``) is trusted without looking at the source, so a probe would never run:
``add_probe`` backs such a cache up next to the journal and removes it, and ``revert_probe``
restores it byte for byte (``Probe.bytecode``). A sourceless module (only a ``.pyc``) cannot be
probed: there is no ``.py`` to patch.

``revert_probe`` restores the backup byte for byte (mode and owner as recorded) and checks the
sha256; it refuses, keeping the backup, when the file is neither the patched text nor the
original (someone edited it). Probes on the same file stack: revert the newest first
(``revert_all`` does). ``list_journal`` returns the journal's probes and the entries it could not
read; ``list_probes`` the probes only.

Reading back: ``read_probe_log`` greps the server's log on the box for ``[probe:TAG`` lines (the
log is never read whole) and returns one ``ProbeReading`` per line (of one launch with ``pgid=``),
each value parsed by
``parse_probe_value`` (shapes to tuples of ints, Python literals to values, anything else kept
as the printed text). ``probe_file_status`` says whether a probed file is still as the journal
recorded it.

The package's modules, lowest first (each imports only modules before it in this list; those of
one line import none of each other): ``record`` (the :class:`Probe` record, :data:`TAG_RE`, the
defaults) and ``whitelist`` (what an expression may do, checked when the probe is added); ``guard``
(the rewrite and the gate that check it again when the probe runs), ``journal`` (the journal on the
box, :func:`probe_file_status`), ``files`` (the compile snippet, the owner, the bytecode caches) and
``read`` (the printed lines read back); ``text`` (the block and the anchor in a file's text);
``place`` (:func:`add_probe`) and ``revert`` (:func:`revert_probe`, :func:`revert_all`). This
package re-exports their public names: import them from ``remote.probes``.
"""

from __future__ import annotations

# The errors and box types the single module imported were reachable from it (``probes.AnchorNotFound``):
# still re-exported.
from ..box import Box, PathLike
from ..errors import (
    AnchorAmbiguous,
    AnchorNotFound,
    ProbeCompileError,
    ProbeConflict,
    ProbeError,
    ProbeExists,
    ProbeExpressionRefused,
    ProbeNotFound,
    ProbePathOutside,
    RemoteFileDecodeError,
    RemoteFileError,
    RemoteFileNotFound,
    RemoteIsADirectory,
)
from .files import bytecode_caches
from .guard import GATE_NAME, guarded_source
from .journal import FILE_STATUSES, JournalProblem, journal_dir, list_journal, list_probes, probe_file_status
from .place import CRASH_ENV, CRASH_POINTS, add_probe, locate_anchor, resolve_probe_path
from .read import (
    ProbeReading,
    launch_pgid,
    parse_probe_value,
    parse_shape,
    read_probe_log,
    read_probe_output,
    readings_by_launch,
)
from .record import MAX_PRINTS, MAX_REPR, TAG_RE, Probe
from .revert import revert_all, revert_probe
from .text import (
    BEGIN_MARKER,
    END_MARKER,
    _probe_block_lines,  # imported by workbench.engine.codepath / codepath_vllm
    default_tag,
    original_line_count,
    probe_blocks,
    render_block,
)
from .whitelist import (
    MAX_INT_BITS,
    MAX_LOOP_STEPS,
    MAX_POW_EXPONENT,
    MAX_RANGE_LEN,
    MAX_SEQUENCE_LEN,
    MAX_SHIFT,
    MODULE_METHODS,
    PURE_FUNCTIONS,
    PURE_METHODS,
    SAFE_DUNDERS,
    TORCH_FUNCTIONS,
    check_expression,
    parse_expression,
)

__all__ = [
    # record
    "Probe", "TAG_RE", "MAX_PRINTS", "MAX_REPR",
    # whitelist
    "parse_expression", "check_expression", "PURE_FUNCTIONS", "TORCH_FUNCTIONS", "PURE_METHODS", "MODULE_METHODS",
    "SAFE_DUNDERS", "MAX_POW_EXPONENT", "MAX_INT_BITS", "MAX_SHIFT", "MAX_SEQUENCE_LEN", "MAX_RANGE_LEN",
    "MAX_LOOP_STEPS",
    # guard
    "guarded_source", "GATE_NAME",
    # journal
    "journal_dir", "list_journal", "list_probes", "JournalProblem", "probe_file_status", "FILE_STATUSES",
    # files
    "bytecode_caches",
    # read
    "read_probe_log", "read_probe_output", "ProbeReading", "readings_by_launch", "launch_pgid", "parse_shape",
    "parse_probe_value",
    # text
    "render_block", "BEGIN_MARKER", "END_MARKER", "probe_blocks", "original_line_count", "default_tag",
    # place
    "add_probe", "resolve_probe_path", "locate_anchor", "CRASH_ENV", "CRASH_POINTS",
    # revert
    "revert_probe", "revert_all",
    # the errors and box types, as the single module had them
    "Box", "PathLike", "AnchorAmbiguous", "AnchorNotFound", "ProbeCompileError", "ProbeConflict", "ProbeError",
    "ProbeExists", "ProbeExpressionRefused", "ProbeNotFound", "ProbePathOutside", "RemoteFileDecodeError",
    "RemoteFileError", "RemoteFileNotFound", "RemoteIsADirectory",
]
