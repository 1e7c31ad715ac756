"""What every model loader shares (masked LMs, causal LMs, toxicity classifiers): the one "this model cannot be used"
error and the one device rule. Importing this module does not import torch."""

from __future__ import annotations

import pickle
from pathlib import Path

__all__ = ["PICKLE_ERRORS", "ModelLoadError", "refused_pickle", "resolve_device"]


class ModelLoadError(ValueError):
    """A model or its tokenizer cannot be used: not found, not fetchable offline, or not the kind of model needed."""


PICKLE_ERRORS: tuple[type[BaseException], ...] = (pickle.UnpicklingError,)
"""What torch raises when a pickle checkpoint (``pytorch_model.bin``) holds anything but tensors: its safe loader
(``weights_only=True``) refuses to run the code such a file may carry."""


def refused_pickle(model: str | Path, exc: BaseException) -> ModelLoadError:
    """The one line for a pickle checkpoint torch's safe loader refused (``exc``: one of :data:`PICKLE_ERRORS`):
    which model and file, why, and the fix. Nothing in the file ran."""
    folder = Path(model).expanduser()
    bins = sorted(p.name for p in folder.glob("*.bin")) if folder.is_dir() else []
    where = f"{folder / bins[0]}" if len(bins) == 1 else f"the .bin checkpoint of {model}"
    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0][:80]
    return ModelLoadError(
        f"{where} is a pickle that holds more than tensors, and torch's safe loader (weights_only) refused it "
        f"({said}); nothing in it was run. Use a model that ships model.safetensors (or convert trusted weights "
        "to safetensors)"
    )


def resolve_device(spec: str = "auto") -> str:
    """The library's one device rule: ``auto`` → ``cuda``, then ``mps``, then ``cpu``; otherwise the named device,
    checked to be available. Returns the device's name (``cpu``, ``cuda:1``: what torch takes and outputs record); a
    one-line ``ValueError`` for an unknown or unavailable one."""
    import torch

    if spec == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise ValueError(f"unknown device {spec!r}; use auto, cpu, cuda, cuda:N or mps") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {spec!r} requested but CUDA is not available here; use --device auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {spec!r} requested but MPS is not available here; use --device auto or cpu")
    return str(device)
