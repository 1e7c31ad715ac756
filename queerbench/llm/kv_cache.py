"""A KV cache with room for the whole reply: each decoding step writes its keys and values in place.

transformers' ``DynamicCache`` grows by concatenation, so every step copies the whole cache of every layer: at
batch 8 and 1,000 positions of SmolLM2-135M that is ~400 MB copied per token step, and the step's ``torch.cat``
alone took more time than its linear layers (an SCM story runs to 1,024 new tokens). :func:`preallocate` turns an
already filled ``DynamicCache`` (transformers 5: a list of ``DynamicLayer``) into one whose layers keep their keys
and values in buffers sized for the prefill plus every new token, and hand out views of the filled part: the
attention reads the same values, and a step copies only its own token.

Anything that replaces a layer's tensors (``batch_select_indices`` when rows finish, ``reorder_cache``) leaves them
outside the buffer; the next update copies them into a fresh buffer once. Caches of other kinds (transformers 4's
lists, sliding windows, a model's own cache class) are left as they are.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["preallocate"]


@functools.cache
def _layer_class() -> type | None:
    """The preallocated subclass of transformers' ``DynamicLayer``, or ``None`` before transformers 5."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return None
    return type("PreallocatedLayer", (DynamicLayer,), {"update": _update, "_qb_base": DynamicLayer})


def _in_buffer(view: Any, buffer: Any) -> bool:
    """Whether ``view`` is the filled part of ``buffer`` (same storage start, strides and leading sizes)."""
    return (
        buffer is not None
        and view.data_ptr() == buffer.data_ptr()
        and view.stride() == buffer.stride()
        and view.shape[:2] == buffer.shape[:2]
    )


def _room(tensor: Any, buffer: Any, needed: int, capacity: int) -> Any:
    """``buffer`` when ``tensor`` is its filled part and ``needed`` positions fit, else a new buffer holding
    ``tensor``: ``capacity`` positions, or twice the filled length when even that is short."""
    import torch

    if _in_buffer(tensor, buffer) and buffer.shape[-2] >= needed:
        return buffer
    size = capacity if needed <= capacity else max(needed, 2 * tensor.shape[-2])
    fresh = torch.empty((*tensor.shape[:-2], size, tensor.shape[-1]), dtype=tensor.dtype, device=tensor.device)
    fresh[..., : tensor.shape[-2], :] = tensor
    return fresh


def _update(self: Any, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``DynamicLayer.update`` without the concatenation: the new states are written after the filled part."""
    filled = self.keys.shape[-2]
    needed = filled + key_states.shape[-2]
    self._qb_keys = _room(self.keys, self._qb_keys, needed, self._qb_capacity)
    self._qb_values = _room(self.values, self._qb_values, needed, self._qb_capacity)
    self._qb_keys[..., filled:needed, :] = key_states
    self._qb_values[..., filled:needed, :] = value_states
    self.keys = self._qb_keys[..., :needed, :]
    self.values = self._qb_values[..., :needed, :]
    return self.keys, self.values


def preallocate(cache: Any, capacity: int) -> bool:
    """Give every layer of a filled ``DynamicCache`` room for ``capacity`` positions in all (in place).

    Returns whether it did: only when every layer is exactly transformers 5's ``DynamicLayer`` and already holds
    keys (after the prefill). The buffers are allocated at the first update.
    """
    cls = _layer_class()
    layers = getattr(cache, "layers", None)
    if cls is None or not layers:
        return False
    base = cls._qb_base
    if any(type(layer) not in (base, cls) or not layer.is_initialized for layer in layers):
        return False
    for layer in layers:
        layer.__class__ = cls
        layer._qb_capacity = capacity
        layer._qb_keys = layer._qb_values = None
    return True
