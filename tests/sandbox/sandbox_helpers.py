"""Names for the sandbox tests: the committed model dirs, the launch command, and the
``models_present`` fixture. The servers are ``testkit.sandbox_servers``, through the fixtures of
``tests/conftest.py``: ``sandbox_server`` (shared) and ``own_sandbox_server``."""

from __future__ import annotations

import pytest

from testkit.sandbox_servers import (  # noqa: F401  (re-exported for the sandbox tests)
    CONTROL,
    DRAFT,
    MODELS,
    ROOT,
    SPEC_FLAGS,
    TARGET,
    launch_argv,
    models_missing_reason,
)


@pytest.fixture(scope="session")
def models_present() -> None:
    reason = models_missing_reason()
    if reason:
        pytest.skip(reason)
