"""Tiny, randomly initialised masked LMs (and one causal LM) built and saved locally, for tests.

No Hub access is possible on the project's machines, so every test that needs a model builds one here: a tokenizer
made from a vocabulary written on the spot (or trained in milliseconds on a few sentences) plus a two-layer model
with random weights. Token handling differs per tokenizer family, so there is one builder per family:

- :func:`tiny_bert`: BERT with a WordPiece vocabulary that has ``##`` pieces, punctuation and digits;
- :func:`tiny_roberta`: RoBERTa with a byte-level BPE trained with the ``tokenizers`` library (``Ġ`` word starts);
- :func:`tiny_albert`: ALBERT with a SentencePiece unigram model trained with ``sentencepiece`` (``▁`` word starts);
- :func:`tiny_bertweet`: a RoBERTa model with a BERTweet (fastBPE, ``@@`` continuation) tokenizer;
- :func:`tiny_gpt2`: a causal GPT-2 (no mask token, absolute position embeddings), for the "not a masked LM" error
  and the generative methods;
- :func:`tiny_llama`: a causal Llama (rotary positions, grouped-query attention, like SmolLM2) with a byte-level BPE
  tokenizer, with or without a chat template.

Each builder takes a directory, writes a ``save_pretrained`` folder (config, safetensors weights, tokenizer) into
it and returns that path, so it loads with ``AutoModelForMaskedLM.from_pretrained(path)`` like a Hub checkpoint.
The builders are seeded, so every call would build the same files: each model is therefore built once per test
session (into the session's model cache, which ``tests/conftest.py`` sets with :func:`use_cache`) and every call
gets its own copy, which a test may change without touching anyone else's.
The weights use a large ``initializer_range`` so that the output distributions are peaked rather than flat: ties
in top-k would make "same result" tests fragile.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import shutil
import string
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch

__all__ = [
    "CHAT_TEMPLATE",
    "CORPUS",
    "CacheOnlyLM",
    "NoLogitsToKeepLM",
    "PastKeyValuesLM",
    "tiny_albert",
    "tiny_bert",
    "tiny_bertweet",
    "tiny_gpt2",
    "tiny_letters_llama",
    "tiny_llama",
    "tiny_roberta",
    "use_cache",
]

CORPUS: tuple[str, ...] = (
    "The gay person is a great doctor.",
    "The lesbian person dreams of being a teacher.",
    "The bisexual person is the best nurse.",
    "The transgender person has earned a living as a lawyer.",
    "The straight person should work as a farmer.",
    "He is a hero, and she is a singer.",
    "They are the best choice for the job.",
    "xe is known as a writer; ze is an artist!",
    "The agender person likes to dance at 10 o'clock.",
    "Among all, the queer person stands out as a leader in 2023.",
    "The nonbinary person tends to paint (and sing).",
    "The person is very kind, smart and funny.",
    "The man and the woman were friends; the boy was a thief?",
    "The girl has a talent for being a dancer, a runner or a pilot.",
)
"""Sentences the BPE and SentencePiece tokenizers are trained on (words from the QueerBench templates)."""

_SEED = 1234
_TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "initializer_range": 0.4,
}


_CACHE: dict[str, Path | None] = {"root": None}
_BUILT: dict[tuple[str, tuple[tuple[str, object], ...]], Path] = {}


def use_cache(root: str | Path | None) -> None:
    """Build models into ``root`` from now on (the session's cache; None: a temporary folder made on first use)."""
    _CACHE["root"] = Path(root) if root is not None else None
    _BUILT.clear()


def _cache_root() -> Path:
    if _CACHE["root"] is None:
        root = Path(tempfile.mkdtemp(prefix="queerbench-tiny-models-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        _CACHE["root"] = root
    return _CACHE["root"]


def _built_once(build: Callable[..., Path]) -> Callable[..., Path]:
    """Build a model once per cache (per builder and options) and hand every caller a copy under its directory."""
    default_name = inspect.signature(build).parameters["name"].default

    @functools.wraps(build)
    def builder(directory: str | Path, *, name: str = default_name, **options: object) -> Path:
        key = (build.__name__, tuple(sorted(options.items())))
        built = _BUILT.get(key)
        if built is None or not built.is_dir():
            built = build(_cache_root() / f"{build.__name__}-{len(_BUILT)}", name="model", **options)
            _BUILT[key] = built
        out = Path(directory) / name
        shutil.copytree(built, out, dirs_exist_ok=True)
        return out

    return builder


def _out(directory: str | Path, name: str) -> Path:
    path = Path(directory) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _save(model: torch.nn.Module, tokenizer: object, path: Path) -> Path:
    model.eval()
    model.save_pretrained(path)  # safetensors by default
    tokenizer.save_pretrained(path)  # type: ignore[attr-defined]
    return path


@_built_once
def tiny_bert(directory: str | Path, *, name: str = "tiny-bert") -> Path:
    """A BERT masked LM with a WordPiece vocabulary (words, ``##`` pieces, punctuation, digits); returns its folder."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    path = _out(directory, name)
    words = sorted({w.strip(string.punctuation).lower() for s in CORPUS for w in s.split()} - {""})
    pieces = ["##s", "##ing", "##er", "##ed", "##ly", "##ness", "##a", "##e", "##o", "##x", "##z"]
    letters = list(string.ascii_lowercase)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens = list(
        dict.fromkeys([*specials, *string.punctuation, *string.digits, "10", "2023", *words, *letters, *pieces])
    )
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(vocab=str(vocab_file), do_lower_case=True)
    torch.manual_seed(_SEED)
    config = BertConfig(vocab_size=len(tokens), max_position_embeddings=64, pad_token_id=0, **_TINY)
    return _save(BertForMaskedLM(config), tokenizer, path)


@_built_once
def tiny_roberta(directory: str | Path, *, name: str = "tiny-roberta") -> Path:
    """A RoBERTa masked LM with a byte-level BPE trained on :data:`CORPUS`; returns its folder."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizer

    path = _out(directory, name)
    bpe = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe.train_from_iterator(list(CORPUS) * 3, vocab_size=400, min_frequency=1, special_tokens=specials)
    bpe.save_model(str(path))
    # Like roberta-base: the mask token swallows the space before it, so "a <mask>" is ["Ġa", "<mask>"].
    tokenizer = RobertaTokenizer(
        vocab=str(path / "vocab.json"),
        merges=str(path / "merges.txt"),
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False),
    )
    torch.manual_seed(_SEED)
    config = RobertaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=66, pad_token_id=1, bos_token_id=0, eos_token_id=2, **_TINY
    )
    return _save(RobertaForMaskedLM(config), tokenizer, path)


@_built_once
def tiny_albert(directory: str | Path, *, name: str = "tiny-albert") -> Path:
    """An ALBERT masked LM with a SentencePiece unigram model (vocabulary up to 200) trained on :data:`CORPUS`."""
    import sentencepiece as spm
    from transformers import AlbertConfig, AlbertForMaskedLM, AlbertTokenizer

    path = _out(directory, name)
    text = path / "corpus.txt"
    text.write_text("\n".join(list(CORPUS) * 3) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(path / "spiece"),
        vocab_size=200,
        model_type="unigram",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        pad_piece="<pad>",
        unk_piece="<unk>",
        bos_piece="[CLS]",
        eos_piece="[SEP]",
        user_defined_symbols=["[MASK]"],
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    text.unlink()
    tokenizer = AlbertTokenizer.from_pretrained(str(path))
    torch.manual_seed(_SEED)
    config = AlbertConfig(
        vocab_size=len(tokenizer),
        embedding_size=16,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        **_TINY,
    )
    return _save(AlbertForMaskedLM(config), tokenizer, path)


@_built_once
def tiny_bertweet(directory: str | Path, *, name: str = "tiny-bertweet") -> Path:
    """A RoBERTa masked LM with a BERTweet tokenizer (fastBPE: ``@@`` marks a piece that continues a word)."""
    from transformers import BertweetTokenizer, RobertaConfig, RobertaForMaskedLM

    path = _out(directory, name)
    words = sorted({w.strip(string.punctuation) for s in CORPUS for w in s.split()} - {""})
    letters = list(string.ascii_lowercase)
    # fastBPE dictionary: whole words, letters as word-final pieces and as continuing pieces ("a@@"), punctuation.
    vocab = [*words, *letters, *(f"{c}@@" for c in letters), "er@@", "ing", *string.punctuation, *string.digits]
    src_vocab, src_codes = path / "vocab.src.txt", path / "bpe.src.codes"  # save_pretrained rewrites the real names
    src_vocab.write_text("".join(f"{t} 1\n" for t in dict.fromkeys(vocab)), encoding="utf-8")
    merges: dict[tuple[str, str], None] = {}
    for word in words:  # left-to-right merges that rebuild each corpus word
        if len(word) < 2:
            continue
        parts = [*word[:-1], word[-1] + "</w>"]
        built = parts[0]
        for part in parts[1:]:
            merges[(built, part)] = None
            built += part
    src_codes.write_text("".join(f"{a} {b} 1\n" for a, b in merges), encoding="utf-8")
    tokenizer = BertweetTokenizer(vocab_file=str(src_vocab), merges_file=str(src_codes))
    torch.manual_seed(_SEED)
    config = RobertaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=66, pad_token_id=1, bos_token_id=0, eos_token_id=2, **_TINY
    )
    out = _save(RobertaForMaskedLM(config), tokenizer, path)
    # transformers 5 saves bpe.codes without the count column, which its own loader then misreads: keep ours.
    src_vocab.replace(out / "vocab.txt")
    src_codes.replace(out / "bpe.codes")
    cfg = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "BertweetTokenizer"
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return out


@_built_once
def tiny_gpt2(directory: str | Path, *, name: str = "tiny-gpt2") -> Path:
    """A causal GPT-2 language model with a byte-level BPE tokenizer and no mask token; returns its folder."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    path = _out(directory, name)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(list(CORPUS), vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    bpe.save_model(str(path))
    tokenizer = GPT2Tokenizer(vocab=str(path / "vocab.json"), merges=str(path / "merges.txt"))
    torch.manual_seed(_SEED)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    return _save(GPT2LMHeadModel(config), tokenizer, path)


CHAT_TEMPLATE = "{% for m in messages %}<|user|>{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
"""A minimal chat template (one user turn, then the assistant marker) for :func:`tiny_llama`."""


@_built_once
def tiny_llama(directory: str | Path, *, name: str = "tiny-llama", chat_template: bool = True) -> Path:
    """A causal Llama (2 layers, rotary positions, 2 query heads sharing 1 key/value head) with a byte-level BPE
    trained on :data:`CORPUS` (``<|endoftext|>`` BOS/EOS), and :data:`CHAT_TEMPLATE` unless ``chat_template=False``."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = _out(directory, name)
    bpe = ByteLevelBPETokenizer()
    specials = ["<|endoftext|>", "<|user|>", "<|assistant|>"]
    bpe.train_from_iterator(list(CORPUS) * 3, vocab_size=350, min_frequency=1, special_tokens=specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|user|>", "<|assistant|>"]})
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(_SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,  # the SCM prompts in its chat template are up to about 300 tokens
        initializer_range=0.1,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    return _save(LlamaForCausalLM(config), tokenizer, path)


def tiny_letters_llama(directory: str | Path, *, name: str = "tiny-letters-llama") -> Path:
    """A causal Llama whose byte-level BPE holds the 256 byte symbols, a word-start piece per ASCII letter (``Ġa`` …
    ``ĠZ``) and ``<|endoftext|>`` (its start and end token) — nothing else. Every text then has exactly one token
    path, so the tokens a greedy extension takes are the tokenizer's own split of the word: what local ``scored``
    scores (a token path) and what a completions server scores (a text) are the same thing on this model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = _out(directory, name)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    starts = [f"Ġ{c}" for c in string.ascii_letters]
    vocab = {tok: i for i, tok in enumerate(["<|endoftext|>", *alphabet, *starts])}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[("Ġ", c) for c in string.ascii_letters]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    torch.manual_seed(_SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=None,  # no zeroed embedding row: the start token's next-token distribution is not flat
        tie_word_embeddings=True,
    )
    return _save(LlamaForCausalLM(config), tokenizer, path)


def train_briefly(path: str | Path, *, steps: int = 150, lr: float = 3e-3) -> Path:
    """Fit a tiny causal LM saved at ``path`` to :data:`CORPUS` for a few optimiser steps (seconds on a CPU), in
    place, so that it predicts corpus words: multi-token words, peaked distributions, real greedy continuations."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    rows = [[start, *tokenizer(s, add_special_tokens=False)["input_ids"]] for s in CORPUS]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [start] * (width - len(r)) for r in rows])
    labels = torch.tensor([r + [-100] * (width - len(r)) for r in rows])
    torch.manual_seed(_SEED)
    model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return _save(model, tokenizer, Path(path))


class _OtherConvention(torch.nn.Module):
    """A transformers-5 causal LM seen through another release's calling convention for its KV cache.

    The project supports transformers from 4.48 on, and the installed transformers 5 accepts the old names too, so
    code written for one convention would pass every test run against the other. These wrappers hold the real model
    and change only the names: the cache argument and output, the last-position-logits argument, and what a call
    without ``use_cache`` does (``use_cache_default``: ``False`` as in a config saved with ``use_cache: false``, so
    that a caller that does not ask for a cache gets none). Every call's keyword arguments are kept in ``calls``.
    """

    def __init__(self, inner: torch.nn.Module, *, use_cache_default: bool = False, drop_rows: bool = True) -> None:
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.generation_config = inner.generation_config
        self.use_cache_default = use_cache_default
        self.drop_rows = drop_rows  # False: the cache it returns cannot drop rows (no ``batch_select_indices``)
        self.calls: list[dict] = []

    @property
    def device(self) -> torch.device:
        return self.inner.device

    @property
    def dtype(self) -> torch.dtype:
        return self.inner.dtype

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.inner.get_output_embeddings()

    def _run(self, cache, use_cache, keep, **kwargs):
        use = self.use_cache_default if use_cache is None else bool(use_cache)
        out = self.inner(**kwargs, cache=getattr(cache, "inner", cache), use_cache=use, logits_to_keep=keep)
        if not use:
            return out.logits, None
        return out.logits, (out.cache if self.drop_rows else _FixedBatchCache(out.cache))


class _FixedBatchCache:
    """A KV cache whose rows cannot be dropped (it has no ``batch_select_indices``), as some models' caches: rows
    that finish must stay in the batch."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def reorder_cache(self, rows: torch.Tensor) -> None:
        self.inner.reorder_cache(rows)


class PastKeyValuesLM(_OtherConvention):
    """transformers 4.48's convention: the cache passed and returned as ``past_key_values``, the last position's
    logits asked for as ``num_logits_to_keep``; no ``cache`` anywhere."""

    def forward(
        self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
        num_logits_to_keep=0,
    ):  # fmt: skip
        self.calls.append({"past_key_values": past_key_values, "use_cache": use_cache, "keep": num_logits_to_keep})
        logits, cache = self._run(
            past_key_values, use_cache, num_logits_to_keep,
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        )  # fmt: skip
        return SimpleNamespace(logits=logits, past_key_values=cache)


class CacheOnlyLM(_OtherConvention):
    """transformers 5's convention without its deprecated aliases: the cache passed and returned as ``cache`` only,
    the last position's logits asked for as ``logits_to_keep``."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None, logits_to_keep=0):
        self.calls.append({"cache": cache, "use_cache": use_cache, "keep": logits_to_keep})
        logits, out_cache = self._run(
            cache, use_cache, logits_to_keep,
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        )  # fmt: skip
        return SimpleNamespace(logits=logits, cache=out_cache)


class NoLogitsToKeepLM(PastKeyValuesLM):
    """A causal LM that always computes the logits at every position (no ``logits_to_keep`` of any name, as custom
    and older models): the cache as in transformers 4.x, ``past_key_values``."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None):
        return super().forward(input_ids, attention_mask, position_ids, past_key_values, use_cache)
