"""The metric passes ``evaluate``'s own module check, the one every module in the ``evaluate`` repository passes.

This is ``LocalModuleTest.test_load`` of ``tests/test_metric_common.py`` in huggingface/evaluate, run on our folder:
the module is imported through ``evaluation_module_factory`` (as ``evaluate.load`` does), ``_compute`` may not take
``**kwargs``, and the docstring examples are run as doctests with ``raise_on_error=True`` (each must print what it
shows) with ``evaluate.load`` pointed at the local folder; more than one example must run. On top, every config the
module accepts must have an example that loads it.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import re
from pathlib import Path
from unittest.mock import patch

import evaluate
import pytest

METRIC_DIR = Path(__file__).resolve().parents[1] / "metric_queerbench"


@pytest.fixture(scope="module")
def metric_module():
    factory = evaluate.loading.evaluation_module_factory(str(METRIC_DIR), module_type="measurement")
    return importlib.import_module(factory.module_path)


def test_compute_takes_no_var_keyword(metric_module):
    main_class = evaluate.loading.import_main_class(metric_module.__name__)
    parameters = inspect.signature(main_class._compute).parameters
    assert all(p.kind != p.VAR_KEYWORD for p in parameters.values()), list(parameters)


def test_docstring_examples_run_as_evaluate_runs_them(metric_module):
    real_load = evaluate.load
    loaded: list[str] = []

    def load_local(name, *args, **kwargs):
        assert name == METRIC_DIR.name, f"the examples must load {METRIC_DIR.name!r}, not {name!r}"
        loaded.append(args[0] if args else kwargs.get("config_name", "default"))
        return real_load(str(METRIC_DIR), *args, **kwargs)

    doctest.ELLIPSIS_MARKER = "[...]"
    try:
        with patch("evaluate.load") as mock_load:
            mock_load.side_effect = load_local
            try:
                results = doctest.testmod(metric_module, verbose=False, raise_on_error=True)
            except doctest.UnexpectedException as exc:
                raise exc.exc_info[1] from None  # the exception the example raised
            except doctest.DocTestFailure as exc:
                pytest.fail(
                    f"example {exc.example.source!r} printed {exc.got!r}, its docstring shows {exc.example.want!r}"
                )
    finally:
        doctest.ELLIPSIS_MARKER = "..."
    assert results.failed == 0 and results.attempted > 1
    assert set(loaded) == set(metric_module.CONFIGS), (
        f"configs without a runnable example: {set(metric_module.CONFIGS) - set(loaded)}"
    )


def test_every_config_has_an_example_in_the_docstring(metric_module):
    shown = set(re.findall(r'evaluate\.load\("metric_queerbench", "(\w+)"', metric_module._KWARGS_DESCRIPTION))
    for config in metric_module.CONFIGS:
        assert config in shown, f"config {config!r} has no example in the metric's docstring"
