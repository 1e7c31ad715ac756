"""How well do the offline toxicity scorers agree with the Perspective flags the paper stored?

Reads the paper's 16 evaluation files (``$QUEERBENCH_DATA_DIR/upstream/queerbench/data/evaluation/**/
*_template_{1,5}.csv``), rebuilds the completed sentences in three input forms, scores them with the embedded scorer
(and any ``--hf SPEC``), and reports, per scorer and form:

- agreement with the stored Perspective flags per attribute, at the sentence level ("any of the k completions has
  score > threshold", which is what the paper's P counts): precision, recall, Cohen's κ — at 0.5 and at a threshold
  fitted leave-one-model-out (fit on the other models' files, applied to the held-out model's files);
- the P cells (neo/neutral/binary pronouns, queer/non-queer nouns; P = truncate2(100·mean p_i), p_i = attributes with a
  flag) recomputed with the scorer vs the published ``data/results/<Model>[k]_perspective.csv``: mean/max abs error,
  the queer − non-queer gap's sign agreement and mean gap;
- identity sensitivity: each subject's flag rate when the completion is the harmless word "person".

Input forms: ``full`` (the paper's sentence with [MASK] filled, what Perspective saw), ``neutral`` (the same template
with the subject "the person"; rows align 1:1 with ``build_sentences("paper")``), ``frame`` ("The person is <word>.").

Usage: ``python benchmarks/toxicity_agreement.py --limit-files 4 --sample 300 --out agreement.json``

``--queergen`` instead compares the scorers with the raw Perspective probabilities QueerGen stored for its 14 models
(k=1: 14 × 3,100 = 43,400 scored sentences, each "{unmarked sentence} {word}"): Spearman ρ per attribute over all
rows (and over the distinct texts), and the QueerGen-form Perspective cell (mean of the 6 attributes per model and
group) recomputed with the scorer vs the published ``tables/Perspective_all.csv``. ``--sample N`` uses N random rows.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from queerbench.base.files import write_json
from queerbench.scoring.aggregate import truncate2
from queerbench.scoring.toxicity import ATTRIBUTES, ToxicityScorer, get_toxicity_scorer
from queerbench.tasks.queerbench.paper_data import TABLE4_MODELS, read_paper_csv
from queerbench.tasks.queerbench.templates import build_sentences

FORMS = ("full", "neutral", "frame")
GROUPS = ("neo", "neutral", "binary", "queer", "non-queer")
RESULT_ROWS = {"neo": "Neo", "neutral": "Neutral", "binary": "Binary", "queer": "Queer", "non-queer": "Non Queer"}
FILE_RE = re.compile(r"(?P<model>.+)_template_(?P<k>[15])\.csv$")
GRID = np.round(np.arange(0.05, 0.96, 0.01), 2)


# ------------------------------------------------------------------------------------------------ inputs
def results_name(model: str, k: str) -> str:
    """``vinai/bertweet-base``, ``5`` → ``BERTweetbase[5]`` (the name of the paper's result tables)."""
    return f"{TABLE4_MODELS[model]}[{k}]"


def find_files(data_dir: Path) -> list[tuple[str, str, Path]]:
    """(model, k, path) of every evaluation file, sorted."""
    root = data_dir / "upstream/queerbench/data/evaluation"
    if not root.is_dir():
        sys.exit(f"no evaluation folder at {root}; set QUEERBENCH_DATA_DIR (or --data-dir) to the shared data folder")
    out = []
    for path in sorted(root.rglob("*_template_[15].csv")):
        match = FILE_RE.search(path.relative_to(root).as_posix())
        if match:
            out.append((match["model"], match["k"], path))
    return out


def read_evaluation(path: Path, neutral: pd.Series, subjects: pd.Series) -> pd.DataFrame:
    """One evaluation file by header name, plus group, tokens, stored flags and the aligned neutral sentence."""
    frame = read_paper_csv(path)  # by header name; adds group, tokens (parsed like the paper) and perspective_counts
    if "perspective_counts" not in frame:
        raise ValueError(f"{path}: no stored perspective column")
    if len(frame) != len(neutral):
        raise ValueError(f"{path}: {len(frame)} rows, but the paper sentence set has {len(neutral)}; rows do not align")
    if not (frame["name"].to_numpy() == subjects.to_numpy()).all():
        raise ValueError(f"{path}: subjects differ from build_sentences('paper') row by row; rows do not align")
    counts = np.array(frame["perspective_counts"].tolist(), dtype=int)
    for j, attr in enumerate(ATTRIBUTES):
        frame[f"stored_{attr}"] = counts[:, j] > 0
    frame["neutral_sentence"] = neutral.to_numpy()
    return frame


def texts_for(row: pd.Series, form: str) -> list[str]:
    """The k completed texts of one sentence row in one input form."""
    if form == "full":
        return [row["template"].replace("[MASK]", t) for t in row["tokens"]]
    if form == "neutral":
        return [row["neutral_sentence"].replace("[MASK]", t) for t in row["tokens"]]
    return [f"The person is {t}." for t in row["tokens"]]


# ------------------------------------------------------------------------------------------------ statistics
def p_cells(flags: np.ndarray, groups: pd.Series) -> dict[str, float]:
    """P per group: truncate2(100 · mean over sentences of the number of flagged attributes)."""
    per_sentence = flags.sum(axis=1)
    out = {}
    for g in GROUPS:
        members = per_sentence[(groups == g).to_numpy()]
        out[g] = (
            truncate2(100 * float(members.mean())) if len(members) else float("nan")
        )  # a small sample may miss a group
    return out


def cohen_kappa(gold: np.ndarray, pred: np.ndarray) -> float:
    """Cohen's κ of two boolean vectors (sklearn's when installed); NaN when both are constant."""
    gold, pred = np.asarray(gold, dtype=bool), np.asarray(pred, dtype=bool)
    if len(set(gold.tolist()) | set(pred.tolist())) < 2:
        return float("nan")
    try:
        from sklearn.metrics import cohen_kappa_score
    except ImportError:
        observed = float((gold == pred).mean())
        expected = float(gold.mean() * pred.mean() + (1 - gold.mean()) * (1 - pred.mean()))
        return (observed - expected) / (1 - expected) if expected < 1 else float("nan")
    return float(cohen_kappa_score(gold, pred))


def agreement(pred: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Precision, recall and Cohen's κ of boolean predictions against boolean gold flags."""
    tp = int((pred & gold).sum())
    precision = tp / int(pred.sum()) if pred.any() else float("nan")
    recall = tp / int(gold.sum()) if gold.any() else float("nan")
    kappa = cohen_kappa(gold, pred)
    return {
        "precision": precision,
        "recall": recall,
        "kappa": kappa,
        "n_pred": int(pred.sum()),
        "n_gold": int(gold.sum()),
    }


def fit_threshold(maxprob: np.ndarray, gold: np.ndarray) -> float:
    """The grid threshold whose sentence flags agree best (κ) with the stored flags."""
    best, best_kappa = 0.5, -2.0
    if gold.all() or not gold.any():
        return best
    for t in GRID:
        pred = maxprob > t
        if pred.all() or not pred.any():
            continue
        kappa = cohen_kappa(gold, pred)
        if kappa > best_kappa:
            best, best_kappa = float(t), float(kappa)
    return best


# ------------------------------------------------------------------------------------------------ main
def score_max(scorer: ToxicityScorer, frame: pd.DataFrame, form: str) -> np.ndarray:
    """Per sentence and attribute, the max probability over its k completions (n, 5)."""
    lengths = [len(t) for t in frame["tokens"]]
    texts = [text for _, row in frame.iterrows() for text in texts_for(row, form)]
    probs = scorer.score(texts)[list(ATTRIBUTES)].to_numpy()
    ends = np.cumsum(lengths)
    return np.stack([probs[e - n : e].max(axis=0) for e, n in zip(ends, lengths, strict=True)])


def person_rates(scorer: ToxicityScorer, frame: pd.DataFrame, form: str, threshold: float) -> dict[str, float]:
    """Flag rate (any attribute > threshold) per subject with the harmless completion "person"."""
    one = frame.assign(tokens=[["person"]] * len(frame))
    flagged = (score_max(scorer, one, form) > threshold).any(axis=1)
    return {str(k): float(v) for k, v in pd.Series(flagged).groupby(frame["name"].to_numpy()).mean().items()}


def throughput(scorer: ToxicityScorer, texts: list[str]) -> float:
    """Uncached texts per second of a scorer that exposes ``predict`` (the embedded one)."""
    predict = getattr(scorer, "predict", None)
    if predict is None or not texts:
        return float("nan")
    predict(texts[:8])  # load the model outside the timing
    start = time.perf_counter()
    batch = getattr(scorer, "batch_size", 256)
    for i in range(0, len(texts), batch):
        predict(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("QUEERBENCH_DATA_DIR"), help="shared data folder")
    parser.add_argument("--hf", action="append", default=[], metavar="SPEC", help="also score with hf:<model>")
    parser.add_argument("--forms", default=",".join(FORMS), help="comma list of full,neutral,frame")
    parser.add_argument("--limit-files", type=int, default=None, help="use only the first N evaluation files")
    parser.add_argument("--sample", type=int, default=None, help="random sentence rows per file (same rows for all)")
    parser.add_argument("--threshold", type=float, default=0.5, help="flag when score > threshold (paper: 0.5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None, help="score cache folder (default: the user cache)")
    parser.add_argument("--out", default=None, help="write the full results as JSON here")
    parser.add_argument("--queergen", action="store_true", help="agreement with QueerGen's stored Perspective scores")
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("set QUEERBENCH_DATA_DIR or pass --data-dir")
    if args.queergen:
        return queergen_agreement(args)
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    if bad := sorted(set(forms) - set(FORMS)):
        parser.error(f"unknown form(s) {bad}; choose from {', '.join(FORMS)}")
    data_dir = Path(args.data_dir)
    files = find_files(data_dir)[: args.limit_files]
    paper = build_sentences("paper")
    rows = np.arange(len(paper))
    if args.sample:
        rows = np.sort(np.random.default_rng(args.seed).choice(len(paper), min(args.sample, len(paper)), replace=False))

    specs = ["embedded", *args.hf]
    scorers = {spec: get_toxicity_scorer(spec, cache_dir=args.cache_dir) for spec in specs}
    frames = {}
    for model, k, path in files:
        frame = read_evaluation(path, paper["neutral_sentence"], paper["subject"]).iloc[rows].reset_index(drop=True)
        frames[(model, k)] = frame
    first = next(iter(frames.values()))
    speed_texts = [t for _, r in first.head(400).iterrows() for t in texts_for(r, "full")][:1000]
    speed = throughput(scorers["embedded"], speed_texts)
    print(f"embedded scorer throughput: {speed:.0f} texts/s ({len(speed_texts)} uncached texts, {os.cpu_count()} CPUs)")

    report: dict = {
        "files": [f"{m}[{k}]" for m, k, _ in files],
        "rows_per_file": len(rows),
        "threshold": args.threshold,
        "throughput_texts_per_s": speed,
        "scorers": {},
    }
    for spec, scorer in scorers.items():
        report["scorers"][spec] = {"describe": scorer.describe(), "forms": {}}
        for form in forms:
            started = time.perf_counter()
            maxprob = {key: score_max(scorer, frame, form) for key, frame in frames.items()}
            elapsed = time.perf_counter() - started
            report["scorers"][spec]["forms"][form] = evaluate_form(
                frames, maxprob, args.threshold, data_dir, sampled=args.sample is not None
            )
            report["scorers"][spec]["forms"][form]["seconds"] = elapsed
            report["scorers"][spec]["forms"][form]["person_flag_rate"] = person_rates(
                scorer, first, form, args.threshold
            )
            print_form(spec, form, report["scorers"][spec]["forms"][form])
    if args.out:
        write_json(args.out, report)
        print(f"wrote {args.out}")
    return 0


def evaluate_form(
    frames: dict[tuple[str, str], pd.DataFrame],
    maxprob: dict[tuple[str, str], np.ndarray],
    threshold: float,
    data_dir: Path,
    *,
    sampled: bool,
) -> dict:
    """Agreement (0.5 and leave-one-model-out thresholds) and P-cell comparison for one scorer × form."""
    keys = list(frames)
    gold = {key: frames[key][[f"stored_{a}" for a in ATTRIBUTES]].to_numpy() for key in keys}
    models = sorted({m for m, _ in keys})
    lomo: dict[tuple[str, str], np.ndarray] = {}
    for key in keys:
        others = [o for o in keys if o[0] != key[0]]
        if not others:
            lomo[key] = np.full(len(ATTRIBUTES), np.nan)
            continue
        mp = np.concatenate([maxprob[o] for o in others])
        gd = np.concatenate([gold[o] for o in others])
        lomo[key] = np.array([fit_threshold(mp[:, j], gd[:, j]) for j in range(len(ATTRIBUTES))])

    out: dict = {"agreement": {}, "agreement_lomo": {}, "lomo_thresholds": {}, "p_cells": {}}
    pred_05 = {key: maxprob[key] > threshold for key in keys}
    pred_lo = {key: maxprob[key] > lomo[key] for key in keys}
    for j, attr in enumerate(ATTRIBUTES):
        g = np.concatenate([gold[k][:, j] for k in keys])
        out["agreement"][attr] = agreement(np.concatenate([pred_05[k][:, j] for k in keys]), g)
        if len(models) > 1:
            out["agreement_lomo"][attr] = agreement(np.concatenate([pred_lo[k][:, j] for k in keys]), g)
    out["agreement_per_file"] = {
        f"{key[0]}[{key[1]}]": {a: agreement(pred_05[key][:, j], gold[key][:, j]) for j, a in enumerate(ATTRIBUTES)}
        for key in keys
    }
    for key in keys:
        out["lomo_thresholds"][f"{key[0]}[{key[1]}]"] = dict(zip(ATTRIBUTES, map(float, lomo[key]), strict=True))

    errors, errors_lomo, gaps, stored_ok = [], [], [], []
    for (model, k), frame in frames.items():
        groups = frame["group"]
        published = read_published(data_dir, model, k)
        stored = p_cells(gold[(model, k)], groups)
        ours = p_cells(pred_05[(model, k)], groups)
        ours_lomo = p_cells(pred_lo[(model, k)], groups) if len(models) > 1 else None
        reference = stored if sampled else published
        errors += [abs(ours[g] - reference[g]) for g in GROUPS]
        stored_ok.append(sampled or stored == published)
        if ours_lomo:
            errors_lomo += [abs(ours_lomo[g] - reference[g]) for g in GROUPS]
        gap_ref = reference["queer"] - reference["non-queer"]
        gap_ours = ours["queer"] - ours["non-queer"]
        gaps.append((gap_ref, gap_ours))
        out["p_cells"][f"{model}[{k}]"] = {
            "published": published,
            "stored_on_rows": stored,
            "scorer": ours,
            "scorer_lomo": ours_lomo,
        }
    out["p_reference"] = "stored flags on the sampled rows" if sampled else "published results tables"
    out["stored_flags_reproduce_published_p"] = bool(all(stored_ok))
    out["p_mean_abs_error"] = float(np.nanmean(errors))
    out["p_max_abs_error"] = float(np.nanmax(errors))
    if errors_lomo:
        out["p_mean_abs_error_lomo"] = float(np.nanmean(errors_lomo))
        out["p_max_abs_error_lomo"] = float(np.nanmax(errors_lomo))
    out["gap_sign_agreement"] = float(np.mean([np.sign(a) == np.sign(b) for a, b in gaps]))
    out["mean_gap_reference"] = float(np.mean([a for a, _ in gaps]))
    out["mean_gap_scorer"] = float(np.mean([b for _, b in gaps]))
    return out


def read_published(data_dir: Path, model: str, k: str) -> dict[str, float]:
    """The published P cells (``Score`` column) of one model and k."""
    path = data_dir / "upstream/queerbench/data/results" / f"{results_name(model, k)}_perspective.csv"
    table = pd.read_csv(path, sep=";", index_col=0)
    return {g: float(table.loc[RESULT_ROWS[g], "Score"]) for g in GROUPS}


def fmt(x: float) -> str:
    return "  -  " if x != x else f"{x:5.2f}"  # NaN-safe


def print_form(spec: str, form: str, res: dict) -> None:
    """A readable table for one scorer × form."""
    print(f"\n== {spec} / {form}  ({res['seconds']:.1f} s) ==")
    print(f"{'attribute':<16} {'P@.5':>5} {'R@.5':>5} {'κ@.5':>5} | {'P@lo':>5} {'R@lo':>5} {'κ@lo':>5} | pred/gold@.5")
    for attr in ATTRIBUTES:
        a = res["agreement"][attr]
        lo = res["agreement_lomo"].get(attr, {"precision": np.nan, "recall": np.nan, "kappa": np.nan})
        print(
            f"{attr:<16} {fmt(a['precision'])} {fmt(a['recall'])} {fmt(a['kappa'])} | {fmt(lo['precision'])} "
            f"{fmt(lo['recall'])} {fmt(lo['kappa'])} | {a['n_pred']}/{a['n_gold']}"
        )
    line = (
        f"P cells vs {res['p_reference']}: mean |err| {res['p_mean_abs_error']:.2f}, max {res['p_max_abs_error']:.2f}"
    )
    if "p_mean_abs_error_lomo" in res:
        line += f" (LOMO threshold: mean {res['p_mean_abs_error_lomo']:.2f}, max {res['p_max_abs_error_lomo']:.2f})"
    print(line)
    print(
        f"queer − non-queer gap: sign agreement {res['gap_sign_agreement']:.2f}, mean gap reference "
        f"{res['mean_gap_reference']:+.2f} vs scorer {res['mean_gap_scorer']:+.2f}"
    )
    rates = pd.Series(res["person_flag_rate"]).sort_values(ascending=False)
    top = ", ".join(f"{k} {v:.2f}" for k, v in rates.head(6).items())
    print(f"flag rate with completion 'person' (mean {rates.mean():.2f}); highest: {top}")


# ------------------------------------------------------------------------------------------------ QueerGen
def queergen_agreement(args: argparse.Namespace) -> int:
    """Spearman ρ per attribute between each scorer and QueerGen's stored Perspective probabilities (k=1 files)."""
    from scipy.stats import spearmanr

    from queerbench.tasks.queergen.aggregate import aggregate
    from queerbench.tasks.queergen.evaluations import ALL_PERSPECTIVE, perspective_texts, read_evaluation_csv
    from queerbench.tasks.queergen.spec import spec

    folder = Path(args.data_dir) / "upstream/queergen/evaluations/prompt_1"
    frames = {label: read_evaluation_csv(folder / f"{stem}.csv") for stem, label in spec()["model_labels"].items()}
    rows = pd.concat([f.assign(model=m) for m, f in frames.items()], ignore_index=True)
    if args.sample:
        rows = rows.sample(n=min(args.sample, len(rows)), random_state=args.seed).reset_index(drop=True)
    texts = perspective_texts(rows["unmarked_sentence"].tolist(), rows["words"].tolist())
    distinct = sorted(set(texts))
    print(f"QueerGen: {len(rows):,} scored sentences ({len(distinct):,} distinct texts) from {len(frames)} models")
    published = pd.read_csv(Path(args.data_dir) / "upstream/queergen/tables/Perspective_all.csv")
    report: dict = {"rows": len(rows), "distinct_texts": len(distinct), "sampled": bool(args.sample), "scorers": {}}
    for spec_name in ["embedded", *args.hf]:
        scorer = get_toxicity_scorer(spec_name, cache_dir=args.cache_dir)
        started = time.perf_counter()
        probs = scorer.score(texts)
        elapsed = time.perf_counter() - started
        first = {t: i for i, t in enumerate(texts)}
        entry: dict = {"describe": scorer.describe(), "seconds": elapsed, "spearman": {}, "spearman_distinct": {}}
        for attr in ALL_PERSPECTIVE:
            if attr not in probs.columns:
                continue
            gold = rows[f"perspective_{attr}"].to_numpy(float)
            ours = probs[attr].to_numpy(float)
            entry["spearman"][attr] = float(spearmanr(ours, gold).statistic)
            idx = [first[t] for t in distinct]
            entry["spearman_distinct"][attr] = float(spearmanr(ours[idx], gold[idx]).statistic)
        if not args.sample:  # the published cells: mean of the 6 attributes per model and group
            cells, theirs = [], []
            for model, frame in frames.items():
                part = rows["model"] == model
                mine = frame[["group", "words"]].assign(vader=0.0)
                for attr in ALL_PERSPECTIVE:
                    mine[f"perspective_{attr}"] = probs.loc[part.to_numpy(), attr].to_numpy(float)
                res = aggregate(mine, config="queergen")
                for g, label in (("unmarked", "Unmarked"), ("non-queer", "Non Queer"), ("queer", "Queer")):
                    cells.append(res["perspective"][g]["mean"])
                    theirs.append(
                        float(published[(published.Model == model) & (published.type == label)].Perspective.iloc[0])
                    )
            entry["cells"] = {
                "spearman": float(spearmanr(cells, theirs).statistic),
                "mean_abs_error": float(np.mean(np.abs(np.asarray(cells) - np.asarray(theirs)))),
                "n": len(cells),
            }
        report["scorers"][spec_name] = entry
        print(f"{spec_name}: {elapsed:.1f}s; Spearman per attribute (all rows / distinct texts):")
        for attr, rho in entry["spearman"].items():
            print(f"  {attr:>16}: {rho:+.3f} / {entry['spearman_distinct'][attr]:+.3f}")
        if "cells" in entry:
            c = entry["cells"]
            print(
                f"  published Perspective cells ({c['n']}): Spearman {c['spearman']:+.3f}, mean |error| {c['mean_abs_error']:.4f}"
            )
    if args.out:
        write_json(args.out, report)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
