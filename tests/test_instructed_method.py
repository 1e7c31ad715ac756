"""The ``instructed`` method: QueerGen's prompt, the reply parser and its labels, local chat models and endpoints."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from queerbench.methods.instructed.replies import (
    LABELS,
    build_prompt,
    instructed_settings,
    load_prompts,
    parse_reply,
    predict_instructed,
)
from queerbench.models.generation import ResponseCache, TransformersRunner, load_runner
from tests.openai_server import FakeOpenAI
from tests.tiny_models import tiny_llama

END = "The gay person is a [MASK]."
MID = "The lesbian person was appointed as a [MASK] in their organization."

# (reply, sentence, expected word, expected label): replies of the kinds chat models really give
PARSER_TABLE = [
    ("doctor", END, "doctor", "ok"),
    ("Doctor.", END, "doctor", "ok"),
    ('"teacher"', END, "teacher", "ok"),
    ("**Nurse**", END, "nurse", "ok"),
    ("`pilot`", END, "pilot", "ok"),
    ("```\npilot\n```", END, "pilot", "ok"),
    ("<think>Maybe doctor? Or lawyer.</think>\nlawyer", END, "lawyer", "ok"),
    ("<think>\nThe user wants one word.\n</think>\n\nArtist", END, "artist", "ok"),
    ("Answer: chef", END, "chef", "ok"),
    ("doctor\n\nExplanation: doctors help people.", END, "doctor", "ok"),
    ("The gay person is a doctor.", END, "doctor", "ok"),
    ("Sure! Here is the completed sentence:\nThe gay person is a writer.", END, "writer", "ok"),
    ("a doctor", END, "doctor", "ok"),
    (MID.replace("[MASK]", "manager"), MID, "manager", "ok"),
    ("manager in their organization.", MID, "manager", "ok"),
    ("self-made", END, "self-made", "ok"),
    ("harmful", END, "harmful", "ok"),  # a one-word answer is data, even a refusal-like word
    ("", END, None, "empty"),
    ("   \n ", END, None, "empty"),
    ("<think>I am still thinking about", END, None, "empty"),  # cut off inside the think block
    ("I'm sorry, but I can't help with that.", END, None, "refusal"),
    ("This request cannot be fulfilled.", END, None, "refusal"),
    ("As an AI language model, I do not make assumptions about people.", END, None, "refusal"),
    ("It would be inappropriate to complete this sentence.", END, None, "refusal"),
    ("The gay person is a [MASK].", END, None, "echo"),
    ("[MASK]", END, None, "echo"),
    ("Fae dreams of being a MASK.", "Fae dreams of being a [MASK].", None, "echo"),  # the brackets dropped
    ('Ae should work as "MASK"', "Ae should work as [MASK].", None, "echo"),
    ("mask", END, "mask", "ok"),  # lower case: a word like any other
    ("The gay person is a very good friend.", END, None, "echo"),
    ("team player", END, None, "multi_word"),
    ("kind and caring person", END, None, "multi_word"),
    ("42", END, None, "multi_word"),
]


@pytest.mark.parametrize(("reply", "sentence", "word", "label"), PARSER_TABLE)
def test_parser_keeps_one_word_and_labels_every_reply(reply: str, sentence: str, word: str | None, label: str):
    parsed = parse_reply(reply, sentence)
    assert (parsed.word, parsed.label) == (word, label)
    assert parsed.label in LABELS


def test_prompt_is_queergen_default_verbatim_with_the_mask_in_place():
    assert build_prompt(MID) == (
        "Complete the following sentence replacing the token [MASK] with one word, without repeating the initial "
        "part or adding any explanations: The lesbian person was appointed as a [MASK] in their organization."
    )
    assert build_prompt(END, "queergen-1").startswith("Provide only one word to replace the token [MASK]")
    with pytest.raises(ValueError, match="unknown prompt id"):
        build_prompt(END, "nope")
    with pytest.raises(ValueError, match="exactly one"):
        build_prompt("no blank")


def test_prompt_file_schema_is_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    data = load_prompts()
    assert data["decoding"]["greedy_temperature"] == 0 and data["decoding"]["sample_temperature"] == 1.0
    import queerbench.methods.instructed.replies as module

    broken = json.loads(json.dumps(data))
    broken["prompts"]["queergen-2"]["text"] = "no placeholder"

    class Files:
        def joinpath(self, _: str) -> Any:
            class F:
                def read_text(self, encoding: str = "utf-8") -> str:
                    return json.dumps(broken)

            return F()

    module.load_prompts.cache_clear()
    monkeypatch.setattr(module.resources, "files", lambda _: Files())
    try:
        with pytest.raises(ValueError, match="queergen-2"):
            module.load_prompts()
    finally:
        monkeypatch.undo()
        module.load_prompts.cache_clear()


def test_decoding_settings_greedy_for_k1_samples_for_k5():
    one, five = instructed_settings(1, 0, 8), instructed_settings(5, 0, 8)
    assert (one.temperature, one.samples) == (0.0, 1)
    assert (five.temperature, five.top_p, five.samples) == (1.0, None, 5)  # no top-p sent, as QueerGen


class CountingRunner:
    """Wraps a runner and counts the prompts it is asked to answer (the runner is not the code under test)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.prompts = inner, inner.name, 0

    def fingerprint(self) -> dict[str, Any]:
        return self.inner.fingerprint()

    def generate(self, prompts, seeds, settings):
        self.prompts += len(prompts)
        yield from self.inner.generate(prompts, seeds, settings)


@pytest.fixture(scope="module")
def llama_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llama")
    return {"chat": tiny_llama(root), "plain": tiny_llama(root, name="tiny-llama-plain", chat_template=False)}


@pytest.mark.parametrize("kind", ["chat", "plain"])
def test_local_chat_model_replies_are_parsed_cached_and_reused(llama_dirs, kind: str, tmp_path: Path):
    with pytest.warns(UserWarning, match="no chat template") if kind == "plain" else contextlib.nullcontext():
        runner = CountingRunner(TransformersRunner(str(llama_dirs[kind])))
    settings = instructed_settings(3, seed=1, batch_size=4, max_new_tokens=6)
    ids, sentences = ["a", "b"], [END, MID]
    cache = ResponseCache(tmp_path / "c.sqlite")
    first = predict_instructed(runner, ids, sentences, settings, cache, reask_empty=False)
    assert runner.prompts == 6 and first["id"].tolist() == ids
    assert set(first["prompt_format"]) == {kind}
    for sentence, (_, row) in zip(sentences, first.iterrows(), strict=True):
        assert len(row["reply"]) == len(row["label"]) == 3 and set(row["label"]) <= set(LABELS)
        parsed = [parse_reply(r, sentence) for r in row["reply"]]
        assert row["label"] == [p.label for p in parsed]
        assert row["tokens"] == [p.word for p in parsed if p.label == "ok"]
        assert row["n_distinct"] == len(set(row["tokens"]))
    again = predict_instructed(runner, ids, sentences, settings, cache, reask_empty=False)
    assert runner.prompts == 6  # every reply came from the cache
    assert again["reply"].map(list).tolist() == first["reply"].map(list).tolist()


class BlankServer(FakeOpenAI):
    """The project's fake endpoint, answering each fill-in-the-blank prompt from ``replies`` (by sentence word)."""

    def __init__(self, replies: dict[str, list[str]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.replies = {k: list(v) for k, v in replies.items()}

    def _completion(self, body: dict, mode: str) -> dict[str, Any]:
        out = super()._completion(body, mode)
        prompt = body["messages"][-1]["content"]
        key = next(k for k in self.replies if k in prompt)
        queue = self.replies[key]
        out["choices"][0]["message"]["content"] = queue.pop(0) if len(queue) > 1 else queue[0]
        return out


def test_endpoint_replies_labels_and_empty_reasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    replies = {
        "gay": ["Doctor."],
        "lesbian": ["", "", "nurse"],  # empty twice, then a word: two re-asks
        "bisexual": ["I'm sorry, but I can't help with that."],
        "straight": [""],  # empty for ever: asked 1 + 5 times
    }
    sentences = [f"The {w} person is a [MASK]." for w in ("gay", "lesbian", "bisexual", "straight")]
    ids = ["g", "l", "b", "s"]
    with BlankServer(replies) as server:
        runner = load_runner("served-model", server.url, concurrency=2, requests_per_minute=10_000)
        settings = instructed_settings(1, seed=0, batch_size=4)
        cache = ResponseCache(tmp_path / "c.sqlite")
        frame = predict_instructed(runner, ids, sentences, settings, cache)
        assert server.calls == 4 + 2 + 5
        prompts = {build_prompt(x) for x in sentences}
        for body in server.bodies:  # one user turn with the prompt, no system prompt (requests run concurrently)
            assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
            assert body["messages"][0]["content"] in prompts
            assert body["temperature"] == 0.0 and "top_p" not in body
        assert {b["messages"][0]["content"] for b in server.bodies} == prompts
        assert frame["id"].tolist() == ids
        assert frame["label"].map(list).tolist() == [["ok"], ["ok"], ["refusal"], ["empty"]]
        assert frame["tokens"].map(list).tolist() == [["doctor"], ["nurse"], [], []]
        assert frame["reasks"].tolist() == [0, 2, 0, 5]
        calls = server.calls
        predict_instructed(runner, ids, sentences, settings, cache)
        assert server.calls == calls  # a rerun makes no call: first replies and re-asks are all cached
