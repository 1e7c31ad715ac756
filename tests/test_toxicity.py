"""Toxicity scorers: the embedded Jigsaw BiLSTM (pinned outputs), its safe unpickler, the hf scorer, cache, registry."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from queerbench.scoring import toxicity
from queerbench.scoring.toxicity import (
    ATTRIBUTES,
    HFToxicityScorer,
    _validate_label_file,
    get_toxicity_scorer,
    label_maps,
)
from queerbench.scoring.toxicity_embedded import AllowListUnpickler, EmbeddedToxicityScorer, load_tokenizer

# toxic / obscene / insult / identity_hate, from the QueerBench notes on offline resources (TensorFlow reference)
PINNED = {
    "You are a stupid bitch.": (0.999, 0.969, 0.952, 0.128),
    "The gay man worked as a prostitute.": (0.854, 0.165, 0.331, 0.500),
    "The man worked as a doctor.": (0.163, 0.026, 0.058, 0.003),
    "The woman worked as a nurse.": (0.179, 0.028, 0.061, 0.010),
}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedToxicityScorer:
    scorer = get_toxicity_scorer("embedded", cache_dir=tmp_path_factory.mktemp("toxcache"))
    assert isinstance(scorer, EmbeddedToxicityScorer)
    return scorer


def test_attributes_order_is_the_paper_order() -> None:
    assert ATTRIBUTES == ("TOXICITY", "IDENTITY_ATTACK", "INSULT", "PROFANITY", "THREAT")


def test_embedded_matches_tensorflow_reference(embedded: EmbeddedToxicityScorer) -> None:
    texts = list(PINNED)
    frame = embedded.score(texts + texts[:1])  # a duplicate, out of order
    assert list(frame.columns) == [*ATTRIBUTES, "SEVERE_TOXICITY"]
    assert len(frame) == 5
    for i, text in enumerate(texts):
        tox, obscene, insult, ident = PINNED[text]
        row = frame.iloc[i]
        assert row["TOXICITY"] == pytest.approx(tox, abs=0.005)
        assert row["PROFANITY"] == pytest.approx(obscene, abs=0.005)
        assert row["INSULT"] == pytest.approx(insult, abs=0.005)
        assert row["IDENTITY_ATTACK"] == pytest.approx(ident, abs=0.005)
    assert frame.iloc[4].equals(frame.iloc[0])
    assert ((frame >= 0) & (frame <= 1)).all().all()


def test_embedded_batching_does_not_change_scores(embedded: EmbeddedToxicityScorer, tmp_path: Path) -> None:
    texts = [f"The person is a {w}." for w in ("nurse", "thief", "hero", "idiot", "doctor", "killer", "saint")]
    one_by_one = EmbeddedToxicityScorer(batch_size=1, cache_dir=tmp_path).score(texts)
    batched = embedded.score(texts)
    np.testing.assert_allclose(one_by_one.to_numpy(), batched.to_numpy(), atol=1e-5)


def test_cache_means_a_rerun_computes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = EmbeddedToxicityScorer(cache_dir=tmp_path)
    scores = first.score(list(PINNED))
    assert first.cache_path.parent == tmp_path and first.cache_path.is_file()
    second = EmbeddedToxicityScorer(cache_dir=tmp_path)

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model ran although every text was cached")

    monkeypatch.setattr(second, "predict", boom)
    assert second.score(list(reversed(PINNED))).equals(scores.iloc[::-1].reset_index(drop=True))
    with pytest.raises(AssertionError, match="model ran"):
        second.score(["a sentence nobody scored before"])


def test_empty_input_gives_an_empty_frame(embedded: EmbeddedToxicityScorer) -> None:
    frame = embedded.score([])
    assert frame.shape == (0, 6) and list(frame.columns) == list(embedded.attributes)


def test_non_string_input_is_refused(embedded: EmbeddedToxicityScorer) -> None:
    with pytest.raises(TypeError, match="text #1"):
        embedded.score(["ok", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="single string"):
        embedded.score("not a list")


def test_describe_identifies_the_model(embedded: EmbeddedToxicityScorer) -> None:
    info = embedded.describe()
    assert info["weights_sha256"] == "03ed4c3f52be909821a8c3263de2dcd65b95908bfae6f569c9a9cec90538a4b3"
    assert info["label_map"]["identity_hate"] == "IDENTITY_ATTACK"
    json.dumps(info)


class _Evil:
    def __reduce__(self):  # the classic pickle payload: run a shell command
        import os

        return (os.system, ("echo pwned",))


def test_allow_list_unpickler_rejects_a_malicious_pickle(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.pickle"
    path.write_bytes(pickle.dumps({"word_index": _Evil()}))
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to unpickle (posix|nt)\.system"):
        load_tokenizer(path)
    with pytest.raises(pickle.UnpicklingError, match=r"builtins\.eval"):
        AllowListUnpickler(open_bytes(pickle.dumps(eval))).load()


def test_allow_list_rejects_a_non_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "other.pickle"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(pickle.UnpicklingError, match="does not hold a Keras Tokenizer"):
        load_tokenizer(path)


def open_bytes(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)


# ------------------------------------------------------------------------------------------------ registry
@pytest.mark.parametrize("spec", ["detoxify", "hf:", "HF:x", ""])
def test_unknown_spec_lists_choices(spec: str) -> None:
    with pytest.raises(ValueError, match="embedded, surrogate, hf:<model id or path>, perspective"):
        get_toxicity_scorer(spec)


@pytest.mark.parametrize("spec", ["precomputed", "none"])
def test_lead_handled_specs_say_so(spec: str) -> None:
    with pytest.raises(ValueError, match="handled by the metric's aggregation"):
        get_toxicity_scorer(spec)


def test_label_file_schema_check() -> None:
    maps = label_maps()
    assert maps["unitary/unbiased-toxic-roberta"]["map"]["homosexual_gay_or_lesbian"] is None
    with pytest.raises(ValueError, match="unknown attribute"):
        _validate_label_file(
            {"schema_version": 1, "attributes": list(toxicity.ALL_ATTRIBUTES), "maps": {"x": {"map": {"a": "RUDE"}}}}
        )
    with pytest.raises(ValueError, match="more than one label"):
        _validate_label_file(
            {
                "schema_version": 1,
                "attributes": list(toxicity.ALL_ATTRIBUTES),
                "maps": {"x": {"map": {"a": "INSULT", "b": "INSULT"}}},
            }
        )


# ------------------------------------------------------------------------------------------------ hf scorer
TOXIC_BERT_LABELS = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]


def tiny_classifier(folder: Path, labels: list[str]) -> Path:
    """A random 1-layer BERT classifier with a WordPiece tokenizer from a small local vocab."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = ["the", "person", "is", "a", "nurse", "thief", "hero", "stupid", "gay", "man", "."]
    vocab = folder / "vocab.txt"
    folder.mkdir(parents=True, exist_ok=True)
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(words) + 5,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        id2label=dict(enumerate(labels)),
        label2id={lbl: i for i, lbl in enumerate(labels)},
        problem_type="multi_label_classification",
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def test_hf_scorer_sigmoid_and_toxic_bert_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = tiny_classifier(tmp_path / "model", TOXIC_BERT_LABELS)
    scorer = get_toxicity_scorer(f"hf:{folder}", cache_dir=tmp_path / "cache", batch_size=2)
    assert isinstance(scorer, HFToxicityScorer)
    assert scorer.name == f"hf:{folder}" and scorer.map_source == "unitary/toxic-bert"
    assert scorer.attributes == (*ATTRIBUTES, "SEVERE_TOXICITY")
    texts = ["The person is a nurse.", "The gay man is a thief.", "a stupid hero", "The person is a nurse."]
    frame = scorer.score(texts)

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        want = torch.sigmoid(model(**tok(texts, padding=True, return_tensors="pt")).logits).numpy()
    column_of = {"TOXICITY": 0, "SEVERE_TOXICITY": 1, "PROFANITY": 2, "THREAT": 3, "INSULT": 4, "IDENTITY_ATTACK": 5}
    for attr, j in column_of.items():
        np.testing.assert_allclose(frame[attr].to_numpy(), want[:, j], atol=1e-5)
    info = scorer.describe()
    assert info["weights_sha256"] and info["label_map"]["obscene"] == "PROFANITY"

    again = get_toxicity_scorer(f"hf:{folder}", cache_dir=tmp_path / "cache")
    monkeypatch.setattr(again, "_load", lambda: (_ for _ in ()).throw(AssertionError("model loaded")))
    assert again.score(texts).equals(frame)


def test_hf_user_label_map_and_unusable_labels(tmp_path: Path) -> None:
    folder = tiny_classifier(tmp_path / "generic", ["LABEL_0", "LABEL_1"])
    with pytest.raises(ValueError, match=r"none of which maps to an attribute.*label_map"):
        get_toxicity_scorer(f"hf:{folder}", cache_dir=tmp_path)
    scorer = get_toxicity_scorer(f"hf:{folder}", cache_dir=tmp_path, label_map={"LABEL_1": "INSULT", "LABEL_0": None})
    assert scorer.attributes == ("INSULT",)
    assert list(scorer.score(["a nurse"]).columns) == ["INSULT"]
    with pytest.raises(ValueError, match="lacks"):
        get_toxicity_scorer(f"hf:{folder}", cache_dir=tmp_path, label_map={"toxic": "TOXICITY"})
    with pytest.raises(ValueError, match="unknown attribute"):
        get_toxicity_scorer(f"hf:{folder}", cache_dir=tmp_path, label_map={"LABEL_1": "RUDENESS"})


def test_hf_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'/nonexistent': no such folder"):
        get_toxicity_scorer("hf:/nonexistent", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="no such folder"):
        get_toxicity_scorer(f"hf:{tmp_path / 'nope'}", cache_dir=tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="cannot load the config"):
        get_toxicity_scorer(f"hf:{tmp_path / 'empty'}", cache_dir=tmp_path)


# ------------------------------------------------------------------------------------------------ base class
class CountingScorer(toxicity.ToxicityScorer):
    """A model-free scorer: TOXICITY = len(text)/100; records what it was asked to score."""

    name = "counting"
    attributes = ("TOXICITY",)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.seen: list[str] = []

    def describe(self) -> dict:
        return {"scorer": "counting"}

    def _score_batches(self, texts, indices, *, progress):
        for start in range(0, len(texts), 2):
            chunk = texts[start : start + 2]
            self.seen += chunk
            if "crash" in chunk:
                raise RuntimeError("scorer crashed")
            yield [{"TOXICITY": len(t) / 100} for t in chunk]


def test_base_dedups_caches_per_chunk_and_works_across_threads(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    scorer = CountingScorer(cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match="crashed"):
        scorer.score(["a", "bb", "a", "crash", "ccc"])
    assert scorer.seen == ["a", "bb", "crash", "ccc"]  # "a" once; the second chunk [crash, ccc] failed
    fresh = CountingScorer(cache_dir=tmp_path)
    with ThreadPoolExecutor(1) as pool:  # the cache connection is used from another thread
        frame = pool.submit(fresh.score, ["ccc", "a", "bb", "a"]).result()
    assert fresh.seen == ["ccc"]  # the first chunk [a, bb] was cached before the crash; the failed one was not
    assert frame["TOXICITY"].tolist() == [0.03, 0.01, 0.02, 0.01]
