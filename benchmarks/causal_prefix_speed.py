"""Speed of a causal LM's ``loglikelihood`` with and without prefix sharing, on MISGENDERED's ``scored`` requests.

The first ``--items`` items of the ``misgendered`` task each ask 11 whole-sentence log-likelihoods (one per pronoun
set's form in the slot) that differ only from the slot on. They are scored with
:class:`~queerbench.models.backends.causal.CausalBackend` on the embedded SmolLM2-135M-Instruct
(``embedded:smollm2-135m-instruct``, float32, CPU, ``--batch-size`` rows per pass), all in one call as a run's part
holds them, with ``share_prefixes`` off (every row run whole) and on (each group's common prefix run once, its
suffixes on the prefix's KV cache: :mod:`queerbench.models.backends.prefixes`). Each mode's model loads once, outside
the timing; the modes alternate ``--repeats`` times and the best time counts (the machine may be shared).

Printed: per mode the seconds and sentences/s, the speed-up, and the largest absolute difference between the two
modes' log-probabilities (it should be float rounding, below 1e-3 on a sentence's sum).

Then, unless ``--limit 0``, the whole command a user runs, ``queerbench run --config misgendered --model
embedded:smollm2-135m-instruct --method scored --limit N`` (model load, items, runner, record, report and figure
included), each in a fresh process into a fresh folder: as it ships (sharing on), and with sharing switched off by
wrapping ``open_backend`` before the same CLI entry point runs. Printed: both wall times and their ratio.

Run: ``QUEERBENCH_DATA_DIR=<data folder> HF_HUB_OFFLINE=1 python benchmarks/causal_prefix_speed.py [--items 30]
[--batch-size 64] [--repeats 1] [--threads N] [--limit 2]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tempfile

import torch
from timed_command import timed_command

from queerbench.models.backends import open_backend
from queerbench.models.registry import model_ref
from queerbench.models.requests import Loglikelihood
from queerbench.models.spec import ModelSpec
from queerbench.tasks import get_task

MODEL = "embedded:smollm2-135m-instruct"


def misgendered_requests(n_items: int) -> list[Loglikelihood]:
    """The ``scored`` requests of the first ``n_items`` MISGENDERED items, in the task's order."""
    task = get_task("misgendered")
    items = task.items().head(n_items).to_dict("records")
    requests = [r for item in items for r in task.requests(item, "scored")]
    assert all(isinstance(r, Loglikelihood) for r in requests)
    return requests  # type: ignore[return-value]


_SHARING_OFF = """
import sys
import queerbench.models.backends as backends
import queerbench.run.requests as runner
opened = backends.open_backend
runner.open_backend = lambda *a, **k: opened(*a, **{**k, "share_prefixes": False})
from queerbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def whole_commands(limit: int) -> None:
    """The whole ``queerbench run`` with sharing on (as shipped) and off, each a fresh process and folder."""
    args = ["run", "--config", "misgendered", "--model", MODEL, "--method", "scored", "--limit", str(limit)]
    with tempfile.TemporaryDirectory() as tmp:
        on = timed_command([sys.executable, "-m", "queerbench", *args, "--out", f"{tmp}/on"], env=os.environ)
        off = timed_command([sys.executable, "-c", _SHARING_OFF, *args, "--out", f"{tmp}/off"], env=os.environ)
    n = limit * 11
    print(f"whole command, `queerbench {' '.join(args)}` ({n} items, {n * 11} sentences), a fresh process each:")
    print(f"  sharing off: {off:6.1f} s   sharing on (as shipped): {on:6.1f} s   speed-up {off / on:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=30, help="MISGENDERED items, 11 sentences each (default 30)")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per forward pass (default 64)")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per mode, the best counts (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--limit", type=int, default=2, help="templates of the whole-command run (0: skip it)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    requests = misgendered_requests(args.items)
    ref = model_ref(MODEL)
    backends = {
        share: open_backend(
            ref,
            "loglikelihood",
            ModelSpec(device="cpu", batch_size=args.batch_size),
            share_prefixes=share,
            log=lambda _: None,
        )
        for share in (False, True)
    }
    best = dict.fromkeys(backends, float("inf"))
    values: dict[bool, list[float]] = {}
    for _ in range(args.repeats):
        for share, backend in backends.items():
            start = time.perf_counter()
            results = backend.loglikelihood(requests)
            best[share] = min(best[share], time.perf_counter() - start)
            values[share] = [r.logprob for r in results]
    assert all(b.metadata()["share_prefixes"] is s for s, b in backends.items()), "sharing was switched off"
    n = len(requests)
    print(
        f"{MODEL} loglikelihood, {args.items} MISGENDERED items = {n} sentences, batch size {args.batch_size}, "
        f"{torch.get_num_threads()} torch threads, best of {args.repeats}"
    )
    for share, seconds in best.items():
        print(f"  share_prefixes={share!s:<5}: {seconds:7.2f} s  ({n / seconds:6.1f} sentences/s)")
    diff = max(abs(a - b) for a, b in zip(values[False], values[True], strict=True))
    print(f"  speed-up {best[False] / best[True]:.2f}x; max |logprob off - on| = {diff:.2e}")
    if args.limit:
        whole_commands(args.limit)


if __name__ == "__main__":
    main()
