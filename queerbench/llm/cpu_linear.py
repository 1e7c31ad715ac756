"""oneDNN-prepacked weights for the linear layers of a causal LM that runs on the CPU.

Decoding reads every weight once per step for a few rows (the batch), a shape that torch's default float32 GEMM
serves badly on x86: at 8 rows it re-packs each weight matrix on every call, so one decoding step's linear layers of
SmolLM2-135M took 2.1× the time of a single row, and the 49,152 × 576 LM head 3.5×. Packing each weight once into oneDNN's
blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, the kernel that ``torch.compile``'s CPU freezing
pass uses) removes that: ``benchmarks/generation_speed.py`` prints the effect side by side. A single row (a GEMV)
still runs torch's kernel, which is the faster one there. For two rows or more a packed layer's output for one row
does not depend on how many rows share the call (torch's kernel changes with the row count).

The packed copy sits beside the original weight (which stays a parameter: the tied embedding, the fingerprint's
parameter count and ``state_dict`` read it), so packing costs the linear weights' memory once more; it is done only
up to :data:`MAX_PACKED_BYTES`. Float32 and bfloat16 weights on the CPU only, and only after a packed layer has
reproduced ``F.linear`` at load; anything else keeps torch's kernel. Gradients are never needed by the
generation layer: with autograd on, a packed layer falls back to ``F.linear``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ENV",
    "MAX_PACKED_BYTES",
    "PACKED",
    "TORCH",
    "linear_kernel",
    "prepack_linear_weights",
    "unpack_linear_weights",
]

PACKED = "onednn-prepacked"
"""Kernel name recorded for a model whose linear layers were packed."""
TORCH = "torch"
"""Kernel name recorded for a model left on torch's own ``F.linear``."""
MAX_PACKED_BYTES = 4 * 2**30
"""Largest total of linear-weight bytes packed (a model up to ~1B float32 parameters): the copy doubles them."""

ENV = "QUEERBENCH_LINEAR_KERNEL"
"""Environment variable: ``torch`` keeps torch's own kernel (e.g. to compare); unset or ``onednn-prepacked``: pack."""

_ATTR = "queerbench_linear_kernel"


def linear_kernel(model: Any) -> str:
    """Which kernel ``model``'s linear layers run: :data:`PACKED` or :data:`TORCH`."""
    return str(getattr(model, _ATTR, TORCH))


def _packed_linear(x: Any, packed: Any, bias: Any) -> Any:
    """``x @ W.T + bias`` with ``W`` packed by ``torch.ops.mkldnn._reorder_linear_weight``."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


def _packed_class(base: type) -> type:
    """A subclass of ``base`` (``nn.Linear`` or a subclass) whose forward uses the packed weight."""
    import torch
    import torch.nn.functional as F

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        # one row (batch 1, or the last live row of a batch) is a GEMV, where torch's kernel is the faster
        if (
            torch.is_grad_enabled()
            or x.numel() == x.shape[-1]
            or x.dtype != self.weight.dtype
            or x.device.type != "cpu"
        ):
            return F.linear(x, self.weight, self.bias)
        return _packed_linear(x, self._qb_packed, self.bias)

    return type(f"Prepacked{base.__name__}", (base,), {"forward": forward, "_qb_base": base})


def _reproduces(layer: Any, packed: Any) -> bool:
    """Whether the packed weight gives ``F.linear``'s output to float rounding (on the layer's own weight rows as
    input): relative to the output's scale, 1e-4 in float32, 2e-2 in bfloat16."""
    import torch
    import torch.nn.functional as F

    x = layer.weight.detach()[:3]
    got = _packed_linear(x, packed, layer.bias).float()
    want = F.linear(x, layer.weight, layer.bias).float()
    tolerance = 1e-4 if layer.weight.dtype == torch.float32 else 2e-2
    return bool((got - want).abs().max() <= tolerance * want.abs().max())


def _supported(model: Any, max_bytes: int) -> list[Any]:
    """The model's ``nn.Linear`` layers when all can be packed, else an empty list."""
    import torch

    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return []
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not layers or any(m.weight.device.type != "cpu" for m in layers):
        return []
    if any(m.weight.dtype not in (torch.float32, torch.bfloat16) for m in layers):
        return []
    if sum(m.weight.numel() * m.weight.element_size() for m in layers) > max_bytes:
        return []
    return layers


def prepack_linear_weights(model: Any, *, max_bytes: int = MAX_PACKED_BYTES) -> str:
    """Pack every ``nn.Linear`` weight of ``model`` for oneDNN (in place) and return the kernel now in use.

    Returns :data:`PACKED`, or :data:`TORCH` when ``QUEERBENCH_LINEAR_KERNEL=torch`` asks for it, the model is not
    on the CPU, has weights other than float32 or
    bfloat16, exceeds ``max_bytes`` of linear weights, when this torch build has no oneDNN, or when a packed layer
    does not reproduce ``F.linear`` (to float rounding). Calling it again is a no-op. The kernel
    is also stored on the model (:func:`linear_kernel`) for the run's record.
    """
    import os

    import torch

    wanted = os.environ.get(ENV) or PACKED
    if wanted not in (PACKED, TORCH):
        raise ValueError(f"{ENV}={wanted!r}: use {PACKED!r} (the default on the CPU) or {TORCH!r}")
    if linear_kernel(model) == PACKED:
        return PACKED
    layers = _supported(model, max_bytes) if wanted == PACKED else []
    try:
        with torch.no_grad():
            packed = [torch.ops.mkldnn._reorder_linear_weight(m.weight.detach()) for m in layers]
            usable = bool(layers) and _reproduces(layers[0], packed[0])
    except (RuntimeError, NotImplementedError):
        usable = False
    if not usable:
        setattr(model, _ATTR, TORCH)
        return TORCH
    classes: dict[type, type] = {}
    for i, layer in enumerate(layers):
        layer._qb_packed = packed[i]
        layer.__class__ = classes.setdefault(type(layer), _packed_class(type(layer)))
    setattr(model, _ATTR, PACKED)
    return PACKED


def unpack_linear_weights(model: Any) -> None:
    """Undo :func:`prepack_linear_weights`: every layer back on ``F.linear``, the packed copies freed."""
    import torch

    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear) and hasattr(layer, "_qb_packed"):
            layer.__class__ = type(layer)._qb_base
            del layer._qb_packed
    setattr(model, _ATTR, TORCH)
