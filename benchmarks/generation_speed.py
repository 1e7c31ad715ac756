"""Local generation speed: the generation layer's decoding loop against transformers' ``model.generate`` on
SmolLM2-135M-Instruct, tokens/s at the default batch and at batch 1, and the share of the memory-bandwidth floor.

The embedded SmolLM2-135M-Instruct (Q4_1 GGUF from its pinned wheel, dequantised to float32 by transformers) runs
:meth:`queerbench.models.generation.TransformersRunner.decode` (the generation layer's loop: one prefill, then one token per step
through the model's own forward and KV cache, one seeded generator per row) on real SCM story prompts,
``--new-tokens`` (200) new tokens per reply with the SCM sampling settings (temperature 0.6, top-p 0.9); stop tokens
are ignored so every row decodes exactly that many. The same batch goes through ``model.generate`` with the same
sampling (``min_new_tokens`` = ``max_new_tokens``). The two alternate ``--repeats`` times per batch size and the
best time of each counts, since the machine may be shared (its load is printed).

The floor: every decoding step must read all the weights once (the tied embedding matrix as the LM head), so a step
takes at least ``weight bytes ÷ memory bandwidth``, whatever the batch; at batch B the floor is
``B × bandwidth ÷ weight bytes`` tokens/s. The bandwidth is measured here, just before and after, as the best of a
large float32 tensor copy (STREAM "copy" convention: bytes read + bytes written, per second). Printed per batch and
per loop: tokens/s over the whole reply (prefill included) and their share of the floor; then the loop's ratio to
``model.generate``, the share of the loop's CPU time spent in the linear layers (torch profiler, a short run) and one
step's linear layers alone (every ``nn.Linear`` at the batch's row count, best of 5): the ceiling the matmul kernel
puts on the share of the floor, whatever the loop around it.

Run: ``QUEERBENCH_DATA_DIR=<data folder> nice python benchmarks/generation_speed.py [--new-tokens 200] [--batch 8]
[--repeats 1]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from transformers.utils import logging as hf_logging

from queerbench.models.generation import GenerationSettings, TransformersRunner
from queerbench.tasks.scm.dataset import scm_splits

LOOP, GENERATE = "queerbench loop", "model.generate"


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
    included) called on a ``[rows, in_features]`` input. What no decoding loop can go below at that batch."""
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


def loops(runner: TransformersRunner, prompts: list[str], new_tokens: int) -> dict[str, Callable[[int], None]]:
    """The two ways of sampling ``new_tokens`` per row for the first ``batch`` prompts, by name."""
    seqs = [runner.tokenizer(runner.format_prompt(p), add_special_tokens=False)["input_ids"] for p in prompts]
    settings = GenerationSettings(temperature=0.6, top_p=0.9, max_new_tokens=new_tokens)

    def ours(batch: int) -> None:
        out = runner.decode(seqs[:batch], list(range(batch)), settings)
        assert all(len(toks) == new_tokens for toks, _ in out)

    def generate(batch: int) -> None:
        enc = runner.tokenizer(
            [runner.format_prompt(p) for p in prompts[:batch]],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        torch.manual_seed(0)
        with torch.inference_mode():
            gen = runner.model.generate(
                **enc,
                do_sample=True,
                temperature=0.6,
                top_p=0.9,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=runner.tokenizer.pad_token_id,
            )
        assert gen.shape[1] - enc["input_ids"].shape[1] == new_tokens

    return {LOOP: ours, GENERATE: generate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--batch", type=int, default=GenerationSettings().batch_size, help="default: the default")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
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
    lengths = [len(runner.tokenizer(runner.format_prompt(p), add_special_tokens=False)["input_ids"]) for p in prompts]
    run = loops(runner, prompts, args.new_tokens)
    batches = list(dict.fromkeys((args.batch, 1)))

    bandwidth = copy_bandwidth()
    best: dict[tuple[str, int], float] = {}
    for _ in range(args.repeats):
        for batch in batches:
            for name, fn in run.items():  # side by side: each repeat runs both, alternating
                start = time.perf_counter()
                fn(batch)
                best[name, batch] = min(best.get((name, batch), float("inf")), time.perf_counter() - start)

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runner.decode(
            [runner.tokenizer(runner.format_prompt(p), add_special_tokens=False)["input_ids"] for p in prompts],
            list(range(len(prompts))),
            GenerationSettings(temperature=0.6, top_p=0.9, max_new_tokens=12),
        )
    events = prof.key_averages()
    total_cpu = sum(e.self_cpu_time_total for e in events)
    mm_cpu = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm", "aten::linear"))
    bandwidth = max(bandwidth, copy_bandwidth())
    step_floor = weights / bandwidth
    gemm = {batch: weight_matmul_time(runner.model, batch) for batch in batches}

    print(
        f"SmolLM2-135M-Instruct (embedded GGUF -> {args.dtype}), {runner.fingerprint()['params'] / 1e6:.1f}M "
        f"parameters = {weights / 1e6:.0f} MB read per decoding step; {args.new_tokens} new tokens per row, prompts "
        f"of {min(lengths)}-{max(lengths)} tokens; torch {torch.__version__}, {torch.get_num_threads()} threads; load "
        f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; best of {args.repeats}"
    )
    print(f"copy bandwidth {bandwidth / 1e9:.2f} GB/s -> floor {step_floor * 1000:.1f} ms per decoding step")
    rate = {}
    for (name, batch), seconds in best.items():
        rate[name, batch] = batch * args.new_tokens / seconds
        floor = batch / step_floor
        print(
            f"{name:16s} batch {batch:3d}: {rate[name, batch]:7.1f} tokens/s ({seconds:.1f} s); floor {floor:7.1f} "
            f"tokens/s -> {rate[name, batch] / floor:5.1%} of the floor"
        )
    for batch in batches:
        print(f"batch {batch}: {LOOP} is {rate[LOOP, batch] / rate[GENERATE, batch]:.2f}x {GENERATE}'s tokens/s")
    if len(batches) > 1:
        print(f"{LOOP}: batch {args.batch} vs batch 1: {rate[LOOP, args.batch] / rate[LOOP, 1]:.2f}x tokens/s")
    print(
        f"linear layers: {mm_cpu / total_cpu:.0%} of the loop's CPU time at batch {len(prompts)}; the rest is "
        "attention, the KV cache, norms and activations, sampling and Python"
    )
    for batch, seconds in gemm.items():
        print(
            f"one step's linear layers alone, batch {batch}: {seconds * 1000:.1f} ms = "
            f"{weights / seconds / 1e9:.1f} GB/s of weights -> at most {step_floor / seconds:.0%} of the floor"
        )


if __name__ == "__main__":
    main()
