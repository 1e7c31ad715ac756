"""``queerbench score``: score a predictions file (a run's Parquet or the paper's own CSVs) from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from queerbench.base.files import read_parquet, write_json
from queerbench.cli.common import config_argument


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``score`` to the CLI."""
    score = sub.add_parser(
        "score",
        help="score a predictions file",
        description="Score PREDICTIONS: a run's predictions.parquet, or one of the paper's prediction/evaluation "
        "CSVs (with --toxicity precomputed, an evaluation CSV's stored Perspective counts are used).",
    )
    score.add_argument("predictions", help="predictions.parquet from `queerbench run`, or an upstream QueerBench CSV")
    config_argument(score)
    score.add_argument("--toxicity", default="embedded", help="embedded, hf:<id>, perspective, precomputed, none")
    score.add_argument("--toxicity-input", choices=("neutral", "full", "frame"), default=None)
    score.add_argument("--top-k", type=int, default=None, help="score only the first K completions of each sentence")
    score.add_argument(
        "--exclude-function-words",
        action="store_true",
        help="score only the completions that are not closed-class words (a, is, the, ...: the list in "
        "queerbench/data/function_words.json); off by default, recorded in scores.json. The share of such "
        "completions per group is reported either way",
    )
    score.add_argument("--bootstrap", type=int, default=1000)
    score.add_argument("--permutations", type=int, default=1000)
    score.add_argument("--seed", type=int, default=0)
    score.add_argument("--out", default=None, help="write the full result as JSON here")
    score.add_argument(
        "--regard",
        default="auto",
        help="QueerGen regard scorer: auto (stored values when present, else none), precomputed, none, "
        "hf:<model id or path> (QueerGen used hf:sasha/regardv3, which needs the Hub)",
    )
    score.add_argument(
        "--vader",
        choices=("recompute", "stored"),
        default="recompute",
        help="QueerGen VADER: recompute with vaderSentiment (checked against a stored column) or use the stored one",
    )
    score.add_argument(
        "--tables", default=None, help="write QueerGen-format tables (VADER_all.csv, …) into this folder"
    )
    score.set_defaults(func=_score)


def _score(args: argparse.Namespace) -> int:
    from queerbench.run.scores import default_toxicity_input, queergen_of_predictions, score_predictions
    from queerbench.scoring.aggregate import ScoringOptions, compute
    from queerbench.tasks.queerbench.paper_data import read_paper_csv
    from queerbench.tasks.queerbench.templates import build_sentences

    path = Path(args.predictions)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file {path} does not exist")
    from queerbench.tasks.queergen.evaluations import is_queergen_csv

    if path.suffix == ".csv" and is_queergen_csv(path):
        return _score_queergen_csv(path, args)
    if path.suffix == ".csv" and args.config == "queergen":
        raise ValueError(f"{path} is not a QueerGen evaluation CSV; --config queergen scores QueerGen's files or runs")
    options = ScoringOptions(
        config=args.config,
        toxicity=args.toxicity,
        n_bootstrap=args.bootstrap,
        n_permutations=args.permutations,
        seed=args.seed,
        toxicity_input="frame" if args.toxicity_input == "frame" else "sentence",
        exclude_function_words=args.exclude_function_words,
    )
    if path.suffix == ".csv":
        try:
            frame = read_paper_csv(path)
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
            reason = "it is empty" if isinstance(exc, pd.errors.EmptyDataError) else f"{type(exc).__name__}"
            raise ValueError(
                f"{path} is not a readable QueerBench CSV ({reason}); expected an upstream "
                "data/prediction or data/evaluation/<model>_template_<k>.csv (';'-separated)"
            ) from None
        tokens = [t[: args.top_k] if args.top_k else t for t in frame["tokens"]]
        counts = (
            frame["perspective_counts"].tolist()
            if args.toxicity == "precomputed" and "perspective_counts" in frame
            else None
        )
        if args.toxicity == "precomputed" and counts is None:
            raise ValueError(f"{path} has no stored perspective column; choose another --toxicity")
        paper = build_sentences("paper")
        aligned = len(frame) == len(paper) and (frame["name"].to_numpy() == paper["subject"].to_numpy()).all()
        if args.config == "default" and counts is None and args.toxicity != "none":
            print(
                "warning: the paper's files hold the paper's sentences; the toxicity scorer reads them in full "
                "(not the subject-blind neutral sentence of the default config)",
                file=sys.stderr,
            )
        result = compute(
            tokens,
            frame["group"].tolist(),
            sentences=frame["template"].tolist(),
            toxicity_counts=counts,
            template_ids=paper["template_id"].tolist() if aligned else None,  # bootstrap/permutation clusters
            options=options,
        )
    elif path.suffix == ".parquet":
        frame = read_parquet(
            path, fix="if it is a run's predictions.parquet, delete it and rerun `queerbench run` for that folder"
        )
        needed = {"id", "tokens", "group", "category", "subject", "template_id", "masked_sentence", "neutral_sentence"}
        if not needed <= set(frame.columns):
            raise ValueError(
                f"{path} lacks the columns {sorted(needed - set(frame.columns))}; expected a run's predictions.parquet"
            )
        if args.toxicity == "precomputed":
            raise ValueError(
                f"{path}: a run's predictions carry no stored toxicity; --toxicity precomputed is for the upstream "
                "evaluation CSVs. Pass --toxicity embedded, hf:<id>, perspective or none"
            )
        if args.config == "queergen":
            _check_queergen_run(frame, path)  # before any scorer runs
        toxicity_input = args.toxicity_input or default_toxicity_input(args.config)
        result, _ = score_predictions(frame, options, toxicity_input, k=args.top_k)
        if args.config == "queergen":
            result["queergen"] = queergen_of_predictions(
                frame,
                result["k"],
                args.top_k,
                toxicity="none" if args.toxicity == "precomputed" else args.toxicity,
                regard=args.regard,
                vader="recompute",
                seed=args.seed,
            )
    else:
        raise ValueError(f"{path}: expected a .parquet (from `queerbench run`) or an upstream .csv")
    print(f"QueerBench ({result['config']}, top-{result['k']}):")
    from queerbench.reporting.tables import fmt, n_note

    for group in result["n"]:
        qb, tox = result["queerbench"][group], result["toxicity"][group]
        print(
            f"  {group:>10}: QB {'n/a' if qb is None else fmt(qb)}  A {fmt(result['afinn'][group])}  "
            f"H {fmt(result['hurtlex'][group])}  P {'n/a' if tox is None else fmt(tox)}  ({n_note(result, group)})"
        )
    if (result.get("function_words") or {}).get("excluded"):
        print("  (function words excluded: --exclude-function-words)")
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    else:
        print(json.dumps({k: result[k] for k in ("queerbench", "n", "config", "k")}, indent=2))
    return 0


def _check_queergen_run(frame: pd.DataFrame, path: Path) -> None:
    """Refuse, in one line, a predictions table that is not a ``queergen`` run: QueerGen's columns and groups."""
    from queerbench.tasks.queergen.spec import spec

    needed = {"unmarked_sentence", "template", "group", "tokens"}
    if not needed <= set(frame.columns):
        raise ValueError(f"{path} is not a queergen run (it lacks {sorted(needed - set(frame.columns))})")
    groups = spec()["group_order"]
    unknown = sorted({str(g) for g in frame["group"]} - set(groups))
    if unknown:
        raise ValueError(
            f"{path}: unknown group(s) {unknown} for --config queergen; a queergen run's groups are {', '.join(groups)}"
        )


def _score_queergen_csv(path: Path, args: argparse.Namespace) -> int:
    """Score one of QueerGen's stored evaluation CSVs with QueerGen's scorers (its own values with precomputed)."""
    from queerbench.base.files import atomic_path
    from queerbench.tasks.queergen.score import score_queergen_csv

    result = score_queergen_csv(
        path,
        config=args.config,
        toxicity=args.toxicity,
        regard=args.regard,
        vader=args.vader,
        seed=args.seed,
        top_k=args.top_k,
    )
    pinned = result["source"]["pinned"]
    print(
        f"QueerGen scores ({result['config']}, top-{result['k']}) of {path} [{pinned or 'not a pinned QueerGen file'}]:"
    )
    for name, rows in result["tables"].items():
        print(f"  {name}:")
        print("    " + pd.DataFrame(rows).to_string(index=False).replace("\n", "\n    "))
    differ = result["scorers"].get("vader_check", {}).get("differ_from_stored", [])
    if differ:
        print(f"  note: recomputed VADER differs from the stored column in {len(differ)} row(s): {differ[:3]}")
    if args.tables:
        folder = Path(args.tables)
        folder.mkdir(parents=True, exist_ok=True)
        for name, rows in result["tables"].items():
            with atomic_path(folder / f"{name}.csv") as tmp:
                pd.DataFrame(rows).to_csv(tmp, index=False)
        print(f"wrote {', '.join(result['tables'])} into {folder}")
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0
