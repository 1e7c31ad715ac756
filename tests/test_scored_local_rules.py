"""The ``scored`` method's rules, fast: tiny random causal LMs built in-process, checked against a brute-force reading.

Every expectation here is computed independently of :mod:`queerbench.models.causal_blanks.local`'s batched, cached code: the
candidates come from a plain re-implementation of the documented procedure (top-N word-start tokens after the prefix,
greedy extension by plain forward passes, the cap, the whole-word rule), every log-probability from one plain forward
pass over the filled sentence, the ranking from summed probabilities per lowercased word, the continuation table
from decoding each id. The models are random (peaked by a large initialisation, so that no two candidates tie) and
untrained: their words are nonsense, but every branch of the procedure (multi-token words, words dropped at the cap,
sentence-initial blanks, blanks with nothing after them) is exercised. Built once per module in well under a second,
so that mutation testing can afford this file per mutant (``tools/mutation_modules.toml``).
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from queerbench.models.causal_blanks import local as scored
from queerbench.models.causal_blanks.local import (
    Candidate,
    ScoredLM,
    _encode,
    _gather_logprobs,
    _n_inputs,
    _output_size,
    score_blanks,
    sentence_logprob_reference,
    split_blank,
    start_token_id,
)
from queerbench.models.causal_blanks.local import (
    rank_candidates as _rank,
)
from queerbench.models.masked.vocab_filter import WORD as _WORD
from queerbench.models.masked.vocab_filter import sentence_start_table, whole_word_table
from tests.tiny_models import CORPUS, CacheOnlyLM, NoLogitsToKeepLM, PastKeyValuesLM

SENTENCES = [
    "The gay person is a [MASK].",
    "[MASK] is the best choice for the job.",
    "The straight person was appointed as a [MASK] in their organization.",
    "The person is very [MASK], smart and funny.",
    "The nonbinary person tends to [MASK]",  # nothing after the blank: the word's own probability
    "[MASK] are friends.",
    "The lesbian person dreams of being a [MASK].",
]
EOT = "<|endoftext|>"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _bpe(specials: list[str]) -> ByteLevelBPETokenizer:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(list(CORPUS) * 3, vocab_size=600, min_frequency=1, special_tokens=specials)
    return bpe


def _gpt2_tokenizer() -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=_bpe([EOT])._tokenizer, eos_token=EOT)


def _gpt2(tok: PreTrainedTokenizerFast, n_positions: int = 64) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tok), n_positions=n_positions, n_embd=16, n_layer=2, n_head=2, initializer_range=0.3
    )
    config.bos_token_id = config.eos_token_id = 0
    return GPT2LMHeadModel(config).eval()


def _llama() -> ScoredLM:
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_bpe([EOT, "<|user|>"])._tokenizer, bos_token=EOT, eos_token=EOT, pad_token=EOT
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|user|>"]})
    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        initializer_range=0.3,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return ScoredLM(LlamaForCausalLM(config).eval(), tok)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def lm(request: pytest.FixtureRequest) -> ScoredLM:
    if request.param == "gpt2":
        tok = _gpt2_tokenizer()
        return ScoredLM(_gpt2(tok), tok)
    return _llama()


# ------------------------------------------------------------------------------------------------ reference ---
def _plain_logprobs(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)


def _prefix_suffix(lm: ScoredLM, sentence: str) -> tuple[list[int], list[int]]:
    """Prefix (start token + text before the blank) and suffix (the text after it: a byte-level BPE splits words and
    punctuation before merging, so the text after a word tokenizes as it does alone)."""
    before, after = sentence.split("[MASK]")
    tok = lm.tokenizer
    start = [tok.convert_tokens_to_ids(EOT)] if EOT in tok.get_vocab() else []
    prefix = start + (tok(before.rstrip(" "))["input_ids"] if before.strip() else [])
    return prefix, tok(after)["input_ids"] if after else []


def _continues(tok, i: int) -> bool:
    """An id continues a word: not special or added, and decodes to letters with no leading space."""
    return i not in tok.all_special_ids and i not in tok.added_tokens_decoder and tok.decode([i]).isalpha()


def brute_candidates(lm: ScoredLM, sentence: str, n_first: int, cap: int) -> dict[tuple[int, ...], float]:
    """word ids → log P(word + suffix | prefix), by the documented procedure with one plain forward pass per step."""
    prefix, suffix = _prefix_suffix(lm, sentence)
    first = _plain_logprobs(lm.model, prefix)[-1]
    table = sentence_start_table if sentence.startswith("[MASK]") else whole_word_table
    allowed = table(lm.tokenizer, "bpe", _output_size(lm.model))[0]
    tops = first.masked_fill(~allowed, float("-inf")).topk(n_first).indices.tolist()
    out = {}
    for t in tops:
        word = [t]
        while True:
            nxt = int(_plain_logprobs(lm.model, prefix + word)[-1].argmax())
            if not _continues(lm.tokenizer, nxt):
                break
            if len(word) >= cap:
                word = []  # unfinished at the cap: dropped
                break
            word.append(nxt)
        if word and _WORD.fullmatch(lm.tokenizer.decode(word).strip()):
            lp = _plain_logprobs(lm.model, prefix + word + suffix)
            n = len(prefix)
            out[tuple(word)] = float(sum(lp[n - 1 + j, t] for j, t in enumerate(word + suffix)))
    return out


# ---------------------------------------------------------------------------------------------------- tests ---
def test_split_blank_and_its_errors() -> None:
    assert split_blank("The [MASK] is kind.") == ("The", " is kind.")
    assert split_blank("[MASK] are.") == ("", " are.")
    assert split_blank("A  \t [MASK]") == ("A  \t", "")  # only spaces are stripped before the blank
    assert split_blank("Call X [MASK].") == ("Call X", ".")
    with pytest.raises(ValueError, match=r"^sentence 'no blank' has 0 '\[MASK\]' placeholders; each sentence needs "):
        split_blank("no blank")
    with pytest.raises(ValueError, match=r"has 2 '\[MASK\]' placeholders; each sentence needs exactly one$"):
        split_blank("[MASK] and [MASK]")
    with pytest.raises(ValueError, match=r"^sentence None has 0 "):
        split_blank(None)  # type: ignore[arg-type]


def test_start_token_rules() -> None:
    from tokenizers.processors import TemplateProcessing

    gpt2 = _gpt2_tokenizer()
    assert start_token_id(gpt2) == gpt2.convert_tokens_to_ids(EOT) == 0  # the document separator
    # a tokenizer that adds its own BOS: that one, though the vocabulary has <|endoftext|> too
    bpe = _bpe([EOT, "<s>", "</s>"])
    bpe.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    bos = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")
    assert start_token_id(bos) == 1
    # one that only appends a token: not a start token (the first id is the text's own): the separator
    bpe.post_processor = TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    appends = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")
    assert start_token_id(appends) == 0
    # no <|endoftext|>: the BOS, else the EOS, else none
    plain = _bpe(["<s>", "</s>"])
    assert (
        start_token_id(PreTrainedTokenizerFast(tokenizer_object=plain._tokenizer, bos_token="<s>", eos_token="</s>"))
        == 0
    )
    assert start_token_id(PreTrainedTokenizerFast(tokenizer_object=plain._tokenizer, eos_token="</s>")) == 1
    assert start_token_id(PreTrainedTokenizerFast(tokenizer_object=plain._tokenizer)) is None


def test_output_size_is_the_head_s_not_the_config_s() -> None:
    tok = _gpt2_tokenizer()
    model = _gpt2(tok)
    model.config.vocab_size = 7  # a padded head disagrees with the config: the head's rows count
    assert _output_size(model) == len(tok)
    headless = GPT2Model(model.config)  # no output embeddings: the config's size
    assert _output_size(headless) == 7
    model.lm_head = torch.nn.Identity()  # an output layer without a weight matrix: the config's size
    assert _output_size(model) == 7


def test_tables(lm: ScoredLM) -> None:
    tok = lm.tokenizer
    size = _output_size(lm.model)
    assert lm.family == "bpe" and lm.start_id == 0
    expected = torch.tensor([_continues(tok, i) for i in range(size)])
    assert torch.equal(lm.continuation, expected) and 100 < int(expected.sum()) < size - 100
    assert torch.equal(lm.word_start, whole_word_table(tok, "bpe", size)[0])
    assert torch.equal(lm.sentence_start, sentence_start_table(tok, "bpe", size)[0])
    assert not torch.equal(lm.word_start, lm.sentence_start)
    if "<|user|>" in tok.get_vocab():
        assert not lm.continuation[tok.convert_tokens_to_ids("<|user|>")]


def test_added_tokens_never_continue_a_word() -> None:
    tok = _gpt2_tokenizer()
    tok.add_tokens(["zork"])  # an added, non-special, alphabetic token
    model = _gpt2(tok)
    lm = ScoredLM(model, tok)
    assert tok.decode([tok.convert_tokens_to_ids("zork")]).isalpha()
    assert not lm.continuation[tok.convert_tokens_to_ids("zork")]
    assert lm.continuation[tok.convert_tokens_to_ids("ing")]


def test_continuation_tables_of_other_families(tmp_path) -> None:
    from transformers import AutoTokenizer

    from tests.tiny_models import tiny_albert, tiny_bert

    for path, marker in ((tiny_bert(tmp_path), "##"), (tiny_albert(tmp_path), "▁")):
        tok = AutoTokenizer.from_pretrained(path)
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=8, n_layer=1, n_head=1))
        lm = ScoredLM(model, tok)
        special = set(tok.all_special_ids)
        for i, token in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))):
            if marker == "##":
                want = token.startswith("##") and token[2:].isalpha()
            else:
                want = not token.startswith("▁") and token.isalpha()
            assert bool(lm.continuation[i]) == (want and i not in special), token
        assert int(lm.continuation.sum()) > 5


def test_metadata(lm: ScoredLM) -> None:
    meta = lm.metadata()
    assert meta == {
        "tokenizer_family": "bpe",
        "start_token": EOT,
        "device": "cpu",
        "dtype": "float32",
        "architecture": type(lm.model).__name__,
    }
    none = ScoredLM(lm.model, lm.tokenizer)
    none.start_id = None
    assert none.metadata()["start_token"] is None


def test_encode(lm: ScoredLM) -> None:
    for sentence in SENTENCES:
        enc = _encode(lm, sentence)
        assert (enc.prefix, enc.suffix) == _prefix_suffix(lm, sentence)
        assert enc.at_start == sentence.startswith("[MASK]")
    # a word glued to the text after it ("[MASK]er"): "word" + "er" merge across the blank, so the suffix is
    # tokenized alone
    tok = lm.tokenizer
    assert tok("The worder")["input_ids"][: len(tok("The word")["input_ids"])] != tok("The word")["input_ids"]
    enc = _encode(lm, "The [MASK]er is kind.")
    assert enc.suffix == tok("er is kind.")["input_ids"]


def test_encode_never_lets_the_tokenizer_add_its_own_tokens() -> None:
    """A tokenizer that adds its BOS itself: the BOS starts the prefix once, and neither the text before the blank
    nor a suffix tokenized on its own carries another."""
    from tokenizers.processors import TemplateProcessing

    bpe = _bpe([EOT, "<s>"])
    bpe.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>")
    lm = ScoredLM(_gpt2(tok), tok)
    plain = {"add_special_tokens": False}
    assert lm.start_id == 1 and tok("The")["input_ids"][0] == 1
    enc = _encode(lm, "The [MASK]er is kind.")  # "word" + "er" merge: the suffix is tokenized alone
    assert enc.prefix == [1, *tok("The", **plain)["input_ids"]]
    assert enc.suffix == tok("er is kind.", **plain)["input_ids"]
    enc = _encode(lm, "[MASK] is kind.")
    assert enc.prefix == [1] and enc.suffix == tok(" is kind.", **plain)["input_ids"]


def test_encode_takes_the_suffix_as_it_follows_a_word(tmp_path) -> None:
    """SentencePiece marks a word start with "▁": "." after a word is "." but alone it is "▁." — the suffix must be
    the tokens that follow a word, at the start of a sentence ("Word") and after text ("… word") alike."""
    from transformers import AutoTokenizer

    from tests.tiny_models import tiny_albert

    tok = AutoTokenizer.from_pretrained(tiny_albert(tmp_path))
    torch.manual_seed(0)
    lm = ScoredLM(GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=8, n_layer=1, n_head=1)), tok)
    plain = {"add_special_tokens": False}
    for sentence, probe in (("The person is [MASK].", "The person is word"), ("[MASK].", "Word")):
        enc = _encode(lm, sentence)
        assert enc.suffix == tok(probe + ".", **plain)["input_ids"][len(tok(probe, **plain)["input_ids"]) :]
        assert enc.suffix != tok(".", **plain)["input_ids"]
        assert enc.prefix[0] == lm.start_id == tok.cls_token_id  # ALBERT adds its [CLS] itself
        before = sentence.split(" [MASK]")[0] if sentence[0] != "[" else ""
        assert enc.prefix == [tok.cls_token_id, *(tok(before, **plain)["input_ids"] if before else [])]


@pytest.mark.parametrize("cap", [1, 2, 4])
def test_candidates_are_the_brute_force_ones(lm: ScoredLM, cap: int) -> None:
    k, per_k = 3, 4
    res = score_blanks(lm, SENTENCES, k, candidates_per_k=per_k, max_word_tokens=cap, batch_size=3)
    lengths = []
    for sentence, cands in zip(SENTENCES, res.candidates, strict=True):
        want = brute_candidates(lm, sentence, k * per_k, cap)
        got = {c.word_ids: c.logprob for c in cands}
        assert got.keys() == want.keys(), sentence
        for ids, lp in want.items():
            assert got[ids] == pytest.approx(lp, abs=1e-4), (sentence, ids)
        _, suffix = _prefix_suffix(lm, sentence)
        for c in cands:
            assert c.suffix_ids == tuple(suffix) and c.word == lm.tokenizer.decode(list(c.word_ids)).strip()
        lengths += [len(ids) for ids in want]
        # ranking: summed probability per lowercased word, renormalised over all candidate words
        mass: dict[str, float] = {}
        for c in cands:
            mass[c.word.lower()] = mass.get(c.word.lower(), 0.0) + math.exp(want[c.word_ids])
        top = sorted(mass, key=lambda w: -mass[w])[:k]
        i = SENTENCES.index(sentence)
        assert res.tokens[i] == top
        assert res.probs[i] == pytest.approx([mass[w] / sum(mass.values()) for w in top], rel=1e-4)
        assert res.logprobs[i] == pytest.approx([math.log(mass[w]) for w in top], abs=1e-4)
    # every branch ran: one-token words and, above the cap of 1, longer ones; fewer words kept at a lower cap
    assert min(lengths) == 1 and max(lengths) == min(cap, max(lengths)) and (cap == 1 or max(lengths) > 1)


def _calls_at_limit(
    lm: ScoredLM, monkeypatch, limit: int, sentences: list[str], cap: int, *, k: int = 3, **kwargs
) -> tuple[list[tuple[int, int, int]], scored.ScoredPredictions]:
    """score_blanks with ``MAX_POSITIONS = limit``: every forward call's (rows, width, attention mask's dims), width 0
    for a prefix pass (no cache), and the result."""
    calls: list[tuple[int, int, int]] = []

    def pre(module, args, kw):
        rows, width = kw["input_ids"].shape
        calls.append((rows, width if kw.get("cache") is not None else 0, kw["attention_mask"].dim()))

    monkeypatch.setattr(scored, "MAX_POSITIONS", limit)
    handle = lm.model.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        res = score_blanks(lm, sentences, k, max_word_tokens=cap, batch_size=len(sentences), **kwargs)
    finally:
        handle.remove()
    return calls, res


# suffixes of 2 and 4 tokens beside SENTENCES' 0, 1, 3, 5, 8 and 13: each width of the first pass's branches
EXTRA = ["The person is [MASK] kind.", "The person is a [MASK] and a singer."]


def test_the_first_pass_runs_each_sentence_once_in_chunks_that_fit(lm: ScoredLM, monkeypatch) -> None:
    """Every suffix length scores as the brute-force reading. The first pass (the calls with a 4-D mask, one row per
    sentence) runs each sentence exactly once: the sentences of one suffix length together while their branches fit
    in ``MAX_POSITIONS``, one sentence a call when even one does not; the other calls never carry more rows."""
    sentences = SENTENCES + EXTRA
    assert {len(_encode(lm, s).suffix) for s in sentences} >= {0, 1, 2, 3, 4}

    def first_pass_rows(limit: int) -> list[int]:
        calls, res = _calls_at_limit(lm, monkeypatch, limit, sentences, 4, candidates_per_k=3, k=2)
        for sentence, cands in zip(sentences, res.candidates, strict=True):
            want = brute_candidates(lm, sentence, 2 * 3, 4)
            assert {c.word_ids: c.logprob for c in cands} == pytest.approx(want, abs=1e-4), sentence
        return [rows for rows, _, dim in calls if dim == 4]

    widths = Counter(scored._n_inputs([0], _encode(lm, s).suffix) for s in sentences)
    assert sorted(first_pass_rows(10_000)) == sorted(widths.values())  # one call per suffix length
    assert first_pass_rows(1) == [1] * len(sentences)  # nothing fits: one sentence a call, each once


def test_the_words_that_go_on_run_in_chunks_that_fit(lm: ScoredLM, monkeypatch) -> None:
    """The continuation passes (calls on a prefix cache with a 2-D mask: one row per word that goes on) stay within
    ``MAX_POSITIONS`` (rows × width) unless a call is one row, and feed each word once per token it grows: the same
    rows in all and the same results, whatever the limit."""
    sentences = SENTENCES + EXTRA

    def continuation_calls(limit: int) -> tuple[list[tuple[int, int]], scored.ScoredPredictions]:
        calls, res = _calls_at_limit(lm, monkeypatch, limit, sentences, 4)
        return [(rows, width) for rows, width, dim in calls if dim == 2 and width > 0], res

    wide, base = continuation_calls(100_000)
    assert any(rows > 1 for rows, _ in wide)
    for limit in (1, 40):
        calls, res = continuation_calls(limit)
        assert res.tokens == base.tokens
        assert [p for row in res.probs for p in row] == pytest.approx([p for row in base.probs for p in row], abs=1e-5)
        assert sum(rows for rows, _ in calls) == sum(rows for rows, _ in wide)
        assert all(rows == 1 or rows * width <= limit for rows, width in calls), limit
        assert limit > 1 or all(rows == 1 for rows, _ in calls)


def test_a_lower_cap_drops_words_that_go_on(lm: ScoredLM) -> None:
    wide = score_blanks(lm, SENTENCES, 3, max_word_tokens=4)
    one = score_blanks(lm, SENTENCES, 3, max_word_tokens=1)
    n_wide = sum(len(c) for c in wide.candidates)
    n_one = sum(len(c) for c in one.candidates)
    assert n_one < n_wide
    assert all(len(c.word_ids) == 1 for cands in one.candidates for c in cands)


def test_rank_by_hand() -> None:
    def c(word: str, lp: float, n: int = 1) -> Candidate:
        return Candidate(word, tuple(range(n)), (9,), lp)

    cands = [c("Doctor", math.log(0.1)), c("nurse", math.log(0.3), 2), c("doctor", math.log(0.2), 3), c("x", -9.0)]
    top, probs, logprobs, n_tokens = _rank(cands, 2)
    total = 0.1 + 0.3 + 0.2 + math.exp(-9.0)
    assert top == ["doctor", "nurse"]  # 0.1 + 0.2 for the two spellings beats 0.3
    assert probs == pytest.approx([0.3 / total, 0.3 / total])
    assert logprobs == pytest.approx([math.log(0.3), math.log(0.3)])
    assert n_tokens == [3, 2]  # the tokens of the spelling with the higher log-probability
    assert _rank(cands, 10)[0] == ["doctor", "nurse", "x"]
    assert _rank([], 3) == ([], [], [], [])


def test_small_pure_helpers() -> None:
    assert _n_inputs([1, 2], [3, 4, 5]) == 4 and _n_inputs([1, 2], []) == 2 and _n_inputs([1], [3]) == 1
    logits = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    targets = torch.tensor([[0, 5, 10], [3, 3, 1]])
    got = _gather_logprobs(logits, targets)
    want = torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None])[..., 0]
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-6)


def test_reference_logprob_equals_the_model_s_own_loss(lm: ScoredLM) -> None:
    prefix, cont = [0, 5, 9], [17, 4, 30]
    ids = torch.tensor([prefix + cont])
    labels = torch.tensor([[-100] * len(prefix) + cont])
    with torch.inference_mode():
        loss = float(lm.model(input_ids=ids, labels=labels).loss)
    assert sentence_logprob_reference(lm.model, prefix, cont) == pytest.approx(-loss * len(cont), abs=1e-4)


def test_batching_chunking_and_accounting(lm: ScoredLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Smaller batches and chunks change nothing; every forward call stays within the position budget; the tokens
    reported are the tokens fed; the prefix pass computes the last logits only; progress counts sentences."""
    base = score_blanks(lm, SENTENCES, 3, batch_size=32)
    calls: list[tuple[int, bool, int]] = []

    def pre(module, args, kwargs):
        calls.append((kwargs["input_ids"].numel(), kwargs.get("cache") is None, 0))

    def post(module, args, kwargs, output):
        n, is_prefix, _ = calls[-1]
        calls[-1] = (n, is_prefix, output.logits.shape[1])

    handles = [
        lm.model.register_forward_pre_hook(pre, with_kwargs=True),
        lm.model.register_forward_hook(post, with_kwargs=True),
    ]
    try:
        monkeypatch.setattr(scored, "MAX_POSITIONS", 30)
        monkeypatch.setattr(scored, "MAX_ROWS", 24)  # 2 sentences × 12 candidates per prefix batch
        ticks: list[int] = []
        small = score_blanks(lm, SENTENCES, 3, batch_size=32, progress=ticks.append)
    finally:
        for h in handles:
            h.remove()
    assert small.tokens == base.tokens
    for a, b in zip(small.candidates, base.candidates, strict=True):
        assert [c.word_ids for c in a] == [c.word_ids for c in b]
        assert [c.logprob for c in a] == pytest.approx([c.logprob for c in b], abs=1e-4)
    assert ticks == [2, 2, 2, 1]
    prefix_calls = [c for c in calls if c[1]]
    assert len(prefix_calls) == 4 and all(keep == 1 for _, _, keep in prefix_calls)
    widest = max(len(_encode(lm, s).suffix) for s in SENTENCES) + 4
    continuation = [n for n, is_prefix, _ in calls if not is_prefix]
    assert all(n <= max(30, 12 * widest) for n in continuation) and len(continuation) > 8
    assert small.tokens_run == sum(n for n, _, _ in calls)
    monkeypatch.setattr(scored, "MAX_ROWS", 5)  # fewer rows than one sentence's candidates: one sentence a batch
    ticks.clear()
    one = score_blanks(lm, SENTENCES[:3], 3, batch_size=32, progress=ticks.append)
    assert ticks == [1, 1, 1] and one.tokens == base.tokens[:3]


@pytest.mark.parametrize("convention", [PastKeyValuesLM, CacheOnlyLM, NoLogitsToKeepLM])
def test_other_transformers_conventions_score_the_same(lm: ScoredLM, convention) -> None:
    """The KV cache under transformers 4.48's name (``past_key_values``) and under transformers 5's without its
    aliases (``cache`` only), from a model that caches only when asked: the same candidates and scores; every call
    asks for the cache and the continuations run on the prefix's."""
    base = score_blanks(lm, SENTENCES, 3)
    wrapped = convention(lm.model)
    other = score_blanks(ScoredLM(wrapped, lm.tokenizer), SENTENCES, 3)
    assert other.tokens == base.tokens
    for a, b in zip(other.candidates, base.candidates, strict=True):
        assert [c.word_ids for c in a] == [c.word_ids for c in b]
        assert [c.logprob for c in a] == pytest.approx([c.logprob for c in b], abs=1e-4)
    name = "cache" if convention is CacheOnlyLM else "past_key_values"
    assert all(c["use_cache"] is True for c in wrapped.calls)
    assert 0 < sum(c[name] is None for c in wrapped.calls) < len(wrapped.calls)  # prefixes, then on their cache


def test_a_single_sentence_batch_equals_its_batch_mates_run(lm: ScoredLM) -> None:
    together = score_blanks(lm, SENTENCES, 3, batch_size=7)
    for i, sentence in enumerate(SENTENCES):
        alone = score_blanks(lm, [sentence], 3)
        assert alone.tokens[0] == together.tokens[i]
        assert alone.probs[0] == pytest.approx(together.probs[i], abs=1e-5)
        assert alone.n_word_tokens[0] == together.n_word_tokens[i]


def test_more_candidates_asked_than_word_starts_exist(lm: ScoredLM) -> None:
    """A tiny vocabulary has fewer mid-sentence word starts (118 here) than 140 candidates, and more at the start
    (156): each sentence gets min(140, its own count), the brute-force reading with that N, the same alone as beside
    the other; never a token its table does not allow."""
    sentences = ["[MASK] are friends.", "The gay person is a [MASK]."]
    together = score_blanks(lm, sentences, 1, candidates_per_k=140, batch_size=2)
    counts = [int(lm.sentence_start.sum()), int(lm.word_start.sum())]
    assert counts[1] < 140 < counts[0]
    for i, sentence in enumerate(sentences):
        table = lm.sentence_start if i == 0 else lm.word_start
        alone = score_blanks(lm, [sentence], 1, candidates_per_k=140).candidates[0]
        got = {c.word_ids: c.logprob for c in together.candidates[i]}
        assert got == pytest.approx({c.word_ids: c.logprob for c in alone}, abs=1e-5)
        assert got == pytest.approx(brute_candidates(lm, sentence, min(140, counts[i]), 4), abs=1e-4)
        assert all(table[c.word_ids[0]] for c in together.candidates[i])


def test_n_word_tokens(lm: ScoredLM) -> None:
    assert [len(t) for t in score_blanks(lm, SENTENCES[:2]).tokens] == [5, 5]  # k = 5 unless asked
    res = score_blanks(lm, SENTENCES, 3)
    for cands, words, n_tokens in zip(res.candidates, res.tokens, res.n_word_tokens, strict=True):
        for w, n in zip(words, n_tokens, strict=True):
            assert n == len(max((c for c in cands if c.word.lower() == w), key=lambda c: c.logprob).word_ids)


def test_bad_arguments_are_refused_before_any_inference(lm: ScoredLM) -> None:
    for k in (0, -1, 1.5, "3"):
        with pytest.raises(ValueError, match=r"^k must be a positive integer, got "):
            score_blanks(lm, SENTENCES[:1], k)  # type: ignore[arg-type]
    for bad in ({"candidates_per_k": 0}, {"max_word_tokens": 0}, {"batch_size": 0}):
        with pytest.raises(ValueError, match=r"^candidates_per_k, max_word_tokens and batch_size must be at least 1$"):
            score_blanks(lm, SENTENCES[:1], 1, **bad)
    one = score_blanks(lm, SENTENCES[:1], 1, candidates_per_k=1, max_word_tokens=1, batch_size=1)
    assert len(one.tokens[0]) <= 1 and len(one.candidates[0]) <= 1
    with pytest.raises(ValueError, match="placeholders"):
        score_blanks(lm, [SENTENCES[0], "no blank"], 1)


def test_sentences_too_long_for_the_model(lm: ScoredLM) -> None:
    limit = 64 if isinstance(lm.model, GPT2LMHeadModel) else 128
    sentence = "The " + "very " * 20 + "kind person is a [MASK] here."
    enc = _encode(lm, sentence)
    room = limit - len(enc.prefix) - len(enc.suffix)
    assert room > 1
    score_blanks(lm, [sentence], 1, max_word_tokens=room)  # exactly at the limit: fine
    with pytest.raises(ValueError, match=rf"^sentence '.*' is too long for the model's {limit} positions$"):
        score_blanks(lm, [SENTENCES[0], sentence], 1, max_word_tokens=room + 1)


def test_half_precision_runs() -> None:
    tok = _gpt2_tokenizer()
    lm = ScoredLM(_gpt2(tok).to(torch.bfloat16), tok)
    res = score_blanks(lm, SENTENCES[:3], 3)
    assert lm.metadata()["dtype"] == "bfloat16"
    assert all(len(t) == 3 for t in res.tokens)
    full = ScoredLM(_gpt2(tok), tok)
    ref = score_blanks(full, SENTENCES[:3], 3)
    overlap = sum(len(set(a) & set(b)) for a, b in zip(res.tokens, ref.tokens, strict=True))
    assert overlap >= 6  # the same model at lower precision mostly agrees (a wrong mask would not)


def test_a_tokenizer_without_any_special_token() -> None:
    """No BOS, EOS, pad or separator: the text is scored from its own first token (and padded with id 0)."""
    tok = PreTrainedTokenizerFast(tokenizer_object=_bpe([])._tokenizer)
    lm = ScoredLM(_gpt2(tok), tok)
    assert lm.start_id is None and lm.pad_id == 0 and lm.metadata()["start_token"] is None
    mid = [s for s in SENTENCES if not s.startswith("[MASK]")]
    res = score_blanks(lm, mid, 3, batch_size=4)
    for sentence, cands in zip(mid, res.candidates, strict=True):
        assert _encode(lm, sentence).prefix == _prefix_suffix(lm, sentence)[0]
        want = brute_candidates(lm, sentence, 12, 4)
        got = {c.word_ids: c.logprob for c in cands}
        assert got.keys() == want.keys() and all(got[i] == pytest.approx(want[i], abs=1e-4) for i in want)


@pytest.mark.parametrize(
    ("shape", "chunks"),
    [
        ((0, 50), []),
        ((1, 50), [1]),
        ((2, 50), [2]),
        ((5, 50), [5]),
        ((10, 50), [5, 5]),
        ((11, 50), [5, 6]),  # a lone last position joins the chunk before it
        ((12, 50), [5, 5, 2]),
        ((3, 7, 50), [5, 5, 5, 6]),  # [rows, positions, vocabulary]: 21 positions
        ((1, 3, 2, 50), [6]),  # the first pass's [rows, candidates, width, vocabulary]: 6 positions
    ],
)
def test_the_log_softmax_runs_over_chunks_of_positions_with_the_same_values(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], chunks: list[int]
) -> None:
    monkeypatch.setattr(scored, "LSE_CHUNK_BYTES", 4 * 50 * 5)  # 5 positions of a 50-token vocabulary per call
    sizes: list[int] = []
    real = torch.logsumexp

    def recorded(x: torch.Tensor, dim: int) -> torch.Tensor:
        sizes.append(x.shape[0])
        return real(x, dim=dim)

    monkeypatch.setattr(torch, "logsumexp", recorded)
    gen = torch.Generator().manual_seed(len(shape) * 100 + shape[0])
    logits = torch.randn(shape, generator=gen) * 4
    targets = torch.randint(0, 50, shape[:-1], generator=gen)
    got = scored._gather_logprobs(logits, targets)
    want = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert got.shape == want.shape == shape[:-1]
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert sizes == chunks


def test_chunks_hold_about_lse_chunk_bytes_of_logits_and_at_least_two_positions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes: list[int] = []
    real = torch.logsumexp
    monkeypatch.setattr(torch, "logsumexp", lambda x, dim: sizes.append(x.shape[0]) or real(x, dim=dim))
    scored._gather_logprobs(torch.zeros(25, 49152), torch.zeros(25, dtype=torch.long))
    assert sizes == [10, 10, 5]  # 2 MiB / (4 bytes × 49,152) = 10 positions per call
    sizes.clear()
    monkeypatch.setattr(scored, "LSE_CHUNK_BYTES", 8)  # less than one position: still two per call
    scored._gather_logprobs(torch.zeros(4, 3), torch.zeros(4, dtype=torch.long))
    assert sizes == [2, 2]
