"""Masked-LM top-k engine: load any ``AutoModelForMaskedLM`` and fill the ``[MASK]`` of many sentences fast.

The paper's code ran one CPU forward pass per sentence and applied the LM head to every position. Here sentences are
sorted by length, padded per batch with an attention mask and run under :func:`torch.inference_mode`; the
encoder runs once per batch and the LM head (the largest matrix, hidden × vocabulary) only at the mask positions
wherever the architecture exposes it as one module (BERT ``cls``, RoBERTa ``lm_head``, ALBERT ``predictions``).
Unknown architectures fall back to full logits. Results do not depend on the batch size.

Two modes (:data:`MODES`; a task names its own, ``mlm_mode`` in its data file):

- ``whole_word`` (QueerBench's ``default``): top-k over whole-word vocabulary entries only (see
  :mod:`queerbench.models.masked.vocab_filter`); the reported probability of each word is its softmax probability
  over the full vocabulary.
- ``raw`` (``paper``, ``queergen``): what the paper's code did — the sentence wrapped as ``"[CLS] %s [SEP]"`` / ``"<s> %s </s>"`` and
  tokenized without adding special tokens, raw top-k over the full vocabulary, ``Ġ``/``▁`` stripped, ``##`` kept,
  no lowercasing, no filtering. :func:`paper_one_at_a_time` is that procedure literally, one sentence at a time.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from queerbench.base import env
from queerbench.models import fingerprint
from queerbench.models.device import PICKLE_ERRORS, ModelLoadError, refused_pickle, resolve_device
from queerbench.models.masked.vocab_filter import detect_family, paper_token, sentence_start_table, whole_word_table
from queerbench.models.requests import FILL_MASK_MODES

__all__ = [
    "MASK",
    "MODES",
    "MaskedLM",
    "ModelLoadError",
    "Predictions",
    "TopK",
    "load_masked_lm",
    "load_masked_lm_tokenizer",
    "max_top_k",
    "paper_one_at_a_time",
    "predict",
    "predict_top_k",
    "resolve_device",
    "whole_word_vocab_size",
]

MASK = "[MASK]"
"""The literal placeholder in the dataset's ``masked_sentence``; each model's own mask token replaces it."""
MODES: tuple[str, ...] = FILL_MASK_MODES
"""How the top-k is read: whole words only, or the raw top-k tokens as the papers' code read them."""


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES`, else a one-line ``ValueError`` naming them."""
    if mode not in MODES:
        raise ValueError(f"unknown masked-LM mode {mode!r}; choose one of: {', '.join(MODES)}")
    return mode


DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_MLM_EXAMPLES = "bert-base-uncased, roberta-base or albert-base-v2"
_HEAD_NAMES = ("cls", "lm_head", "predictions")


class TopK(NamedTuple):
    """The top-k of one sentence: vocabulary ids, tokens as reported, probabilities (best first)."""

    ids: list[int]
    tokens: list[str]
    probs: list[float]


class Predictions(NamedTuple):
    """Top-k for many sentences, in input order: ids, tokens as reported, probabilities."""

    ids: list[list[int]]
    tokens: list[list[str]]
    probs: list[list[float]]


@dataclass
class MaskedLM:
    """A loaded masked LM with everything a run needs to record about it."""

    model: Any
    tokenizer: Any
    model_id: str
    revision: str | None
    device: torch.device | str  # a resolved name ("cpu", "cuda", "mps"), or a device map's first device
    dtype: torch.dtype
    family: str  # "wordpiece" | "bpe" | "sentencepiece" | "bertweet" | "other"
    commit_hash: str | None = None
    weights_format: str = "safetensors"  # or "pytorch_bin" when the checkpoint has no safetensors file
    head: torch.nn.Module | None = None  # LM head applied at the mask positions only; None → full logits
    device_map: str | None = None  # accelerate's placement (--device-map), or None: the whole model on `device`
    _whole_words: tuple[torch.Tensor, list[str | None]] | None = field(default=None, repr=False)
    _start_words: tuple[bool, Any] | None = field(default=None, repr=False)

    def whole_words(self) -> tuple[torch.Tensor, list[str | None]]:
        """(allowed-id mask on the model's device, word per id), built once per model."""
        if self._whole_words is None:
            allowed, words = whole_word_table(self.tokenizer, self.family, _output_size(self.model))
            self._whole_words = (allowed.to(self.device), words)
        return self._whole_words

    def start_words(self) -> tuple[torch.Tensor, list[str | None]] | None:
        """The whole words as written at the start of a sentence, when they differ (byte-level BPE), else None."""
        if self._start_words is None:
            table = sentence_start_table(self.tokenizer, self.family, _output_size(self.model))
            self._start_words = (False, None) if table is None else (True, (table[0].to(self.device), table[1]))
        return self._start_words[1]

    def metadata(self) -> dict[str, Any]:
        """What a run should record so that its predictions can be traced to exact weights and settings."""
        import transformers

        return {
            "model": self.model_id,
            "revision": self.revision,
            "commit_hash": self.commit_hash,
            "weights_format": self.weights_format,
            "architecture": type(self.model).__name__,
            "tokenizer": type(self.tokenizer).__name__,
            "tokenizer_family": self.family,
            "mask_token": self.tokenizer.mask_token,
            "device": str(self.device),
            "device_map": self.device_map,
            "dtype": str(self.dtype).removeprefix("torch."),
            "head_at_mask_only": self.head is not None,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
        }


# ------------------------------------------------------------------------------------------------------- loading
def _parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")


def _fetch_error(what: str, model_id: str, revision: str | None, exc: Exception) -> ModelLoadError:
    rev = f" at revision {revision!r}" if revision else ""
    offline = env.hf_hub_offline()
    hint = (
        "HF_HUB_OFFLINE is set: only local folders and models already in the Hugging Face cache load"
        if offline
        else "if it is a Hub id, check the spelling and your network connection (or set HF_HUB_OFFLINE=1 to use the "
        "local cache only)"
    )
    # transformers' messages run on (URLs, links to docs): keep their first sentence
    first = " ".join(str(exc).split()).split(". ")[0].rstrip(".")
    return ModelLoadError(
        f"could not load the {what} of {model_id!r}{rev}: {type(exc).__name__}: {first[:200]}. "
        f"Pass a local folder saved with save_pretrained or a Hub id of a masked LM (e.g. {_MLM_EXAMPLES}); {hint}."
    )


def _not_mlm(model_id: str, why: str) -> ModelLoadError:
    return ModelLoadError(
        f"{model_id!r} is not a masked language model ({why}); QueerBench fills a [MASK] slot and needs a masked LM "
        f"such as {_MLM_EXAMPLES}"
    )


def _output_size(model: Any) -> int:
    out = model.get_output_embeddings()
    if out is not None and getattr(out, "weight", None) is not None:
        return int(out.weight.shape[0])
    return int(model.config.vocab_size)


def _find_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module that turns encoder states into vocabulary logits, if the model is exactly encoder + that head.

    Applying it to the gathered mask positions gives the same logits as the full forward at those positions. Any
    other layout (extra modules between encoder and head, or no recognised head) returns ``None``: full logits.
    """
    out = model.get_output_embeddings()  # type: ignore[operator]
    prefix = getattr(model, "base_model_prefix", "")
    children = {name for name, _ in model.named_children()}
    for name in _HEAD_NAMES:
        head = getattr(model, name, None)
        if (
            isinstance(head, torch.nn.Module)
            and out is not None
            and any(sub is out for sub in head.modules())
            and children == {prefix, name}
        ):
            return head
    return None


def load_masked_lm_tokenizer(model_id_or_path: str, *, revision: str | None = None) -> tuple[Any, Any]:
    """(config, tokenizer) of a masked LM, without its weights: seconds, so a run checks what needs only these
    (a masked-LM architecture, a mask token, ``--top-k`` within the vocabulary) before it loads the model.

    Raises :class:`ModelLoadError` like :func:`load_masked_lm`. Never runs remote code.
    """
    from transformers import MODEL_FOR_MASKED_LM_MAPPING, AutoConfig, AutoTokenizer

    common = {"revision": revision, "trust_remote_code": False}
    try:
        config = AutoConfig.from_pretrained(model_id_or_path, **common)
    except (OSError, ValueError) as exc:
        raise _fetch_error("configuration", model_id_or_path, revision, exc) from exc
    if type(config) not in MODEL_FOR_MASKED_LM_MAPPING:
        raise _not_mlm(model_id_or_path, f"its architecture {config.model_type!r} has no masked-LM head")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id_or_path, **common)
    except (OSError, ValueError) as exc:
        raise _fetch_error("tokenizer", model_id_or_path, revision, exc) from exc
    if tokenizer.mask_token is None or tokenizer.mask_token_id is None:
        raise _not_mlm(model_id_or_path, f"its tokenizer {type(tokenizer).__name__} has no mask token")
    return config, tokenizer


def max_top_k(config: Any, tokenizer: Any, mode: str) -> int:
    """The largest valid ``k`` for a model with this config and tokenizer: its whole-word vocabulary entries in
    ``whole_word`` mode, all vocabulary entries in ``raw`` mode (what :func:`predict` accepts)."""
    size = int(config.vocab_size)
    if check_mode(mode) == "raw":
        return size
    return int(whole_word_table(tokenizer, detect_family(tokenizer), size)[0].sum())


def load_masked_lm(
    model_id_or_path: str,
    *,
    device: str = "auto",
    dtype: str | torch.dtype = "float32",
    revision: str | None = None,
    allow_pickle: bool = True,
    device_map: str | None = None,
) -> MaskedLM:
    """Load a masked LM and its tokenizer by Hub id or local folder, ready for :func:`predict`.

    Never runs remote code. Prefers safetensors weights and falls back to a ``.bin`` checkpoint only when the
    repository has no safetensors file (recorded in ``weights_format``). The resolved commit hash is kept when the
    Hub reports one. Raises :class:`ModelLoadError` for a model that cannot be found or fetched, or that is not a
    masked LM (no mask token, or no masked-LM head for its architecture). ``allow_pickle=False`` refuses the
    ``.bin`` fallback (the Space uses it: a pickle from an arbitrary repository is never unpickled there).
    ``device_map`` (``auto``, ``balanced``, …) places the layers with accelerate instead of moving the model to
    ``device``; inputs then go to the model's first device. A model too large for the free memory is refused
    before its weights load (:func:`queerbench.models.memory.check_fits`).
    """
    from transformers import AutoModelForMaskedLM

    from queerbench.models.memory import check_device_map, check_fits

    torch_dtype = _parse_dtype(dtype)
    check_device_map(device_map)
    dev = resolve_device(device)
    common: dict[str, Any] = {"revision": revision, "trust_remote_code": False}
    config, tokenizer = load_masked_lm_tokenizer(model_id_or_path, revision=revision)
    dtype_name = str(torch_dtype).removeprefix("torch.")
    check_fits(model_id_or_path, config, dtype_name, dev, device_map, causal=False, revision=revision)
    if device_map is not None:
        common["device_map"] = device_map

    weights_format = "safetensors"
    try:
        model = AutoModelForMaskedLM.from_pretrained(
            model_id_or_path, config=config, dtype=torch_dtype, use_safetensors=True, **common
        )
    except OSError as first:
        if not allow_pickle:
            raise ModelLoadError(
                f"{model_id_or_path!r} has no loadable safetensors weights, and pickle (.bin) checkpoints are not "
                "allowed here; choose a model that ships model.safetensors"
            ) from first
        try:  # no safetensors file: allow a PyTorch .bin checkpoint, and say so in the metadata
            with warnings.catch_warnings():  # torch's note on the pickle protocol is no news to the user
                warnings.filterwarnings("ignore", message="Detected pickle protocol")
                model = AutoModelForMaskedLM.from_pretrained(
                    model_id_or_path, config=config, dtype=torch_dtype, use_safetensors=False, **common
                )
            weights_format = "pytorch_bin"
        except PICKLE_ERRORS as exc:  # a malicious or odd pickle: torch's safe loader refused it, nothing ran
            raise refused_pickle(model_id_or_path, exc) from None
        except (OSError, ValueError) as exc:
            raise _fetch_error("weights", model_id_or_path, revision, first) from exc
    if device_map is None:
        model.to(dev)
    else:
        dev = model.device  # the first device of the map: inputs go there
    model.eval()
    return MaskedLM(
        model=model,
        tokenizer=tokenizer,
        model_id=model_id_or_path,
        revision=revision,
        device=dev,
        dtype=torch_dtype,
        family=detect_family(tokenizer),
        commit_hash=fingerprint.hub_commit(model_id_or_path, revision),  # None for a local folder
        weights_format=weights_format,
        head=_find_head(model),
        device_map=device_map,
    )


# ---------------------------------------------------------------------------------------------------- prediction
def whole_word_vocab_size(lm: MaskedLM) -> int:
    """How many vocabulary entries the ``whole_word`` mode may predict (the largest valid ``k`` there)."""
    return int(lm.whole_words()[0].sum())


def _check_sentence(sentence: str) -> None:
    if not isinstance(sentence, str) or sentence.count(MASK) != 1:
        count = sentence.count(MASK) if isinstance(sentence, str) else 0
        raise ValueError(f"sentence {sentence!r} has {count} '{MASK}' placeholders; each sentence needs exactly one")


def _wrap_paper(tokenizer: Any, sentence: str) -> str:
    """The paper's input text: ``"[CLS] %s [SEP]"`` or ``"<s> %s </s>"`` with the model's own tokens."""
    return f"{tokenizer.cls_token} {sentence.replace(MASK, tokenizer.mask_token)} {tokenizer.sep_token}"


def _encode(lm: MaskedLM, sentences: Sequence[str], mode: str) -> tuple[list[list[int]], list[int]]:
    """Token ids per sentence and the index of its mask token."""
    tok = lm.tokenizer
    for sentence in sentences:
        _check_sentence(sentence)
    if mode == "raw":
        texts = [_wrap_paper(tok, s) for s in sentences]
        ids = tok(texts, add_special_tokens=False)["input_ids"]
    else:
        ids = tok([s.replace(MASK, tok.mask_token) for s in sentences], add_special_tokens=True)["input_ids"]
    limit = tok.model_max_length if isinstance(tok.model_max_length, int) and tok.model_max_length < 10**6 else None
    positions = []
    for sentence, row in zip(sentences, ids, strict=True):
        hits = [i for i, t in enumerate(row) if t == tok.mask_token_id]
        if len(hits) != 1:
            raise ValueError(
                f"sentence {sentence!r} gives {len(hits)} mask tokens after tokenization; expected exactly one"
            )
        if limit is not None and len(row) > limit:
            raise ValueError(f"sentence {sentence!r} is {len(row)} tokens long; the model accepts at most {limit}")
        positions.append(hits[0])
    return ids, positions


def _mask_scores(
    lm: MaskedLM, input_ids: torch.Tensor, attention: torch.Tensor | None, mask_pos: torch.Tensor
) -> torch.Tensor:
    """Vocabulary logits at the mask position of each row, shape ``[batch, vocab]``."""
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)
    if lm.head is not None:
        hidden = lm.model.base_model(input_ids=input_ids, attention_mask=attention).last_hidden_state
        # with a device map the last layer (and the head) may sit on another GPU than the inputs
        return lm.head(hidden.to(rows.device)[rows, mask_pos]).to(rows.device)
    return lm.model(input_ids=input_ids, attention_mask=attention).logits[rows, mask_pos]


def _pad_id(lm: MaskedLM) -> int:
    for value in (lm.tokenizer.pad_token_id, getattr(lm.model.config, "pad_token_id", None)):
        if value is not None:
            return int(value)
    return 0


def predict(
    lm: MaskedLM,
    sentences: Sequence[str],
    k: int = 5,
    *,
    mode: str = "whole_word",
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> Predictions:
    """Top-k fills of the single ``[MASK]`` in each sentence (ids, tokens, probabilities), in input order.

    ``mode`` is ``whole_word`` (whole words only, markers stripped) or ``raw`` (raw tokens as the paper's code read
    them). ``progress`` is called with the number of sentences finished after each batch.
    """
    whole = check_mode(mode) == "whole_word"
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    allowed, words = lm.whole_words()
    limit = int(allowed.sum()) if whole else _output_size(lm.model)
    if not isinstance(k, int) or k < 1 or k > limit:
        what = "whole-word vocabulary entries" if whole else "vocabulary entries"
        raise ValueError(f"k must be between 1 and {limit} (the model's {what}), got {k!r}")
    if not sentences:
        return Predictions([], [], [])
    ids, positions = _encode(lm, sentences, mode)
    # a mask that opens the sentence (only special tokens before it) is ranked over sentence-initial word forms
    start_table = lm.start_words() if whole else None
    if start_table is not None and int(start_table[0].sum()) < k:
        start_table = None  # too few sentence-initial words for this k: keep the ordinary whole-word set
    specials = set(lm.tokenizer.all_special_ids)
    at_start = [all(t in specials for t in row[:pos]) for row, pos in zip(ids, positions, strict=True)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)  # longest first: memory errors early
    top_ids = torch.empty((len(ids), k), dtype=torch.long)
    top_probs = torch.empty((len(ids), k), dtype=torch.float32)
    pad = _pad_id(lm)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            width = len(ids[batch[0]])
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
                attention[row, : len(ids[i])] = 1
            mask_pos = torch.tensor([positions[i] for i in batch])
            # length-sorted batches are often unpadded; then no mask is needed (a faster attention path)
            attention_arg = None if len(ids[batch[-1]]) == width else attention.to(lm.device)
            scores = _mask_scores(lm, input_ids.to(lm.device), attention_arg, mask_pos.to(lm.device))
            probs = torch.softmax(scores.float(), dim=-1)
            ranked = probs.masked_fill(~allowed, -1.0) if whole else probs
            if start_table is not None:
                first = torch.tensor([at_start[i] for i in batch], device=probs.device)
                if bool(first.any()):
                    ranked[first] = probs[first].masked_fill(~start_table[0], -1.0)
            values, indices = torch.topk(ranked, k, dim=-1, sorted=True)
            index = torch.tensor(batch)
            top_ids[index] = indices.cpu()
            top_probs[index] = values.cpu()
            if progress is not None:
                progress(len(batch))
    id_lists = top_ids.tolist()
    if whole:
        start_words = start_table[1] if start_table is not None else words
        tokens = [[((start_words if at_start[i] else words)[j] or "") for j in row] for i, row in enumerate(id_lists)]
    else:
        tokens = [[paper_token(t) for t in lm.tokenizer.convert_ids_to_tokens(row)] for row in id_lists]
    return Predictions(id_lists, tokens, top_probs.tolist())


def predict_top_k(
    lm: MaskedLM,
    sentences: Sequence[str],
    k: int = 5,
    *,
    mode: str = "whole_word",
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[list[str]], list[list[float]]]:
    """(tokens, probabilities) per sentence; :func:`predict` without the ids."""
    result = predict(lm, sentences, k, mode=mode, batch_size=batch_size, progress=progress)
    return result.tokens, result.probs


def paper_one_at_a_time(model: Any, tokenizer: Any, sentence: str, k: int) -> TopK:
    """The paper's prediction procedure, literally, for one sentence (the reference for the ``paper`` mode).

    Wrap as ``"[CLS] %s [SEP]"`` / ``"<s> %s </s>"``, tokenize, find the first mask, run the whole model at batch
    size 1, softmax the logits at the mask, ``torch.topk``, ``convert_ids_to_tokens``, strip ``Ġ``/``▁``.
    One deviation: current tokenizers return a mask that swallows the space before it as the token string
    ``" <mask>"``, so the mask is located among the token *ids* (what the model sees is unchanged).
    """
    _check_sentence(sentence)
    ids = tokenizer(_wrap_paper(tokenizer, sentence), add_special_tokens=False)["input_ids"]
    mask_index = ids.index(tokenizer.mask_token_id)
    device = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(torch.tensor([ids], device=device)).logits
        probs = torch.softmax(logits[0, mask_index].float(), dim=-1)
        values, indices = torch.topk(probs, k, sorted=True)
    top = indices.tolist()
    tokens = [paper_token(t) for t in tokenizer.convert_ids_to_tokens(top)]
    return TopK(top, tokens, values.tolist())
