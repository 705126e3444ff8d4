"""A session on one box that may change it, and puts it back.

- :mod:`.inventory` — what is on the box before anything changes (engine, version, server, its
  command line, cwd and environment);
- :mod:`.journal` — every change written to a journal on the box first, and :func:`restore_box`,
  which undoes them (also from a later process, after a kill);
- :mod:`.box_session` — :class:`BoxSession`: stop the server found, launch others on its port, restore;
- :mod:`.gpus`, :mod:`.gpu_holders`, :mod:`.gpu_release`, :mod:`.gpu_guard`, :mod:`.box_view` — the box's
  GPUs: the query command, each holder named, a stop's wait for the GPUs' baseline, the check before a
  launch (rendezvous ports, GPUs held, the user's own orphans reclaimed), the box now for ``workbench status``;
- :mod:`.draft_copy` — :func:`make_repaired_copy`: a repaired copy of the draft on the box (the
  ``draft-copy`` kind of fix), journalled, verified by reading it back, removed at the end unless kept.

Used by the diagnosis and by the sweeps. Layering: imports :mod:`remote`, :mod:`workbench.engine`,
:mod:`workbench.report` (HTML tables), :mod:`workbench.checkpoint` (the draft copy's reads),
:mod:`workbench.sandbox_box` and :mod:`workbench.errors`.
"""

from workbench.errors import DiagnosisError, DraftCopyError, JournalError
from workbench.session.box_session import BoxSession, open_box
from workbench.session.draft_copy import (
    DraftCopyPlan,
    RepairedDraft,
    keep_repaired_copy,
    make_repaired_copy,
    plan_repaired_copy,
    remove_repaired_copy,
)
from workbench.session.inventory import Inventory, absolutize, take_inventory
from workbench.session.journal import Journal, RestoreReport, journal_path, restore_box

__all__ = ["BoxSession", "open_box", "Inventory", "absolutize", "take_inventory", "Journal", "RestoreReport",
           "journal_path", "restore_box", "DiagnosisError", "JournalError", "DraftCopyError", "DraftCopyPlan",
           "RepairedDraft", "make_repaired_copy", "plan_repaired_copy", "keep_repaired_copy", "remove_repaired_copy"]
