"""SCM runs: small --limit runs cover every group and both axes, paper defaults per family, separate survey and
story settings, truncation counts, shuffled selection lists, constrained scoring without the first-option artefact."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.models.requests import GENERATE, LOGLIKELIHOOD, LoglikelihoodResult, UnsupportedRequestError
from queerbench.tasks.scm.constrained import _content_free_prompt, constrained_scores
from queerbench.tasks.scm.data import load_groups, paper_decoding
from queerbench.tasks.scm.dataset import scm_splits, select_rows, shuffled_selection_rows
from queerbench.tasks.scm.pipeline import resolve_settings
from queerbench.tasks.scm.pipeline import truncated as _truncated
from tests.scm_runs import local_backend, option_logps, run_scm
from tests.tiny_models import tiny_llama

GROUPS = {g.id for g in load_groups()}


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> str:
    return str(tiny_llama(tmp_path_factory.mktemp("chat")))


class _FakeMapper:
    def map_words(self, words):
        from queerbench.tasks.scm.axes import AxisLabel

        return {w: AxisLabel(w.startswith("k"), w.startswith("s"), "test", 1, -1) for w in words}


@pytest.mark.parametrize("limit", [14, 20, 40])
def test_small_limits_cover_all_groups_both_axes_and_every_prompt_type(limit: int) -> None:
    survey = select_rows(scm_splits()["survey"], limit)
    assert len(survey) == limit and set(survey["group"]) == GROUPS
    assert set(survey["prompt_type"]) == {"rating_v1", "rating_v2", "selection_v1", "selection_v2", "elicitation"}
    ratings = survey[survey["task"] == "rating"]
    assert set(ratings["axis"]) == {"Warmth", "Competence"}
    both = ratings.groupby("group")["axis"].nunique()
    assert (both == 2).sum() >= 3  # Warmth × Competence points for several groups
    story = select_rows(scm_splits()["generation"], limit)
    assert set(story["group"]) == GROUPS and story["prompt_type"].nunique() == 5


def test_limit_20_run_has_both_axes_and_all_seven_groups(chat_model, tmp_path) -> None:
    survey, story, prov = resolve_settings(
        "embedded", survey_samples=1, story_samples=1, max_new_tokens=4, story_max_new_tokens=3, batch_size=8
    )
    res = run_scm(
        tmp_path / "out",
        model=chat_model,
        settings=survey,
        story_settings=story,
        provenance=prov,
        limit=20,
        mapper_factory=_FakeMapper,
        log=lambda m: None,
    )
    frame = pd.read_parquet(tmp_path / "out" / "responses.parquet")
    assert set(frame["group"]) == GROUPS and len(frame) == 40
    rc = res["rating_constrained"]
    assert set(rc) == GROUPS
    with_both = [g for g, v in rc.items() if v["Warmth"]["mean"] is not None and v["Competence"]["mean"] is not None]
    assert len(with_both) >= 3
    assert res["spearman"]["rating_constrained"]["Competence"]["n"] >= 3
    # refusals reported per split with n, and every story reply counted for truncation
    assert res["refusals"]["survey"]["overall"]["n"] == 20 and res["refusals"]["story"]["overall"]["n"] == 20
    assert res["refusals"]["story"]["truncated"]["n"] == 20
    report = (tmp_path / "out" / "report.md").read_text()
    assert "truncated at the token limit" in report and "survey prompts | story prompts" in report
    assert "| survey_samples | 1 | override |" in report and "| temperature | 0.6 | paper default |" in report
    assert res["constrained_diagnostics"]["method"] == "calibrated"


def test_survey_and_story_samples_are_separate(chat_model, tmp_path) -> None:
    survey, story, _ = resolve_settings(
        "embedded", survey_samples=2, story_samples=1, max_new_tokens=2, story_max_new_tokens=2
    )
    run_scm(
        tmp_path / "o",
        model=chat_model,
        settings=survey,
        story_settings=story,
        limit=3,
        constrained=False,
        mapper_factory=_FakeMapper,
        log=lambda m: None,
    )
    frame = pd.read_parquet(tmp_path / "o" / "responses.parquet")
    counts = frame.groupby(frame["task"] == "generation").size().to_dict()
    assert counts == {False: 6, True: 3}
    assert set(frame[frame["task"] == "generation"]["sample"]) == {0}


def test_paper_defaults_per_family() -> None:
    assert paper_decoding("gpt-3.5-turbo") | {"note": ""} == {
        "family": "gpt",
        "temperature": 0.9,
        "top_p": None,
        "note": "",
    }
    assert paper_decoding("gemini-1.5-flash")["family"] == "gemini"
    assert paper_decoding("meta-llama/Llama-2-7b-chat-hf")["temperature"] == 0.6
    assert paper_decoding("meta-llama/Llama-2-7b-chat-hf")["top_p"] == 0.9
    assert paper_decoding("gpt2")["family"] == "other"  # GPT-2 is not the paper's GPT 3.5
    survey, story, prov = resolve_settings("gemini-1.5-flash")
    assert survey.temperature == 0.9 and survey.samples == 10 and story.samples == 10
    assert story.max_new_tokens > survey.max_new_tokens >= 512
    assert prov["values"]["top_p"] == {"value": None, "source": "paper default"}
    s2, _, prov2 = resolve_settings("gemini-1.5-flash", temperature=0.2, top_p=0.5, story_samples=3)
    assert s2.temperature == 0.2 and s2.top_p == 0.5 and prov2["values"]["story_samples"]["source"] == "override"


def test_truncation_flag_from_runner_meta() -> None:
    assert _truncated(json.dumps({"finish_reason": "length"}), 100) is True
    assert _truncated(json.dumps({"finish_reason": "stop"}), 100) is False
    assert _truncated(json.dumps({"new_tokens": 100}), 100) is True
    assert _truncated(json.dumps({"new_tokens": 12}), 100) is False
    assert _truncated(json.dumps({"truncated": True, "finish_reason": "stop"}), 100) is True
    assert _truncated("{}", 100) is None


def test_shuffled_selection_lists_are_seeded_and_per_sample() -> None:
    rows = select_rows(scm_splits()["survey"], 20)
    a = shuffled_selection_rows(rows, 3, seed=1)
    b = shuffled_selection_rows(rows, 3, seed=1)
    sel = a[a["task"] == "selection"]
    assert a["prompt"].tolist() == b["prompt"].tolist()
    first = sel[sel["id"] == sel["id"].iloc[0]]
    assert len(first) == 3 and len({tuple(o) for o in first["options"]}) == 3
    assert all(sorted(o) == sorted(rows[rows["task"] == "selection"]["options"].iloc[0]) for o in sel["options"])
    for rec in sel.to_dict("records"):  # the prompt lists the terms in the order recorded in options
        assert rec["prompt"].endswith(", ".join(rec["options"])) or ", ".join(rec["options"]) in rec["prompt"]
    c = shuffled_selection_rows(rows, 3, seed=2)
    assert c["prompt"].tolist() != a["prompt"].tolist()
    # default (the paper): one fixed order, Table 1's
    fixed = rows[rows["task"] == "selection"]
    assert fixed["prompt"].str.contains("warm, tolerant, good-natured").all()


class _PriorBackend:
    """Option log-probs with a strong prior for the first listed, single-token "warm" (the artefact), while the
    prompt itself raises "competent" most: the case where the right answer is not the first option."""

    name = "prior"
    request_types = frozenset({LOGLIKELIHOOD})

    def loglikelihood(self, requests, tick=None):
        out = []
        for r in requests:
            content_free = "n/a" in r.context.lower()
            assert r.chat and r.reply_prefix == "Answer:" and r.continuation.startswith(" ")
            option = r.continuation[1:]
            if option == "warm":
                value = -0.5 if content_free else -1.0
            elif option == "competent":
                value = -8.0 if content_free else -3.0
            else:
                value = -9.0
            out.append(LoglikelihoodResult(value, max(1, len(option) // 3)))
        if tick is not None:
            tick(len(requests))
        return out


def test_calibrated_scoring_picks_an_answer_that_is_not_the_first_option() -> None:
    rows = scm_splits()["survey"]
    sel = rows[rows["task"] == "selection"].head(2)
    raw = constrained_scores(_PriorBackend(), sel, method="sum")
    assert set(raw["top_term"]) == {"warm"} and raw["top_is_first"].all()
    cal = constrained_scores(_PriorBackend(), sel, method="calibrated")
    assert set(cal["top_term"]) == {"competent"} and not cal["top_is_first"].any()
    assert all(p > 0.5 for p in cal["p_competence"])
    mean = constrained_scores(_PriorBackend(), sel, method="mean")
    assert math.isclose(sum(mean["probs"].iloc[0]), 1.0)
    with pytest.raises(ValueError, match="scoring method"):
        constrained_scores(_PriorBackend(), sel, method="max")


def test_constrained_scoring_needs_a_backend_that_answers_loglikelihood() -> None:
    class _GenerateOnly:
        name, request_types = "a chat endpoint", frozenset({GENERATE})

    sel = scm_splits()["survey"].head(2)
    with pytest.raises(
        UnsupportedRequestError, match=r"^a chat endpoint cannot answer loglikelihood requests \(constrained"
    ):
        constrained_scores(_GenerateOnly(), sel)  # type: ignore[arg-type]


def test_calibrated_scores_equal_direct_content_free_difference(chat_model) -> None:
    from queerbench.models.generation import TransformersRunner

    runner = TransformersRunner(chat_model)
    rows = scm_splits()["survey"]
    row = rows[rows["task"] == "rating"].head(1)
    got = constrained_scores(local_backend(runner, batch_size=8), row, method="calibrated").iloc[0]
    rec = row.iloc[0].to_dict()
    cf = _content_free_prompt(rec)
    assert "N/A" in cf and rec["term"] in cf and cf != rec["prompt"]
    lp = option_logps(runner, [rec["prompt"]], [list(rec["options"])], "Rating:")[0]
    lp_cf = option_logps(runner, [cf], [list(rec["options"])], "Rating:")[0]
    diff = [a - b for a, b in zip(lp, lp_cf, strict=True)]
    z = [math.exp(d - max(diff)) for d in diff]
    want = [x / sum(z) for x in z]
    assert all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6) for a, b in zip(got["probs"], want, strict=True))


def test_cli_rejects_bad_decoding_flags_before_loading(tmp_path, capsys) -> None:
    assert main(["scm", "run", "--extra-body", '{"a": 1}', "--out", str(tmp_path / "x")]) != 0
    assert "--extra-body only applies to --endpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["scm", "run", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--extra-body", "[1]", "--out", "x"])
    with pytest.raises(SystemExit):
        main(["scm", "run", "--top-p", "1.5", "--out", "x"])
    assert main(["scm", "run", "--survey-samples", "0", "--out", str(tmp_path / "y")]) != 0
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_endpoint_run_sends_the_papers_gpt_decoding_extra_body_and_system_prompt(tmp_path, monkeypatch) -> None:
    from tests.openai_server import FakeOpenAI

    monkeypatch.setenv("QB_SCM_KEY", "sk-scm-test")
    safety = {"safety_settings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]}
    survey, story, prov = resolve_settings("gpt-3.5-turbo", survey_samples=1, story_samples=2)
    with FakeOpenAI(by_prompt={"Tell me a story": ["length"] * 10}) as server:
        res = run_scm(
            tmp_path / "gpt",
            endpoint=server.url,
            model="gpt-3.5-turbo",
            settings=survey,
            story_settings=story,
            provenance=prov,
            limit=7,
            api_key_env="QB_SCM_KEY",
            concurrency=2,
            mapper_factory=_FakeMapper,
            system_prompt="You answer surveys.",
            extra_body=safety,
            log=lambda m: None,
        )
        bodies = list(server.bodies)
    assert len(bodies) == 7 + 7 * 2
    assert all(b["temperature"] == 0.9 and "top_p" not in b for b in bodies)  # the paper: T 0.9, top-p unstated
    assert all(b["safety_settings"] == safety["safety_settings"] for b in bodies)
    assert all(b["messages"][0] == {"role": "system", "content": "You answer surveys."} for b in bodies)
    story_bodies = [b for b in bodies if b["messages"][-1]["content"].startswith(("Imagine", "Tell", "Help"))]
    assert len(story_bodies) == 14 and {b["max_tokens"] for b in story_bodies} == {story.max_new_tokens}
    assert {b["max_tokens"] for b in bodies if b not in story_bodies} == {survey.max_new_tokens}
    n_gen4 = sum(b["messages"][-1]["content"].startswith("Tell me a story") for b in bodies)
    assert res["refusals"]["story"]["truncated"] == {"rate": n_gen4 / 14, "k": n_gen4, "n": 14} and n_gen4 > 0
    assert res["run"]["settings"]["extra_body_keys"] == ["safety_settings"]
    assert res["run"]["defaults"]["family"] == "gpt" and res["run"]["settings"]["survey"]["top_p"] is None


def test_report_reanalyses_a_run_without_model_calls(chat_model, tmp_path) -> None:
    survey, story, _ = resolve_settings(
        "embedded", survey_samples=1, story_samples=1, max_new_tokens=2, story_max_new_tokens=2
    )
    out = tmp_path / "r"
    run_scm(
        out,
        model=chat_model,
        settings=survey,
        story_settings=story,
        limit=4,
        mapper_factory=_FakeMapper,
        log=lambda m: None,
    )
    frame = pd.read_parquet(out / "responses.parquet")
    # pretend the model had answered one story with only general statements: the narrow rule keeps it
    i = frame.index[frame["task"] == "generation"][0]
    frame.loc[i, "response"] = "Gay men, like all people, are individuals. Each person is unique in their own way."
    frame.to_parquet(out / "responses.parquet", index=False)
    from tests.scm_runs import reanalyze

    wide = reanalyze(out, mapper_factory=_FakeMapper)
    narrow = reanalyze(out, refusal_rule="patterns", mapper_factory=_FakeMapper)
    assert wide["refusals"]["story"]["kinds"].get("refusal:general") == 1
    assert "refusal:general" not in narrow["refusals"]["story"]["kinds"]
    assert json.loads((out / "scm.json").read_text())["run"]["settings"]["refusal_rule"] == "patterns"
    assert "rule `patterns`" in (out / "report.md").read_text()


def test_an_endpoint_scores_no_option_whatever_the_plan_was_told(tmp_path, monkeypatch) -> None:
    """Whether a run scores the answer options is the backend's to say (a completions route scores no reply to a
    chat prompt): a library caller's plan made without ``endpoint=True`` still runs on an endpoint, its replies
    read and no option scored."""
    from queerbench.run.probes import run_probes
    from queerbench.tasks import get_task
    from tests.openai_server import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    task = get_task("scm")
    plan = task.probe_plan("served", limit=2, mapper_factory=_FakeMapper)
    with FakeOpenAI() as server:
        res = run_probes(task, tmp_path / "scm", plan, model="served", endpoint=server.url, log=lambda m: None)
        assert server.calls > 0
    assert res["run"]["constrained"] is False and res["run"]["settings"]["scoring"] is None
    assert not (tmp_path / "scm" / "scores.parquet").exists()
