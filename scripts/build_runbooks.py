"""Write runbooks/diagnose_acceptance.ipynb, runbooks/preflight.ipynb, notebooks/control_panel.ipynb,
notebooks/engine_probes.ipynb and notebooks/walkthrough.ipynb from the cell sources below (no outputs).

The runbook is thin: every cell calls a tested function of ``workbench.diagnosis.run`` and shows what
it returns. Edit the cells here and rerun ``python scripts/build_runbooks.py``.
"""

import copy
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent


def md(text: str, **meta):
    return new_markdown_cell(text.strip(), metadata=meta)


def code(text: str, tags=(), **meta):
    cell = new_code_cell(text.strip(), metadata=dict(meta))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


DIAGNOSE = [
    md("""
# Diagnose acceptance: why is accept length low?

Symptom → hypotheses → probe → fixes → verify → report. Every fault family of the catalogue
(`docs/rules.md`) is a hypothesis: decided from the static evidence first (no restart), its mechanism
shown by one probe launch on the engine's own code path, every derivable fix (a launch-command change,
or a repaired **copy** of the draft on the box — never your files) applied in one relaunch and measured.
A fix is called a fix only when accept length came back. The box is left as found: probes reverted,
copies removed, the original server put back, even when a cell fails (the run is journalled on the box;
`workbench restore --host …` undoes an interrupted run).

Run headless: `workbench runbook diagnose_acceptance -p host myalias` (papermill + HTML export), or
`papermill runbooks/diagnose_acceptance.ipynb out.ipynb -p host myalias`.
"""),
    code("""
host = "local"            # the box: "local", an ~/.ssh/config alias, user@host[:port]
launch_command = None     # None: the server running on the box (or, when none runs, the sandbox box launched with --speculative-algorithm EAGLE)
port = None               # None: the launch command's --port, else the engine's default (SGLang 30000, vLLM 8000)
allow_restart = True      # False: static checks only (no probe, no fix; the static root cause is still named)
apply_fix = True          # relaunch with every derived fix and measure again
keep_fix = False          # True: leave the fixed server (and its draft copy) running instead of putting the original back
attribute_fixes = False   # True: one relaunch per fix, to show what each one contributed (a ladder)
try_candidates = True     # measure the known conventions when a fix cannot be derived (the aux offset convention)
aux_layer_ids = None      # the aux layer ids the draft was trained with, e.g. "1,3,6", when its config does not record them
expected_accept_length = None  # what a healthy draft reaches here (e.g. its training eval); None: judged against the ceiling
report_dir = "reports"
prompts = None            # a built-in set (chat, code, math, default) or a JSONL file; None: the built-in set (the sandbox's own on the sandbox)
num_prompts = 8
max_new_tokens = 96
server_start_timeout = 600
request_timeout = 300.0   # seconds each request to the server may take (a stalled one fails after it)
force_launch = False      # True: launch even what the doctor says will not start (the verdict records the findings overridden)
reclaim_gpus = False      # True: before a launch, stop this user's orphaned SGLang processes (ranks left by a killed launcher) holding its GPUs; another user's are never touched (else: the launch is refused, the holders named)
engine = None             # no server running and launch_command None: the sandbox box on "sglang" (its SGLang-compatible server, the default) or "vllm" (vLLM's CPU build, port 8000)
watchdog_after_s = 300    # seconds of silence of this run's heartbeat (its driver killed, its connection lost) after which a watchdog on the box restores it; 0: no watchdog
stack_dumps = False       # True: py-spy dump of the running server's processes as live evidence, before any restart (a box without py-spy, or without ptrace permission, gets a note)
""", tags=["parameters"]),
    md("## 1. Inventory the box\nThe engine, its version and source, the running server and its command line."),
    code("""
from workbench.runbook_params import check_runbook_parameters

check_runbook_parameters("diagnose_acceptance", globals(), kernel_namespace=True)  # every parameter, before anything touches the box

from IPython.display import HTML, display
from workbench.diagnosis import DiagnosisRun

run = DiagnosisRun.start(host=host, launch_command=launch_command, port=port, allow_restart=allow_restart,
                         apply_fix=apply_fix, keep_fix=keep_fix, attribute_fixes=attribute_fixes,
                         try_candidates=try_candidates, aux_layer_ids=aux_layer_ids,
                         expected_accept_length=expected_accept_length, prompts=prompts, num_prompts=num_prompts,
                         max_new_tokens=max_new_tokens, server_start_timeout=server_start_timeout,
                         report_dir=report_dir, request_timeout=request_timeout, force_launch=force_launch,
                         engine=engine, watchdog_after_s=watchdog_after_s, stack_dumps=stack_dumps)
run.reclaim_gpus = reclaim_gpus
run.inventory
"""),
    md("## 2. The symptom\nAccept length over the prompt set, as SGLang defines it: Σ completion tokens / Σ verify steps (bonus token included); on vLLM (no `/generate`) greedy `/v1/completions` and its `vllm:spec_decode_*` counters, 1 + accepted / drafts (the same quantity). A server that does not start is the symptom too: its exception and log tail are evidence."),
    code("""
before = run.measure_symptom()
before
"""),
    md("## 3. Hypotheses from the catalogue (static, no restart)\nEach fault family's hypotheses, decided from the doctor's findings: confirmed by an error finding, refuted when its rules found nothing, inconclusive when only a warning points at it, its inputs could not be read, or it is out of static reach."),
    code("""
run.preflight()
"""),
    code("""
run.check_hypotheses()
"""),
    md("## 4. Probe the mechanism (a restart only when it cannot ride on the fix)\nThe recipes of every suspect on the engine's own code path: the width reaching the draft's `fc`, the layers the target captures, the token map the worker holds, the names `load_weights` drops. When a fix launch will be made and measured, the probes ride on it (no load spent here; the server as found was read live in step 3: `/server_info`, `/metrics`, its log, the code-path map); otherwise one probe launch, its reason in the verdict's `launches`."),
    code("""
probed = run.probe()
probed if probed is not None else "no probe: " + "; ".join(n for n in run.notes if n.startswith("no probe"))
"""),
    md("### Where this happens in the engine's source\nThe EAGLE-3 code path of the box's engine version, read from its own files."),
    code("""
run.code_path()
"""),
    md("## 5. Apply every derived fix in one relaunch and measure"),
    code("""
after = run.apply_fixes()
for fix in run.fixes:
    print(f"{fix.kind:10} {', '.join(fix.rules)}: {fix.summary}" + (f"  — missing: {fix.missing}" if fix.missing else ""))
after if after is not None else ("no fix applied: the run ended early, " + str(run.server_lost) if run.server_lost
                                 else "no fix applied (apply_fix or allow_restart is False, or no fix could be derived)")
"""),
    md("### What each fix contributed (only with `attribute_fixes`)"),
    code("""
run.attribute()
"""),
    md("## 6. Summary"),
    code("""
display(HTML(run.summary_html()))
for fig in run.figures().values():
    fig.show()
run.ledger
"""),
    md("## 7. Leave the box as found, write the verdict"),
    code("""
verdict = run.finish()
print("outcome:", verdict["outcome"], " restarts:", verdict["restarts"], " duration:", verdict["duration_s"], "s")
for line in verdict["restore"]["actions"] + verdict["restore"]["problems"]:
    print(" -", line)
print("verdict:", run.report_dir / "diagnose_acceptance.json")
print("loads:", verdict["loads"], " downtime:", verdict["downtime_s"], "s")
for launch in verdict["launches"]:
    print(f" - {launch['label']}: {launch['reason']} (ready after {launch['ready_after_s']} s)")
run.box_timeline().show()
"""),
]


PREFLIGHT = [
    md("""
# Preflight: what is wrong with this deployment, before any restart?

Every rule of the preflight catalogue on one launch command, read from the box's own files: the two
`config.json`, the draft checkpoint's safetensors headers and token map (by byte range), the engine's
source. Nothing is restarted, nothing is changed. The same checks as `workbench doctor --launch "…"`.

Run headless: `workbench runbook preflight -p host myalias -p launch_command "python -m sglang.launch_server …"`.
"""),
    code("""
host = "local"            # the box: "local", an ~/.ssh/config alias, user@host[:port]
launch_command = None     # None: the server running on the box (or, when none runs, the sandbox box launched with --speculative-algorithm EAGLE)
port = None               # with launch_command None: the running server's port when several run
report_dir = "reports"
""", tags=["parameters"]),
    md("## Findings\nEach finding with its evidence: the values compared and the file (and line) they came from."),
    code("""
from workbench.runbook_params import check_runbook_parameters

check_runbook_parameters("preflight", globals(), kernel_namespace=True)  # every parameter, before anything touches the box

from IPython.display import HTML, display
from workbench.doctor import preflight

report = preflight(host=host, launch_command=launch_command, port=port)
report
"""),
    md("## The corrected launch command"),
    code("""
display(HTML(report.fix_html()))
print("preflight JSON:", report.write_json(f"{report_dir}/preflight.json"))
"""),
]


PANEL = [
    md("""
# Control panel: diagnose a box step by step

The `diagnose_acceptance` runbook as buttons (JupyterLab: `make lab`). Each button runs one step of
`workbench.diagnosis.DiagnosisRun` and shows its evidence below; **Finish** puts the box back as found
and writes the verdict JSON. For a headless run and an HTML report use the runbook instead.
"""),
    code("""
host = "local"          # the box: local (the sandbox box), an ~/.ssh/config alias, user@host[:port]
port = None             # the server's port (None: the only one running; the port field can change it)
report_dir = "reports"  # where Finish writes the verdict (diagnose_acceptance.json), relative to the repository root
num_prompts = 6         # prompts per accept-length measurement
max_new_tokens = 64     # tokens generated per prompt
engine = "auto"         # "auto" (the running server's), "sglang" or "vllm" (with none running: the sandbox box on that engine)
""", tags=("parameters",)),
    code("""
from workbench.lab.panel import control_panel

panel = control_panel(host=host, port=port, report_dir=report_dir, num_prompts=num_prompts,
                      max_new_tokens=max_new_tokens, engine=engine)
panel.widget
"""),
]


MEASURE = [
    md("""
# Measure acceptance: accept length and speedup over a grid of speculative settings

One server launch per setting (`--speculative-num-steps`, `--speculative-eagle-topk`,
`--speculative-num-draft-tokens`) and one without speculation, each measured over the same prompts
with greedy `/generate` requests sent one at a time (warm-up excluded). Accept length is SGLang's:
completion tokens per verify step, bonus token included. The server found on the port is stopped
first and put back at the end (also after an interruption: `workbench restore`). A setting the
engine refuses to start is a row with its error.

On vLLM the same runbook sweeps `num_speculative_tokens` in `--speculative-config` (steps; topk 1,
draft tokens = steps + 1: vLLM drafts a chain) and measures through `/v1/completions` and the
`vllm:spec_decode_*` counters (accept length = 1 + accepted / drafts).
"""),
    code("""
host = "local"              # the box: local, an ~/.ssh/config alias, user@host[:port]
launch_command = None       # default: the server running on `port` (none: the sandbox box with EAGLE3)
port = None                 # default: the launch command's --port, else 30000
grid = "steps:1,2,3,4 topk:1 draft_tokens:auto"   # every combination (auto: steps + 1 when topk is 1)
include_baseline = True     # also measure without speculative decoding (the speedup's reference)
prompts = None              # chat, code, math, default or a JSONL file (default: default; the sandbox's own on the sandbox)
num_prompts = 8
max_new_tokens = 64
warmup = 1                  # requests sent first and not counted, per setting
server_start_timeout = 300.0
request_timeout = 300.0     # seconds each request to the server may take (a stalled one fails after it)
report_dir = "reports"
force_launch = False        # True: launch a setting even when the doctor says it will not start (else: a refused row, no launch)
reclaim_gpus = False        # True: before a launch, stop this user's orphaned SGLang processes holding its GPUs (never another user's); else the launch is refused, the holders named
engine = None               # no server running and launch_command None: the sandbox box on "sglang" (default) or "vllm" (vLLM's CPU build, port 8000)
watchdog_after_s = 300      # seconds of silence of this run's heartbeat (its driver killed, its connection lost) after which a watchdog on the box restores it; 0: no watchdog
""", tags=("parameters",)),
    code("""
from workbench.runbook_params import check_runbook_parameters

check_runbook_parameters("measure_acceptance", globals(), kernel_namespace=True)  # every parameter, before anything touches the box

from workbench.measure.sweep import SweepRun

run = SweepRun.start(host=host, launch_command=launch_command, port=port, grid=grid,
                     include_baseline=include_baseline, prompts=prompts, num_prompts=num_prompts,
                     max_new_tokens=max_new_tokens, warmup=warmup, server_start_timeout=server_start_timeout,
                     report_dir=report_dir, progress="text", request_timeout=request_timeout,
                     force_launch=force_launch, engine=engine, watchdog_after_s=watchdog_after_s)
run.reclaim_gpus = reclaim_gpus
print("settings:", [s.label for s in run.settings])
run.inventory
"""),
    md("## The sweep"),
    code("""
result = run.run()
result
"""),
    md("## Figures"),
    code("""
for fig in result.figures().values():
    fig.show()
"""),
    md("## Leave the box as found, write the table (`measure_acceptance.json`, `measure_acceptance.csv`)"),
    code("""
result = run.finish()
best = result.best
if best is not None:
    print(f"fastest speculative setting: {best.label}"
          + (f" ({best.speedup:.2f}x against no speculation)" if best.speedup else ""))
for line in result.restore["actions"] + result.restore["problems"]:
    print(" -", line)
result.check()  # fails the run when no setting could be measured
"""),
]

COMPARE = [
    md("""
# Compare two drafts on the same target

The same target, algorithm and speculative settings; only `--speculative-draft-model-path` differs.
One launch per draft (and one without speculation when asked), greedy `/generate` requests one at
a time, warm-up excluded. Without `draft_b`, draft B is a copy of draft A whose `d2t` token map
lists the same target ids in a shuffled order: every id valid, nothing fails at load, and
acceptance shows what a wrong token map costs. The server found on the port is put back at the end.
The best draft is the one with the higher accept length (tokens per verify step: the drafts' quality,
which the box's load does not move); tokens/s is shown beside it and decides only between accept lengths
that tie (within 0.005). The table, `compare_drafts.json` (`best`, `best_by`, `ranking`) say which figure decided.
On vLLM the draft is `--speculative-config`'s `"model"`, and the requests go to `/v1/completions`.
"""),
    code("""
host = "local"              # the box: local, an ~/.ssh/config alias, user@host[:port]
launch_command = None       # default: the server running on `port` (none: the sandbox box with EAGLE3)
port = None                 # default: the launch command's --port, else 30000
draft_a = None              # default: the launch command's draft (--speculative-draft-model-path; vLLM: --speculative-config "model")
draft_b = None              # default: draft A with its token map shuffled (written on the box, removed after)
include_baseline = False    # also measure without speculative decoding
prompts = None              # chat, code, math, default or a JSONL file (default: default; the sandbox's own on the sandbox)
num_prompts = 8
max_new_tokens = 64
warmup = 1
server_start_timeout = 300.0
request_timeout = 300.0     # seconds each request to the server may take (a stalled one fails after it)
report_dir = "reports"
force_launch = False        # True: launch a draft even when the doctor says it will not start (else: a refused row, no launch)
reclaim_gpus = False        # True: before a launch, stop this user's orphaned SGLang processes holding its GPUs (never another user's); else the launch is refused, the holders named
engine = None               # no server running and launch_command None: the sandbox box on "sglang" (default) or "vllm" (vLLM's CPU build, port 8000)
watchdog_after_s = 300      # seconds of silence of this run's heartbeat (its driver killed, its connection lost) after which a watchdog on the box restores it; 0: no watchdog
""", tags=("parameters",)),
    code("""
from workbench.runbook_params import check_runbook_parameters

check_runbook_parameters("compare_drafts", globals(), kernel_namespace=True)  # every parameter, before anything touches the box

from workbench.measure.sweep import SweepRun

run = SweepRun.compare(host=host, launch_command=launch_command, port=port, draft_a=draft_a, draft_b=draft_b,
                       include_baseline=include_baseline, prompts=prompts, num_prompts=num_prompts,
                       max_new_tokens=max_new_tokens, warmup=warmup, server_start_timeout=server_start_timeout,
                       report_dir=report_dir, progress="text", request_timeout=request_timeout,
                       force_launch=force_launch, engine=engine, watchdog_after_s=watchdog_after_s)
run.reclaim_gpus = reclaim_gpus
for note in run.notes:
    print("note:", note)
[(s.label, s.draft_path) for s in run.settings]
"""),
    md("## The comparison"),
    code("""
result = run.run()
result
"""),
    code("""
for fig in result.figures().values():
    fig.show()
"""),
    md("## Leave the box as found, write the table (`compare_drafts.json`, `compare_drafts.csv`)"),
    code("""
result = run.finish("compare_drafts")
for line in result.restore["actions"] + result.restore["problems"]:
    print(" -", line)
for note in result.notes:
    print("note:", note)
ranking = result.ranking()
print(f"best: {result.best.label if result.best else None} (decided by {ranking['decided_by']}): {ranking['reason']}")
result.check()  # fails the run when no draft could be measured
"""),
]

ENGINE = [
    md("""
# The engine's EAGLE-3 code path, and probes on it

Where the box's own engine source decides what the draft receives: the `is_eagle3()` gate, the
`eagle_config` read inside a broad `except`, the target's offset rule, the draft's `fc` width
check, `load_weights`' silent drops, the `d2t` use, each with its file and line in *this* version.
Then one-shot probes on that path (named recipes), read back from the server log, and reverted.
Every cell calls a tested function (`workbench.engine`, `workbench.rules`, `remote.probes`).
"""),
    code("""
host = "local"      # the box: local, an ~/.ssh/config alias, user@host[:port]
port = None         # the server whose engine to read (None: the only one running)
python = None       # the interpreter that runs the server (None: the running server's, else python3)
package = None      # "workbench.sandbox" for the sandbox box's engine when no server runs
add_probes = True   # add the recipes' probes (they print once the server restarts)
revert_at_end = True  # the last cell reverts the probes this notebook added (run it when you are done)
""", tags=("parameters",)),
    code("""
from remote import connect
from remote import probes
from workbench.engine import RECIPES, code_path_map, find_engine, map_for_launch, running_servers
from workbench.engine.recipes import add_recipes, read_recipes
from workbench.lab.notebook import IN_PARAMETERS_CELL, shown_as_message
from workbench.rules import scan_swallowed

box = connect(host)
with shown_as_message():  # e.g. several servers run: the ports listed, no traceback
    engine = find_engine(box, python=python, port=port, package=package, how=IN_PARAMETERS_CELL)
src = engine.source(box)
engine.to_dict()
"""),
    md("## The code path in this engine version"),
    code("""
notes = []
cmap = map_for_launch(box, src, engine.launch, cwd=engine.cwd, notes=notes) if engine.launch else code_path_map(src)
for note in notes:
    print("note:", note)
cmap
"""),
    md("## Swallowed errors and silent fallbacks on that path"),
    code("""
for finding in scan_swallowed(src, cmap):
    print(finding.message)
"""),
    md("## The draft's fc width check, with context"),
    code("""
check = cmap.entry("draft-fc-width-check")
print(src.show(check.file, check.line, 6) if check.found else check.location)
"""),
    md("""
## Probes
Each recipe prints to stderr, tagged `[probe:NAME]`, once per server process (`draft-input-width`:
once per distinct width, because a GPU server also runs the draft at start-up on a 1×-wide buffer
to capture CUDA graphs). The probes print only after the server restarts: **restart it now** (as you
always do), send one request, then run the next cell. Run top to bottom without a restart, the
probes are added and reverted and nothing is read.
"""),
    code("""
for name, recipe in RECIPES.items():
    print(f"{name}: {recipe.description}\\n    reads: {recipe.reads}")
added = add_recipes(box, cmap, list(RECIPES), python=engine.python) if add_probes else []  # all or none
[(p.tag, f"{p.path}:{p.line}") for p in probes.list_probes(box)]
"""),
    code("""
if engine.log_path is None:
    print("no log file for this server (its stderr is not a file): read the tags from wherever it logs")
now = running_servers(box, port=engine.port) if engine.port else []  # after the restart: the server running now
log, pgid = (now[0].log_path, now[0].pgid) if now else (engine.log_path, None)
for name, readings in (read_recipes(box, log, added, pgid=pgid).items() if added and log else []):
    print(name, [r.values for r in readings])  # only the lines of the launch running now
"""),
    md("## Revert the probes this notebook added (byte for byte, sha256 checked)\nProbes added from the command line stay; `workbench probe list` shows them."),
    code("""
if revert_at_end:
    reverted = [probes.revert_probe(box, p) for p in reversed(added)]
    print("reverted:", [p.tag for p in reverted], " still recorded:", [p.tag for p in probes.list_probes(box)])
box.close()
"""),
]


CONSOLE = [
    md("""
# Box console

The box and its server in one widget (`workbench.lab.console.BoxConsole`): what runs, start / stop /
restart with an edited command, and one button that puts the box back as found. Tabs:

- **Status**: host, the server's command line, port, health (`GET /health`), uptime, the engine's
  version and root, the other servers running, and, where `nvidia-smi` exists, GPU memory and the
  processes holding it. *At 2 a.m.*: a holder marked **LEFTOVER** is not in the server's process
  group (an orphaned scheduler of an earlier server): it keeps the GPU memory the next start needs.
- **Server**: the launch command (editable). Start / Stop / Restart run the doctor on the exact
  command first; a command it says will not start is refused with its findings (rule, severity,
  message, fix) and nothing is stopped. *Look for*: an error finding before you spend a 20-minute
  load on a command that cannot start. "Launch anyway" appears only after a refusal.
- **Journal**: what this console changed on the box (servers stopped and started, probes, files),
  and **Put the box back**: stops the console's servers, reverts probes, relaunches the server
  found. Closing the kernel does the same.
- **Log**, **Accept length**, **Source**, **Probes**: the log tail, the accept length from the decode
  log, the engine source, the probes (each says so when not installed). On a vLLM server (`engine =
  "vllm"`, or `"auto"` with one running): its `SpecDecoding metrics` lines parsed, the accept length and
  per-position acceptance from its `/metrics` counters, vLLM's probe recipes.

`port = None` takes the only server running; when several run, the Status tab lists their ports:
set `port = 30000` (say) in the parameters cell and run again. Once the console has a server it
stays on its port: if that server exits, the Status tab says so with the end of its log.
"""),
    code("""
host = "local"          # the box: local (the sandbox box), an ~/.ssh/config alias, user@host[:port]
port = None             # the server's port (None: the only one running)
launch_command = None   # what the Server tab offers when no server runs (None: the sandbox box's on `engine`)
engine = "auto"         # "auto" (the running server's), "sglang" or "vllm": the panes read the server's engine
""", tags=("parameters",)),
    code("""
from workbench.lab.console import box_console
from workbench.lab.notebook import shown_as_message

with shown_as_message():  # e.g. a port that is no port number: one line, no traceback
    console = box_console(host=host, port=port, launch_command=launch_command, engine=engine)
console.widget
"""),
]


WALKTHROUGH = [
    md("""
# Walkthrough: from "accept length is 1.00" to a verified fix, one cell at a time

The `diagnose_acceptance` runbook's story as cells you run, read and re-run one by one. Each code
cell is ONE call into the library (`workbench.diagnosis.DiagnosisRun` and its views in
`workbench.lab.walkthrough`): what you see is what the runbook would decide, step by step.

**Terms, once.** The **target** is the model you serve; the **draft** is the small EAGLE-3 model
that proposes the next few tokens, which the target verifies in one forward pass. The draft's input
is the target's **aux hidden states**: hidden states taken at three target layers and concatenated,
so `3 × hidden` wide (21504 on Kimi-K2.5, 3 × 64 on the sandbox). **Accept length** is SGLang's
Σ completion tokens / Σ verify steps: tokens gained per target forward, the bonus token included,
so **1.00 means no proposal is ever accepted**. The **ceiling** is the most one verify step can yield
(`--speculative-num-draft-tokens`, steps + 1 for chain drafting).

**The box is left as found.** Every change (servers stopped and started, probes in the engine
source) is journalled on the box first; the last cell puts everything back, and so does closing
the kernel. Interrupted? `workbench restore --host …` undoes it. Re-running a cell is safe: a step
that ran shows its result again instead of restarting anything, and re-running the start cell
finishes the previous run first.
"""),
    code("""
host = "local"            # the box: "local" (the sandbox box), an ~/.ssh/config alias, user@host[:port]
port = None               # the server's port (None: the only one running; with none running, the launch's --port, else 30000)
launch_command = None     # None: the server running on the box (none running: the sandbox box with --speculative-algorithm EAGLE)
report_dir = "reports"    # where the verdict JSON goes
num_prompts = 4           # prompts measured per server (small: a sandbox run stays short)
max_new_tokens = 64       # tokens generated per prompt
server_start_timeout = 600  # seconds a (re)launch may take to get healthy (a large model: raise it)
""", tags=["parameters"]),
    md("""
## 0. Set up

Checks every parameter above before anything touches the box (a typo such as `num_promts` is
refused here, with what each value must be), and imports the steps.
"""),
    code("""
from workbench.runbook_params import check_runbook_parameters

check_runbook_parameters("diagnose_acceptance", globals(), kernel_namespace=True)

from workbench.lab import walkthrough as walk  # the steps' views: walk.symptom(run), walk.probe_width(run), ...
"""),
    md("""
## 1. The symptom

**This cell** connects to the box, takes the run lock (one diagnosis per box) and opens the journal
(`DiagnosisRun.start`). With `port = None` and several servers running it stops and lists their
ports: set `port = N` in the parameters cell and run again. Re-running this cell finishes the
previous run first (the box put back), then starts a new one.
"""),
    code("""
run = walk.start_run(globals().get("run"), host=host, port=port, launch_command=launch_command, report_dir=report_dir,
                     num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                     server_start_timeout=server_start_timeout)
"""),
    md("""
**This cell** measures the server as found (launching it when none runs): greedy `/generate`
requests one at a time, one warm-up excluded, accept length from the responses' `spec_verify_ct`.

**Look for** the accept length against the ceiling:
- **pinned near 1.00 with no error anywhere**: this tool's fault class. The draft runs but on the
  wrong input (a flag, the aux layers, the token map, its weights): every proposal is rejected.
- **low** (under 45 % of the ceiling): something on the draft's path is wrong, or the draft is weak.
- **not low** (a working EAGLE-3 draft sits at 55-80 % of the ceiling): the hypotheses below still
  run, and a fault found then is *latent* (no measured effect here).
- **the server did not start**: that is the symptom; its log tail is the evidence.
"""),
    code("""
walk.symptom(run)
"""),
    md("""
## 2. What runs, and what the doctor finds on it

**The inventory**: the engine, its version and source location, the server and its exact command
line (the one the run will put back at the end). **Look for** the `--speculative-algorithm` value
and the draft path: is this the launch you think it is?
"""),
    code("""
run.inventory
"""),
    md("""
**The doctor**: every static rule of the catalogue on that command line, read from the box's own
files (both `config.json`, the draft's safetensors headers and token map by byte range, the engine
source). No restart. **Look for** an **error** finding: each names the values it compared and the
file they came from, and a fix. `algorithm-mismatch` (an EAGLE-3 draft launched with `EAGLE`) is the
case this tool was built for: under `EAGLE` the target never captures its aux hidden states.
"""),
    code("""
run.preflight()
"""),
    md("""
## 3. The hypotheses

Every fault family of the catalogue is a hypothesis. **This cell** decides each from the findings
above, without a restart: *confirmed* by an error finding, *refuted* when its rules found nothing,
*inconclusive* when only a warning points at it, its inputs could not be read, or it is out of
static reach (then the table says what would decide it). **Look for** the confirmed rows: those
are the causes, listed in the order they act on a request.
"""),
    code("""
run.check_hypotheses()
"""),
    md("""
**The ledger**: each hypothesis with all its evidence so far (finding, values, source). It grows:
the probe and the fix below add their measurements to it (shown again at step 7).
"""),
    code("""
run.ledger
"""),
    md("""
## 4. Where it happens in the engine's source

The code-path map reads the box's **own** engine files (this version's line numbers, not a
memory of them). **This cell** shows the draft's `fc` width check: EAGLE-3's draft passes its input
through `fc` (3 × hidden → hidden) only when the input is wider than one hidden state. **Look for**
the marked line: with one hidden state instead of three, the condition is false, `fc` is skipped
**silently** (no error, no log line) and the draft runs on features it was never trained on.
"""),
    code("""
walk.engine_line(run, "draft-fc-width-check")
"""),
    md("""
## 5. The probe: what width does the draft really receive?

**This cell** (one restart) adds the `draft-input-width` probe just before that check (and the
recipes of any other suspect), relaunches the server with its own command, sends one request and
reads the probe's line back from that launch's log. The probes stay in for the fix relaunch, so
the fixed server's width is read too; the fix step reverts them (step 7 shows none is left).

**Look for** observed width against expected (`3 × hidden`, the fc's in_features):
- **observed = hidden** (one hidden state): the target captured no aux hidden states; the
  mechanism of the symptom is confirmed.
- **observed = 3 × hidden**: the aux states reach the draft; the width check is not the fault;
  look at the other confirmed or inconclusive hypotheses.
- **nothing printed**: no draft forward reached the check (the log lines say what ran).
"""),
    code("""
walk.probe_width(run)
"""),
    md("""
## 6. The fix: the corrected launch command, relaunched

**This cell** (one restart) derives every fix of the confirmed causes (a launch-command change;
a repaired **copy** of the draft when the checkpoint itself is wrong — never your files), relaunches
with all of them at once, reads the probes on the fixed server, reverts them, and measures. **Look
for** the diff (`--speculative-algorithm - EAGLE + EAGLE3` in the sandbox's case) and the corrected
command: that is what you would put in your own launch script.
"""),
    code("""
walk.apply_fix(run)
"""),
    md("""
## 7. Verification: did accept length come back?

Before against after, from the measurements above (nothing is measured again here).
**Fixed** means: every confirmed cause had its fix applied, accept length rose by at least 1.1×
and is no longer low — near the draft's trained value when you know it (≥ 90 % of it), else at
least 45 % of the ceiling. **Still open** means a fix helped too little or nothing could be fixed:
the open hypotheses and what would decide them are listed. **Look for** the draft input width too:
`hidden` before, `3 × hidden` after, and no probe left on the box.
"""),
    code("""
walk.verification(run)
"""),
    md("The same numbers as a figure: accept length as found and with the fix, the ceiling as a line."),
    code("""
walk.before_after_figure(run)
"""),
    md("The ledger now: the probe's width and the fix's measurement are evidence of their hypotheses."),
    code("""
run.ledger
"""),
    md("""
## 8. Finish: put the box back, write the verdict

**This cell** stops the servers the run started, reverts any probe still in, removes draft copies,
relaunches the server it found (same command line, same log file) and writes
`diagnose_acceptance.json` in `report_dir`: root cause, every hypothesis with its evidence, accept
length before and after, the probe's widths, the fixed command, what was restored. **Look for** the
verdict's path and each restore action. Running it again is fine: it restores again (normally
nothing to do) and rewrites the verdict.
"""),
    code("""
walk.finish(run)
"""),
]


#: every built notebook's metadata (also what ``make lab`` saves committed notebooks with: scripts/lab_config.py)
NOTEBOOK_METADATA = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                     "language_info": {"name": "python"}}


def build(cells, name: str, folder: str = "runbooks") -> Path:
    for i, cell in enumerate(cells):
        cell.id = f"{name[:48]}-{i}"  # stable ids: rebuilding an unchanged notebook changes nothing
    nb = new_notebook(cells=cells)
    nb.metadata.update(copy.deepcopy(NOTEBOOK_METADATA))
    path = ROOT / folder / f"{name}.ipynb"
    path.parent.mkdir(exist_ok=True)
    nbformat.validate(nb)
    nbformat.write(nb, str(path))
    return path


if __name__ == "__main__":
    print(build(DIAGNOSE, "diagnose_acceptance"))
    print(build(PREFLIGHT, "preflight"))
    print(build(MEASURE, "measure_acceptance"))
    print(build(COMPARE, "compare_drafts"))
    print(build(PANEL, "control_panel", folder="notebooks"))
    print(build(ENGINE, "engine_probes", folder="notebooks"))
    print(build(CONSOLE, "box_console", folder="notebooks"))
    print(build(WALKTHROUGH, "walkthrough", folder="notebooks"))
