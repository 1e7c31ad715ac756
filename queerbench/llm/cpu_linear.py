"""Prepacked weights (oneDNN's, and MKL's for float32 decoding steps) for the linear layers of a causal LM on the CPU.

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

Float32 decoding steps (2 to :data:`DECODE_ROWS` rows, the default batch) go one step further: MKL's packed SGEMM
(``torch.ops.mkl._mkl_linear``, packed for exactly :data:`DECODE_ROWS` rows) reads the weights faster at that shape
than oneDNN's (one SmolLM2-135M step's linear layers: 31 ms vs 35 ms at 8 rows), so those calls are padded to
:data:`DECODE_ROWS` rows and run it; a row's output then does not depend on how many rows (2 to 8) share the call or
what they hold, as with oneDNN. More rows (a prefill, the ``scored`` method) stay on oneDNN; so a batch of more
than 8 rows decodes on oneDNN until 8 or fewer of its rows are left, then on MKL (a change of rounding only, like
the one-row GEMV; the default batch is 8, so its steps all run MKL or, at one row, the GEMV). MKL's packed copy is
about twice the weights' size, so it is added only while all packed copies together fit :data:`MAX_PACKED_BYTES`,
and only after it too has reproduced ``F.linear``; the kernel is then recorded as :data:`PACKED_DECODE`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = [
    "DECODE_ROWS",
    "ENV",
    "KERNELS",
    "MAX_PACKED_BYTES",
    "PACKED",
    "PACKED_DECODE",
    "TORCH",
    "linear_kernel",
    "mkl_decode_linear",
    "prepack_linear_weights",
    "unpack_linear_weights",
]

PACKED = "onednn-prepacked"
"""Kernel name recorded for a model whose linear layers were packed."""
PACKED_DECODE = "onednn-prepacked+mkl-decode"
"""Kernel name recorded for a float32 model packed for oneDNN and, for decoding steps, for MKL's packed SGEMM."""
TORCH = "torch"
"""Kernel name recorded for a model left on torch's own ``F.linear``."""
KERNELS = (PACKED_DECODE, PACKED, TORCH)
"""Every kernel name, the most packed first."""
MAX_PACKED_BYTES = 4 * 2**30
"""Largest total of packed bytes: the oneDNN copy of the linear weights (a model up to ~1B float32 parameters) and,
when it fits too, the MKL decoding copy (about twice the weights)."""
DECODE_ROWS = 8
"""Rows MKL's copy is packed for: the generation layer's default batch (a decoding step has one row per reply)."""

ENV = "QUEERBENCH_LINEAR_KERNEL"
"""Environment variable: one of :data:`KERNELS`; unset: the most packed kernel the weights allow. ``torch`` keeps
torch's own kernel and ``onednn-prepacked`` leaves MKL out (e.g. to compare)."""

_ATTR = "queerbench_linear_kernel"


def linear_kernel(model: Any) -> str:
    """Which kernel ``model``'s linear layers run: :data:`PACKED_DECODE`, :data:`PACKED` or :data:`TORCH`."""
    return str(getattr(model, _ATTR, TORCH))


def _packed_linear(x: Any, packed: Any, bias: Any) -> Any:
    """``x @ W.T + bias`` with ``W`` packed by ``torch.ops.mkldnn._reorder_linear_weight``."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


def _mkl_linear(x: Any, packed: Any, weight: Any, bias: Any) -> Any:
    """``x @ W.T + bias`` for at most :data:`DECODE_ROWS` rows, with ``W`` packed by MKL for that many: fewer rows
    are padded with zeros (MKL's packed kernel runs only at the row count it was packed for)."""
    import torch

    flat = x.reshape(-1, x.shape[-1])
    rows = flat.shape[0]
    if rows < DECODE_ROWS:
        flat = torch.cat([flat, flat.new_zeros(DECODE_ROWS - rows, flat.shape[1])])
    out = torch.ops.mkl._mkl_linear(flat.contiguous(), packed, weight, bias, DECODE_ROWS)[:rows]
    return out.reshape(*x.shape[:-1], out.shape[-1])


mkl_decode_linear = _mkl_linear
"""The decoding-step kernel, for callers that hold MKL copies of their own (:mod:`queerbench.llm.llama_decoder`'s
stacked projections): ``mkl_decode_linear(x, packed, weight, bias)`` for 1 to :data:`DECODE_ROWS` rows."""


def _packed_class(base: type) -> type:
    """A subclass of ``base`` (``nn.Linear`` or a subclass) whose forward uses the packed weight."""
    import torch
    import torch.nn.functional as F

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        rows = math.prod(x.shape[:-1])
        # one row (batch 1, or the last live row of a batch) is a GEMV, where torch's kernel is the faster
        if torch.is_grad_enabled() or rows <= 1 or x.dtype != self.weight.dtype or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        if self._qb_mkl is not None and rows <= DECODE_ROWS:
            return _mkl_linear(x, self._qb_mkl, self.weight, self.bias)
        return _packed_linear(x, self._qb_packed, self.bias)

    return type(f"Prepacked{base.__name__}", (base,), {"forward": forward, "_qb_base": base})


def _reproduces(layer: Any, linear: Callable[[Any], Any]) -> bool:
    """Whether ``linear`` (a packed kernel with the layer's weight) gives ``F.linear``'s output to float rounding (on
    the layer's own weight rows as input): relative to the output's scale, 1e-4 in float32, 2e-2 in bfloat16."""
    import torch
    import torch.nn.functional as F

    x = layer.weight.detach()[:3]
    got = linear(x).float()
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


def _mkl_copies(layers: list[Any], budget: int) -> list[Any] | None:
    """MKL's decoding copies of the layers' weights (packed for :data:`DECODE_ROWS` rows), or ``None``: weights
    other than float32, no MKL in this torch build, more than ``budget`` bytes in all, a failure while packing, or a
    first layer whose copy does not reproduce ``F.linear``."""
    import torch

    if any(m.weight.dtype != torch.float32 for m in layers) or not (
        torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
    ):
        return None
    copies: list[Any] = []
    total = 0
    try:
        with torch.no_grad():
            for m in layers:
                copy = torch.ops.mkl._mkl_reorder_linear_weight(m.weight.detach(), DECODE_ROWS)
                total += copy.numel() * copy.element_size()
                if total > budget:
                    return None
                copies.append(copy)
            first = layers[0]
            usable = _reproduces(first, lambda x: _mkl_linear(x, copies[0], first.weight, first.bias))
    except (RuntimeError, NotImplementedError):
        return None
    return copies if usable else None


def prepack_linear_weights(model: Any, *, max_bytes: int = MAX_PACKED_BYTES) -> str:
    """Pack every ``nn.Linear`` weight of ``model`` for oneDNN (and float32 ones for MKL's decoding steps too), in
    place, and return the kernel now in use.

    Returns :data:`PACKED_DECODE` (float32 weights whose MKL copy fits ``max_bytes`` beside the oneDNN one and
    reproduces ``F.linear``), :data:`PACKED`, or :data:`TORCH` when ``QUEERBENCH_LINEAR_KERNEL=torch`` asks for it,
    the model is not on the CPU, has weights other than float32 or bfloat16, exceeds ``max_bytes`` of linear
    weights, when this torch build has no oneDNN, or when a packed layer does not reproduce ``F.linear`` (to float
    rounding). ``QUEERBENCH_LINEAR_KERNEL=onednn-prepacked`` stops at :data:`PACKED`. Calling it again on a packed
    model is a no-op. The kernel is also stored on the model (:func:`linear_kernel`) for the run's record.
    """
    import os

    import torch

    wanted = os.environ.get(ENV) or PACKED_DECODE
    if wanted not in KERNELS:
        names = ", ".join(repr(k) for k in KERNELS)
        raise ValueError(f"{ENV}={wanted!r}: use one of {names}, or leave it unset (the most packed the weights allow)")
    if linear_kernel(model) != TORCH:
        return linear_kernel(model)
    layers = _supported(model, max_bytes) if wanted != TORCH else []
    try:
        with torch.no_grad():
            packed = [torch.ops.mkldnn._reorder_linear_weight(m.weight.detach()) for m in layers]
            usable = bool(layers) and _reproduces(layers[0], lambda x: _packed_linear(x, packed[0], layers[0].bias))
    except (RuntimeError, NotImplementedError):
        usable = False
    if not usable:
        setattr(model, _ATTR, TORCH)
        return TORCH
    mkl = None
    if wanted == PACKED_DECODE:
        mkl = _mkl_copies(layers, max_bytes - sum(p.numel() * p.element_size() for p in packed))
    classes: dict[type, type] = {}
    for i, layer in enumerate(layers):
        layer._qb_packed = packed[i]
        layer._qb_mkl = None if mkl is None else mkl[i]
        layer.__class__ = classes.setdefault(type(layer), _packed_class(type(layer)))
    kernel = PACKED if mkl is None else PACKED_DECODE
    setattr(model, _ATTR, kernel)
    return kernel


def unpack_linear_weights(model: Any) -> None:
    """Undo :func:`prepack_linear_weights`: every layer back on ``F.linear``, the packed copies freed."""
    import torch

    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear) and hasattr(layer, "_qb_packed"):
            layer.__class__ = type(layer)._qb_base
            del layer._qb_packed, layer._qb_mkl
    setattr(model, _ATTR, TORCH)
