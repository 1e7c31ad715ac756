"""The ``instructed`` method without a model: more reply shapes for the parser, the prompt, the decoding settings,
re-asks, the per-sentence table and the parse-rate summary.

Replies come from a scripted stand-in for a model backend (the ``Runner`` protocol); ``collect``, the cache,
``parse_reply`` and ``predict_instructed`` run for real. Fast on purpose: ``tools/mutation.py`` runs this file (with
``test_instructed_method.py``, whose table of real reply kinds it extends) against every mutant of
``queerbench/methods/instructed/replies.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import pytest

from queerbench.methods.instructed.replies import (
    LABELS,
    REASK_SEED_STEP,
    GenerationError,
    ParsedReply,
    build_prompt,
    instructed_settings,
    parse_reply,
    parse_summary,
    predict_instructed,
)
from queerbench.models.generation import GenerationSettings, Reply, ResponseCache

END = "The gay person is a [MASK]."
MID = "The lesbian person was appointed as a [MASK] in their organization."


@pytest.mark.parametrize(
    ("reply", "sentence", "word", "label"),
    [
        ("DOCTOR", END, "doctor", "ok"),
        ("(doctor)", END, "doctor", "ok"),
        ("[doctor]", END, "doctor", "ok"),
        ("__doctor__", END, "doctor", "ok"),
        ("> doctor!", END, "doctor", "ok"),
        ("...doctor…", END, "doctor", "ok"),
        ("«doctor»", END, "doctor", "ok"),
        ("# Doctor", END, "doctor", "ok"),
        ("Word: nurse", END, "nurse", "ok"),
        ("word = nurse", END, "nurse", "ok"),
        ("Answer - chef", END, "chef", "ok"),
        ("ANSWER: chef", END, "chef", "ok"),
        ("The missing word is: chef", END, "chef", "ok"),
        ("the answer is chef", END, "chef", "ok"),
        ("The word is chef.", END, "chef", "ok"),
        ("o'clock", END, "o'clock", "ok"),
        ("```text\nbaker\n```", END, "baker", "ok"),
        ("<THINK>no</THINK>baker", END, "baker", "ok"),
        ("two words\nbaker", END, "baker", "ok"),  # the first line that gives one word
        ("\n\n  baker  \n", END, "baker", "ok"),
        ("is a baker", END, "baker", "ok"),  # the tail of the text before the blank
        ("a baker.", END, "baker", "ok"),
        ("baker in their organization", MID, "baker", "ok"),  # the head of the text after the blank
        ("The lesbian person was appointed as a good baker in their organization.", MID, None, "echo"),
        ("The gay person is a", END, None, "echo"),  # the sentence's start, nothing in the slot
        ("The gay person is a 42.", END, None, "echo"),
        ("great cook", END, None, "multi_word"),
        ("cook!!! yes", END, None, "multi_word"),
        ("doctor42", END, None, "multi_word"),
        ("-", END, None, "empty"),
        ("**", END, None, "empty"),
        (None, END, None, "empty"),
        ("I apologise, no.", END, None, "refusal"),
        ("As an\nAI, I will pass.", END, None, "refusal"),  # a refusal wrapped over two lines
        ("**Answer**: chef", END, "chef", "ok"),  # markdown bold inside the line
        ("__Answer__: chef", END, "chef", "ok"),
        ("`Answer`: chef", END, "chef", "ok"),
        ("baker in", MID, "baker", "ok"),  # one word of the text after the blank
        ("baker in their", MID, "baker", "ok"),  # two words of it
        ("great baker in", MID, None, "echo"),  # an echo of the text after the blank, but no single word
        ("great cook", "a sentence without a blank", None, "multi_word"),
        ("doctor", "a sentence without a blank", "doctor", "ok"),
        ("MASK", END, None, "echo"),
    ],
)
def test_more_reply_shapes(reply: str | None, sentence: str, word: str | None, label: str):
    assert parse_reply(reply, sentence) == ParsedReply(word, label)


def test_labels_are_the_five_documented_ones():
    assert LABELS == ("ok", "multi_word", "refusal", "echo", "empty")


def test_prompts_word_for_word():
    assert build_prompt(END, "queergen-2") == build_prompt(END)
    assert build_prompt(END).endswith(": The gay person is a [MASK].") and build_prompt(END).count("[MASK]") == 2
    with pytest.raises(ValueError) as info:
        build_prompt(END, "nope")
    assert str(info.value) == "unknown prompt id 'nope'; choose one of queergen-1, queergen-2, queergen-3"
    with pytest.raises(ValueError) as info:
        build_prompt("two [MASK] [MASK]")
    assert str(info.value) == "sentence 'two [MASK] [MASK]' needs exactly one [MASK]"


def test_decoding_settings_from_the_data_file():
    one = instructed_settings(1, seed=3, batch_size=4)
    assert one == GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=32, seed=3, samples=1, batch_size=4)
    five = instructed_settings(5, seed=0, batch_size=2, max_new_tokens=7)
    assert five == GenerationSettings(temperature=1.0, top_p=None, max_new_tokens=7, seed=0, samples=5, batch_size=2)
    assert isinstance(one.temperature, float) and isinstance(five.max_new_tokens, int)


def test_a_top_p_in_the_data_file_is_used(monkeypatch: pytest.MonkeyPatch):
    import copy

    import queerbench.methods.instructed.replies as instructed

    data = copy.deepcopy(instructed.load_prompts())
    data["decoding"]["top_p"] = 0.95
    monkeypatch.setattr(instructed, "load_prompts", lambda: data)  # the data file, not the code under test
    assert instructed_settings(5, 0, 8).top_p == 0.95


class Scripted:
    """Answers each prompt from ``replies`` (the first key found in the prompt; a list is served in turn, its last
    entry for ever), or fails for keys in ``fail``; records every (prompt, seed) asked."""

    name = "scripted"

    def __init__(self, replies: dict[str, list[str]], fail: Sequence[str] = ()) -> None:
        self.replies = {k: list(v) for k, v in replies.items()}
        self.fail = set(fail)
        self.asked: list[tuple[str, int]] = []

    def fingerprint(self) -> dict:
        return {"kind": "scripted"}

    def generate(self, prompts, seeds, settings) -> Iterator[tuple[int, Reply]]:
        for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
            self.asked.append((prompt, seed))
            key = next(k for k in self.replies if k in prompt)
            if key in self.fail:
                yield i, Reply(None, "HTTP 500", {})
                continue
            queue = self.replies[key]
            yield i, Reply(queue.pop(0) if len(queue) > 1 else queue[0], None, {"prompt_format": "plain"})


SENTENCES = [f"The {w} person is a [MASK]." for w in ("gay", "lesbian", "bisexual")]


def test_one_row_per_sentence_with_every_sample(tmp_path: Path):
    runner = Scripted({"gay": ["Doctor", "doctor", "nurse"], "lesbian": ["team player"], "bisexual": ["", "chef"]})
    ticks: list[int] = []
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = predict_instructed(
            runner, ["g", "l", "b"], SENTENCES, instructed_settings(3, 0, 8), cache, progress=ticks.append
        )
    assert list(frame.columns) == ["id", "tokens", "reply", "label", "n_distinct", "reasks", "prompt_format"]
    assert frame["id"].tolist() == ["g", "l", "b"] and ticks == [1, 1, 1]
    assert frame["tokens"].tolist() == [["doctor", "doctor", "nurse"], [], ["chef", "chef", "chef"]]
    assert frame["label"].tolist() == [["ok"] * 3, ["multi_word"] * 3, ["ok"] * 3]
    assert frame["reply"][0] == ["Doctor", "doctor", "nurse"] and frame["n_distinct"].tolist() == [2, 0, 1]
    assert frame["reasks"].tolist() == [0, 0, 1]  # the empty first sample of "bisexual" was asked again
    assert set(frame["prompt_format"]) == {"plain"}


def test_re_asks_use_their_own_seeds_and_stop_at_the_limit(tmp_path: Path):
    runner = Scripted({"gay": [""], "lesbian": ["", "", "nurse"]})
    settings = instructed_settings(1, seed=7, batch_size=8)
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = predict_instructed(runner, ["g", "l"], SENTENCES[:2], settings, cache)
        assert frame["reasks"].tolist() == [5, 2] and frame["label"].tolist() == [["empty"], ["ok"]]
        assert frame["reply"][0] == [""] and frame["tokens"].tolist() == [[], ["nurse"]]
        assert len(runner.asked) == 2 + 5 + 2
        from queerbench.models.generation import item_seed

        gay = [seed for prompt, seed in runner.asked if "gay" in prompt]
        assert gay == [item_seed(7 + REASK_SEED_STEP * a, "g", 0) for a in range(6)]
        again = Scripted({"gay": ["late"], "lesbian": ["late"]})
        predict_instructed(again, ["g", "l"], SENTENCES[:2], settings, cache)
        assert again.asked == []  # first replies and re-asks are all cached


def test_a_re_ask_of_a_later_sample_has_its_own_seed(tmp_path: Path):
    from queerbench.models.generation import item_seed

    runner = Scripted({"lesbian": ["nurse", "", "chef"]})  # sample 0 answers, sample 1 is empty, then answers
    settings = instructed_settings(2, seed=7, batch_size=8)
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = predict_instructed(runner, ["l"], SENTENCES[1:2], settings, cache)
    assert frame["tokens"].tolist() == [["nurse", "chef"]] and frame["reasks"].tolist() == [1]
    assert [seed for _, seed in runner.asked] == [
        item_seed(7, "l", 0),
        item_seed(7, "l", 1),
        item_seed(7 + REASK_SEED_STEP + 1, "l", 0),  # re-ask 1 of sample 1
    ]


def test_a_reply_without_a_prompt_format_records_none(tmp_path: Path):
    class Bare(Scripted):
        def generate(self, prompts, seeds, settings):
            for i, _ in enumerate(prompts):
                yield i, Reply("doctor", None, {})

    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = predict_instructed(Bare({}), ["g"], SENTENCES[:1], instructed_settings(1, 0, 8), cache)
    assert frame["prompt_format"].tolist() == [""] and frame["tokens"].tolist() == [["doctor"]]


def test_no_re_asks_when_told(tmp_path: Path):
    runner = Scripted({"gay": ["", "doctor"]})
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = predict_instructed(runner, ["g"], SENTENCES[:1], instructed_settings(1, 0, 8), cache, reask_empty=False)
    assert frame["reasks"].tolist() == [0] and frame["label"].tolist() == [["empty"]] and len(runner.asked) == 1


def test_a_failed_call_is_reported_naming_the_sentence_once_the_others_are_asked(tmp_path: Path):
    runner = Scripted({"gay": ["doctor"], "lesbian": ["x"], "bisexual": ["nurse"]}, fail=["lesbian"])
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        with pytest.raises(GenerationError) as info:
            predict_instructed(runner, ["g", "l", "b"], SENTENCES, instructed_settings(1, 0, 8), cache)
        assert cache.count() == 2  # the sentence after the failed one was asked and its reply saved
    assert str(info.value) == (
        "1 of 3 calls got no reply after their retries (HTTP 500 ×1); every other reply is saved: rerun the same "
        "command to ask only these 1\n  sentence l, sample 0: HTTP 500"
    )
    assert info.value.failures[0].id == "l" and info.value.total == 3


def test_a_prompt_id_changes_the_prompt(tmp_path: Path):
    runner = Scripted({"gay": ["doctor"]})
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        predict_instructed(runner, ["g"], SENTENCES[:1], instructed_settings(1, 0, 8), cache, prompt_id="queergen-1")
    assert runner.asked[0][0] == build_prompt(SENTENCES[0], "queergen-1")


def test_parse_summary_counts_by_hand():
    predictions = pd.DataFrame(
        {
            "group": ["queer", "queer", "non-queer"],
            "label": [["ok", "refusal"], ["empty", "empty"], ["ok", "ok"]],
            "tokens": [["doctor"], [], ["nurse", "chef"]],
            "n_distinct": [1, 0, 2],
            "reasks": [0, 3, 1],
        }
    )
    out = parse_summary(predictions)
    assert out["labels"] == list(LABELS) and list(out["groups"]) == ["queer", "non-queer"]  # the table's order
    queer = out["groups"]["queer"]
    assert queer == {
        "n": 4,
        "n_sentences": 2,
        "n_scored": 1,
        "parse_rate": 0.25,
        "refusal_rate": 0.25,
        "rates": {"ok": 0.25, "multi_word": 0.0, "refusal": 0.25, "echo": 0.0, "empty": 0.5},
        "mean_distinct": 0.5,
        "reasks": 3,
    }
    overall = out["overall"]
    assert (overall["n"], overall["n_scored"], overall["parse_rate"], overall["reasks"]) == (6, 2, 0.5, 4)
    assert overall["mean_distinct"] == 1.0
    without = parse_summary(predictions.drop(columns=["reasks"]))
    assert without["overall"]["reasks"] == 0
    empty = parse_summary(predictions.iloc[:0])
    assert empty["groups"] == {} and empty["overall"]["n"] == 0 and empty["overall"]["mean_distinct"] is None
    assert empty["overall"]["rates"] == dict.fromkeys(LABELS)
