"""What the checks a run makes before inference cost, measured side by side with what they guard.

1. Fingerprinting a local model folder (:func:`queerbench.models.fingerprint.fingerprint_model`: sha256 over every weight,
   tokenizer and config file) against reading the same bytes (from the page cache) without hashing — the floor any
   full-content check pays; the ratio is what sha256 adds. Then a second fingerprint in the same process (size,
   mtime, ctime and inode unchanged: no re-hash).
2. The tokenizer-only check of ``--top-k`` (:func:`queerbench.models.masked.predict.load_masked_lm_tokenizer` +
   :func:`queerbench.models.masked.predict.max_top_k`) against loading the full model, on a bert-base-sized ``BertForMaskedLM``
   (vocabulary 30,522, 12 layers, randomly initialised and saved locally, ~440 MB of float32 weights).

Printed: seconds and MB/s per step, and the ratios ``fingerprint / plain read`` and ``tokenizer check / model load``.

Run: ``python benchmarks/preflight_cost.py [--layers 12]``
"""

from __future__ import annotations

import argparse
import os
import string
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizer
from transformers.utils import logging as hf_logging

from queerbench.models import fingerprint
from queerbench.models.fingerprint import fingerprint_model, model_files
from queerbench.models.masked.predict import load_masked_lm, load_masked_lm_tokenizer, max_top_k

VOCAB = 30522


def build_model(folder: Path, layers: int) -> Path:
    """A bert-base-sized masked LM with a synthetic WordPiece vocabulary, saved with save_pretrained."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = string.ascii_lowercase
    words = [a + b + c for a in letters for b in letters for c in letters]  # 17,576 whole words
    pieces = ["##" + a + b for a in letters for b in letters]  # 676 continuation pieces
    tokens = [*specials, *string.punctuation, *words, *pieces]
    tokens += [f"w{i}" for i in range(VOCAB - len(tokens))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
    tokenizer = BertTokenizer(str(folder / "vocab.txt"))
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=VOCAB, num_hidden_layers=layers))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def plain_read(folder: Path) -> int:
    total = 0
    for path in model_files(folder):
        with open(path, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 22), b""):
                total += len(block)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12, help="encoder layers (12 = bert-base size)")
    args = parser.parse_args()
    hf_logging.set_verbosity_error()
    with tempfile.TemporaryDirectory(prefix="qb-preflight-") as tmp:
        folder = build_model(Path(tmp) / "bert", args.layers)
        size = sum(p.stat().st_size for p in model_files(folder))
        mb = size / 1e6
        plain_read(folder)  # warm the page cache once, so both timings below read from memory alike
        _, read_s = timed(lambda: plain_read(folder))
        fingerprint._MEMO.clear()
        fp, hash_s = timed(lambda: fingerprint_model(folder))
        _, memo_s = timed(lambda: fingerprint_model(folder))
        print(f"model folder: {len(fp['files'])} files, {mb:.0f} MB")
        print(f"plain read:            {read_s:7.3f} s  ({mb / read_s:7.0f} MB/s)")
        print(f"fingerprint (sha256):  {hash_s:7.3f} s  ({mb / hash_s:7.0f} MB/s)")
        print(f"fingerprint again:     {memo_s:7.3f} s  (same process, files unchanged)")
        (config, tokenizer), check_s = timed(lambda: load_masked_lm_tokenizer(str(folder)))
        limit, limit_s = timed(lambda: max_top_k(config, tokenizer, "default"))
        _, load_s = timed(lambda: load_masked_lm(str(folder), device="cpu"))
        print(f"tokenizer + config:    {check_s:7.3f} s; whole-word count ({limit} words): {limit_s:.3f} s")
        print(f"full model load:       {load_s:7.3f} s")
        print(f"fingerprint / plain read: {hash_s / read_s:.2f}x")
        print(f"tokenizer check / model load: {(check_s + limit_s) / load_s:.2f}x")


if __name__ == "__main__":
    main()
