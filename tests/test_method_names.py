"""Generic code asks the method registry what a method does instead of comparing its name (issue 35): the
properties each method declares, the methods a model kind runs (the eval's part order), how a stored run's method
shows in a comparison, the Hub task type of a card's rows, the reply cache of an eval part, and the check of what a
task declares of the methods, made where a task meets the method registry."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.methods.base import Method
from queerbench.methods.registry import (
    _REGISTRY,
    check_task_spec,
    get_method,
    in_label,
    model_methods,
    recorded_method,
    registered,
)
from queerbench.models.registry import model_ref
from queerbench.results import eval as eval_module
from queerbench.results.card import model_index
from queerbench.results.compare import _labelled, compare_labels
from queerbench.results.eval import EvalPart, EvalSettings, plan_eval
from queerbench.tasks import load_specs
from tests.tiny_models import tiny_bert, tiny_llama

TINY = Path(__file__).parent / "data" / "tiny_task"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "bert": tiny_bert(root),
        "llama": tiny_llama(root),
        "plain": tiny_llama(root, name="tiny-llama-plain", chat_template=False),
    }


# ------------------------------------------------------------------------------------- what each method declares
def test_each_method_declares_what_generic_code_asked_of_its_name() -> None:
    """The properties that replace the name comparisons agree with what the names meant: only the masked-LM method
    fills a mask on the Hub, is outside the run key and is not generative; only the chat method needs a chat and
    takes a prompt."""
    declared = {
        name: (m.hub_task, m.in_key, m.generative, m.needs_chat, m.takes_prompt) for name, m in _REGISTRY.items()
    }
    assert declared == {
        "mlm": ("fill-mask", False, False, False, False),
        "scored": ("text-generation", True, True, False, False),
        "instructed": ("text-generation", True, True, True, True),
    }
    assert Method.hub_task == "text-generation"  # what a method this version does not know is on a card


def test_a_stored_runs_method_is_read_without_refusing_an_unknown_one() -> None:
    assert registered(None) is None and registered("vibes") is None and registered("auto") is None
    assert registered("scored") is get_method("scored")
    assert recorded_method(None) == get_method("auto").name == "mlm" and recorded_method("scored") == "scored"
    assert [in_label(m) for m in (None, "mlm", "scored", "instructed", "vibes")] == [False, False, True, True, True]


# ------------------------------------------------------------------------------- the methods of a model kind
def test_the_methods_of_each_model_kind_come_from_the_backends_in_the_eval_order(models: dict[str, Path]) -> None:
    """A masked LM runs mlm; a causal LM scored, and instructed when it has a chat template; an endpoint its chat
    route first (instructed), then its completions route (scored): the order of the eval's parts and folders."""

    def methods(model: Path | str, endpoint: str | None = None) -> list[str]:
        return eval_module._model_methods(EvalSettings(model=str(model), endpoint=endpoint))[0]

    assert methods(models["bert"]) == ["mlm"]
    assert methods(models["llama"]) == ["scored", "instructed"]
    assert methods(models["plain"]) == ["scored"]
    assert methods("gpt-4o-mini", "http://127.0.0.1:9/v1") == ["instructed", "scored"]
    ref = model_ref(str(models["llama"]))
    assert model_methods(ref, False) == ("scored",) and model_methods(ref, True) == ("scored", "instructed")


def test_a_masked_lm_never_reads_a_tokenizer_for_a_chat(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a method that needs a chat asks the model for one (a masked LM's backend has none)."""
    ref = model_ref(str(models["bert"]))
    monkeypatch.setattr(type(ref), "has_chat_template", lambda self: pytest.fail("asked for a chat template"))
    assert model_methods(ref) == ("mlm",)


# ------------------------------------------------------------------------------------- results across runs
def _run(method: str | None, k: int = 5) -> dict:
    meta = {"model": "org/m", "n_sentences": 4} | ({"method": method} if method is not None else {})
    scores = {"config": "default", "k": k, "n": {"queer": 1}, "queerbench": {"queer": 1.0}}
    return {"scores": scores, "meta": meta, "dir": f"/r/{method}"}


def test_a_comparison_labels_a_method_only_when_it_is_in_the_run_key() -> None:
    labels = compare_labels([_run(None, 1), _run("mlm", 2), _run("scored"), _run("instructed", 3)])
    assert labels == [
        "org/m · default · top-1",
        "org/m · default · top-2",
        "org/m · default · top-5 · scored",
        "org/m · default · top-3 · instructed",
    ]
    handed = _labelled([_run(None), _run("mlm"), _run("instructed")])
    assert [r["method_in_label"] for r in handed] == [False, False, True]


def test_queergens_columns_show_the_method_as_the_registry_says() -> None:
    """QueerGen's side-by-side columns, through the comparison: a masked-LM run's column is the model alone."""
    from queerbench.tasks.queergen.compare import _column_keys

    runs = [_run("mlm"), _run("instructed", 1)]
    assert _column_keys(_labelled(runs)) == ["org/m", "org/m · instructed"]


def test_the_cards_hub_task_type_is_the_methods() -> None:
    row = {
        "task": "default",
        "benchmark": "QueerBench",
        "model": "org/m",
        "k": 5,
        "toxicity": "none",
        "scores": {"queer": 1.0},
        "metric": "QueerBench score",
        "signature": "s",
    }
    rows = [{**row, "method": m} for m in ("mlm", "scored", "instructed", "vibes")]
    index = model_index({"model": "org/m", "rows": rows})
    types = {m["type"]: r["task"]["type"] for r in index[0]["results"] for m in r["metrics"]}
    assert types == {
        "default_mlm_k5_queer": "fill-mask",
        "default_scored_k5_queer": "text-generation",
        "default_instructed_k5_queer": "text-generation",
        "default_vibes_k5_queer": "text-generation",  # a method this version does not know
    }


def test_an_eval_part_keeps_a_reply_cache_only_for_a_generative_method(models: dict[str, Path], tmp_path: Path) -> None:
    settings = EvalSettings(model=str(models["llama"]), toxicity="none")
    scored = eval_module._part_options(EvalPart("default", "scored", "default-scored"), settings, tmp_path)
    assert scored.reply_cache == str(tmp_path / "replies.sqlite")
    masked = EvalSettings(model=str(models["bert"]), toxicity="none")
    mlm = eval_module._part_options(EvalPart("default", "mlm", "default-mlm"), masked, tmp_path)
    assert mlm.reply_cache is None


# ------------------------------------------------------------------------- a task's methods, checked by the registry
VIBES = {"methods": ["mlm", "vibes"], "requests": {"mlm": "fill_mask", "vibes": "generate"}}
"""A task naming a method no registry knows (with the request type it would ask, as every method declares)."""


def _tiny(folder: Path, change: dict) -> Path:
    shutil.copytree(TINY, folder)
    spec = json.loads((folder / "tiny_tasks.json").read_text())
    spec["tasks"][0].update(change)
    (folder / "tiny_tasks.json").write_text(json.dumps(spec))
    return folder


def test_a_task_naming_an_unknown_method_is_one_line_naming_the_task_and_the_method(tmp_path: Path) -> None:
    spec = next(iter(load_specs(_tiny(tmp_path / "t", VIBES) / "tiny_tasks.json").values()))
    assert spec.methods == ("mlm", "vibes")  # the task layer knows no method: it takes any name
    with pytest.raises(ValueError) as caught:
        check_task_spec(spec)
    said = str(caught.value)
    assert said.startswith("task 'tiny': 'methods' must name some of mlm, scored, instructed")
    assert "unknown: vibes" in said and "\n" not in said


def test_a_prompt_on_a_pass_whose_method_takes_none_is_refused(tmp_path: Path) -> None:
    passes = [{"method": "mlm", "prompt": "queergen-2"}]
    spec = next(iter(load_specs(_tiny(tmp_path / "t", {"eval_passes": passes}) / "tiny_tasks.json").values()))
    with pytest.raises(ValueError, match=r"^task 'tiny': eval_passes\[0\]: 'prompt' names the prompt id of an "):
        check_task_spec(spec)
    fine = copy.deepcopy(passes)
    fine[0]["method"] = "instructed"
    spec = next(iter(load_specs(_tiny(tmp_path / "u", {"eval_passes": fine}) / "tiny_tasks.json").values()))
    check_task_spec(spec)


def test_the_eval_checks_its_tasks_methods_before_it_looks_at_the_model(
    fresh_registry: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = _tiny(tmp_path / "tiny", VIBES)
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(folder))
    with pytest.raises(ValueError, match=r"^task 'tiny': 'methods' must name some of .*unknown: vibes\)$"):
        plan_eval(EvalSettings(model=str(tmp_path / "no-such-model"), tasks=("tiny",)))


def test_queergens_published_methods_are_among_its_tasks_methods() -> None:
    from queerbench.tasks.queergen.spec import QueerGenSpecError, _task_methods, _validate, spec

    raw = copy.deepcopy(spec())
    assert set(raw["model_methods"].values()) <= set(_task_methods())
    raw["model_methods"][next(iter(raw["model_methods"]))] = "vibes"
    with pytest.raises(QueerGenSpecError, match="model_methods must give each model of model_labels one of the"):
        _validate(raw)


# ----------------------------------------------------------- a new method, handled by the generic code unedited
def _registry_with(monkeypatch: pytest.MonkeyPatch, *methods: Method) -> None:
    """The method registry with ``methods`` registered too (the module's registry is restored after the test)."""
    from queerbench.methods import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    for method in methods:
        registry.register(method)


def _method(name: str, **declared: Any) -> Method:
    return Method(
        name, default_model="org/m", backends={"causal_lm": "queerbench.methods.mlm:MaskedLMPredictor"}, **declared
    )


def _predictions(method: str | None) -> pd.DataFrame:
    row = {
        "id": "s1",
        "tokens": ["hero"],
        "group": "queer",
        "category": "c",
        "subject": "s",
        "template_id": 1,
        "masked_sentence": "The person is [MASK].",
        "neutral_sentence": "The person is [MASK].",
    }
    return pd.DataFrame([row | ({"method": method} if method is not None else {})])


def _scores_document(method: str | None) -> dict:
    run = {"model": "org/m", "limit": None, "signature": "task:default"} | ({"method": method} if method else {})
    return {
        "config": "default",
        "k": 5,
        "queerbench": {"queer": 1.0},
        "n": {"queer": 4},
        "scorers": {"toxicity": {"name": "precomputed"}},
        "signature": "task:default",
        "run": run,
    }


def test_the_method_of_runs_that_name_none_is_the_one_that_declares_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stored run, run key or predictions table that names no method was made by the method declaring
    ``predates_methods`` (today mlm); the generic readers follow the declaration, not a name they write."""
    from queerbench.methods.registry import unrecorded_method
    from queerbench.results.folders import run_row
    from queerbench.run.scores import method_of
    from queerbench.run.signature import Signature

    assert unrecorded_method() is get_method("mlm") is get_method("auto")
    assert run_row(tmp_path, _scores_document(None)).method == "mlm"
    assert Signature.from_key({"config": "default", "model": "org/m", "top_k": 5}).method == "mlm"
    assert method_of(_predictions(None)) is get_method("mlm")
    # another method declared as the one of the old runs: every reader follows, none is edited
    old = _method("fill", predates_methods=True)
    _registry_with(
        monkeypatch, Method("mlm", default_model="bert-base-uncased", backends=dict(get_method("mlm").backends)), old
    )
    assert unrecorded_method() is old and get_method("auto") is old and recorded_method(None) == "fill"
    assert run_row(tmp_path, _scores_document(None)).method == "fill"
    assert Signature.from_key({"config": "default", "model": "org/m", "top_k": 5}).method == "fill"
    assert method_of(_predictions(None)) is old


def test_only_one_method_can_be_the_method_of_runs_that_name_none(monkeypatch: pytest.MonkeyPatch) -> None:
    from queerbench.methods.registry import register

    _registry_with(monkeypatch)
    with pytest.raises(ValueError) as caught:
        register(_method("fill", predates_methods=True))
    said = str(caught.value)
    assert said.startswith("method 'fill': predates_methods=True, but 'mlm' already is") and "\n" not in said
    register(get_method("mlm"))  # the same method again replaces itself


def test_a_newly_registered_method_is_read_and_keyed_by_what_it_declares(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A method registered with one ``register`` call goes through the readers of the generic code with no edit
    there: its predictions table is checked and read as its, its run key carries its key fields and names it in the
    folder as its declarations say, and a stored run's row shows it."""
    from queerbench.results.folders import run_row
    from queerbench.run.scores import check_predictions_table, method_of
    from queerbench.run.signature import Signature

    keyed = _method("vibes", key_fields=("endpoint",), generative=True)
    quiet = _method("hush")  # no key fields: outside the run key, like the masked-LM method
    _registry_with(monkeypatch, keyed, quiet)
    for method in (keyed, quiet):
        check_predictions_table(_predictions(method.name), "p.parquet", "fix it")
        assert method_of(_predictions(method.name)) is method
        assert run_row(tmp_path, _scores_document(method.name)).method == method.name
    with pytest.raises(
        ValueError, match=r"column method is 'auto'; expected one of mlm, scored, instructed, vibes, hush;"
    ):
        check_predictions_table(_predictions("auto"), "p.parquet", "fix it")

    record = {"config": "default", "model": "org/m", "top_k": 5, "method": "vibes", "endpoint": "http://h/v1"}
    key = Signature.from_key(record)
    assert key.method == "vibes" and dict(key.settings) == {"endpoint": "http://h/v1"}
    assert key.folder_name() == "org_m-default-k5-vibes"
    hushed = Signature.from_key({**record, "method": "hush"})
    assert hushed.settings == () and hushed.folder_name() == "org_m-default-k5"


def test_a_figures_label_shows_a_method_as_the_registry_says_handed_down_by_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reporting sits below the methods: the run hands it ``method_in_label`` (the registry's :func:`in_label`), so a
    new method's label follows its declarations (in the run key: shown) with no edit in reporting; a caller that
    hands no flag shows any method the metadata records."""
    from queerbench.reporting.figures import run_label

    _registry_with(monkeypatch, _method("vibes", key_fields=("endpoint",), generative=True), _method("hush"))
    scores = {"config": "default", "k": 5}

    def label(method: str) -> str:  # as the run hands a run's metadata to the figures and the report
        return run_label({"model": "org/m", "method": method, "method_in_label": in_label(method)}, scores)

    assert [label(m) for m in ("vibes", "hush", "mlm", "scored", "instructed")] == [
        "org/m · default config · top-5 · vibes",
        "org/m · default config · top-5",
        "org/m · default config · top-5",
        "org/m · default config · top-5 · scored",
        "org/m · default config · top-5 · instructed",
    ]
    assert run_label({"model": "org/m", "method": "hush"}, scores) == "org/m · default config · top-5 · hush"
    assert run_label({"model": "org/m"}, scores) == "org/m · default config · top-5"
    assert run_label(None, scores) == "default config · top-5"


def test_auto_picks_the_method_that_claims_the_models_first_backend(
    monkeypatch: pytest.MonkeyPatch, models: dict[str, Path]
) -> None:
    """``--method auto`` (the CLI and the Space) reads which method claims a backend from the methods' declarations
    (``auto_on``), not from names in the resolver: a masked LM gets mlm, a causal LM scored, an endpoint instructed
    (its chat route comes first); a method registered for a backend nobody claims is picked there with no edit."""
    from queerbench.hub.space.models import ModelCheck
    from queerbench.methods.registry import auto_method, resolve_method

    assert resolve_method("auto", str(models["bert"]), None) == "mlm"
    assert resolve_method("auto", str(models["llama"]), None) == "scored"
    assert resolve_method("auto", "gpt-4o-mini", "http://127.0.0.1:9/v1") == "instructed"
    assert resolve_method("auto", None, None) == "scored"  # the embedded default is a causal LM
    assert (
        ModelCheck("m", "hub", None, None, None, "causal").method,
        ModelCheck("m", "hub", None, None, None).method,
    ) == (
        "scored",
        "mlm",
    )
    with pytest.raises(ValueError) as caught:
        auto_method(("completions_endpoint",))
    assert str(caught.value) == "no method runs on completions_endpoint by default; choose --method"
    _registry_with(monkeypatch, _method("echo", auto_on=("completions_endpoint",)))
    assert auto_method(("completions_endpoint",)) == "echo" and auto_method(("chat_endpoint",)) == "instructed"


def test_a_run_asks_every_method_to_check_the_settings_it_owns(monkeypatch: pytest.MonkeyPatch) -> None:
    """RunOptions names no method's settings: each registered method checks its own key fields (``seed`` here)."""
    from queerbench.run.options import RunOptions

    seen: list[dict[str, Any]] = []

    class Fussy(Method):
        def check_settings(self, settings: dict[str, Any]) -> None:
            seen.append(settings)
            if settings["seed"] == 13:
                raise ValueError("--seed 13 is unlucky for the fussy method; choose another")

    _registry_with(monkeypatch, Fussy("fussy", "org/m", {"causal_lm": "x:Y"}, key_fields=("seed",)))
    RunOptions(model="bert-base-uncased", seed=5)
    assert seen == [{"seed": 5}]
    with pytest.raises(ValueError, match=r"^--seed 13 is unlucky"):
        RunOptions(model="bert-base-uncased", seed=13)  # the mlm run's options: the fussy method still checks
    with pytest.raises(ValueError, match=r"^unknown prompt id 'nope' \(--prompt\)"):
        RunOptions(model="bert-base-uncased", method_settings={"prompt_id": "nope"})  # instructed's own check
