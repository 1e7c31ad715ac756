"""A run resolves its task, method and model once (issue 35: "nothing looks a name up twice"): the options keep what
they resolved when a run derives new options from them, and a whole fill-in-the-blank run through the CLI looks each
name up a bounded number of times, not once per layer it passes through."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import queerbench.methods.registry as methods
import queerbench.models.registry as models
import queerbench.run.options as run_options
import queerbench.tasks as tasks
from queerbench.cli import main
from queerbench.run.options import RunOptions
from tests.tiny_models import tiny_bert


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


def test_new_options_keep_what_did_not_change_and_resolve_what_did(model: Path) -> None:
    options = RunOptions(model=str(model), limit=2, toxicity="none")
    task, ref, method = options.task, options.ref, options.method_impl
    assert options.with_fields(limit=2) is options  # nothing changed: the same options

    fewer = options.with_fields(limit=1)
    assert fewer.limit == 1
    assert fewer.ref is ref and fewer.method_impl is method and fewer.task.name == task.name

    resolved = options.with_fields(method="mlm")
    assert resolved.method == "mlm" and resolved.method_impl.name == "mlm"
    assert resolved.ref is ref and resolved.task.name == task.name

    other_task = options.with_fields(config="queergen")
    assert other_task.task.name == "queergen" and other_task.task is not task
    assert other_task.mlm_mode == str(other_task.task.spec.mlm_mode)

    other_revision = options.with_fields(revision="main")
    assert other_revision.revision == "main" and other_revision.ref.revision == "main"
    assert other_revision.ref is not ref


def test_new_options_are_checked_again(model: Path) -> None:
    options = RunOptions(model=str(model), toxicity="none")
    with pytest.raises(ValueError, match=r"^--top-k must be a positive integer, got 0$"):
        options.with_fields(top_k=0)


def test_a_run_looks_each_name_up_a_bounded_number_of_times(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One tiny-BERT run from the command line: the task by name at most 3 times (the CLI's dispatch and once per
    set of options), the model reference at most 3 times (a names-only check per set of options, and once with its
    paths), the method by name at most 6 times (resolving ``auto``, the options' method, and the reads of the run's
    key and predictions table, which name their method)."""
    counts: Counter[str] = Counter()

    def counted(name: str, function):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return wrapper

    originals = {"get_task": tasks.get_task, "model_ref": models.model_ref, "get_method": methods.get_method}
    for module in (tasks, run_options):
        monkeypatch.setattr(module, "get_task", counted("get_task", originals["get_task"]))
    for module in (models, methods, run_options):
        monkeypatch.setattr(module, "model_ref", counted("model_ref", originals["model_ref"]))
    for module in (methods, run_options):
        monkeypatch.setattr(module, "get_method", counted("get_method", originals["get_method"]))

    out = tmp_path / "run"
    assert main(["run", "--model", str(model), "--limit", "2", "--toxicity", "none", "--out", str(out)]) == 0
    assert (out / "scores.json").is_file()
    assert counts["get_task"] <= 3, counts
    assert counts["model_ref"] <= 3, counts
    assert counts["get_method"] <= 6, counts  # 17 before: once per layer and per registered method


def test_a_field_options_do_not_have_is_a_type_error(model: Path) -> None:
    options = RunOptions(model=str(model), toxicity="none")
    with pytest.raises(TypeError, match=r"^RunOptions has no field"):
        options.with_fields(ref=options.ref)
