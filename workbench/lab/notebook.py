"""Errors in an interactive notebook shown as their message, without a traceback.

A typed workbench error (:class:`workbench.errors.WorkbenchError`) already says what was wrong and
what to do ("2 SGLang servers run: port 30000 (pid …); port 31555 (pid …). Pick one: set port =
30000 in the parameters cell"); a traceback through the library around it only hides that line.
:func:`shown_as_message` re-raises such an error as :class:`NotebookMessage`, which IPython renders
as its one message (IPython's ``_render_traceback_`` protocol), so the cell still fails — "Run
All" stops there, a papermill run fails with that message — but the user reads one line.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from workbench.errors import WorkbenchError

__all__ = ["IN_PARAMETERS_CELL", "NotebookMessage", "shown_as_message"]

#: How a notebook's user picks a port, for ``how=`` of :func:`workbench.engine.find_engine` /
#: :func:`workbench.engine.choose_server` (``N`` stands for the number).
IN_PARAMETERS_CELL = "port = N in the parameters cell"


class NotebookMessage(WorkbenchError):
    """A typed workbench error, shown in a notebook as ``TypeName: message`` without a traceback.
    ``.error`` is the original exception (its type and attributes, e.g. ``.ports``)."""

    def __init__(self, error: BaseException):
        self.error = error
        super().__init__(str(error))

    def _render_traceback_(self) -> list[str]:
        """The lines IPython shows instead of a traceback (IPython's ``InteractiveShell.showtraceback``
        calls this when the exception defines it)."""
        return [f"{type(self.error).__name__}: {self.error}"]


@contextlib.contextmanager
def shown_as_message(*types: type[BaseException]) -> Iterator[None]:
    """Run the ``with`` body; an exception of ``types`` (default: any
    :class:`~workbench.errors.WorkbenchError`) leaves it as :class:`NotebookMessage`, shown
    without a traceback. Anything else propagates unchanged (a bug keeps its traceback)."""
    catch = types or (WorkbenchError,)
    try:
        yield
    except NotebookMessage:
        raise
    except catch as exc:
        raise NotebookMessage(exc) from None
