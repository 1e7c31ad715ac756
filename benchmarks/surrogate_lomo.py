"""Leave-one-model-out validation of ``--toxicity surrogate`` on the papers' pinned evaluation files.

For each published model of a protocol (QueerBench's 8 masked LMs: ``full``; QueerGen's 14 models: ``blind``), the
surrogate is fitted on the other models' files only and scores the held-out model's distinct texts, the ones
``queerbench toxicity agreement`` reads; the embedded scorer scores the same texts. Printed per model and attribute:
Cohen's κ with Perspective's stored flags at > 0.5 (surrogate, then embedded), the positives Perspective flagged, and
κ on the texts no other model produced (``unseen``); then the median and minimum over models. The fits and the
features are cached (``$QUEERBENCH_CACHE``), so a second run only scores.

Usage: ``python benchmarks/surrogate_lomo.py [--protocol full|blind] [--out lomo.json]`` (``$QUEERBENCH_DATA_DIR`` or
the pinned sources give the files).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from queerbench.base.sources import fetch
from queerbench.scoring.agreement import agreement_stats, distinct_texts
from queerbench.scoring.published_files import published_files
from queerbench.scoring.toxicity import get_toxicity_scorer

ATTRS = ("TOXICITY", "IDENTITY_ATTACK", "INSULT")


def _kappa(truth: np.ndarray, probs: np.ndarray) -> float | None:
    if not len(truth):
        return None
    return agreement_stats(truth, probs)["kappa"]


def _show(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.2f}"


def validate(protocol_name: str) -> list[dict]:
    """One record per held-out model of ``protocol_name``."""
    protocol = published_files().protocols[protocol_name]
    form = protocol.text_forms[0]
    embedded = get_toxicity_scorer("embedded")
    frames = [distinct_texts(fetch(source))[0] for source, _ in protocol.files]
    records = []
    for i, (_source, model) in enumerate(protocol.files):
        start = time.perf_counter()
        frame = frames[i]
        others = set().union(*(set(f["text"]) for j, f in enumerate(frames) if j != i))
        unseen = ~frame["text"].isin(others).to_numpy()
        scorer = get_toxicity_scorer("surrogate", text_form=form, held_out_model=model, progress=False)
        ours = scorer.score(frame["text"].tolist(), words=frame["word"].tolist())
        theirs = embedded.score(frame["text"].tolist())
        record = {"model": protocol.labels[i], "texts": len(frame), "unseen": int(unseen.sum()), "attributes": {}}
        for attr in ATTRS:
            truth = frame[f"perspective_{attr}"].to_numpy(float) > 0.5
            record["attributes"][attr] = {
                "positives": int(truth.sum()),
                "surrogate": _kappa(truth, ours[attr].to_numpy(float)),
                "embedded": _kappa(truth, theirs[attr].to_numpy(float)),
                "surrogate_unseen": _kappa(truth[unseen], ours[attr].to_numpy(float)[unseen]),
            }
        record["seconds"] = round(time.perf_counter() - start, 1)
        records.append(record)
        scorer.close()
    return records


def _table(protocol_name: str, records: list[dict]) -> None:
    print(f"\n{protocol_name}: Cohen's κ with Perspective at > 0.5, surrogate (leave-one-model-out) / embedded")
    head = " | ".join(f"{a} sur/emb (unseen) pos" for a in ATTRS)
    print(f"| model | texts | {head} |")
    for r in records:
        cells = []
        for attr in ATTRS:
            s = r["attributes"][attr]
            cells.append(
                f"{_show(s['surrogate'])}/{_show(s['embedded'])} ({_show(s['surrogate_unseen'])}) {s['positives']}"
            )
        print(f"| {r['model']} | {r['texts']} | " + " | ".join(cells) + " |")
    for name, fn in (("median", np.nanmedian), ("min", np.nanmin)):
        cells = []
        for attr in ATTRS:
            values = {k: [r["attributes"][attr][k] for r in records] for k in ("surrogate", "embedded")}
            values = {k: np.array([np.nan if v is None else v for v in vs]) for k, vs in values.items()}
            cells.append(f"{fn(values['surrogate']):5.2f}/{fn(values['embedded']):5.2f}")
        print(f"| {name} | | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=("full", "blind"), action="append", help="default: both")
    parser.add_argument("--out", type=Path, help="write the records as JSON")
    args = parser.parse_args()
    results = {}
    for protocol in args.protocol or ["full", "blind"]:
        start = time.perf_counter()
        results[protocol] = validate(protocol)
        _table(protocol, results[protocol])
        print(f"({time.perf_counter() - start:.0f} s, fits and features cached after the first run)")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
