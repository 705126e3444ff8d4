"""pytest fixtures for tests/sandbox (helpers live in sandbox_helpers.py)."""

from sandbox_helpers import models_present  # noqa: F401  (fixture re-export)
