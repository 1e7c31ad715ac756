"""The serving engine and harness some tests run against (llama.cpp's server, lm-evaluation-harness): neither is a
dependency of queerbench, so ``pip install -e ".[test,space,scm]"`` does not bring them. ``.ci/engines.sh`` installs
both (llama.cpp as a portable build, see docs/engines.md). Without one, its tests skip with that reason on a
developer's machine (docs/testing.md says so) and fail in CI (``CI`` set), which must run them."""

from __future__ import annotations

import importlib.util
import os

import pytest

__all__ = ["need_engine"]


def need_engine(module: str, what: str) -> None:
    """Skip (locally) or fail (in CI) the calling test when the engine's ``module`` cannot be imported."""
    if importlib.util.find_spec(module) is not None:
        return
    reason = f"{what} is not installed: run `. .ci/engines.sh` (see docs/testing.md)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
