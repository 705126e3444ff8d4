"""eagle-workbench: diagnose EAGLE / EAGLE-3 speculative decoding on SGLang boxes.

Kept import-free so that `python -m workbench.sandbox.launch_server` loads nothing else.
"""
