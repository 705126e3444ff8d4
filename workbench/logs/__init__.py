"""SGLang server logs (temporary: the module moved to :mod:`workbench.logs.scanner` whole; the
next commit splits it by what it does). Every name ``from workbench.logs import X`` used stays
importable from here."""

from workbench.logs.scanner import *  # noqa: F401,F403
from workbench.logs.scanner import __all__  # noqa: F401
from workbench.logs.scanner import _Block, _numbers, _numbers_d_dd, _numbers_f2, _numbers_int  # noqa: F401
