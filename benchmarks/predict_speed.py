"""Speed of the masked-LM engine against the paper's one-sentence-at-a-time procedure and ``pipeline("fill-mask")``.

A bert-base-sized ``BertForMaskedLM`` (vocabulary 30,522, hidden 768, 12 layers) is randomly initialised and saved
locally with a synthetic WordPiece vocabulary that contains every word of the dataset, so sentence lengths are
realistic; no download is needed. ``--n`` dataset sentences (``build_sentences("default")``, spread over the whole
set) go through

1. the engine (:func:`queerbench.models.masked.predict.predict`, ``paper`` mode = full vocabulary, and ``default`` mode),
2. :func:`queerbench.models.masked.predict.paper_one_at_a_time` (batch size 1, LM head on every position, as the paper did),
3. ``transformers.pipeline("fill-mask")`` with ``batch_size``,

and the top-5 ids are checked to agree. Printed: sentences/s and peak resident memory per method, the time
extrapolated to the paper's 8,268 sentences, the engine's share of the machine's FLOP floor (the model FLOPs the
run needs, unpadded tokens only, ÷ the best large-matmul rate measured just before and after, same dtype; engine
times are the best of two runs, since the machine may be shared), and last
``speedup vs one-at-a-time: N.Nx``. ``--dtype bfloat16`` also reports top-1/top-5 agreement with float32.

Run: ``QUEERBENCH_DATA_DIR=<data folder> python benchmarks/predict_speed.py [--n 400] [--batch-size 64] [--threads N]``
"""

from __future__ import annotations

import argparse
import os
import resource
import string
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizer, pipeline
from transformers.utils import logging as hf_logging

from queerbench.models.masked.predict import MaskedLM, load_masked_lm, paper_one_at_a_time, predict
from queerbench.tasks.queerbench.templates import build_sentences

PAPER_SIZE = 8268
VOCAB = 30522


# ---------------------------------------------------------------------------------------------------- model setup
def build_model(directory: Path, sentences: list[str]) -> Path:
    """Save a random bert-base-sized masked LM and a 30,522-entry WordPiece vocabulary into ``directory``."""
    words = sorted({w.strip(string.punctuation).lower() for s in sentences for w in s.split()} - {"", "[mask]"})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.punctuation, *string.digits, *words]
    tokens += [f"##{c}" for c in string.ascii_lowercase] + list(string.ascii_lowercase)
    tokens = list(dict.fromkeys(tokens))
    filler = (f"w{i:05d}" if i % 3 else f"##p{i:05d}" for i in range(VOCAB * 2))
    while len(tokens) < VOCAB:
        tokens.append(next(filler))
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    BertTokenizer(vocab=str(directory / "vocab.txt")).save_pretrained(directory)
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=VOCAB)).save_pretrained(directory)  # bert-base defaults otherwise
    return directory


# ------------------------------------------------------------------------------------------------------ measuring
def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@contextmanager
def peak_rss() -> Iterator[dict[str, float]]:
    """Peak resident memory (MiB) while the block runs, sampled every 5 ms (includes the loaded weights)."""
    result = {"peak_mib": _rss_mib()}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            result["peak_mib"] = max(result["peak_mib"], _rss_mib())
            time.sleep(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        result["peak_mib"] = max(result["peak_mib"], _rss_mib())


def timed(fn: Callable[[], Any], repeats: int = 1) -> tuple[Any, float, float]:
    """(result, best seconds over ``repeats`` calls, peak RSS MiB); best-of damps noise from other processes."""
    best = float("inf")
    with peak_rss() as mem:
        for _ in range(repeats):
            start = time.perf_counter()
            out = fn()
            best = min(best, time.perf_counter() - start)
    return out, best, mem["peak_mib"]


def matmul_rate(dtype: torch.dtype, size: int = 2048, seconds: float = 3.0) -> float:
    """The machine's large-matmul rate in FLOP/s for ``dtype`` (best of repeated ``size``² products).

    Uses ``F.linear``, the kernel ``nn.Linear`` layers run: for bfloat16 on CPUs without native support, plain
    ``torch.mm`` takes a far slower fallback path and would make the floor meaningless.
    """
    a = torch.randn(size, size).to(dtype)
    w = torch.randn(size, size).to(dtype)
    torch.nn.functional.linear(a, w)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        torch.nn.functional.linear(a, w)
        best = max(best, 2 * size**3 / (time.perf_counter() - start))
    return best


def model_flops(config: BertConfig, lengths: list[int]) -> float:
    """FLOPs a BERT masked LM needs for these unpadded sequence lengths, with the LM head at one position each."""
    h, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    total = 0.0
    for n in lengths:
        per_layer = 2 * n * (4 * h * h + 2 * h * i) + 2 * 2 * n * n * h  # projections + FFN, QKᵀ and AV
        total += layers * per_layer + 2 * (h * h + h * v)  # head: dense transform + decoder
    return total


# ------------------------------------------------------------------------------------------------------------ run
def agreement(a: list[list[int]], b: list[list[int]]) -> tuple[float, float]:
    """(top-1 agreement, exact top-k list agreement) between two id lists."""
    top1 = sum(x[0] == y[0] for x, y in zip(a, b, strict=True)) / len(a)
    exact = sum(x == y for x, y in zip(a, b, strict=True)) / len(a)
    return top1, exact


def run_pipeline(lm: MaskedLM, sentences: list[str], k: int, batch_size: int) -> list[list[int]]:
    fill = pipeline("fill-mask", model=lm.model, tokenizer=lm.tokenizer, device=lm.device, top_k=k)
    out = fill(sentences, batch_size=batch_size)
    return [[d["token"] for d in row] for row in out]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400, help="dataset sentences to run (default 400)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--skip-pipeline", action="store_true", help="leave out pipeline('fill-mask')")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    frame = build_sentences("default")
    step = max(1, len(frame) // args.n)
    sentences = frame["masked_sentence"].tolist()[::step][: args.n]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {len(sentences)} sentences, k={args.k}")

    with tempfile.TemporaryDirectory(prefix="qb-bench-") as tmp:
        path = build_model(Path(tmp), frame["masked_sentence"].tolist())
        lm = load_masked_lm(str(path), device="cpu", dtype="float32")
        lengths = [len(x) for x in lm.tokenizer(sentences)["input_ids"]]
        mean = sum(lengths) / len(lengths)
        print(f"model: random BertForMaskedLM, vocab {VOCAB}, hidden 768, 12 layers; mean length {mean:.1f} tokens")
        predict(lm, sentences[:8], args.k, mode="raw", batch_size=8)  # warm-up
        paper_one_at_a_time(lm.model, lm.tokenizer, sentences[0], args.k)

        rows: list[tuple[str, float, float]] = []
        one, t_one, m_one = timed(lambda: [paper_one_at_a_time(lm.model, lm.tokenizer, s, args.k) for s in sentences])
        rows.append(("paper one-at-a-time", t_one, m_one))
        floor32 = matmul_rate(torch.float32)  # measured next to the engine run: other load on the machine varies
        eng, t_eng, m_eng = timed(lambda: predict(lm, sentences, args.k, mode="raw", batch_size=args.batch_size), 2)
        floor32 = max(floor32, matmul_rate(torch.float32))
        rows.append((f"engine paper mode (batch {args.batch_size})", t_eng, m_eng))
        _, t_def, m_def = timed(
            lambda: predict(lm, sentences, args.k, mode="whole_word", batch_size=args.batch_size), 2
        )
        rows.append((f"engine default mode (batch {args.batch_size})", t_def, m_def))
        if not args.skip_pipeline:
            pipe, t_pipe, m_pipe = timed(lambda: run_pipeline(lm, sentences, args.k, args.batch_size))
            rows.append((f"pipeline fill-mask (batch {args.batch_size})", t_pipe, m_pipe))

        one_ids = [r.ids for r in one]
        top1, exact = agreement(eng.ids, one_ids)
        print(f"top-{args.k} ids, engine vs one-at-a-time: top-1 {top1:.1%}, identical lists {exact:.1%}")
        if not args.skip_pipeline:
            top1, exact = agreement(pipe, one_ids)
            print(f"top-{args.k} ids, pipeline vs one-at-a-time: top-1 {top1:.1%}, identical lists {exact:.1%}")
        if exact < 1.0 or agreement(eng.ids, one_ids)[1] < 1.0:
            print("WARNING: top-k ids disagree (near-ties in float arithmetic, or a bug)")
        print(f"{'method':40s} {'sent/s':>8s} {'full 8,268':>11s} {'peak RSS':>10s}")
        for name, seconds, mib in rows:
            rate = len(sentences) / seconds
            print(f"{name:40s} {rate:8.1f} {PAPER_SIZE / rate:10.1f}s {mib:8.0f}MiB")
        print(f"process peak RSS (getrusage): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")

        flops = model_flops(lm.model.config, lengths)
        print(
            f"FLOP floor: {flops / 1e9:.1f} GFLOP needed; large fp32 matmul {floor32 / 1e9:.1f} GFLOP/s → "
            f"floor {flops / floor32:.2f}s; engine paper mode {flops / t_eng / 1e9:.1f} GFLOP/s = "
            f"{flops / t_eng / floor32:.0%} of the fp32 floor (default mode {flops / t_def / floor32:.0%})"
        )

        if args.dtype == "bfloat16":
            lm16 = load_masked_lm(str(path), device="cpu", dtype="bfloat16")
            predict(lm16, sentences[:8], args.k, mode="raw", batch_size=8)
            floor16 = matmul_rate(torch.bfloat16)
            e16, t16, m16 = timed(lambda: predict(lm16, sentences, args.k, mode="raw", batch_size=args.batch_size))
            floor16 = max(floor16, matmul_rate(torch.bfloat16))
            top1, _ = agreement(e16.ids, eng.ids)
            overlap = sum(len(set(a) & set(b)) for a, b in zip(e16.ids, eng.ids, strict=True)) / (args.k * len(e16.ids))
            print(
                f"bfloat16 engine: {len(sentences) / t16:.1f} sent/s ({t_eng / t16:.2f}x fp32), peak RSS {m16:.0f} MiB; "
                f"large bf16 matmul {floor16 / 1e9:.1f} GFLOP/s, engine {flops / t16 / floor16:.0%} of the bf16 floor; "
                f"vs fp32: top-1 agreement {top1:.1%}, top-{args.k} overlap {overlap:.1%}"
            )
        print(f"speedup vs one-at-a-time: {t_one / t_eng:.1f}x")


if __name__ == "__main__":
    main()
