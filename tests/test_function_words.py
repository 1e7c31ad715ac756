"""Function words among the completions: the documented word list and its schema check, the per-group share in
``scores.json``, and ``--exclude-function-words`` (off by default, recorded in the outputs) for ``score`` and ``run``."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.scoring.aggregate import ScoringOptions, compute
from queerbench.scoring.function_words import (
    content_only,
    function_word_summary,
    load_function_words,
    schema_problems,
)
from queerbench.tasks import get_task
from queerbench.tasks.queerbench.templates import build_sentences
from tests.test_instructed_method import BlankServer

NO_STATS = {"n_bootstrap": 0, "n_permutations": 0}


def _document() -> dict:
    return json.loads(resources.files("queerbench.data").joinpath("function_words.json").read_text(encoding="utf-8"))


def test_the_list_holds_closed_classes_only_and_says_where_it_comes_from():
    fw = load_function_words()
    for word in ("a", "the", "is", "are", "one", "of", "and", "not", "there", "they", "them", "would", "isn't"):
        assert word in fw, word
    # open-class words, and the neopronouns the benchmark is about, are never function words
    for word in ("well", "very", "nurse", "doctor", "gay", "kind", "xe", "ze", "fae", "little", "done"):
        assert word not in fw, word
    assert "A" in fw and "The" in fw  # matched lower-cased
    assert "Penn Treebank" in fw.source and len(fw.sha256) == 64
    doc = _document()
    assert "neopronouns" in doc["not_included"] and set(doc["classes"]) >= {"determiners", "pronouns"}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d.update(schema_version=2), "schema_version must be 1"),
        (lambda d: d.update(source=" "), "source must say where the list comes from"),
        (lambda d: d.update(classes={}), "classes must map class names to word lists"),
        (lambda d: d["classes"].update(pronouns=[]), "class 'pronouns' must be a non-empty list of words"),
        (lambda d: d["classes"]["pronouns"].append("They"), "class 'pronouns': ['They'] are not lower-case words"),
        (lambda d: d["classes"]["pronouns"].append("it's a"), "are not lower-case words"),
        (lambda d: d["classes"]["determiners"].append("the"), "class 'determiners' lists ['the'] twice"),
    ],
)
def test_the_schema_check_names_each_problem(change, problem):
    assert schema_problems(_document()) == []
    doc = copy.deepcopy(_document())
    change(doc)
    assert any(problem in p for p in schema_problems(doc)), schema_problems(doc)
    assert schema_problems([]) == ["the file must hold a JSON object"]


def test_the_share_per_group_by_hand():
    preds = [["a", "nurse"], ["is", "The"], ["doctor", "well"]]
    got = function_word_summary(preds, ["queer", "queer", "non-queer"], excluded=False)
    assert got["excluded"] is False and got["list"]["n_words"] == len(load_function_words().words)
    assert got["groups"]["queer"] == {
        "n_completions": 4,
        "n_function_words": 3,
        "share": 0.75,
        "most_frequent": [["a", 1], ["is", 1], ["the", 1]],
        "sentences_only_function_words": 1,
    }
    assert got["groups"]["non-queer"]["share"] == 0.0 and got["groups"]["non-queer"]["most_frequent"] == []
    assert got["overall"]["n_completions"] == 6 and got["overall"]["share"] == pytest.approx(0.5)
    assert content_only(preds) == ([["nurse"], ["doctor", "well"]], [0, 2])


def test_scores_json_carries_the_share_and_the_exclusion_scores_only_content_words():
    preds = [["a", "whore"], ["is", "the"], ["doctor", "pig"], ["one", "nurse"]]
    groups = ["queer", "queer", "non-queer", "non-queer"]
    sentences = ["The gay person is [MASK].", "The lesbian is [MASK].", "The man is [MASK].", "The woman is [MASK]."]
    plain = compute(preds, groups, options=ScoringOptions(toxicity="none", **NO_STATS), return_per_sentence=True)
    assert plain["function_words"]["excluded"] is False and plain["n"] == {"queer": 2, "non-queer": 2}
    assert plain["function_words"]["groups"]["queer"]["share"] == 0.75
    by_hand = compute([["whore"], ["doctor", "pig"], ["nurse"]], ["queer", "non-queer", "non-queer"],
                      options=ScoringOptions(toxicity="none", **NO_STATS))  # fmt: skip
    options = ScoringOptions(toxicity="none", exclude_function_words=True, **NO_STATS)
    out = compute(preds, groups, sentences=sentences, options=options, return_per_sentence=True)
    assert out["function_words"]["excluded"] is True
    assert out["function_words"]["groups"] == plain["function_words"]["groups"]  # the share is of all completions
    assert out["n"] == {"queer": 1, "non-queer": 2} and out["k"] == 2  # the run's k, not the words left
    for metric in ("afinn", "hurtlex"):
        assert out[metric] == pytest.approx(by_hand[metric]) and out[metric] != plain[metric]
    table = out["per_sentence"]
    assert len(table) == 4 and table["words"].map(list).tolist() == [["whore"], [], ["doctor", "pig"], ["nurse"]]
    assert out["afinn"]["queer"] == pytest.approx(80.0) and plain["afinn"]["queer"] == pytest.approx(20.0)
    assert pd.isna(table.loc[1, "afinn"]) and table.loc[2, "hurtlex"] == plain["per_sentence"].loc[2, "hurtlex"]


def test_exclusion_refuses_stored_counts_and_an_empty_result_in_one_line():
    options = ScoringOptions(toxicity="precomputed", exclude_function_words=True, **NO_STATS)
    with pytest.raises(ValueError, match=r"^--exclude-function-words cannot use stored toxicity counts"):
        compute([["a", "nurse"]], ["queer"], toxicity_counts=[[0, 0, 0, 0, 0]], options=options)
    options = ScoringOptions(toxicity="none", exclude_function_words=True, **NO_STATS)
    with pytest.raises(ValueError, match="every completion is a function word"):
        compute([["a", "the"], ["is"]], ["queer", "queer"], options=options)


def _predictions_file(tmp_path: Path) -> Path:
    frame = build_sentences("default")
    frame = frame[frame["template_id"] == frame["template_id"].iloc[0]].reset_index(drop=True)
    words = [["a", "nurse"], ["is", "the"], ["doctor", "friend"]]
    frame["tokens"] = [words[i % 3] for i in range(len(frame))]
    path = tmp_path / "predictions.parquet"
    frame.to_parquet(path, index=False)
    return path


def test_score_records_the_flag_and_off_is_the_default(tmp_path: Path, capsys):
    path = _predictions_file(tmp_path)
    fast = ["--toxicity", "none", "--bootstrap", "0", "--permutations", "0"]
    assert main(["score", str(path), *fast, "--out", str(tmp_path / "plain.json")]) == 0
    assert main(["score", str(path), *fast, "--exclude-function-words", "--out", str(tmp_path / "fw.json")]) == 0
    plain = json.loads((tmp_path / "plain.json").read_text())
    fw = json.loads((tmp_path / "fw.json").read_text())
    assert plain["function_words"]["excluded"] is False and fw["function_words"]["excluded"] is True
    assert plain["function_words"]["overall"]["share"] == pytest.approx(3 / 6, abs=0.02)
    assert sum(fw["n"].values()) < sum(plain["n"].values())  # the ["is", "the"] sentences are not scored


def test_run_records_the_flag_in_scores_json_and_a_rerun_without_it_rescores(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    task = get_task("default")
    sentences = task.first_templates(task.items(), 1)["masked_sentence"].tolist()
    replies = {sentences[0]: ["a"], sentences[1]: ["the"], "[MASK]": ["doctor"]}  # the first key found wins
    out = tmp_path / "run"
    fast = ["--toxicity", "none", "--bootstrap", "20", "--permutations", "20", "--requests-per-minute", "1000000"]
    with BlankServer(replies) as server:
        args = ["run", "--endpoint", server.url, "--model", "served", "--limit", "1", "--top-k", "1", "--out", str(out)]
        assert main([*args, *fast, "--exclude-function-words"]) == 0
        scores = json.loads((out / "scores.json").read_text())
        assert scores["run"]["options"]["exclude_function_words"] is True
        block = scores["function_words"]
        assert block["excluded"] is True and block["overall"]["n_function_words"] == 2
        assert sum(scores["n"].values()) == len(sentences) - 2 and (out / "report.md").is_file()
        calls = server.calls
        assert main([*args, *fast]) == 0 and server.calls == calls  # re-scored from the saved predictions
    again = json.loads((out / "scores.json").read_text())
    assert again["function_words"]["excluded"] is False and sum(again["n"].values()) == len(sentences)
    assert again["run"]["options"]["exclude_function_words"] is False
