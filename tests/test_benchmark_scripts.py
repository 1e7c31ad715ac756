"""Every script in ``benchmarks/`` still imports: the library names it uses exist (a renamed or removed function
fails here, not when a reader runs the benchmark the docs point to). Importing runs no benchmark: each script's
work sits behind ``if __name__ == "__main__"``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_a_benchmark_script_imports(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import their helpers (timed_command) by name
    spec = importlib.util.spec_from_file_location(f"benchmark_{script[:-3]}", BENCHMARKS / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)  # an ImportError or NameError at the top level fails here
    assert script == "timed_command.py" or callable(getattr(module, "main", None)), f"{script} has no main()"
