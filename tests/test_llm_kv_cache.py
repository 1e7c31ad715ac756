"""The preallocated KV cache (queerbench.llm.kv_cache): the same keys and values as transformers' DynamicCache,
written in place into one buffer per layer, re-adopted after rows leave, grown past its capacity."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_models import tiny_llama
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

import queerbench.llm.local as local
from queerbench.llm import GenerationSettings, TransformersRunner
from queerbench.llm.kv_cache import preallocate

LAYERS, HEADS, DIM = 2, 3, 4


def _states(gen: torch.Generator, rows: int = 5, positions: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One (keys, values) pair per layer: [rows, heads, positions, dim]."""
    return [
        (
            torch.randn(rows, HEADS, positions, DIM, generator=gen),
            torch.randn(rows, HEADS, positions, DIM, generator=gen),
        )
        for _ in range(LAYERS)
    ]


def _step(cache: DynamicCache, states: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[torch.Tensor, ...]]:
    return [cache.update(k, v, i) for i, (k, v) in enumerate(states)]


def _pair(prefill: int = 3) -> tuple[DynamicCache, DynamicCache, torch.Generator]:
    """A plain DynamicCache and a copy to preallocate, both filled with the same prefill."""
    gen = torch.Generator().manual_seed(0)
    plain, fast = DynamicCache(), DynamicCache()
    first = _states(gen, positions=prefill)
    _step(plain, first)
    _step(fast, first)
    return plain, fast, gen


def test_steps_write_in_place_and_return_what_the_dynamic_cache_returns() -> None:
    plain, fast, gen = _pair()
    assert preallocate(fast, capacity=10)
    assert all(type(layer).__name__ == "PreallocatedLayer" and isinstance(layer, DynamicLayer) for layer in fast.layers)
    storage = None
    for step in range(7):  # 3 prefill positions + 7 = the capacity
        states = _states(gen)
        for want, got in zip(_step(plain, states), _step(fast, states), strict=True):
            assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
        layer = fast.layers[0]
        assert layer._qb_keys.shape == (5, HEADS, 10, DIM)  # one buffer of the whole capacity
        if step == 0:
            storage = layer._qb_keys.data_ptr()
        assert layer._qb_keys.data_ptr() == storage  # never reallocated: no copy of the cache per step
        assert layer.keys.data_ptr() == storage and layer.keys.shape[-2] == 4 + step
    assert fast.get_seq_length() == plain.get_seq_length() == 10


def test_rows_that_leave_are_copied_into_a_fresh_buffer_once() -> None:
    plain, fast, gen = _pair()
    preallocate(fast, capacity=12)
    _step(plain, states := _states(gen))
    _step(fast, states)
    keep = torch.tensor([0, 2, 4])
    plain.batch_select_indices(keep)
    fast.batch_select_indices(keep)
    before = fast.layers[0]._qb_keys.data_ptr()
    for step in range(3):
        states = [(k[:3], v[:3]) for k, v in _states(gen)]
        for want, got in zip(_step(plain, states), _step(fast, states), strict=True):
            assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
        if step == 0:
            after = fast.layers[0]._qb_keys.data_ptr()
            assert after != before and fast.layers[0]._qb_keys.shape == (3, HEADS, 12, DIM)
        assert fast.layers[0]._qb_keys.data_ptr() == after


def test_past_its_capacity_the_buffer_doubles_and_the_values_stay() -> None:
    plain, fast, gen = _pair(prefill=2)
    preallocate(fast, capacity=4)
    sizes = []
    for _ in range(5):
        states = _states(gen)
        for want, got in zip(_step(plain, states), _step(fast, states), strict=True):
            assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
        sizes.append(fast.layers[1]._qb_values.shape[-2])
    assert sizes == [4, 4, 8, 8, 8]  # the 5th position does not fit 4: twice the 4 filled


def test_caches_of_other_kinds_are_left_alone() -> None:
    assert not preallocate(object(), capacity=8)  # no layers (transformers 4's lists, a model's own cache)
    assert not preallocate(DynamicCache(), capacity=8)  # nothing prefilled
    sliding = DynamicCache()
    sliding.layers = [DynamicSlidingWindowLayer(sliding_window=4)]
    sliding.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), 0)
    assert not preallocate(sliding, capacity=8)
    assert type(sliding.layers[0]) is DynamicSlidingWindowLayer


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("kv-cache"))


def test_decoding_gives_the_same_replies_with_and_without_it(llama_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = TransformersRunner(str(llama_dir))
    runner.decoder = None  # transformers' forward runs the steps (the Llama decoder keeps buffers of its own)
    runner.stop_token_ids = lambda: set()  # every row decodes the full length
    seqs = [[5, 6, 7, 8], [9, 10], [5, 6, 7, 8], [11, 12, 13]]  # a duplicate prompt: its cache is copied per row
    settings = GenerationSettings(temperature=1.0, top_p=0.9, max_new_tokens=12)
    calls: list[bool] = []
    real = local.preallocate
    monkeypatch.setattr(local, "preallocate", lambda cache, capacity: calls.append(real(cache, capacity)) or calls[-1])
    fast = runner.decode(seqs, [0, 1, 2, 3], settings)
    assert calls == [True]
    monkeypatch.setattr(local, "preallocate", lambda cache, capacity: False)
    plain = runner.decode(seqs, [0, 1, 2, 3], settings)
    assert fast == plain
    assert all(len(tokens) == 12 for tokens, _ in fast)


def test_a_cache_filled_exactly_to_its_capacity_keeps_one_buffer_of_that_size() -> None:
    plain, fast, gen = _pair(prefill=3)
    preallocate(fast, capacity=4)
    states = _states(gen)
    for want, got in zip(_step(plain, states), _step(fast, states), strict=True):
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    assert fast.layers[0]._qb_keys.shape[-2] == 4


def test_the_buffers_keep_the_states_dtype() -> None:
    cache = DynamicCache()
    gen = torch.Generator().manual_seed(1)
    cast = [(k.bfloat16(), v.bfloat16()) for k, v in _states(gen, positions=2)]
    _step(cache, cast)
    preallocate(cache, capacity=6)
    keys, values = _step(cache, [(k.bfloat16(), v.bfloat16()) for k, v in _states(gen)])[0]
    assert keys.dtype == values.dtype == torch.bfloat16
    assert cache.layers[0]._qb_keys.dtype == torch.bfloat16
    assert torch.equal(keys[..., :2, :], cast[0][0])
