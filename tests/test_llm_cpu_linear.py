"""Prepacked linear weights (queerbench.llm.cpu_linear): oneDNN's and, for float32 decoding steps, MKL's; same outputs
as ``F.linear``, recorded, reversible."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_models import tiny_llama

from queerbench.llm import GenerationSettings, TransformersRunner, load_causal_lm
from queerbench.llm.cpu_linear import (
    DECODE_ROWS,
    PACKED,
    PACKED_DECODE,
    TORCH,
    linear_kernel,
    prepack_linear_weights,
    unpack_linear_weights,
)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("cpu-linear"))


def _batch(tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    enc["position_ids"] = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    return enc


def _linears(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def test_loaded_causal_lm_is_packed_and_matches_f_linear(llama_dir: Path) -> None:
    lm, tok = load_causal_lm(str(llama_dir))
    assert linear_kernel(lm) == PACKED_DECODE  # float32: oneDNN, and MKL for the decoding steps
    layers = _linears(lm)
    assert layers and all(type(m).__name__ == "PrepackedLinear" for m in layers)
    assert all(m._qb_packed is not None and m._qb_mkl is not None for m in layers)
    enc = _batch(tok, ["the cat sat on the mat", "a b"])
    with torch.inference_mode():
        packed = lm(**enc).logits
    unpack_linear_weights(lm)
    assert linear_kernel(lm) == TORCH
    assert all(type(m) is torch.nn.Linear and not hasattr(m, "_qb_packed") for m in _linears(lm))
    assert not any(hasattr(m, "_qb_mkl") for m in _linears(lm))
    with torch.inference_mode():
        plain = lm(**enc).logits
    assert packed.shape == plain.shape
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)
    assert not torch.equal(packed, torch.zeros_like(packed))


def test_a_rows_output_does_not_depend_on_how_many_rows_share_the_call() -> None:
    layer = torch.nn.Linear(96, 200)
    x = torch.randn(8, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = torch.nn.functional.linear(x, layer.weight, layer.bias)
    holder = torch.nn.Sequential(layer)
    assert prepack_linear_weights(holder) == PACKED_DECODE
    with torch.inference_mode():
        full = layer(x)
        torch.testing.assert_close(full, want, rtol=1e-5, atol=1e-5)  # the bias is added
        for rows in (2, 3, 7):
            assert torch.equal(layer(x[:rows]), full[:rows])
        other = x.clone()
        other[1:] = torch.randn(7, 96, generator=torch.Generator().manual_seed(2))
        assert torch.equal(layer(other)[0], full[0])  # nor on what the other rows hold
        # one row is a GEMV: torch's kernel, exactly
        assert torch.equal(layer(x[:1]), torch.nn.functional.linear(x[:1], layer.weight, layer.bias))
        assert torch.equal(
            layer(x[:1].view(1, 1, 96)), torch.nn.functional.linear(x[:1], layer.weight, layer.bias)[None]
        )
        assert torch.equal(layer(x.view(8, 1, 96))[:, 0], full)  # [batch, 1 token, features] as in decoding


def test_autograd_falls_back_to_f_linear_exactly() -> None:
    layer = torch.nn.Linear(32, 16)
    holder = torch.nn.Sequential(layer)
    prepack_linear_weights(holder)
    x = torch.randn(4, 32, requires_grad=True)
    out = layer(x)
    assert torch.equal(out, torch.nn.functional.linear(x, layer.weight, layer.bias))
    out.sum().backward()
    assert x.grad is not None and layer.weight.grad is not None


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: torch.nn.Sequential(torch.nn.Linear(8, 8).half()), "float16 weights"),
        (lambda: torch.nn.Sequential(torch.nn.Conv1d(2, 2, 1)), "no linear layer"),
    ],
)
def test_unsupported_models_keep_torchs_kernel(make, why: str) -> None:
    model = make()
    assert prepack_linear_weights(model) == TORCH, why
    assert linear_kernel(model) == TORCH
    assert not any(hasattr(m, "_qb_packed") for m in model.modules())


def test_size_cap_and_repeat_calls() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16, bias=False), torch.nn.Linear(16, 4))
    weight_bytes = (16 * 16 + 4 * 16) * 4
    assert prepack_linear_weights(model, max_bytes=weight_bytes - 1) == TORCH
    assert not any(hasattr(m, "_qb_packed") for m in model.modules())
    assert prepack_linear_weights(model, max_bytes=weight_bytes) == PACKED
    first = model[0]._qb_packed
    assert prepack_linear_weights(model) == PACKED and model[0]._qb_packed is first  # no second packing
    assert type(model[0]).__mro__[1] is torch.nn.Linear  # packed once: the subclass of nn.Linear, not of itself


def test_runner_records_the_kernel_and_decodes_like_f_linear(llama_dir: Path) -> None:
    runner = TransformersRunner(str(llama_dir))
    assert runner.linear_kernel == PACKED_DECODE
    settings = GenerationSettings(temperature=0.0, max_new_tokens=6)
    replies = dict(runner.generate(["Say a word.", "Name a colour, please."], [0, 1], settings))
    assert {r.meta["linear_kernel"] for r in replies.values()} == {PACKED_DECODE}
    unpack_linear_weights(runner.model)
    plain = dict(runner.generate(["Say a word.", "Name a colour, please."], [0, 1], settings))
    assert [r.meta["linear_kernel"] for r in plain.values()] == [TORCH, TORCH]
    assert [replies[i].text for i in (0, 1)] == [plain[i].text for i in (0, 1)]


def test_environment_variable_keeps_torchs_kernel_or_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    monkeypatch.setenv("QUEERBENCH_LINEAR_KERNEL", "torch")
    assert prepack_linear_weights(model) == TORCH and not hasattr(model[0], "_qb_packed")
    monkeypatch.setenv("QUEERBENCH_LINEAR_KERNEL", "mkl")
    with pytest.raises(ValueError, match="QUEERBENCH_LINEAR_KERNEL='mkl'") as error:
        prepack_linear_weights(model)
    assert "use one of 'onednn-prepacked+mkl-decode', 'onednn-prepacked', 'torch', or leave it unset" in str(
        error.value
    )
    monkeypatch.setenv("QUEERBENCH_LINEAR_KERNEL", "onednn-prepacked")
    assert prepack_linear_weights(model) == PACKED and model[0]._qb_mkl is None  # MKL left out
    monkeypatch.setenv("QUEERBENCH_LINEAR_KERNEL", "onednn-prepacked+mkl-decode")
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 8))
    assert prepack_linear_weights(fresh) == PACKED_DECODE and fresh[0]._qb_mkl is not None


def test_a_model_never_packed_reports_torchs_kernel() -> None:
    assert linear_kernel(torch.nn.Sequential(torch.nn.Linear(4, 4))) == TORCH


class _OwnLinear(torch.nn.Linear):
    """A subclass of nn.Linear, as some architectures define."""


def test_each_layer_keeps_its_own_class_packed_and_unpacked() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), _OwnLinear(8, 8), torch.nn.Linear(8, 3))
    x = torch.randn(2, 8)
    with torch.inference_mode():
        want = model(x)
    assert prepack_linear_weights(model) == PACKED_DECODE
    assert [type(m).__mro__[1] for m in model] == [torch.nn.Linear, _OwnLinear, torch.nn.Linear]
    assert type(model[0]) is type(model[2]) and type(model[0]) is not type(model[1])
    with torch.inference_mode():
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
    unpack_linear_weights(model)
    assert [type(m) for m in model] == [torch.nn.Linear, _OwnLinear, torch.nn.Linear]


def test_bfloat16_weights_are_packed_and_agree() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32)).to(torch.bfloat16)
    x = torch.randn(4, 64).to(torch.bfloat16)
    with torch.inference_mode():
        want = model(x).float()
    assert prepack_linear_weights(model) == PACKED  # MKL's packed kernel is float32 only
    assert model[0]._qb_mkl is None
    with torch.inference_mode():
        torch.testing.assert_close(model(x).float(), want, rtol=2e-2, atol=2e-2)


def test_weights_off_the_cpu_are_left_alone() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8, device="meta"))
    assert prepack_linear_weights(model) == TORCH
    assert not hasattr(model[0], "_qb_packed") and type(model[0]) is torch.nn.Linear


@pytest.mark.parametrize(
    ("dtype", "error", "kernel"),
    [
        (torch.float32, 1e-6, PACKED_DECODE),  # rounding-sized: accepted
        (torch.float32, 1e-3, TORCH),  # beyond float32 rounding: refused
        (torch.bfloat16, 5e-3, PACKED),  # bfloat16 rounding is coarser
        (torch.bfloat16, 1e-1, TORCH),
    ],
)
def test_a_packed_kernel_that_does_not_reproduce_f_linear_is_not_used(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, error: float, kernel: str
) -> None:
    """The check at load time: a (simulated) faulty oneDNN kernel, off by ``error`` × the output's scale."""
    real = torch.ops.mkldnn._linear_pointwise

    def off(x, w, b, *rest):
        out = real(x, w, b, *rest)
        return out + (error * out.float().abs().max()).to(out.dtype)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", off)
    layer = torch.nn.Linear(64, 16).to(dtype)
    with torch.no_grad():
        layer.weight.mul_(0.01)  # outputs well below 1: the tolerance is relative to them
    model = torch.nn.Sequential(layer)
    assert prepack_linear_weights(model) == kernel
    assert linear_kernel(model) == kernel
    assert hasattr(layer, "_qb_packed") == (kernel != TORCH)


def test_an_all_zero_layer_is_packed() -> None:
    """Zero weights give zero outputs under both kernels: agreement, so packed (a fresh zero-initialised head)."""
    layer = torch.nn.Linear(16, 4, bias=False)
    torch.nn.init.zeros_(layer.weight)
    assert prepack_linear_weights(torch.nn.Sequential(layer)) == PACKED_DECODE


@pytest.mark.parametrize("error", [RuntimeError, NotImplementedError])
@pytest.mark.parametrize(
    ("library", "kernel"),
    [("mkldnn", TORCH), ("mkl", PACKED)],  # oneDNN fails: torch's kernel; MKL fails: oneDNN's alone
)
def test_a_failure_while_packing_keeps_the_kernel_below(
    monkeypatch: pytest.MonkeyPatch, error: type, library: str, kernel: str
) -> None:
    def fails(*args):
        raise error(f"simulated {library} failure")

    op = {"mkldnn": "_reorder_linear_weight", "mkl": "_mkl_reorder_linear_weight"}[library]
    monkeypatch.setattr(getattr(torch.ops, library), op, fails)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    assert prepack_linear_weights(model) == kernel == linear_kernel(model)
    if kernel == TORCH:
        assert type(model[0]) is torch.nn.Linear
    else:
        assert model[0]._qb_mkl is None and model[0]._qb_packed is not None


def _spy(
    monkeypatch: pytest.MonkeyPatch, namespace, name: str, calls: list[str], rows: list[int] | None = None
) -> None:
    """Record each call of ``namespace.name`` (and the rows of its input in ``rows``)."""
    real = getattr(namespace, name)

    def counted(*args):
        calls.append(name)
        if rows is not None:
            rows.append(args[0].shape[0])
        return real(*args)

    monkeypatch.setattr(namespace, name, counted)


def test_decoding_rows_run_mkl_more_rows_onednn_one_row_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 to DECODE_ROWS rows (padded) run MKL's packed SGEMM, more rows oneDNN, one row torch's GEMV; all agree with
    ``F.linear`` to rounding, and a row's output is the same for any row count from 2 to DECODE_ROWS."""
    layer = torch.nn.Linear(64, 48)
    prepack_linear_weights(torch.nn.Sequential(layer))
    calls: list[str] = []
    mkl_rows: list[int] = []
    _spy(monkeypatch, torch.ops.mkl, "_mkl_linear", calls, mkl_rows)
    _spy(monkeypatch, torch.ops.mkldnn, "_linear_pointwise", calls)
    x = torch.randn(DECODE_ROWS + 4, 64, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        full = layer(x[:DECODE_ROWS])
        for rows in range(1, DECODE_ROWS + 5):
            calls.clear()
            out = layer(x[:rows].view(rows, 1, 64))  # [rows, 1 token, features] as in decoding
            assert out.shape == (rows, 1, 48)
            want = torch.nn.functional.linear(x[:rows], layer.weight, layer.bias)
            torch.testing.assert_close(out[:, 0], want, rtol=1e-5, atol=1e-5)
            if rows == 1:
                assert calls == [] and torch.equal(out[:, 0], want)
            elif rows <= DECODE_ROWS:
                assert calls == ["_mkl_linear"] and torch.equal(out[:, 0], full[:rows])
            else:
                assert calls == ["_linear_pointwise"]
        calls.clear()
        layer(x[:12].view(2, 6, 64))  # a prefill's [rows, tokens, features]: 12 rows in all, not 2
        assert calls == ["_linear_pointwise"]
    # the reference call, then 2 to DECODE_ROWS rows padded: MKL's packed kernel runs only at that row count
    assert mkl_rows == [DECODE_ROWS] * DECODE_ROWS


def test_more_rows_than_decode_rows_match_the_onednn_kernel_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    both = torch.nn.Linear(64, 48)
    onednn = torch.nn.Linear(64, 48)
    onednn.load_state_dict(both.state_dict())
    assert prepack_linear_weights(torch.nn.Sequential(both)) == PACKED_DECODE
    monkeypatch.setenv("QUEERBENCH_LINEAR_KERNEL", "onednn-prepacked")
    assert prepack_linear_weights(torch.nn.Sequential(onednn)) == PACKED
    x = torch.randn(3 * DECODE_ROWS, 64)
    with torch.inference_mode():
        assert torch.equal(both(x), onednn(x))
        assert torch.equal(both(x[: DECODE_ROWS + 1]), onednn(x[: DECODE_ROWS + 1]))


def _packed_bytes(layers: list[torch.nn.Linear]) -> tuple[int, int]:
    """Bytes of the oneDNN and of the MKL copies of the layers' weights."""
    onednn = [torch.ops.mkldnn._reorder_linear_weight(m.weight.detach()) for m in layers]
    mkl = [torch.ops.mkl._mkl_reorder_linear_weight(m.weight.detach(), DECODE_ROWS) for m in layers]
    return tuple(sum(c.numel() * c.element_size() for c in copies) for copies in (onednn, mkl))


def test_the_mkl_copy_is_added_only_while_every_copy_fits_the_cap() -> None:
    def model() -> torch.nn.Sequential:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 16))

    onednn, mkl = _packed_bytes(list(model()))
    assert mkl > onednn  # MKL's packed layout is the larger
    short = model()
    assert prepack_linear_weights(short, max_bytes=onednn + mkl - 1) == PACKED
    assert all(m._qb_mkl is None for m in short)
    assert prepack_linear_weights(model(), max_bytes=onednn + mkl) == PACKED_DECODE


@pytest.mark.parametrize(("error", "kernel"), [(1e-6, PACKED_DECODE), (1e-3, PACKED)])
def test_an_mkl_copy_that_does_not_reproduce_f_linear_is_left_out(
    monkeypatch: pytest.MonkeyPatch, error: float, kernel: str
) -> None:
    real = torch.ops.mkl._mkl_linear

    def off(x, packed, weight, bias, rows):
        out = real(x, packed, weight, bias, rows)
        return out + error * out.abs().max()

    monkeypatch.setattr(torch.ops.mkl, "_mkl_linear", off)
    layer = torch.nn.Linear(64, 16)
    with torch.no_grad():
        layer.weight.mul_(0.01)
    assert prepack_linear_weights(torch.nn.Sequential(layer)) == kernel
    assert (layer._qb_mkl is not None) == (kernel == PACKED_DECODE)
    assert layer._qb_packed is not None  # oneDNN's copy is kept either way


def test_a_torch_build_without_mkl_keeps_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: False)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    assert prepack_linear_weights(model) == PACKED and model[0]._qb_mkl is None
