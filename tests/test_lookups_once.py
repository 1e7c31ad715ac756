"""A run looks its task, its method and its model up once (issue 35: "nothing looks a name up twice"): counted on
whole `queerbench run` commands, a fill-in-the-blank run and a request run, and on the options a run derives."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from queerbench.cli import main
from queerbench.run.options import RunOptions
from queerbench.run.pipeline import run_benchmark  # noqa: F401 - loaded before the lookups are counted
from queerbench.run.requests import run_requests  # noqa: F401 - likewise
from tests.tiny_models import tiny_bert

FAST = ["--limit", "1", "--bootstrap", "20", "--permutations", "20"]


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """Every lookup of a task, a method or a model reference by name, counted as ``(function, name)``, wherever the
    library imported the function; and every :class:`ModelRef` made, as ``("ModelRef", name)``."""
    import queerbench.methods.registry as methods
    import queerbench.models.registry as models
    import queerbench.tasks as tasks
    from queerbench.models.registry import ModelRef

    counted: Counter[tuple[str, str]] = Counter()

    def counting(label: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def lookup(name: Any = None, *args: Any, **kwargs: Any) -> Any:
            counted[(label, str(name))] += 1
            return real(name, *args, **kwargs)

        return lookup

    for home, label in ((tasks, "get_task"), (methods, "get_method"), (models, "model_ref")):
        real = getattr(home, label)
        wrapped = counting(label, real)
        for module in list(sys.modules.values()):
            if (module.__name__ or "").startswith("queerbench") and getattr(module, label, None) is real:
                monkeypatch.setattr(module, label, wrapped)
    real_init = ModelRef.__init__

    def made(self: ModelRef, name: str, *args: Any, **kwargs: Any) -> None:
        counted[("ModelRef", name)] += 1
        real_init(self, name, *args, **kwargs)

    monkeypatch.setattr(ModelRef, "__init__", made)
    return counted


def _once_each(counted: Counter[tuple[str, str]]) -> None:
    assert counted, "nothing was counted: the lookups are no longer made where the fixture patches them"
    twice = {key: n for key, n in counted.items() if n > 1}
    assert not twice, f"looked up more than once: {twice}"


def test_a_fill_in_the_blank_run_looks_up_its_task_method_and_model_once(
    tmp_path: Path, lookups: Counter[tuple[str, str]]
) -> None:
    model = str(tiny_bert(tmp_path))
    lookups.clear()
    assert main(["run", "--model", model, "--toxicity", "none", *FAST, "--out", str(tmp_path / "auto")]) == 0
    _once_each(lookups)
    assert lookups[("get_task", "default")] == 1 and lookups[("model_ref", model)] == 1
    assert lookups[("get_method", "mlm")] == 1  # auto resolved to it, looked up once
    lookups.clear()
    args = ["run", "--model", model, "--method", "mlm", "--config", "paper", "--toxicity", "none", *FAST]
    assert main([*args, "--out", str(tmp_path / "mlm")]) == 0
    _once_each(lookups)
    assert lookups[("ModelRef", model)] == 1


def test_a_request_run_looks_up_its_task_and_model_once(tmp_path: Path, lookups: Counter[tuple[str, str]]) -> None:
    model = str(tiny_bert(tmp_path))
    lookups.clear()
    assert main(["run", "--config", "misgendered", "--model", model, *FAST, "--out", str(tmp_path / "run")]) == 0
    _once_each(lookups)
    assert lookups[("get_task", "misgendered")] == 1 and lookups[("ModelRef", model)] == 1


def test_options_derived_for_a_run_keep_what_was_looked_up(tmp_path: Path, lookups: Counter[tuple[str, str]]) -> None:
    model, other = str(tiny_bert(tmp_path)), str(tiny_bert(tmp_path, name="other-bert"))
    options = RunOptions(model=model, limit=99, toxicity="none")
    task, ref = options.task, options.ref
    lookups.clear()
    resolved = options.with_fields(method="mlm", limit=None)  # what a run derives once `auto` is resolved
    assert resolved.task is task and resolved.ref is ref and resolved.method == "mlm" and resolved.limit is None
    assert lookups == Counter({("get_method", "mlm"): 1})  # the changed field's lookup, nothing else
    moved = resolved.with_fields(model=other)
    assert moved.ref.name == other and moved.ref is not ref and moved.task is task
    assert moved.method_impl is resolved.method_impl
    with pytest.raises(ValueError, match="unknown config 'nope'"):
        resolved.with_fields(config="nope")  # a changed field is looked up again, and checked again
    with pytest.raises(ValueError, match="--top-k must be a positive integer"):
        resolved.with_fields(top_k=0)  # every check is made again
    assert RunOptions.for_task(task, model=model).task is task
    explicit = RunOptions(model=model, method="mlm", limit=99, toxicity="none")
    explicit.method_impl  # noqa: B018 - looked up
    lookups.clear()
    assert explicit.with_fields(method="mlm", limit=None).method_impl is explicit.method_impl
    assert lookups == Counter()  # a field passed with the value it has is no change
