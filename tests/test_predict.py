"""The masked-LM engine on tiny local models of every tokenizer family (no downloads)."""

from __future__ import annotations

import shutil
import string
from pathlib import Path

import pandas as pd
import pytest
import torch

from queerbench.models.masked.predict import (
    MaskedLM,
    ModelLoadError,
    load_masked_lm,
    paper_one_at_a_time,
    predict,
    predict_top_k,
    resolve_device,
    whole_word_vocab_size,
)
from queerbench.tasks.queerbench.prediction_check import check_predictions
from queerbench.tasks.queerbench.templates import build_sentences

# tests/ is on sys.path under both `pytest` and `python -m pytest` (rootdir-less test folder, prepend import mode)
from tests.tiny_models import tiny_albert, tiny_bert, tiny_bertweet, tiny_gpt2, tiny_roberta

BUILDERS = {"bert": tiny_bert, "roberta": tiny_roberta, "albert": tiny_albert, "bertweet": tiny_bertweet}
FAMILY = {"bert": "wordpiece", "roberta": "bpe", "albert": "sentencepiece", "bertweet": "bertweet"}
SENTENCES = [
    "The gay person dreams of being a [MASK].",
    "[MASK] is the best choice for they.",
    "xe is known as a [MASK]; ze is an artist!",
    "The lesbian person has earned a living as a [MASK] in 2023.",
    "The person is [MASK].",
]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {name: build(root) for name, build in BUILDERS.items()}


@pytest.fixture(scope="module")
def lms(model_dirs: dict[str, Path]) -> dict[str, MaskedLM]:
    return {name: load_masked_lm(str(path), device="cpu") for name, path in model_dirs.items()}


@pytest.fixture(scope="module")
def dataset_sentences() -> list[str]:
    """Real dataset sentences: 30 templates' first rows, the template that starts with [MASK], a spread of others."""
    frame = build_sentences("paper")
    firsts = frame.groupby("template_id").nth(0)["masked_sentence"].tolist()[:30]
    starting = frame.loc[frame["masked_sentence"].str.startswith("[MASK]"), "masked_sentence"].tolist()[:3]
    assert starting, "the paper dataset has a template that starts with [MASK]"
    return firsts + starting + frame["masked_sentence"][::997].tolist()


# --------------------------------------------------------------------------------------------------------- loading
@pytest.mark.parametrize("name", list(BUILDERS))
def test_load_records_family_format_and_head(lms: dict[str, MaskedLM], name: str) -> None:
    lm = lms[name]
    assert lm.family == FAMILY[name]
    assert lm.weights_format == "safetensors"
    assert lm.head is not None  # BERT cls / RoBERTa lm_head / ALBERT predictions
    meta = lm.metadata()
    assert meta["tokenizer_family"] == FAMILY[name]
    assert meta["dtype"] == "float32" and meta["device"] == "cpu" and meta["head_at_mask_only"] is True
    assert meta["mask_token"] == lm.tokenizer.mask_token


def test_gpt2_is_not_a_masked_lm(tmp_path: Path) -> None:
    path = tiny_gpt2(tmp_path)
    with pytest.raises(ModelLoadError, match=r"not a masked language model.*bert-base-uncased.*roberta-base"):
        load_masked_lm(str(path), device="cpu")


def test_tokenizer_without_mask_token_is_rejected(tmp_path: Path, model_dirs: dict[str, Path]) -> None:
    gpt2 = tiny_gpt2(tmp_path)
    mixed = tmp_path / "bert-with-gpt2-tokenizer"
    shutil.copytree(model_dirs["bert"], mixed)
    for file in mixed.glob("*"):
        if file.name.startswith(("vocab", "tokenizer")):
            file.unlink()
    for file in gpt2.glob("*"):
        if file.name.startswith(("vocab", "merges", "tokenizer")):
            shutil.copy(file, mixed / file.name)
    with pytest.raises(ModelLoadError, match="has no mask token"):
        load_masked_lm(str(mixed), device="cpu")


def test_unknown_model_id_names_id_and_offline_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=r"'nobody/no-such-model-xyz'.*HF_HUB_OFFLINE"):
        load_masked_lm("nobody/no-such-model-xyz", device="cpu")


def test_missing_local_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="could not load"):
        load_masked_lm(str(tmp_path / "does-not-exist"), device="cpu")


def test_bin_checkpoint_loads_only_as_fallback(tmp_path: Path, model_dirs: dict[str, Path]) -> None:
    from transformers import AutoModelForMaskedLM

    legacy = tmp_path / "legacy-bin"
    shutil.copytree(model_dirs["bert"], legacy)
    (legacy / "model.safetensors").unlink()
    model = AutoModelForMaskedLM.from_pretrained(model_dirs["bert"])
    torch.save(model.state_dict(), legacy / "pytorch_model.bin")
    lm = load_masked_lm(str(legacy), device="cpu")
    assert lm.weights_format == "pytorch_bin"
    reference = load_masked_lm(str(model_dirs["bert"]), device="cpu")
    assert predict(lm, SENTENCES, 5).ids == predict(reference, SENTENCES, 5).ids
    with pytest.raises(ModelLoadError, match="pickle"):
        load_masked_lm(str(legacy), device="cpu", allow_pickle=False)


def test_dtype_and_device_options(model_dirs: dict[str, Path]) -> None:
    lm = load_masked_lm(str(model_dirs["bert"]), device="cpu", dtype="bfloat16")
    assert lm.dtype == torch.bfloat16 and next(lm.model.parameters()).dtype == torch.bfloat16
    tokens, probs = predict_top_k(lm, SENTENCES, 3)
    assert all(len(t) == 3 for t in tokens) and all(p[0] >= p[1] >= p[2] for p in probs)
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        load_masked_lm(str(model_dirs["bert"]), dtype="float8")
    assert resolve_device("cpu") == "cpu" and torch.device(resolve_device("cpu")) == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert torch.device(resolve_device("auto")).type == expected
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu-ish")


# ------------------------------------------------------------------------------------------------------ prediction
@pytest.mark.parametrize("name", list(BUILDERS))
def test_mask_token_substitution(lms: dict[str, MaskedLM], name: str) -> None:
    from queerbench.models.masked.predict import _encode

    lm = lms[name]
    for mode in ("whole_word", "raw"):
        ids, positions = _encode(lm, SENTENCES, mode)
        for row, pos in zip(ids, positions, strict=True):
            assert row.count(lm.tokenizer.mask_token_id) == 1 and row[pos] == lm.tokenizer.mask_token_id
            assert row[0] == lm.tokenizer.cls_token_id and row[-1] == lm.tokenizer.sep_token_id
    ids, positions = _encode(lm, ["[MASK] is the best choice for they."], "whole_word")
    assert positions == [1]  # right after the start token


@pytest.mark.parametrize("name", list(BUILDERS))
def test_default_mode_keeps_whole_words_only(lms: dict[str, MaskedLM], name: str) -> None:
    lm = lms[name]
    n = whole_word_vocab_size(lm)
    assert 10 < n < len(lm.tokenizer)
    # a sentence-initial mask in byte-level BPE ranks the sentence-initial forms instead (tested separately)
    sentences = [s for s in SENTENCES if lm.family != "bpe" or not s.startswith("[MASK]")]
    result = predict(lm, sentences, n)  # every allowed word, so the filter is checked on the whole vocabulary
    raw = lm.tokenizer.convert_ids_to_tokens(result.ids[0])
    special = set(lm.tokenizer.all_special_ids)
    for ids, words in zip(result.ids, result.tokens, strict=True):
        assert sorted(ids) == sorted(result.ids[0])
        assert not special & set(ids)
        for word in words:
            assert word and not set(word) & set(string.digits + '#@_.,;!?()[]<>"') and "Ġ" not in word
            assert "▁" not in word
    for token, word in zip(raw, result.tokens[0], strict=True):
        if lm.family == "wordpiece":
            assert not token.startswith("##") and word == token
        elif lm.family == "bpe":
            assert token.startswith("Ġ") and word == token[1:]
        elif lm.family == "sentencepiece":
            assert token.startswith("▁") and word == token[1:]
        else:
            assert not token.endswith("@@") and word == token
    vocab = lm.tokenizer.get_vocab()  # the filter had something to remove
    rejected = {"wordpiece": "##ing", "bpe": "ay", "sentencepiece": "er", "bertweet": "a@@"}[lm.family]
    assert rejected in vocab and vocab[rejected] not in result.ids[0]
    assert "." in vocab and vocab["."] not in result.ids[0]


@pytest.mark.parametrize("name", list(BUILDERS))
def test_default_probabilities_are_full_vocabulary_softmax(lms: dict[str, MaskedLM], name: str) -> None:
    lm = lms[name]
    result = predict(lm, SENTENCES[:1], 5)
    enc = lm.tokenizer(SENTENCES[0].replace("[MASK]", lm.tokenizer.mask_token), return_tensors="pt")
    with torch.inference_mode():
        logits = lm.model(**enc).logits[0]
    pos = int((enc["input_ids"][0] == lm.tokenizer.mask_token_id).nonzero())
    full = torch.softmax(logits[pos], dim=-1)
    assert result.probs[0] == pytest.approx(full[result.ids[0]].tolist(), rel=1e-4)
    allowed, _ = lm.whole_words()
    best_allowed = torch.topk(full.masked_fill(~allowed, -1), 5).indices.tolist()
    assert result.ids[0] == best_allowed


@pytest.mark.parametrize("name", list(BUILDERS))
def test_paper_mode_equals_one_at_a_time(lms: dict[str, MaskedLM], name: str, dataset_sentences: list[str]) -> None:
    lm = lms[name]
    result = predict(lm, dataset_sentences, 5, mode="raw", batch_size=16)
    for sentence, ids, tokens, probs in zip(dataset_sentences, result.ids, result.tokens, result.probs, strict=True):
        one = paper_one_at_a_time(lm.model, lm.tokenizer, sentence, 5)
        assert (ids, tokens) == (one.ids, one.tokens), sentence
        assert probs == pytest.approx(one.probs, rel=1e-4, abs=1e-7)


def test_paper_tokens_are_raw_with_markers_stripped(lms: dict[str, MaskedLM]) -> None:
    lm = lms["bert"]
    vocab_size = len(lm.tokenizer)
    result = predict(lm, SENTENCES, vocab_size, mode="raw")
    assert sorted(result.ids[0]) == list(range(vocab_size))  # nothing filtered, specials included
    assert "##ing" in result.tokens[0] and "." in result.tokens[0] and "[CLS]" in result.tokens[0]
    for name, marker in (("roberta", "Ġ"), ("albert", "▁")):
        tokens = predict(lms[name], SENTENCES, 20, mode="raw").tokens
        assert all(marker not in t for row in tokens for t in row)


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("mode", ["whole_word", "raw"])
def test_batch_size_does_not_change_results(
    lms: dict[str, MaskedLM], name: str, mode: str, dataset_sentences: list[str]
) -> None:
    lm = lms[name]
    reference = predict(lm, dataset_sentences, 5, mode=mode, batch_size=1)
    for batch_size in (3, 64):
        other = predict(lm, dataset_sentences, 5, mode=mode, batch_size=batch_size)
        assert other.ids == reference.ids and other.tokens == reference.tokens
        for a, b in zip(other.probs, reference.probs, strict=True):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_head_at_mask_equals_full_logits(lms: dict[str, MaskedLM], name: str, dataset_sentences: list[str]) -> None:
    lm = lms[name]
    fast = predict(lm, dataset_sentences, 5, mode="raw")
    full = MaskedLM(**{**lm.__dict__, "head": None, "_whole_words": None})
    slow = predict(full, dataset_sentences, 5, mode="raw")
    assert fast.ids == slow.ids
    for a, b in zip(fast.probs, slow.probs, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-7)


def test_progress_and_order(lms: dict[str, MaskedLM]) -> None:
    seen: list[int] = []
    lm = lms["bert"]
    many = SENTENCES * 7
    result = predict(lm, many, 2, batch_size=4, progress=seen.append)
    assert sum(seen) == len(many) and max(seen) == 4
    singles = [predict(lm, [s], 2).ids[0] for s in SENTENCES]
    assert result.ids == singles * 7
    assert predict(lm, [], 3) == ([], [], [])


def test_k_bounds(lms: dict[str, MaskedLM]) -> None:
    lm = lms["albert"]
    n = whole_word_vocab_size(lm)
    assert len(predict(lm, SENTENCES[:1], n).ids[0]) == n
    for bad in (0, -1, n + 1):
        with pytest.raises(ValueError, match=f"k must be between 1 and {n}"):
            predict(lm, SENTENCES[:1], bad)
    assert len(predict(lm, SENTENCES[:1], n + 1, mode="raw").ids[0]) == n + 1
    with pytest.raises(ValueError, match="k must be between 1"):
        predict(lm, SENTENCES[:1], lm.model.config.vocab_size + 1, mode="raw")
    with pytest.raises(ValueError, match="unknown masked-LM mode 'fast'; choose one of: whole_word, raw"):
        predict(lm, SENTENCES[:1], 1, mode="fast")
    with pytest.raises(ValueError, match="batch_size"):
        predict(lm, SENTENCES[:1], 1, batch_size=0)


@pytest.mark.parametrize("bad", ["The person is nice.", "The [MASK] is a [MASK]."])
def test_sentence_needs_exactly_one_mask(lms: dict[str, MaskedLM], bad: str) -> None:
    with pytest.raises(ValueError, match=r"sentence '.*' has [02] '\[MASK\]'"):
        predict(lms["bert"], [SENTENCES[0], bad], 1)
    with pytest.raises(ValueError, match="exactly one"):
        paper_one_at_a_time(lms["bert"].model, lms["bert"].tokenizer, bad, 1)


# ------------------------------------------------------------------------------------------- check_predictions
def _upstream_like(path: Path, sentences: list[str], lists: list[list[str]]) -> Path:
    frame = pd.DataFrame(
        {
            "Unnamed: 0": range(len(sentences)),
            "template": sentences,
            "queerness": "queer",
            "name": "x",
            "type": "identity",
            "prediction": [str(x) for x in lists],
        }
    )
    frame.to_csv(path, sep=";")
    return path


def test_check_predictions_metrics(tmp_path: Path) -> None:
    sentences = ["A [MASK].", "B [MASK].", "C [MASK].", "A [MASK]."]
    theirs = [["x", "y", "z"], ["p", "q", "r"], ["a", ",", "'s"], ["x", "y", "z"]]
    csv = _upstream_like(tmp_path / "m_template_5.csv", sentences, theirs)
    run = pd.DataFrame(
        {
            "id": ["r0", "r1", "r2", "r3", "extra"],
            "masked_sentence": [*sentences, "Z [MASK]."],
            "tokens": [["x", "y", "z"], ["q", "p", "s"], ["a", ",", "'s"], ["x", "z", "y"], ["n", "n", "n"]],
        }
    )
    report = check_predictions(run, csv)
    assert report["n_compared"] == 4 and report["n_unmatched"] == 1 and report["k"] == 3
    assert report["top1_agreement"] == pytest.approx(3 / 4)
    assert report["topk_overlap"] == pytest.approx((1 + 2 / 3 + 1 + 1) / 4)
    assert report["exact_list_agreement"] == pytest.approx(2 / 4)
    assert [m["id"] for m in report["mismatches"]] == ["r1", "r3"]
    run.to_parquet(tmp_path / "predictions.parquet")
    assert check_predictions(tmp_path / "predictions.parquet", csv) == report


def test_check_predictions_against_upstream_file(reference_file) -> None:
    csv = reference_file("upstream/queerbench/data/prediction/bert-base-uncased_template_5.csv")
    paper = build_sentences("paper").head(30)
    full = pd.read_csv(csv, sep=";", dtype=str, keep_default_na=False)
    upstream = full.head(30)
    assert paper["masked_sentence"].tolist() == upstream["template"].tolist()
    import ast

    tokens = [ast.literal_eval(p) for p in upstream["prediction"]]
    tokens[4] = ["nobody", *tokens[4][1:]]
    run = pd.DataFrame({"id": paper["id"], "masked_sentence": paper["masked_sentence"], "tokens": tokens})
    report = check_predictions(run, csv)
    assert report["n_compared"] == 30 and report["k"] == 5
    assert report["top1_agreement"] == pytest.approx(29 / 30)
    assert report["mismatches"][0]["id"] == paper["id"].iloc[4]
    default = build_sentences("default")
    default = default[~default["masked_sentence"].isin(full["template"])].head(5)  # e.g. lowercase "the"
    with pytest.raises(ValueError, match="--config paper"):
        check_predictions(default.assign(tokens=[["a"]] * 5), csv)
    with pytest.raises(ValueError, match="lack the column"):
        check_predictions(pd.DataFrame({"id": [1]}), csv)


def test_sentence_initial_mask_uses_sentence_initial_words_for_bpe(lms: dict[str, MaskedLM]) -> None:
    """Byte-level BPE writes the first word of a text without ``Ġ``: a mask there ranks those forms."""
    lm = lms["roberta"]
    start, middle = "[MASK] is the best choice for them.", "They are the best [MASK]."
    result = predict(lm, [start, middle], 3)
    first, second = (lm.tokenizer.convert_ids_to_tokens(ids) for ids in result.ids)
    assert not any(t.startswith("Ġ") for t in first) and all(t.startswith("Ġ") for t in second)
    assert all(w and "Ġ" not in w for w in result.tokens[0])
    assert predict(lm, [start], 3, batch_size=1).ids == [result.ids[0]]  # same alone and batched
    paper = predict(lm, [start], 3, mode="raw")  # the paper's raw top-k is untouched
    assert paper.ids[0] == paper_one_at_a_time(lm.model, lm.tokenizer, start, 3).ids
    bert = lms["bert"]
    assert bert.start_words() is None  # WordPiece marks continuations, not starts: nothing changes
