"""Speed of the ``scored`` method: candidates ranked on a shared prefix KV cache vs one forward pass per candidate.

About ``--n`` sentences of the ``default`` set (16 subjects each of a few templates, blanks at the end and
mid-sentence in the set's proportions; see :func:`sample_sentences`) are scored with SmolLM2-135M-Instruct (``embedded:smollm2-135m-instruct``,
the pinned GGUF dequantised to float32; ``--model`` takes any causal LM folder):

1. **shared cache** — :func:`queerbench.models.causal_blanks.local.score_blanks`, the whole method: the prefix is run once per
   sentence, its top-N word-start tokens proposed and extended, and every candidate ``[word, text after the blank]``
   run as one batch of continuations on the prefix's KV cache;
2. **one pass per candidate sentence** — the *same* candidates, each full sentence (start token + prefix + word +
   suffix, less its last token, which is only a target) run through the model from scratch (batched, left-padded,
   explicit positions, LM head only on the positions that are scored), which is what scoring filled sentences one by one costs. Its time excludes the
   proposal step (it gets the candidates for free), so the ratio is conservative.

Checked: every candidate's log-probability agrees between the two to 1e-4. Printed: both times, their ratio (target
≥ 4×), the projected time of the full 7,931-sentence ``default`` run, and the shared-cache run's share of the fp32
FLOP floor: token positions actually fed to the model (padding included) × 2 × parameters ÷ the best large fp32
matmul rate measured next to the run (target ≥ 50%). Times are the best of ``--repeats`` alternating runs of each: the machine may be
shared.

Run: ``QUEERBENCH_DATA_DIR=<data folder> python benchmarks/scored_speed.py [--n 80] [--k 5] [--batch-size 32] [--threads 1]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from predict_speed import matmul_rate  # the same floor measurement as the masked-LM benchmark

from queerbench.models.causal_blanks.local import ScoredLM, _encode, _gather_logprobs, score_blanks
from queerbench.models.generation import DEFAULT_MODEL, load_causal_lm
from queerbench.tasks.queerbench.templates import build_sentences

FULL = 7931


def sample_sentences(n: int, per_template: int = 16) -> list[str]:
    """About ``n`` sentences as a real run meets them: whole runs of ``per_template`` subjects of a few templates
    (a run's batches hold one template's sentences), the templates drawn evenly from the blanks at the end and
    mid-sentence in the ``default`` set's proportions (6,314 : 1,540 sentences; the one sentence-initial template
    is left to the tests)."""
    frame = build_sentences("default")
    firsts = frame.drop_duplicates("template_id")
    mid = firsts[
        ~firsts["masked_sentence"].str.endswith("[MASK].") & ~firsts["masked_sentence"].str.startswith("[MASK]")
    ]
    end = firsts[firsts["masked_sentence"].str.endswith("[MASK].")]
    n_templates = max(2, round(n / per_template))
    n_mid = max(1, round(n_templates * 1540 / 7931))
    pick = [*end["template_id"].iloc[:: max(1, len(end) // (n_templates - n_mid))][: n_templates - n_mid]]
    pick += [*mid["template_id"].iloc[:: max(1, len(mid) // n_mid)][:n_mid]]
    rows = frame[frame["template_id"].isin(pick)].groupby("template_id").head(per_template)
    return rows["masked_sentence"].tolist()


def one_pass_per_sentence(lm: ScoredLM, rows: list[tuple[list[int], list[int]]], batch: int) -> tuple[list[float], int]:
    """log P(continuation | prefix) for each (prefix, continuation), one full forward pass per sequence, batched.

    Each sequence is fed without its last token (only a target, as in the shared-cache path), left-padded, with
    explicit positions, and the LM head runs only on the positions that predict the continuation."""
    run = 0
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]) + len(rows[i][1]), reverse=True)
    scores = [0.0] * len(rows)
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            idx = order[start : start + batch]
            seqs = [(rows[i][0] + rows[i][1])[:-1] for i in idx]
            width = max(len(s) for s in seqs)
            ids = torch.full((len(idx), width), lm.pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for r, s in enumerate(seqs):
                ids[r, width - len(s) :] = torch.tensor(s)
                mask[r, width - len(s) :] = 1
            keep = max(len(rows[i][1]) for i in idx)  # the last `keep` positions predict the continuations
            targets = torch.full((len(idx), keep), lm.pad_id, dtype=torch.long)
            for r, i in enumerate(idx):
                targets[r, keep - len(rows[i][1]) :] = torch.tensor(rows[i][1])
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = lm.model(
                input_ids=ids.to(lm.device),
                attention_mask=mask.to(lm.device),
                position_ids=positions.to(lm.device),
                logits_to_keep=keep,
            ).logits.float()
            run += ids.numel()
            token_lp = _gather_logprobs(logits, targets.to(lm.device))  # the method's own (chunked) log-softmax
            for r, i in enumerate(idx):
                scores[i] = float(token_lp[r, keep - len(rows[i][1]) :].sum())
    return scores, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n", type=int, default=80, help="about this many sentences (16 per template)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per prefix batch")
    parser.add_argument("--brute-batch", type=int, default=320, help="candidate sentences per one-pass batch")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_causal_lm(None if args.model == DEFAULT_MODEL else args.model, device=args.device)
    lm = ScoredLM(model, tokenizer)
    sentences = sample_sentences(args.n)
    kinds = {
        "end": sum(s.endswith("[MASK].") for s in sentences),
        "start": sum(s.startswith("[MASK]") for s in sentences),
    }
    kinds["mid"] = len(sentences) - kinds["end"] - kinds["start"]
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model {args.model}: {type(model).__name__}, {n_params / 1e6:.1f}M parameters, device {lm.device}, "
        f"{torch.get_num_threads()} threads; {len(sentences)} sentences ({kinds}), k={args.k}, "
        f"{4 * args.k} candidates each"
    )
    score_blanks(lm, sentences[:2], args.k)  # warm-up
    result = score_blanks(lm, sentences, args.k, batch_size=args.batch_size)
    rows, cached = [], []
    for sentence, candidates in zip(sentences, result.candidates, strict=True):
        prefix = _encode(lm, sentence).prefix
        for c in candidates:
            rows.append((prefix, [*c.word_ids, *c.suffix_ids]))
            cached.append(c.logprob)
    rate = matmul_rate(torch.float32)
    # the two are timed in alternation, best of each: other load on a shared machine comes and goes
    t_cache = t_brute = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        score_blanks(lm, sentences, args.k, batch_size=args.batch_size)
        t_cache = min(t_cache, time.perf_counter() - t0)
        t0 = time.perf_counter()
        brute, brute_run = one_pass_per_sentence(lm, rows, batch=args.brute_batch)
        t_brute = min(t_brute, time.perf_counter() - t0)
    rate = max(rate, matmul_rate(torch.float32))
    worst = max(abs(a - b) for a, b in zip(cached, brute, strict=True))
    per_token = max(abs(a - b) / len(r[1]) for a, b, r in zip(cached, brute, rows, strict=True))
    # float32 sums of several log-probabilities: batch shapes change the rounding by ~1e-5 per token
    assert per_token < 1e-4, f"cached and one-pass log-probabilities differ by {per_token} per token"
    flops = result.tokens_run * 2 * n_params
    print(
        f"candidates: {len(rows)} ({len(rows) / len(sentences):.1f} per sentence); sentence log-probs agree to "
        f"{worst:.1e} ({per_token:.1e} per scored token)"
    )
    print(
        f"shared cache (whole method): {t_cache:.2f} s = {len(sentences) / t_cache:.2f} sentences/s, "
        f"{result.tokens_run} token positions run"
    )
    print(
        f"one pass per candidate sentence (ranking only): {t_brute:.2f} s = {len(sentences) / t_brute:.2f} "
        f"sentences/s, {brute_run} token positions run"
    )
    print(
        f"full default run ({FULL} sentences): shared cache {FULL * t_cache / len(sentences) / 60:.1f} min projected, "
        f"one pass per candidate {FULL * t_brute / len(sentences) / 60:.1f} min projected"
    )
    print(
        f"fp32 FLOP floor: {flops / 1e9:.1f} GFLOP run (positions × 2 × parameters); large fp32 matmul "
        f"{rate / 1e9:.1f} GFLOP/s → floor {flops / rate:.2f} s, shared cache at {flops / rate / t_cache:.0%} of it"
    )
    print(f"speedup of the shared prefix cache vs one pass per candidate sentence: {t_brute / t_cache:.1f}x")


if __name__ == "__main__":
    main()
