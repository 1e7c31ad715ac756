"""What every model loader shares (masked LMs, causal LMs, toxicity classifiers): the one "this model cannot be used"
error and the one device rule. Importing this module does not import torch."""

from __future__ import annotations

__all__ = ["ModelLoadError", "resolve_device"]


class ModelLoadError(ValueError):
    """A model or its tokenizer cannot be used: not found, not fetchable offline, or not the kind of model needed."""


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
