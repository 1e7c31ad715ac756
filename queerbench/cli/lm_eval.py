"""``queerbench lm-eval export DIR`` and ``queerbench lm-eval import OUTPUT_DIR --out RUN_DIR``."""

from __future__ import annotations

import argparse

from queerbench.lmeval.export import export_configs


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``lm-eval export`` and ``lm-eval import`` to the CLI."""
    lm = sub.add_parser("lm-eval", help="run QueerBench from lm-evaluation-harness and import its samples")
    lsub = lm.add_subparsers(dest="lm_eval_command", metavar="ACTION", required=True)
    export = lsub.add_parser(
        "export",
        help="write task folders for `lm_eval --include_path DIR --tasks queerbench_default`",
        description="Write lm-evaluation-harness 0.4 task folders (one per task with an lm-eval export: "
        "queerbench_default, queerbench_paper, queergen, …, and *_chat for --apply_chat_template) into DIR: the "
        "instructed prompt, greedy, queerbench's reply parser and scorers, the QueerBench score and the one-word "
        "reply rate per group. A requests task (misgendered) is one task: its generate method's prompt, greedy, "
        "its own scoring, each declared metric per group; run a chat model on it with --apply_chat_template.",
    )
    export.add_argument("dir", help="folder for the task folders (new, or an earlier export with --overwrite)")
    export.add_argument(
        "--configs",
        default="default,paper",
        help=f"comma-separated configs, from {', '.join(export_configs())} (default: %(default)s; queergen's "
        "sentences are for academic research only)",
    )
    export.add_argument(
        "--prompt",
        default=None,
        dest="prompt_id",
        help="prompt id of the fill-in-the-blank tasks (default: queergen-2)",
    )
    export.add_argument(
        "--max-new-tokens", type=int, default=None, help="reply length cap of the fill-in-the-blank tasks (default: 32)"
    )
    export.add_argument(
        "--toxicity",
        default="embedded",
        help="toxicity scorer the fill-in-the-blank tasks use (default: %(default)s; none to skip)",
    )
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the files an earlier export wrote in DIR (its task YAMLs, utils.py, sentences.parquet or "
        "items.parquet, "
        "their __pycache__ and its marker; those of tasks not exported now are removed); other files there are "
        "left as they are",
    )
    export.set_defaults(func=_export)

    imp = lsub.add_parser(
        "import",
        help="turn lm_eval --log_samples output into a queerbench run folder",
        description="Read the samples lm_eval wrote with --log_samples --output_path OUTPUT_DIR for one exported "
        "queerbench task and write a scored run folder (predictions.parquet, scores.json, report.md, figures).",
    )
    imp.add_argument("output_dir", help="lm_eval's --output_path folder")
    imp.add_argument("--out", required=True, help="new folder for the run")
    imp.add_argument("--task", default=None, help="which task's samples, when OUTPUT_DIR holds several")
    imp.add_argument("--toxicity", default=None, help="toxicity scorer (default: the one the task was exported with)")
    imp.set_defaults(func=_import)


def _export(args: argparse.Namespace) -> int:
    from queerbench.lmeval.export import export_tasks

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    tasks = export_tasks(
        args.dir,
        configs,
        prompt_id=args.prompt_id,
        max_new_tokens=args.max_new_tokens,
        toxicity=args.toxicity,
        overwrite=args.overwrite,
    )
    print(f"wrote {', '.join(tasks)} to {args.dir}; run: lm_eval --include_path {args.dir} --tasks {tasks[0]} ...")
    return 0


def _import(args: argparse.Namespace) -> int:
    from queerbench.lmeval.samples import import_samples
    from queerbench.models.device import ModelLoadError
    from queerbench.tasks import get_task

    try:
        result = import_samples(args.output_dir, args.out, task=args.task, toxicity=args.toxicity)
    except ModelLoadError as exc:
        raise ValueError(str(exc)) from exc
    scores = result.scores
    headline = get_task(scores["config"]).headline_metric.column  # the task's first declared metric
    for group, value in scores[headline].items():
        shown = "n/a (no toxicity scorer)" if value is None else f"{value:.2f}"
        print(f"  {group:>10}: {shown}  (n={scores['n'][group]})")
    print(f"wrote {result.out}/predictions.parquet, scores.json, report.md and figures")
    return 0
