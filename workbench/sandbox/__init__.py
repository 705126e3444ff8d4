"""The embedded default box: a tiny target, a trained EAGLE-3 draft, an SGLang-compatible server.

Imports neither `remote` nor the diagnosis (it stands in for SGLang, which knows nothing of this tool).
"""

__version__ = "0.5.23+sandbox"
