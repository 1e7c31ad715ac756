"""Decoding steps of a Llama-architecture causal LM on the CPU, without transformers' per-call machinery.

A decoding step of SmolLM2-135M at batch 8 spends ~30 ms in its linear layers and, through transformers'
``LlamaForCausalLM.forward``, ~25 ms more in everything else: per-layer module calls, keyword plumbing, the mask
built anew every step, the cache's bookkeeping. :class:`LlamaDecoder` runs the same step as a flat sequence of
tensor operations on the model's own weights and kernels, with two changes that leave every value as it was:

- the q/k/v projections and the gate/up projections each run as **one** matmul over their weights stacked
  (MKL's packed SGEMM, :func:`~queerbench.llm.cpu_linear.mkl_decode_linear`, for 2 to
  :data:`~queerbench.llm.cpu_linear.DECODE_ROWS` rows; a column of the output does not depend on which other
  weight rows share the call); the modules keep their weights as views into the stacked ones, so no weight is
  held twice;
- the keys and values live in one buffer per layer sized for the whole reply, and the attention mask in one
  buffer, each step writing its own position (as :mod:`queerbench.llm.kv_cache` does for transformers' cache).

Norm, rotary embedding (the model's own ``rotary_emb``, so every rope type it supports), SDPA on the grouped
query heads (what transformers does for one query position), SiLU gate and LM head are those of transformers'
Llama, so on SmolLM2 the logits are bitwise transformers' (checked in ``benchmarks/generation_speed.py``; at batch 8
the step is ~1.2× faster). One row and more than ``DECODE_ROWS`` rows run each projection module as it is (its own
kernel: torch's GEMV, oneDNN). :func:`build_decoder` builds one only for exactly ``LlamaForCausalLM`` in float32
on the CPU with MKL's decoding kernel, no biases, SiLU, SDPA attention, and only after one decoding step of it has
reproduced the model's own; anything else keeps transformers' forward. ``QUEERBENCH_DECODER=transformers`` turns
it off (to compare).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from queerbench.llm.cpu_linear import DECODE_ROWS, PACKED_DECODE, linear_kernel, mkl_decode_linear

__all__ = ["DECODERS", "ENV", "LLAMA", "TRANSFORMERS", "DecodeState", "LlamaDecoder", "build_decoder", "step_gap"]

LLAMA = "queerbench-llama"
"""Decoder name recorded with each reply when :class:`LlamaDecoder` ran the decoding steps."""
TRANSFORMERS = "transformers"
"""Decoder name recorded when transformers' own forward ran them."""
DECODERS = (LLAMA, TRANSFORMERS)
ENV = "QUEERBENCH_DECODER"
"""Environment variable: ``transformers`` keeps transformers' forward for every step; unset or ``queerbench-llama``:
the Llama decoder wherever :func:`build_decoder` allows it."""


class _Layer:
    """One decoder layer's weights: norms, the stacked q/k/v and gate/up weights with their MKL copies, modules."""

    def __init__(self, layer: Any) -> None:
        import torch

        attn, mlp = layer.self_attn, layer.mlp
        self.norms = (layer.input_layernorm, layer.post_attention_layernorm)
        self.qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
        self.gate_up = (mlp.gate_proj, mlp.up_proj)
        self.o_proj, self.down_proj = attn.o_proj, mlp.down_proj
        self.stacked = {}
        for name, modules in (("qkv", self.qkv), ("gate_up", self.gate_up)):
            with torch.no_grad():
                weight = torch.cat([m.weight for m in modules])
                start = 0
                for m in modules:  # the modules' weights become views into the stacked copy: no weight held twice
                    m.weight.data = weight[start : start + m.out_features]
                    start += m.out_features
                self.stacked[name] = (torch.ops.mkl._mkl_reorder_linear_weight(weight, DECODE_ROWS), weight)

    def release(self) -> None:
        """Drop the stacked modules' own MKL copies: only decoding steps used them, and the stacked copies serve
        those now (so the decoder costs no memory beyond them)."""
        for m in (*self.qkv, *self.gate_up):
            m._qb_mkl = None

    def project(self, name: str, modules: Sequence[Any], x: Any) -> Any:
        """``x`` through ``modules`` side by side (their outputs concatenated): one MKL call for 2 to ``DECODE_ROWS``
        rows, else each module's own kernel."""
        import torch

        if 2 <= x.shape[0] <= DECODE_ROWS:
            packed, weight = self.stacked[name]
            return mkl_decode_linear(x, packed, weight, None)
        return torch.cat([m.forward(x) for m in modules], dim=-1)


class LlamaDecoder:
    """Decoding steps for one loaded ``LlamaForCausalLM`` (see the module's docstring): :meth:`begin` takes over the
    KV cache of a prefill and returns the :class:`DecodeState` that runs the steps."""

    def __init__(self, model: Any) -> None:
        config = model.config
        self.model = model
        self.layers = [_Layer(layer) for layer in model.model.layers[: config.num_hidden_layers]]
        attn = model.model.layers[0].self_attn
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.hidden = config.hidden_size
        self.intermediate = config.intermediate_size
        self.eps = config.rms_norm_eps

    def begin(self, cache: Any, mask: Any, capacity: int) -> DecodeState:
        """A state that continues from a prefill: ``cache`` its transformers cache (``cache.layers[i].keys`` /
        ``.values``, ``[rows, kv heads, width, head dim]``), ``mask`` its ``[rows, width]`` attention mask, with
        room for ``capacity`` positions in all."""
        return DecodeState(self, cache, mask, capacity)


class DecodeState:
    """The KV cache and attention mask of one batch being decoded by a :class:`LlamaDecoder`."""

    def __init__(self, decoder: LlamaDecoder, cache: Any, mask: Any, capacity: int) -> None:
        import torch

        self.decoder = decoder
        rows, width = mask.shape
        if capacity < width:
            raise ValueError(f"capacity {capacity} is shorter than the prefill's {width} positions")
        self.filled = width
        self.mask = torch.zeros((rows, capacity), dtype=torch.bool, device=mask.device)
        self.mask[:, :width] = mask.bool()
        self.keys: list[Any] = []
        self.values: list[Any] = []
        for layer in cache.layers[: len(decoder.layers)]:
            for states, buffers in ((layer.keys, self.keys), (layer.values, self.values)):
                buffer = states.new_empty((*states.shape[:2], capacity, states.shape[-1]))
                buffer[:, :, :width] = states
                buffers.append(buffer)

    def keep(self, rows: Any) -> bool:
        """Keep only ``rows`` (a 1-D index tensor) of the batch: the rows that finished leave the cache. Returns
        ``True`` (rows can always leave; the transformers steps' ``keep`` may not)."""
        self.mask = self.mask.index_select(0, rows)
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        return True

    def step(self, tokens: Any, positions: Any) -> Any:
        """Feed one token per row (``tokens``: ``[rows]``, at ``positions``: ``[rows]``) and return the next-token
        logits, ``[rows, vocabulary]``; the step's keys and values are written in place."""
        import torch
        import torch.nn.functional as F

        d = self.decoder
        filled = self.filled
        if filled >= self.mask.shape[1]:
            raise ValueError(f"the KV cache is full ({filled} positions): begin with a larger capacity")
        self.mask[:, filled] = True
        end = filled + 1
        mask = self.mask[:, None, None, :end]
        rows, q_size, kv_size, half = tokens.shape[0], d.heads * d.head_dim, d.kv_heads * d.head_dim, d.head_dim // 2
        model = d.model.model
        x = model.embed_tokens(tokens)
        cos, sin = model.rotary_emb(x, position_ids=positions[:, None])  # [rows, 1, head dim]
        for i, layer in enumerate(d.layers):
            h = F.rms_norm(x, (d.hidden,), layer.norms[0].weight, d.eps)
            qkv = layer.project("qkv", layer.qkv, h)
            qk = qkv[:, : q_size + kv_size].view(rows, d.heads + d.kv_heads, d.head_dim)
            qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin
            self.keys[i][:, :, filled] = qk[:, d.heads :]
            self.values[i][:, :, filled] = qkv[:, q_size + kv_size :].view(rows, d.kv_heads, d.head_dim)
            query = qk[:, : d.heads].reshape(rows, d.kv_heads, d.heads // d.kv_heads, d.head_dim)
            attn = F.scaled_dot_product_attention(
                query, self.keys[i][:, :, :end], self.values[i][:, :, :end], attn_mask=mask, scale=d.scaling
            )
            x = x + layer.o_proj.forward(attn.reshape(rows, q_size))
            h = F.rms_norm(x, (d.hidden,), layer.norms[1].weight, d.eps)
            gate_up = layer.project("gate_up", layer.gate_up, h)
            x = x + layer.down_proj.forward(F.silu(gate_up[:, : d.intermediate]) * gate_up[:, d.intermediate :])
        self.filled = end
        return d.model.lm_head.forward(F.rms_norm(x, (d.hidden,), model.norm.weight, d.eps))


def _eligible(model: Any) -> bool:
    """Whether ``model`` is exactly a float32 ``LlamaForCausalLM`` on the CPU whose linear layers run MKL's decoding
    kernel, with the parts :class:`LlamaDecoder` reproduces (no biases, SiLU, SDPA, no tensor-parallel slicing)."""
    import torch

    if type(model).__name__ != "LlamaForCausalLM" or model.config.model_type != "llama":
        return False
    if linear_kernel(model) != PACKED_DECODE or model.dtype != torch.float32 or model.device.type != "cpu":
        return False
    config = model.config
    return (
        not (config.attention_bias or config.mlp_bias)
        and config.hidden_act == "silu"
        and config.pretraining_tp == 1
        and config._attn_implementation == "sdpa"
    )


def step_gap(model: Any, decoder: LlamaDecoder, ids: Any, mask: Any, steps: int = 1) -> float:
    """How far ``decoder``'s next-token logits are from the model's own forward's: the largest absolute difference
    relative to the largest logit magnitude, over ``steps`` greedy steps after one prefill of the left-padded
    ``ids`` with its ``mask`` (both ``[rows, width]``); 0.0 when bitwise equal."""
    import torch

    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    gap = 0.0
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = out.cache  # transformers 5 (the decoder reads its layers); before it, no decoder is built
        state = decoder.begin(cache, mask, ids.shape[1] + steps)
        logits, pos = out.logits[:, -1], positions[:, -1] + 1
        for _ in range(steps):
            tokens = logits.argmax(-1)
            mask = torch.cat([mask, mask.new_ones((len(ids), 1))], dim=1)
            logits = model(
                input_ids=tokens[:, None], attention_mask=mask, position_ids=pos[:, None], use_cache=True, cache=cache
            ).logits[:, -1]
            gap = max(gap, float((state.step(tokens, pos) - logits).abs().max() / logits.abs().max()))
            pos = pos + 1
    return gap


def _reproduces(model: Any, decoder: LlamaDecoder) -> bool:
    """Whether a decoding step of ``decoder`` gives the model's own logits, to 1e-4 of their scale, on a probe of
    three rows (MKL's kernel) with 0, 1 and 2 padding positions."""
    import torch

    ids = torch.arange(1, 13).view(3, 4) % model.config.vocab_size
    mask = (torch.arange(4) >= torch.arange(3)[:, None]).long()
    return step_gap(model, decoder, ids, mask) <= 1e-4


def build_decoder(model: Any) -> LlamaDecoder | None:
    """A :class:`LlamaDecoder` for ``model``, or ``None``: not eligible (see the module's docstring),
    ``QUEERBENCH_DECODER=transformers``, a failure while building, or a step that does not reproduce the model's."""
    wanted = os.environ.get(ENV) or LLAMA
    if wanted not in DECODERS:
        names = ", ".join(repr(d) for d in DECODERS)
        raise ValueError(f"{ENV}={wanted!r}: use one of {names}, or leave it unset")
    if wanted != LLAMA or not _eligible(model):
        return None
    try:
        decoder = LlamaDecoder(model)
        usable = _reproduces(model, decoder)
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return None
    if not usable:
        return None
    for layer in decoder.layers:
        layer.release()
    return decoder
