"""Which vocabulary entries count as whole words: a table per tokenizer family, with what is kept and what is not.

The filter decides what `default` can predict. Rejections alone are not enough: a filter that kept only ASCII
lowercase, or skipped byte-level decoding, would reject every piece and still pass; so each family also lists words
that must be kept (capitalised, inner apostrophe or hyphen, non-ASCII letters).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from queerbench.models.masked.vocab_filter import (
    detect_family,
    paper_token,
    sentence_start_table,
    whole_word,
    whole_word_table,
)
from tests.tiny_models import tiny_albert, tiny_bert, tiny_bertweet, tiny_roberta

BUILDERS = {"wordpiece": tiny_bert, "bpe": tiny_roberta, "sentencepiece": tiny_albert, "bertweet": tiny_bertweet}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("tok")
    return {family: AutoTokenizer.from_pretrained(str(build(root))) for family, build in BUILDERS.items()}


# (token as it appears in the vocabulary, word it stands for or None)
KEPT_EVERYWHERE = [("He", "He"), ("o'clock", "o'clock"), ("self-made", "self-made"), ("café", "café")]
TABLE: dict[str, list[tuple[str, str | None]]] = {
    "wordpiece": [
        ("doctor", "doctor"),
        *KEPT_EVERYWHERE,
        ("o’clock", "o’clock"),  # typographic apostrophe
        ("Ärztin", "Ärztin"),
        ("##ing", None),
        ("##s", None),
        (".", None),
        (",", None),
        ("'", None),
        ("-", None),
        ("10", None),
        ("2023", None),
        ("a1", None),
        ("x_y", None),
        ("self-", None),
        ("-made", None),
        ("'s", None),
        ("o''clock", None),
        ("[CLS]", None),
        ("", None),
    ],
    "bpe": [
        ("Ġdoctor", "doctor"),
        ("ĠHe", "He"),
        ("Ġo'clock", "o'clock"),
        ("Ġself-made", "self-made"),
        ("ĠcafÃ©", "café"),  # byte-level: "é" is the two byte characters "Ã©"
        ("ĠÃĦrztin", "Ärztin"),
        ("doctor", None),  # no Ġ: continues the previous word
        ("ing", None),
        ("He", None),  # the sentence-start form lives in sentence_start_table, not here
        ("Ġ", None),
        ("Ġ.", None),
        ("Ġ10", None),
        ("Ġa1", None),
        ("ĠcafÃ", None),  # half a UTF-8 character decodes to U+FFFD
        ("Ġ's", None),
        ("<s>", None),
        ("<mask>", None),
    ],
    "sentencepiece": [
        ("▁doctor", "doctor"),
        *[(f"▁{t}", w) for t, w in KEPT_EVERYWHERE],
        ("er", None),
        ("ing", None),
        ("▁", None),
        ("▁.", None),
        ("▁10", None),
        ("▁self-", None),
        ("<pad>", None),
        ("[MASK]", None),
    ],
    "bertweet": [
        ("doctor", "doctor"),
        *KEPT_EVERYWHERE,
        ("a@@", None),
        ("er@@", None),
        ("@@", None),
        (".", None),
        ("10", None),
        ("<s>", None),
        ("@USER", None),
    ],
}
KEPT_IN_VOCAB = {
    "wordpiece": {"doctor", "nurse", "teacher"},
    "bpe": {"person", "being", "the"},
    "sentencepiece": {"The", "dance", "sing"},
    "bertweet": {"doctor", "nurse", "The"},
}
CASES = [(family, token, word) for family, rows in TABLE.items() for token, word in rows]


@pytest.mark.parametrize(("family", "token", "word"), CASES)
def test_whole_word_table_per_family(tokenizers: dict[str, object], family: str, token: str, word: str | None):
    assert whole_word(token, family, tokenizers[family]) == word


def test_byte_level_decoding_needs_the_tokenizer():
    """Without a tokenizer only the marker is stripped, so byte characters stay and the entry is rejected."""
    assert whole_word("Ġdoctor", "bpe") == "doctor"
    assert whole_word("ĠcafÃ©", "bpe") is None


def test_a_vocabulary_without_markers_is_other_and_checked_as_is():
    assert whole_word("doctor", "other") == "doctor" and whole_word("Doctor", "other") == "Doctor"
    assert whole_word("##x", "other") is None and whole_word("x.", "other") is None


def test_detect_family(tokenizers: dict[str, object], tmp_path: Path):
    assert {family: detect_family(tok) for family, tok in tokenizers.items()} == {f: f for f in BUILDERS}
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(WordLevel({"[UNK]": 0, "doctor": 1, "nurse": 2}, unk_token="[UNK]"))
    model.pre_tokenizer = Whitespace()
    word_level = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]")
    assert detect_family(word_level) == "other"


@pytest.mark.parametrize("family", list(BUILDERS))
def test_whole_word_table_masks_specials_pieces_and_padding(tokenizers: dict[str, object], family: str):
    tok = tokenizers[family]
    size = len(tok) + 7  # a padded output layer: the extra ids are no token at all
    allowed, words = whole_word_table(tok, family, size)
    assert allowed.dtype == torch.bool and allowed.shape == (size,) and len(words) == size
    assert allowed.tolist() == [w is not None for w in words]
    assert not allowed[len(tok) :].any()
    assert not any(allowed[i] for i in tok.all_special_ids)
    tokens = tok.convert_ids_to_tokens(list(range(len(tok))))
    for i, token in enumerate(tokens):
        if i not in tok.all_special_ids:
            assert words[i] == whole_word(token, family, tok)
    kept = {w for w in words if w}
    assert KEPT_IN_VOCAB[family] <= kept  # whole words of the tokenizer's corpus survive
    assert 10 < allowed.sum() < len(tok)


def test_added_special_tokens_are_never_words(tmp_path: Path):
    from tokenizers import AddedToken

    tok = AutoTokenizer.from_pretrained(str(tiny_bert(tmp_path)))
    tok.add_tokens([AddedToken("specialword", special=True), AddedToken("plainword", special=False)])
    allowed, words = whole_word_table(tok, "wordpiece", len(tok))
    ids = tok.convert_tokens_to_ids(["specialword", "plainword"])
    assert words[ids[0]] is None and not allowed[ids[0]]
    assert words[ids[1]] == "plainword" and allowed[ids[1]]


def test_sentence_start_table_is_for_byte_level_bpe_only(tokenizers: dict[str, object]):
    for family in ("wordpiece", "sentencepiece", "bertweet"):
        assert sentence_start_table(tokenizers[family], family, len(tokenizers[family])) is None
    tok = tokenizers["bpe"]
    allowed, words = sentence_start_table(tok, "bpe", len(tok) + 3)
    assert allowed.tolist() == [w is not None for w in words] and not allowed[len(tok) :].any()
    vocab = tok.get_vocab()
    assert words[vocab["He"]] == "He"  # "He is a hero" starts a corpus sentence
    assert all(words[i] is None for t, i in vocab.items() if t.startswith("Ġ"))
    assert all(words[i] is None for i in tok.all_special_ids)
    assert words[vocab["."]] is None


def test_paper_token_strips_markers_only():
    assert paper_token("Ġdoctor") == "doctor" and paper_token("▁doctor") == "doctor"
    assert paper_token("##ing") == "##ing" and paper_token("He") == "He" and paper_token(None) == ""


class _Vocabulary:
    """Just a vocabulary: what ``detect_family`` reads of a tokenizer."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    def get_vocab(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}


@pytest.mark.parametrize(
    ("tokens", "family"),
    [
        (["##a", "##b", "##c", "Ġx", "Ġy", "▁z"], "wordpiece"),  # the most common marker wins
        (["##a", "Ġx", "Ġy", "▁z"], "bpe"),
        (["##a", "Ġx", "▁y", "▁z", "▁w"], "sentencepiece"),
        (["##a", "##b", "##c", "▁y", "▁z"], "wordpiece"),
        (["Ġa", "Ġb", "Ġc", "▁y", "▁z"], "bpe"),
        (["##a"], "wordpiece"),  # one marker is enough
        (["Ġa"], "bpe"),
        (["▁a"], "sentencepiece"),
        (["a", "b", "c#", "d▁"], "other"),  # markers count only at the start
    ],
)
def test_detect_family_by_the_most_common_marker(tokens: list[str], family: str):
    assert detect_family(_Vocabulary(tokens)) == family


def _bpe_with_accents(directory: Path):
    """A byte-level BPE (RoBERTa-style) whose vocabulary has whole non-ASCII words (``Ġcafé``, ``Café``)."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer
    from transformers import RobertaTokenizer

    corpus = ["Café is open. The café is a café.", "The naïve person went to the café.", "Ärztin and café."] * 20
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=300, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    bpe.save_model(str(directory))
    return RobertaTokenizer(
        vocab=str(directory / "vocab.json"),
        merges=str(directory / "merges.txt"),
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False),
    )


def test_byte_level_tables_decode_non_ascii_words(tmp_path: Path):
    tok = _bpe_with_accents(tmp_path)
    vocab = tok.get_vocab()
    assert "ĠcafÃ©" in vocab and "CafÃ©" in vocab  # the case this test is about is in the vocabulary
    allowed, words = whole_word_table(tok, "bpe", len(tok))
    assert words[vocab["ĠcafÃ©"]] == "café" and allowed[vocab["ĠcafÃ©"]]
    start_allowed, start_words = sentence_start_table(tok, "bpe", len(tok))
    assert start_allowed.dtype == torch.bool and start_words[vocab["CafÃ©"]] == "Café"
    assert start_allowed[vocab["CafÃ©"]] and not start_allowed[vocab["ĠcafÃ©"]]


def test_added_special_tokens_are_never_sentence_start_words(tmp_path: Path):
    from tokenizers import AddedToken

    tok = _bpe_with_accents(tmp_path)
    tok.add_tokens([AddedToken("Specialword", special=True), AddedToken("Plainword", special=False)])
    _, words = sentence_start_table(tok, "bpe", len(tok))
    special, plain = tok.convert_tokens_to_ids(["Specialword", "Plainword"])
    assert words[special] is None and words[plain] == "Plainword"
    assert all(words[i] is None for i in tok.all_special_ids)
