"""The Llama decoder (queerbench.llm.llama_decoder): decoding steps of a float32 Llama on the CPU without
transformers' forward give the model's own logits at every row count (one row: torch's GEMV; 2-8: MKL's packed
kernel over the stacked projections; more: oneDNN), the same replies, rows leaving the batch; it is built only where
it reproduces the model, and holds no weight twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from tiny_models import tiny_gpt2, tiny_llama

import queerbench.llm.llama_decoder as llama_decoder
from queerbench.llm import GenerationSettings, TransformersRunner
from queerbench.llm.cpu_linear import DECODE_ROWS, ENV, prepack_linear_weights, unpack_linear_weights
from queerbench.llm.llama_decoder import LLAMA, TRANSFORMERS, LlamaDecoder, build_decoder

pytestmark = pytest.mark.usefixtures("one_thread")


def _folder(root: Path, **config: object) -> Path:
    """A tiny Llama (no chat template) with peaked random weights, random norm weights and a large norm epsilon
    (so that each norm's weight and epsilon matter), and ``config`` overrides."""
    path = tiny_llama(root, chat_template=False)
    cfg = transformers.AutoConfig.from_pretrained(path)
    cfg.initializer_range = 0.5
    cfg.rms_norm_eps = 0.05
    for key, value in config.items():
        setattr(cfg, key, value)
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    model.save_pretrained(path)
    return path


def _runner(path: Path) -> TransformersRunner:
    with pytest.warns(UserWarning, match="no chat template"):
        return TransformersRunner(str(path))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> TransformersRunner:
    return _runner(_folder(tmp_path_factory.mktemp("llama-decoder")))


def _batch(rows: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``rows`` left-padded prompts of 2 to 6 tokens: ids, mask and position ids."""
    gen = torch.Generator().manual_seed(rows)
    width = 6
    ids = torch.randint(1, vocab, (rows, width), generator=gen)
    mask = torch.ones((rows, width), dtype=torch.long)
    for r in range(rows):
        mask[r, : r % 5] = 0  # 0 to 4 padding positions
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _both(runner: TransformersRunner, rows: int, steps: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per step, (transformers' logits, the decoder's logits), feeding both the same argmax tokens."""
    model, decoder = runner.model, runner.decoder
    ids, mask, positions = _batch(rows, model.config.vocab_size)
    pairs = []
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = out.cache
        state = decoder.begin(cache, mask, ids.shape[1] + steps)
        logits, pos = out.logits[:, -1], positions[:, -1] + 1
        for _ in range(steps):
            tokens = logits.argmax(-1)
            mask = torch.cat([mask, mask.new_ones((rows, 1))], dim=1)
            want = model(
                input_ids=tokens[:, None], attention_mask=mask, position_ids=pos[:, None], use_cache=True, cache=cache
            ).logits[:, -1]
            got = state.step(tokens, pos)
            pairs.append((want, got))
            logits, pos = want, pos + 1
    return pairs


@pytest.mark.parametrize("rows", [1, 2, 3, DECODE_ROWS, DECODE_ROWS + 2])
def test_each_step_gives_the_models_own_logits(llama: TransformersRunner, rows: int) -> None:
    assert isinstance(llama.decoder, LlamaDecoder)
    for want, got in _both(llama, rows):
        assert got.shape == want.shape == (rows, llama.model.config.vocab_size)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * float(want.abs().max()))


def test_one_row_and_many_rows_run_the_modules_and_2_to_8_rows_one_stacked_call(
    llama: TransformersRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which kernel serves the q/k/v and gate/up projections, per row count: the stacked MKL copy in one call for
    2 to DECODE_ROWS rows, each projection module otherwise."""
    layer = llama.decoder.layers[0]
    module_calls: list[int] = []
    stacked_calls: list[int] = []
    real_forward = type(layer.qkv[0]).forward
    monkeypatch.setattr(
        type(layer.qkv[0]), "forward", lambda self, x: module_calls.append(x.shape[0]) or real_forward(self, x)
    )
    real_mkl = llama_decoder.mkl_decode_linear
    monkeypatch.setattr(
        llama_decoder, "mkl_decode_linear", lambda x, *a: stacked_calls.append(x.shape[0]) or real_mkl(x, *a)
    )
    hidden = llama.model.config.hidden_size
    for rows, stacked in ((1, False), (2, True), (DECODE_ROWS, True), (DECODE_ROWS + 1, False)):
        module_calls.clear()
        stacked_calls.clear()
        x = torch.randn(rows, hidden)
        with torch.inference_mode():
            out = layer.project("qkv", layer.qkv, x)
            want = torch.cat([torch.nn.functional.linear(x, m.weight) for m in layer.qkv], dim=-1)
        torch.testing.assert_close(out, want, rtol=0, atol=1e-5 * float(want.abs().max()))
        assert stacked_calls == ([rows] if stacked else [])
        assert module_calls == ([] if stacked else [rows] * 3)


def test_rows_leaving_keep_the_others_logits(llama: TransformersRunner) -> None:
    model, decoder = llama.model, llama.decoder
    ids, mask, positions = _batch(5, model.config.vocab_size)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        state = decoder.begin(out.cache, mask, ids.shape[1] + 3)
        tokens, pos = out.logits[:, -1].argmax(-1), positions[:, -1] + 1
        full = state.step(tokens, pos)
        keep = torch.tensor([0, 2, 4])
        assert state.keep(keep) is True
        assert state.mask.shape[0] == 3 and all(k.shape[0] == 3 for k in state.keys + state.values)
        after = state.step(full[keep].argmax(-1), pos[keep] + 1)
        # the same three rows decoded without the others, from their own prefill
        out3 = model(input_ids=ids[keep], attention_mask=mask[keep], position_ids=positions[keep], use_cache=True)
        alone = decoder.begin(out3.cache, mask[keep], ids.shape[1] + 3)
        first = alone.step(tokens[keep], pos[keep])
        second = alone.step(first.argmax(-1), pos[keep] + 1)
    torch.testing.assert_close(after, second, rtol=0, atol=1e-5 * float(second.abs().max()))


def test_the_cache_refuses_to_overflow_or_to_start_short(llama: TransformersRunner) -> None:
    model, decoder = llama.model, llama.decoder
    ids, mask, positions = _batch(2, model.config.vocab_size)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        with pytest.raises(ValueError, match="capacity 5 is shorter than the prefill's 6 positions"):
            decoder.begin(out.cache, mask, 5)
        full = decoder.begin(out.cache, mask, 6)  # exactly the prefill: no room for a step
        with pytest.raises(ValueError, match=r"the KV cache is full \(6 positions\)"):
            full.step(out.logits[:, -1].argmax(-1), positions[:, -1] + 1)
        state = decoder.begin(out.cache, mask, 7)
        tokens, pos = out.logits[:, -1].argmax(-1), positions[:, -1] + 1
        state.step(tokens, pos)  # the one position there is room for
        assert state.filled == 7
        with pytest.raises(ValueError, match=r"the KV cache is full \(7 positions\)"):
            state.step(tokens, pos + 1)


@pytest.mark.parametrize(
    "settings",
    [
        GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=8),
        GenerationSettings(temperature=1.0, top_p=0.9, max_new_tokens=8),
    ],
    ids=["greedy", "sampled"],
)
def test_replies_are_those_of_transformers_steps(llama: TransformersRunner, settings, monkeypatch) -> None:
    """Whole replies, with a duplicate prompt (its cache copied per row) and a stop token that ends some rows early
    (they leave the batch): token for token those of transformers' forward, and the reply records its decoder."""
    tok = llama.tokenizer
    texts = ["The gay person is", "xe", "The nonbinary person tends to", "The gay person is", "He is a hero"]
    seqs = [tok(llama.format_prompt(t))["input_ids"] for t in texts]
    seeds = [1, 2, 3, 4, 5]
    free = llama.decode(seqs, seeds, settings)
    # a token that some replies reach and others do not: as the stop token, rows finish at different steps
    stop = next(t for toks, _ in free for t in toks[1:] if 0 < sum(t in other for other, _ in free) < len(free))
    monkeypatch.setattr(llama, "stop_token_ids", lambda: {stop})
    fast = llama.decode(seqs, seeds, settings)
    assert {f for _, f in fast} == {"stop", "length"}
    monkeypatch.setattr(llama, "decoder", None)
    assert llama.decode(seqs, seeds, settings) == fast
    monkeypatch.undo()
    (_, reply), *_ = llama.generate(["xe"], [0], settings)
    assert reply.meta["decoder"] == LLAMA and llama.decoder_name == LLAMA


def test_the_stacked_weights_are_the_modules_weights(llama: TransformersRunner) -> None:
    """q/k/v and gate/up modules keep their weights as views into the stacked copies (no weight held twice), and
    drop their own MKL copies (the stacked ones serve decoding); o/down keep theirs."""
    for layer in llama.decoder.layers:
        for name, modules in (("qkv", layer.qkv), ("gate_up", layer.gate_up)):
            _, stacked = layer.stacked[name]
            start = 0
            for m in modules:
                assert m.weight.data_ptr() == stacked[start].data_ptr()
                assert m.weight.shape == (m.out_features, m.in_features)
                start += m.out_features
                assert m._qb_mkl is None
            assert start == stacked.shape[0]
        assert layer.o_proj._qb_mkl is not None and layer.down_proj._qb_mkl is not None


def test_a_gpt2_or_a_changed_kernel_keeps_transformers_steps(llama, tmp_path: Path, monkeypatch) -> None:
    gpt2 = TransformersRunner(str(tiny_gpt2(tmp_path)))
    assert gpt2.decoder is None and gpt2.decoder_name == TRANSFORMERS
    (_, reply), *_ = gpt2.generate(["xe"], [0], GenerationSettings(temperature=0.0, max_new_tokens=2))
    assert reply.meta["decoder"] == TRANSFORMERS
    # the kernel switched after loading (as benchmarks/generation_speed.py does): transformers runs the steps
    runner = _runner(_folder(tmp_path / "switched"))
    assert runner.decoder_name == LLAMA
    unpack_linear_weights(runner.model)
    assert runner.decoder_name == TRANSFORMERS
    monkeypatch.setattr(runner, "model", llama.model)  # e.g. a wrapped model: not the one the decoder was built for
    assert runner.decoder_name == TRANSFORMERS


@pytest.mark.parametrize(
    "change",
    [
        {"attention_bias": True},
        {"mlp_bias": True},
        {"hidden_act": "gelu"},
        {"_attn_implementation": "eager"},
    ],
    ids=["attention-bias", "mlp-bias", "gelu", "eager"],
)
def test_what_it_does_not_reproduce_keeps_transformers_forward(tmp_path: Path, change: dict) -> None:
    runner = _runner(_folder(tmp_path, **{k: v for k, v in change.items() if not k.startswith("_")}))
    if "_attn_implementation" in change:
        runner.model.config._attn_implementation = change["_attn_implementation"]
        runner.decoder = build_decoder(runner.model)
    assert runner.decoder is None and runner.decoder_name == TRANSFORMERS


def test_other_dtypes_and_kernels_and_the_environment_keep_transformers_forward(tmp_path: Path, monkeypatch) -> None:
    path = _folder(tmp_path)
    with pytest.warns(UserWarning, match="no chat template"):
        assert TransformersRunner(str(path), dtype="bfloat16").decoder is None
    monkeypatch.setenv(ENV, "onednn-prepacked")
    assert _runner(path).decoder is None
    monkeypatch.delenv(ENV)
    monkeypatch.setenv(llama_decoder.ENV, TRANSFORMERS)
    assert _runner(path).decoder is None
    monkeypatch.setenv(llama_decoder.ENV, LLAMA)
    assert isinstance(_runner(path).decoder, LlamaDecoder)
    monkeypatch.setenv(llama_decoder.ENV, "fast")
    with pytest.raises(ValueError, match=r"QUEERBENCH_DECODER='fast': use one of 'queerbench-llama', 'transformers'"):
        TransformersRunner(str(path))


def test_a_decoder_that_does_not_reproduce_the_model_is_not_used(tmp_path: Path, monkeypatch) -> None:
    """The load-time check compares one step with the model's own: a decoder off by a little more than float
    rounding (here, a wrong norm epsilon) is dropped, and the modules keep their MKL copies."""
    real = LlamaDecoder.__init__

    def off(self, model):
        real(self, model)
        self.eps = 0.5

    monkeypatch.setattr(LlamaDecoder, "__init__", off)
    runner = _runner(_folder(tmp_path))
    assert runner.decoder is None
    layer = runner.model.model.layers[0]
    assert layer.self_attn.q_proj._qb_mkl is not None and layer.mlp.gate_proj._qb_mkl is not None


def test_a_failure_while_building_keeps_transformers_forward(tmp_path: Path, monkeypatch) -> None:
    def fail(*args):
        raise RuntimeError("no MKL here")

    monkeypatch.setattr(torch.ops.mkl, "_mkl_reorder_linear_weight", fail, raising=False)
    runner = _runner(_folder(tmp_path))
    assert runner.decoder is None


def test_rope_scaling_and_equal_length_prompts(tmp_path: Path) -> None:
    """The model's own rotary embedding (here Llama 3's frequency scaling), and a batch without padding (where
    transformers may drop the attention mask): the same logits."""
    rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    runner = _runner(_folder(tmp_path, rope_parameters=rope))
    assert runner.model.model.rotary_emb.rope_type == "llama3" and runner.decoder is not None
    for want, got in _both(runner, 3, steps=12):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    model, decoder = runner.model, runner.decoder
    ids = torch.randint(1, model.config.vocab_size, (3, 5), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    positions = torch.arange(5).expand(3, 5)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        state = decoder.begin(out.cache, mask, 6)
        tokens, pos = out.logits[:, -1].argmax(-1), torch.full((3,), 5)
        got = state.step(tokens, pos)
        want = model(
            input_ids=tokens[:, None],
            attention_mask=torch.ones((3, 6), dtype=torch.long),
            position_ids=pos[:, None],
            use_cache=True,
            cache=out.cache,
        ).logits[:, -1]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * float(want.abs().max()))


def test_eligibility(llama: TransformersRunner, tmp_path: Path) -> None:
    """Exactly a float32 LlamaForCausalLM on MKL's decoding kernel: not a subclass, not another model type, not
    bfloat16, not another kernel, not GPT-2."""
    assert llama_decoder._eligible(llama.model)

    class MyLlama(transformers.LlamaForCausalLM):
        pass

    sub = MyLlama(llama.model.config)
    prepack_linear_weights(sub)
    assert not llama_decoder._eligible(sub)
    renamed = _runner(_folder(tmp_path / "renamed"))
    renamed.model.config.model_type = "mistral"
    assert not llama_decoder._eligible(renamed.model)
    other_kernel = _runner(_folder(tmp_path / "kernel"))
    unpack_linear_weights(other_kernel.model)
    assert not llama_decoder._eligible(other_kernel.model)
    half = transformers.LlamaForCausalLM(llama.model.config).to(torch.bfloat16)
    half.queerbench_linear_kernel = llama.linear_kernel  # as if its layers ran MKL's kernel
    assert not llama_decoder._eligible(half)
    gpt2 = TransformersRunner(str(tiny_gpt2(tmp_path / "gpt2")))
    assert not llama_decoder._eligible(gpt2.model)
    config = llama.model.config
    config.pretraining_tp = 2
    try:
        assert not llama_decoder._eligible(llama.model)
    finally:
        config.pretraining_tp = 1


def test_step_gap_is_zero_or_rounding_here_and_large_for_a_wrong_decoder(llama: TransformersRunner) -> None:
    ids, mask, _ = _batch(4, llama.model.config.vocab_size)
    assert llama_decoder.step_gap(llama.model, llama.decoder, ids, mask, steps=3) <= 1e-5
    eps = llama.decoder.eps
    llama.decoder.eps = eps * 2
    try:
        assert llama_decoder.step_gap(llama.model, llama.decoder, ids, mask) > 1e-3
    finally:
        llama.decoder.eps = eps


def test_step_gap_is_relative_to_the_models_largest_logit(llama: TransformersRunner) -> None:
    """A decoder whose logits are all zero is off by exactly the model's largest logit: a gap of 1.0, at each step."""

    class Zeros:
        def begin(self, cache, mask, capacity):
            return self

        def step(self, tokens, positions):
            return torch.zeros(len(tokens), llama.model.config.vocab_size)

    ids, mask, _ = _batch(3, llama.model.config.vocab_size)
    assert llama_decoder.step_gap(llama.model, Zeros(), ids, mask, steps=2) == pytest.approx(1.0, abs=1e-6)
