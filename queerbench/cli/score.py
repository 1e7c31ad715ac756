"""``queerbench score``: score a predictions file (a run's Parquet or the paper's own CSVs) from the command line."""

from __future__ import annotations

import argparse
import json
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
        "CSVs (with --toxicity precomputed, an evaluation CSV's stored Perspective counts are used). Each sentence "
        "is scored once: a file with repeated rows is refused (a run's rows by their id; the paper's CSVs, which have "
        "no id, by sentence and group, beyond the repeats of the paper's own sentence set; QueerGen's by index).",
    )
    score.add_argument("predictions", help="predictions.parquet from `queerbench run`, or an upstream QueerBench CSV")
    config_argument(score)
    score.add_argument(
        "--toxicity", default="embedded", help="embedded, surrogate, hf:<id>, perspective, precomputed, none"
    )
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


def _signature(path: Path, config: str, result: dict) -> str:
    """The signature of a scored file: its run's (from the run folder's ``run.json``) completed by the scores, or the
    file's own (task, file name, k, scorers) for a file that is not in a run folder."""
    from queerbench.base.files import read_json_object
    from queerbench.run.signature import Signature

    record = path.parent / "run.json"
    if path.suffix == ".parquet" and record.is_file():
        stored = read_json_object(record, fix="delete it and rerun `queerbench run` for that folder")
        if stored:
            try:
                return str(Signature.from_key(stored).with_scores(result))
            except (TypeError, ValueError) as exc:  # e.g. an unknown method: say which file recorded it
                raise ValueError(
                    f"{record} is not a run record ({exc}); delete it and rerun `queerbench run` for that folder"
                ) from None
    k = int(result.get("k") or 0)
    return str(
        Signature(task=config, method="file", model=path.name, revision=None, dtype="n/a", k=k, limit=None).with_scores(
            result
        )
    )


def _score(args: argparse.Namespace) -> int:
    from queerbench.run.scores import check_predictions_table, score_predictions, task_scores
    from queerbench.tasks import all_tasks, get_task

    path = Path(args.predictions)
    if args.top_k is not None and args.top_k < 1:  # as `run` refuses it: -1 would drop the last word, 0 be ignored
        raise ValueError(f"--top-k must be a positive integer, got {args.top_k}")
    if not path.is_file():
        raise FileNotFoundError(f"predictions file {path} does not exist")
    task = get_task(args.config)
    options = task.scoring_options(
        toxicity=args.toxicity,
        n_bootstrap=args.bootstrap,
        n_permutations=args.permutations,
        seed=args.seed,
        toxicity_input="frame" if args.toxicity_input == "frame" else "sentence",
        text_form=args.toxicity_input or task.spec.toxicity_input,
        exclude_function_words=args.exclude_function_words,
    )
    settings = {
        "options": options,
        "config": args.config,
        "top_k": args.top_k,
        "regard": args.regard,
        "vader": args.vader,
    }
    owner = next((t for t in all_tasks().values() if t.owns_file(path)), None)
    if owner is not None:  # one of a benchmark's own published files (QueerGen's evaluation CSVs): its scorers
        result = owner.score_file(path, settings)
        result["signature"] = _signature(path, args.config, result)
        return _print_tables(path, result, args, owner.benchmark)
    if path.suffix == ".csv":  # the task reads the published files of its benchmark (the QueerBench paper's)
        result = task.score_file(path, settings)
    elif path.suffix == ".parquet":
        frame = read_parquet(
            path, fix="if it is a run's predictions.parquet, delete it and rerun `queerbench run` for that folder"
        )
        # the columns, one list of words per row, a group per row, each id once: one line naming the row otherwise
        check_predictions_table(
            frame,
            path,
            fix="if it is a run's predictions.parquet, delete it and rerun `queerbench run` for that folder",
        )
        if args.toxicity == "precomputed":
            raise ValueError(
                f"{path}: a run's predictions carry no stored toxicity; --toxicity precomputed is for the upstream "
                "evaluation CSVs. Pass --toxicity embedded, surrogate, hf:<id>, perspective or none"
            )
        task.check_predictions(frame, path)  # before any scorer runs
        toxicity_input = str(args.toxicity_input or task.spec.toxicity_input)  # as run/pipeline.py passes it
        result, _ = score_predictions(frame, options, toxicity_input, k=args.top_k)
        result.update(
            task_scores(
                task,
                frame,
                result["k"],
                args.top_k,
                toxicity=args.toxicity,
                regard=args.regard,
                vader="recompute",
                seed=args.seed,
            )
        )
    else:
        raise ValueError(f"{path}: expected a .parquet (from `queerbench run`) or an upstream .csv")
    result["signature"] = _signature(path, args.config, result)
    print(f"QueerBench ({result['config']}, top-{result['k']}):")
    from queerbench.reporting.tables import fmt, n_note
    from queerbench.scoring.aggregate import GAP_BLOCK, SCORE_LABELS, TOXICITY_BLOCKS

    for group in result["n"]:
        shown = [
            f"{label} {'n/a' if result[key][group] is None and key in TOXICITY_BLOCKS else fmt(result[key][group])}"
            for key, label in SCORE_LABELS.items()
        ]
        print(f"  {group:>10}: {'  '.join(shown)}  ({n_note(result, group)})")
    if (result.get("function_words") or {}).get("excluded"):
        print("  (function words excluded: --exclude-function-words)")
    print(f"  signature: {result['signature']}")
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    else:
        print(json.dumps({k: result[k] for k in (GAP_BLOCK, "n", "config", "k", "signature")}, indent=2))
    return 0


def _print_tables(path: Path, result: dict, args: argparse.Namespace, benchmark: str) -> int:
    """Print (and with ``--tables`` write) the tables of a benchmark's own scores of one of its published files."""
    from queerbench.base.files import atomic_path

    pinned = (result.get("source") or {}).get("pinned")
    print(
        f"{benchmark} scores ({result['config']}, top-{result['k']}) of {path} "
        f"[{pinned or 'not a pinned file of the benchmark'}]:"
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
    print(f"  signature: {result['signature']}")
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0
