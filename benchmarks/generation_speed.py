"""Local generation speed: SmolLM2-135M-Instruct, tokens/s at the default batch vs batch 1, and the share of the
memory-bandwidth floor.

The embedded SmolLM2-135M-Instruct (Q4_1 GGUF from its pinned wheel, dequantised to float32 by transformers) runs
:meth:`queerbench.llm.TransformersRunner.decode` (the generation layer's KV-cache loop: one prefill, then one token
per step, one generator per row) on real SCM story prompts, ``--new-tokens`` (200) new tokens per reply with the SCM
sampling settings (temperature 0.6, top-p 0.9); stop tokens are ignored so every row decodes exactly that many.

The floor: every decoding step must read all the weights once (the tied embedding matrix as the LM head), so a step
takes at least ``weight bytes ÷ memory bandwidth``, whatever the batch; at batch B the floor is
``B × bandwidth ÷ weight bytes`` tokens/s. The bandwidth is measured here, just before and after, as the best of a
large float32 tensor copy (STREAM "copy" convention: bytes read + bytes written, per second). Printed per batch:
tokens/s over the whole reply (prefill included) and over the decoding steps alone, and their share of the floor;
then the speed-up of the default batch over batch 1 (target: ≥ 50 % of the floor at the default batch). Batches
alternate ``--repeats`` times and the best time counts, since the machine may be shared (its load is printed).
Every way of running the steps runs side by side, alternating: the default (float32 on the CPU: the Llama decoder,
:mod:`queerbench.llm.llama_decoder`, on oneDNN-prepacked weights with MKL's packed SGEMM for the decoding steps),
then transformers' own forward on each linear kernel the weights allow (:mod:`queerbench.llm.cpu_linear`: MKL's
decoding kernel, oneDNN alone, torch's own ``F.linear``); the default's ratio to each is printed per batch, with
how many sampled replies came out token-identical under the two. Before that, one decoding step of the Llama
decoder is compared with the model's own forward on the batch: bitwise equal logits, or their largest difference. Checks that depend less on the machine's load
follow: the same batch through transformers' own ``model.generate`` (same sampling, ``min_new_tokens`` =
``max_new_tokens``; ``--no-hf`` skips it), the share of the loop's CPU time spent in the linear layers (torch
profiler, a short run) — the part the floor is about; the rest is attention, the KV cache, norms, sampling and
transformers' Python — and, last, one step's linear layers alone (every ``nn.Linear`` layer at the batch's row
count, best of 5, per kernel): the ceiling that kernel puts on the share of the floor, whatever the loop around it.

Run: ``QUEERBENCH_DATA_DIR=../shared nice python benchmarks/generation_speed.py [--new-tokens 200] [--batch 8]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from transformers.utils import logging as hf_logging

from queerbench.llm import GenerationSettings, TransformersRunner
from queerbench.llm.cpu_linear import ENV, KERNELS, linear_kernel, prepack_linear_weights, unpack_linear_weights
from queerbench.llm.llama_decoder import LLAMA, TRANSFORMERS, LlamaDecoder, step_gap
from queerbench.scm.dataset import scm_splits


def copy_bandwidth(n_bytes: int = 512 * 2**20, repeats: int = 5) -> float:
    """Best bytes/s (read + write) of copying an ``n_bytes`` float32 tensor into another."""
    src = torch.ones(n_bytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch the pages once
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * n_bytes / best


def weight_matmul_time(model: torch.nn.Module, rows: int, repeats: int = 5) -> float:
    """Best time of one decoding step's weight matmuls alone: every ``nn.Linear`` layer of the model (the LM head
    included) called on a ``[rows, in_features]`` input, with the kernel the layers have now. What no decoding loop
    on that kernel can go below at that batch."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {m.in_features: torch.randn(rows, m.in_features, dtype=m.weight.dtype) for m in layers}
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for m in layers:
                m(inputs[m.in_features])
            best = min(best, time.perf_counter() - start)
    return best


def decoder_matmul_time(decoder: LlamaDecoder, rows: int, repeats: int = 5) -> float:
    """Best time of one decoding step's weight matmuls as the Llama decoder runs them (stacked q/k/v and gate/up
    projections, o and down projections, the LM head) on ``[rows, features]`` inputs."""
    config = decoder.model.config
    hidden = torch.randn(rows, config.hidden_size)
    inner = torch.randn(rows, config.intermediate_size)
    attn = torch.randn(rows, decoder.heads * decoder.head_dim)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for layer in decoder.layers:
                layer.project("qkv", layer.qkv, hidden)
                layer.o_proj.forward(attn)
                layer.project("gate_up", layer.gate_up, hidden)
                layer.down_proj.forward(inner)
            decoder.model.lm_head.forward(hidden)
            best = min(best, time.perf_counter() - start)
    return best


def step_difference(runner: TransformersRunner, seqs: list[list[int]], steps: int = 3) -> float:
    """:func:`~queerbench.llm.llama_decoder.step_gap` on ``seqs``, left-padded: the Llama decoder's logits against
    the model's own forward's over ``steps`` greedy steps (0.0: bitwise equal)."""
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), runner.tokenizer.pad_token_id)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, seq in enumerate(seqs):
        ids[r, width - len(seq) :] = torch.tensor(seq)
        mask[r, width - len(seq) :] = 1
    return step_gap(runner.model, runner.decoder, ids, mask, steps)


def use_kernel(model: torch.nn.Module, kernel: str, *, repack: bool = False) -> None:
    """Switch the model's linear layers to ``kernel`` (one of :data:`~queerbench.llm.cpu_linear.KERNELS`);
    ``repack``: pack anew even when it is in use (every layer its own MKL copy again, as without the decoder)."""
    if linear_kernel(model) == kernel and not repack:
        return
    unpack_linear_weights(model)
    before = os.environ.get(ENV)
    os.environ[ENV] = kernel
    try:
        assert prepack_linear_weights(model) == kernel, f"this torch build cannot run the {kernel} kernel"
    finally:
        if before is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--batch", type=int, default=GenerationSettings().batch_size, help="default: the default")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--no-hf", action="store_true", help="skip the model.generate comparison")
    parser.add_argument(
        "--dtype", default="float32", choices=("float32", "bfloat16"), help="weights' dtype (default float32)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

    runner = TransformersRunner(None, dtype=args.dtype)  # embedded SmolLM2-135M-Instruct
    runner.stop_token_ids = lambda: set()  # type: ignore[method-assign]  # decode exactly --new-tokens per row
    weights = sum(p.numel() * p.element_size() for p in runner.model.parameters())  # tied weights counted once
    prompts = scm_splits()["generation"]["prompt"].tolist()[: args.batch]
    seqs = [runner.tokenizer(runner.format_prompt(p), add_special_tokens=False)["input_ids"] for p in prompts]
    settings = GenerationSettings(temperature=0.6, top_p=0.9, max_new_tokens=args.new_tokens)
    prefill_only = GenerationSettings(temperature=0.6, top_p=0.9, max_new_tokens=1)

    bandwidth = copy_bandwidth()
    default = runner.linear_kernel
    kernels = KERNELS[KERNELS.index(default) :]  # the default, then each less packed one
    decoder = runner.decoder
    setups = [(runner.decoder_name, default)] + [(TRANSFORMERS, k) for k in kernels]
    setups = list(dict.fromkeys(setups))  # the default first, once
    if decoder is not None:
        use_kernel(runner.model, default, repack=True)  # the model's forward on its layers' own MKL copies
    logit_gap = None if decoder is None else step_difference(runner, seqs)
    best: dict[tuple[tuple[str, str], int], tuple[float, float]] = {}
    replies: dict[tuple[tuple[str, str], int], list[list[int]]] = {}
    for _ in range(args.repeats):
        for setup in setups:
            kernel = setup[1]
            use_kernel(runner.model, kernel, repack=setup[0] == TRANSFORMERS)  # the layers as without the decoder
            runner.decoder = decoder if setup[0] == LLAMA else None
            for batch in (args.batch, 1):
                rows, seeds = seqs[:batch], list(range(batch))
                start = time.perf_counter()
                runner.decode(rows, seeds, prefill_only)
                prefill = time.perf_counter() - start
                start = time.perf_counter()
                out = runner.decode(rows, seeds, settings)
                total = time.perf_counter() - start
                assert all(len(toks) == args.new_tokens for toks, _ in out)
                replies[setup, batch] = [toks for toks, _ in out]
                best[setup, batch] = min(best.get((setup, batch), (float("inf"), 0.0)), (total, prefill))
    use_kernel(runner.model, default)
    runner.decoder = decoder
    hf_time = None
    if not args.no_hf:
        enc = runner.tokenizer(
            [runner.format_prompt(p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False
        )
        torch.manual_seed(0)
        start = time.perf_counter()
        with torch.inference_mode():
            gen = runner.model.generate(
                **enc,
                do_sample=True,
                temperature=0.6,
                top_p=0.9,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                pad_token_id=runner.tokenizer.pad_token_id,
            )
        hf_time = time.perf_counter() - start
        assert gen.shape[1] - enc["input_ids"].shape[1] == args.new_tokens
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runner.decode(seqs, list(range(len(seqs))), GenerationSettings(temperature=0.6, top_p=0.9, max_new_tokens=12))
    events = prof.key_averages()
    total_cpu = sum(e.self_cpu_time_total for e in events)
    linear_ops = ("aten::mm", "aten::addmm", "mkldnn::_linear_pointwise", "mkl::_mkl_linear")
    mm_cpu = sum(e.self_cpu_time_total for e in events if e.key in linear_ops)
    bandwidth = max(bandwidth, copy_bandwidth())
    step_floor = weights / bandwidth
    gemm = {}
    for kernel in kernels:
        use_kernel(runner.model, kernel)
        gemm.update({(kernel, batch): weight_matmul_time(runner.model, batch) for batch in (args.batch, 1)})
    use_kernel(runner.model, default)
    stacked = {} if decoder is None else {b: decoder_matmul_time(decoder, b) for b in (args.batch, 1)}
    copies = None
    if decoder is not None:  # MKL's copies of the q/k/v and gate/up weights: per module (repacked) vs stacked
        use_kernel(runner.model, default, repack=True)
        modules = [m for layer in decoder.layers for m in (*layer.qkv, *layer.gate_up)]
        separate = sum(m._qb_mkl.numel() * m._qb_mkl.element_size() for m in modules if m._qb_mkl is not None)
        joint = sum(p.numel() * p.element_size() for layer in decoder.layers for p, _ in layer.stacked.values())
        copies = (separate, joint)

    print(
        f"SmolLM2-135M-Instruct (embedded GGUF -> {args.dtype}), {runner.fingerprint()['params'] / 1e6:.1f}M parameters = "
        f"{weights / 1e6:.0f} MB read per decoding step; {args.new_tokens} new tokens per row, prompts of "
        f"{min(map(len, seqs))}-{max(map(len, seqs))} tokens; torch {torch.__version__}, {torch.get_num_threads()} "
        f"threads; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared machine); best of "
        f"{args.repeats}"
    )
    print(f"copy bandwidth {bandwidth / 1e9:.2f} GB/s -> floor {step_floor * 1000:.1f} ms per decoding step")
    if logit_gap is not None:
        print(
            f"{LLAMA} decoder vs the model's own forward, {args.batch} rows, 3 steps: "
            + ("bitwise equal logits" if logit_gap == 0 else f"logits differ by at most {logit_gap:.2e} of their scale")
        )
    rate = {}
    name = {setup: f"{setup[0]} on {setup[1]}" for setup in setups}
    for (setup, batch), (total, prefill) in best.items():
        tokens = batch * args.new_tokens
        rate[setup, batch] = tokens / total
        decode_rate = batch * (args.new_tokens - 1) / max(total - prefill, 1e-9)
        floor = batch / step_floor
        print(
            f"{name[setup]:46s} batch {batch:3d}: {rate[setup, batch]:7.1f} tokens/s over the reply ({total:.1f} s, "
            f"prefill {prefill:.2f} s), {decode_rate:7.1f} tokens/s decoding; floor {floor:7.1f} tokens/s -> "
            f"{rate[setup, batch] / floor:5.1%} of the floor ({decode_rate / floor:5.1%} decoding only)"
        )
    first = setups[0]
    for other in setups[1:]:
        for batch in (args.batch, 1):
            same = sum(a == b for a, b in zip(replies[first, batch], replies[other, batch], strict=True))
            print(
                f"batch {batch}: {name[first]} vs {name[other]} {rate[first, batch] / rate[other, batch]:.2f}x "
                f"tokens/s; {same}/{batch} sampled replies token-identical between the two"
            )
    share = rate[first, args.batch] / (args.batch / step_floor)
    if hf_time is not None:
        hf_rate = args.batch * args.new_tokens / hf_time
        print(
            f"transformers model.generate ({default}), batch {args.batch}: {hf_rate:.1f} tokens/s ({hf_time:.1f} s) "
            f"-> the generation layer's loop ({name[first]}) is {rate[first, args.batch] / hf_rate:.2f}x its speed"
        )
    print(
        f"linear layers ({name[first]}): {mm_cpu / total_cpu:.0%} of the loop's CPU time at batch {args.batch}; the rest is "
        "attention, the KV cache, norms and activations, sampling and Python"
    )
    for (kernel, batch), seconds in gemm.items():
        print(
            f"one step's linear layers alone, {kernel}, batch {batch}: {seconds * 1000:.1f} ms = "
            f"{weights / seconds / 1e9:.1f} GB/s of weights -> at most {step_floor / seconds:.0%} of the floor for any "
            "loop on this kernel"
        )
    for batch, seconds in stacked.items():
        print(
            f"one step's linear layers alone, {LLAMA} decoder (stacked q/k/v and gate/up), batch {batch}: "
            f"{seconds * 1000:.1f} ms = {weights / seconds / 1e9:.1f} GB/s of weights -> at most "
            f"{step_floor / seconds:.0%} of the floor for its loop"
        )
    if copies is not None:
        print(
            f"MKL's packed copies of the q/k/v and gate/up weights (as allocated): {copies[0] / 1e6:.0f} MB as one "
            f"copy per module, {copies[1] / 1e6:.0f} MB stacked as the {LLAMA} decoder holds them"
        )
    print(
        f"default batch {args.batch} vs batch 1 ({name[first]}): {rate[first, args.batch] / rate[first, 1]:.2f}x "
        f"tokens/s; share of the bandwidth floor at batch {args.batch}: {share:.1%} (target >= 50%: "
        f"{'met' if share >= 0.5 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
