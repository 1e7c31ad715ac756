"""The SCM pipeline on the local runner, with tiny random causal LMs (tests/tiny_models.py, chat and plain)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pandas as pd
import pytest

from queerbench.models.generation import GenerationSettings, ResponseCache, TransformersRunner, collect
from queerbench.tasks.scm.analysis import analyze, parse_frame
from queerbench.tasks.scm.dataset import scm_splits, select_rows
from queerbench.tasks.scm.pipeline import constrained_scores
from tests.scm_runs import local_backend, option_logps, run_scm
from tests.tiny_models import tiny_gpt2, tiny_llama


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> str:
    return str(tiny_llama(tmp_path_factory.mktemp("chat"), chat_template=True))


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory) -> str:
    return str(tiny_llama(tmp_path_factory.mktemp("plain"), chat_template=False))


class _CountingRunner:
    """Wraps a runner and counts the prompts it is asked to generate for."""

    def __init__(self, inner: TransformersRunner) -> None:
        self.inner, self.name, self.generated = inner, inner.name, 0

    def fingerprint(self) -> dict:
        return self.inner.fingerprint()

    def generate(self, prompts, seeds, settings):
        for i, reply in self.inner.generate(prompts, seeds, settings):
            self.generated += 1
            yield i, reply


def test_chat_runner_samples_caches_and_resumes(chat_model, tmp_path) -> None:
    runner = _CountingRunner(TransformersRunner(chat_model))
    assert runner.inner.prompt_format == "chat"
    assert runner.inner.format_prompt("hi").startswith("<|user|>hi")
    rows = select_rows(scm_splits()["generation"], 3)
    settings = GenerationSettings(samples=2, max_new_tokens=5, batch_size=2, temperature=1.0)
    cache = ResponseCache(tmp_path / "c.sqlite")
    first = collect(runner, rows.head(2), settings, cache)  # a "killed" run that only got 2 prompts
    assert runner.generated == 4 and (first["status"] == "ok").all()
    full = collect(runner, rows, settings, cache)
    assert runner.generated == 6  # only the missing prompt × 2 samples
    assert full["cached"].sum() == 4 and len(full) == 6
    assert set(full["prompt_format"]) == {"chat"}
    again = collect(runner, rows, settings, cache)
    assert runner.generated == 6 and again["response"].tolist() == full["response"].tolist()
    cache.close()
    # same seed, fresh cache → the same samples (one generator per row, seeded by the row)
    other = collect(TransformersRunner(chat_model), rows, settings, ResponseCache(tmp_path / "d.sqlite"))
    assert other["response"].tolist() == full["response"].tolist()


def test_plain_fallback_warns_and_is_recorded(plain_model, tmp_path) -> None:
    with pytest.warns(UserWarning, match="no chat template"):
        runner = TransformersRunner(plain_model)
    assert runner.prompt_format == "plain" and runner.format_prompt("hi") == "hi\n"
    frame = collect(
        runner,
        select_rows(scm_splits()["survey"], 2),
        GenerationSettings(max_new_tokens=3),
        ResponseCache(tmp_path / "c.sqlite"),
    )
    assert set(frame["prompt_format"]) == {"plain"}
    assert all(json.loads(m)["prompt_format"] == "plain" for m in frame["meta"])


def test_constrained_scores_are_distributions_matching_direct_logprobs(chat_model) -> None:
    import torch

    runner = TransformersRunner(chat_model)
    rows = scm_splits()["survey"]
    rows = pd.concat([rows[rows["task"] == "rating"].head(2), rows[rows["task"] == "selection"].head(1)])
    scores = constrained_scores(local_backend(runner, batch_size=3), rows)
    assert len(scores) == 3
    for probs in scores["probs"]:
        assert math.isclose(sum(probs), 1.0, rel_tol=1e-6) and all(p > 0 for p in probs)
    r0 = scores.iloc[0]
    assert 1 <= r0["expected_rating"] <= 5
    assert math.isclose(r0["expected_rating"], sum((i + 1) * p for i, p in enumerate(r0["probs"])), rel_tol=1e-9)
    sel = scores[scores["task"] == "selection"].iloc[0]
    assert len(sel["probs"]) == 22 and math.isclose(sel["p_warmth"] + sel["p_competence"], 1.0)
    # the batched scorer (the backend's loglikelihood) equals an unpadded forward pass on one option
    ctx = runner.format_prompt(rows.iloc[0]["prompt"]) + "Rating:"
    ids = (
        runner.tokenizer(ctx, add_special_tokens=False)["input_ids"]
        + runner.tokenizer(" 3", add_special_tokens=False)["input_ids"]
    )
    n_cont = len(runner.tokenizer(" 3", add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(runner.model(torch.tensor([ids])).logits[0, :-1], -1)
    direct = sum(float(logp[len(ids) - n_cont - 1 + k, ids[len(ids) - n_cont + k]]) for k in range(n_cont))
    batched = option_logps(runner, [rows.iloc[0]["prompt"]], [["1", "3", "warm"]], "Rating:", batch_size=3)[0][1]
    assert math.isclose(direct, batched, rel_tol=1e-4, abs_tol=1e-4)


class _FakeMapper:
    def map_words(self, words):
        from queerbench.tasks.scm.axes import AxisLabel

        return {w: AxisLabel(w.startswith("k"), w.startswith("s"), "test") for w in words}


def test_run_scm_writes_all_outputs_and_rerun_is_free(chat_model, tmp_path) -> None:
    settings = GenerationSettings(max_new_tokens=4, batch_size=4)
    res = run_scm(
        tmp_path / "out", model=chat_model, settings=settings, limit=6, mapper_factory=_FakeMapper, log=lambda m: None
    )
    out = tmp_path / "out"
    for name in ("responses.parquet", "scores.parquet", "scm.json", "report.md", "cache.sqlite"):
        assert (out / name).is_file(), name
    assert list(out.glob("*.png")), "no figures"
    frame = pd.read_parquet(out / "responses.parquet")
    assert len(frame) == 12 and res["run"]["calls"] == 12
    assert "rating_constrained" in res and "Expected rating (constrained)" in (out / "report.md").read_text()
    again = run_scm(out, model=chat_model, settings=settings, limit=6, mapper_factory=_FakeMapper, log=lambda m: None)
    assert again["run"]["calls"] == 0 and again["run"]["cached"] == 12
    assert analyze(parse_frame(frame), mapper=_FakeMapper())["n_responses"] == 12


def test_the_option_scores_are_asked_of_the_backend_the_run_opened_in_the_plans_batch_size(
    chat_model, tmp_path, monkeypatch
) -> None:
    """A local run's constrained scoring asks ``loglikelihood`` of the very backend whose runner answered its
    ``generate`` requests (one model, opened once, through the seam), ``batch_size`` rows per forward pass as the
    run's ``--batch-size`` says; the backend is closed when the run that opened it ends."""
    import queerbench.models.backends as backends
    from queerbench.models.backends.causal import CausalBackend

    opened: list[Any] = []
    asked: list[tuple[Any, int, int]] = []
    closed: list[Any] = []
    real_open, real_ll, real_close = backends.open_backend, CausalBackend.loglikelihood, CausalBackend.close

    def spy_open(*args: Any, **kwargs: Any) -> Any:
        opened.append(real_open(*args, **kwargs))
        return opened[-1]

    def spy_ll(self: CausalBackend, requests: Any, tick: Any = None) -> Any:
        asked.append((self, self.batch_size, len(requests)))
        return real_ll(self, requests, tick)

    def spy_close(self: CausalBackend) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(backends, "open_backend", spy_open)
    monkeypatch.setattr(CausalBackend, "loglikelihood", spy_ll)
    monkeypatch.setattr(CausalBackend, "close", spy_close)
    res = run_scm(
        tmp_path / "out",
        model=chat_model,
        settings=GenerationSettings(max_new_tokens=4, batch_size=3),
        limit=6,
        mapper_factory=_FakeMapper,
        log=lambda m: None,
    )
    assert res["run"]["constrained"] and len(opened) == 1
    assert asked and all(backend is opened[0] and size == 3 for backend, size, _ in asked)
    assert opened[0].generator().fingerprint() == res["run"]["fingerprint"]  # the replies' model: scored the same
    assert closed == opened


def test_option_scores_do_not_depend_on_batch_padding_with_absolute_positions(tmp_path) -> None:
    """GPT-2 has absolute position embeddings: padding must not shift a row's positions."""
    runner = TransformersRunner(str(tiny_gpt2(tmp_path)))
    short, long = "the cat", "the cat is a very good and nice and kind animal to have at home"
    for share in (True, False):
        alone = option_logps(runner, [short], [["1", "2"]], "Rating:", batch_size=8, share_prefixes=share)[0]
        batched = option_logps(
            runner, [short, long], [["1", "2"], ["1", "2"]], "Rating:", batch_size=8, share_prefixes=share
        )[0]
        assert all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-4) for a, b in zip(alone, batched, strict=True))


def test_the_space_tab_runs_the_probes_on_the_runner_it_is_given(chat_model, tmp_path) -> None:
    """The Space's "Generative LMs" tab runs the probes through the probe runner the app hands it (the task package
    imports no runner): its report, figures and Warmth/Competence table come from that run."""
    from functools import partial

    from queerbench.run.probes import run_probes
    from queerbench.tasks import get_task
    from queerbench.tasks.scm.space import COLUMNS, run_for_space

    asked: list[dict] = []

    def run(out, plan, **kwargs):
        asked.append({"limit": plan.limit, "samples": plan.survey.samples, "model": kwargs["model"]})
        plan = dataclasses.replace(plan, mapper_factory=_FakeMapper)  # no embedder download in the test
        return partial(run_probes, get_task("scm"))(out, plan, **kwargs)

    report, figures, table = run_for_space(run, chat_model, samples=1, limit=3)
    assert asked == [{"limit": 3, "samples": 1, "model": chat_model}]
    assert report.startswith("#") and "Warmth" in report
    assert figures and all(f.endswith(".png") for f in figures)
    assert list(table.columns) == list(COLUMNS) and not table.empty and table["Warmth"].notna().any()
    error, none, empty = run_for_space(run, str(tmp_path / "missing"), samples=1, limit=1)
    assert error.startswith("**Error:**") and none == [] and empty.empty


def test_the_space_app_hands_the_tab_the_probe_runner_of_its_task(monkeypatch) -> None:
    """The app builds the "Generative LMs" tab with the shared probe runner bound to the SCM task."""
    import queerbench.tasks.scm.space as space
    from queerbench.hub.space import build_demo
    from queerbench.hub.space.models import SpaceSettings
    from queerbench.run.probes import run_probes
    from queerbench.tasks import get_task

    given: list = []
    monkeypatch.setattr(space, "build_scm_tab", given.append)
    build_demo(SpaceSettings())
    assert len(given) == 1
    assert given[0].func is run_probes and given[0].args == (get_task("scm"),)


def test_a_prompt_longer_than_the_models_positions_is_one_line_naming_both_fixes(chat_model, tmp_path) -> None:
    from queerbench.models.backends import RequestFailedError
    from queerbench.tasks.scm.plan import ScmPlan

    runner = TransformersRunner(chat_model)
    runner.model.config.max_position_embeddings = 64  # the survey prompts are longer
    plan = ScmPlan(survey=GenerationSettings(), story=GenerationSettings(), limit=2)
    with pytest.raises(RequestFailedError) as caught:
        plan._constrained_scores(local_backend(runner), tmp_path, lambda m: None)
    message = str(caught.value)
    assert "\n" not in message and "takes at most 64 tokens" in message and "--no-constrained" in message
    assert not (tmp_path / "scores.parquet").exists()
