"""``queerbench run`` and ``queerbench compare``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from queerbench.base.arguments import endpoint_arguments
from queerbench.cli.common import config_argument
from queerbench.methods.registry import METHODS, recorded_method

if TYPE_CHECKING:
    from queerbench.tasks import Task


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` and ``compare`` to the CLI."""
    run = sub.add_parser(
        "run",
        help="the main job: predict, score and report for one masked, causal or chat LM",
        description="Predict top-k completions for every dataset sentence with a masked LM (mlm), a local causal LM "
        "(scored: candidates ranked by whole-sentence probability) or a chat model / OpenAI-compatible endpoint "
        "(instructed: QueerGen's prompt, replies parsed to one word), score them and write predictions.parquet, "
        "scores.json, report.md and figures into --out. Rerunning resumes.",
    )
    run.add_argument(
        "--model",
        default=None,
        help="Hub id or local folder of a masked or causal LM, embedded:smollm2-135m-instruct, or with --endpoint the "
        "served model name (default: bert-base-uncased; embedded:smollm2-135m-instruct for scored/instructed)",
    )
    run.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="auto: a masked LM → mlm, a local causal LM → scored, --endpoint → instructed (default: %(default)s)",
    )
    endpoint_arguments(
        run, endpoint_help="OpenAI-compatible base URL (e.g. http://localhost:8000/v1); key from OPENAI_API_KEY"
    )
    run.add_argument(
        "--prompt",
        default=None,
        dest="prompt_id",
        help="instructed: prompt id from llm_prompts.json (default: queergen-2)",
    )
    run.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="instructed: reply length cap (default: 32, from llm_prompts.json)",
    )
    config_argument(run, requests=True)
    run.add_argument("--top-k", type=int, default=5, help="completions per sentence (default: %(default)s)")
    run.add_argument(
        "--exclude-function-words",
        action="store_true",
        help="score only the completions that are not closed-class words (a, is, the, ...: the list in "
        "queerbench/data/function_words.json); off by default, recorded in scores.json. The share of such "
        "completions per group is reported either way",
    )
    run.add_argument(
        "--toxicity",
        default="embedded",
        help="toxicity scorer: embedded (offline default), surrogate (fitted on the papers' files), "
        "hf:<model id or path>, perspective, none (default: "
        "%(default)s); stored 'precomputed' flags are for `queerbench score`",
    )
    run.add_argument(
        "--toxicity-input",
        choices=("neutral", "full", "frame"),
        default=None,
        help="what the toxicity scorer reads: the subject-blind neutral sentence (default config), the full sentence "
        "(paper config), or 'The person is <word>.'",
    )
    run.add_argument("--out", default=None, help="output folder (default: runs/<model>-<config>-k<k>)")
    run.add_argument(
        "--device", default="auto", help="auto (cuda → mps → cpu), cpu, cuda, cuda:1, mps (default: %(default)s)"
    )
    run.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"), help="model dtype")
    run.add_argument(
        "--device-map",
        default=None,
        help="local models: place the layers with accelerate over all visible GPUs (and CPU RAM): auto, balanced, "
        "balanced_low_0, sequential (default: none, the whole model on --device)",
    )
    run.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (default: %(default)s)")
    run.add_argument("--limit", type=int, default=None, help="use only the first N templates (all subjects of each)")
    run.add_argument("--revision", default=None, help="model revision (branch, tag or commit) on the Hub")
    run.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default: %(default)s)")
    run.add_argument("--permutations", type=int, default=1000, help="permutations per test (default: %(default)s)")
    run.add_argument("--seed", type=int, default=0, help="seed for bootstrap and permutations (default: %(default)s)")
    run.set_defaults(func=_run)

    compare = sub.add_parser("compare", help="one table and heatmap across runs (like the paper's Table 4, Figs 8–9)")
    compare.add_argument("runs", nargs="+", help="run folders (each with scores.json)")
    compare.add_argument("--out", required=True, help="folder for compare.md, compare.csv and compare_heatmap.png")
    compare.set_defaults(func=_compare)


def _run_requests(args: argparse.Namespace, task: Task) -> int:
    """``queerbench run`` of a task on the request runner: resolve once, run, print each declared metric."""
    from queerbench.methods.registry import method_settings, setting_flags
    from queerbench.models.device import ModelLoadError
    from queerbench.run.requests import resolve_request_run, run_requests
    from queerbench.scoring.metric_results import NO_ITEMS

    given = [name for name in method_settings() if getattr(args, name, None) is not None]
    if given:  # a task that asks its own requests takes no method's settings: said, not ignored
        raise ValueError(
            f"{setting_flags(given)}: for a fill-in-the-blank task; --config {args.config} asks its own requests "
            "and takes none: drop them"
        )
    run = resolve_request_run(
        task,
        model=args.model,
        endpoint=args.endpoint,
        revision=args.revision,
        method=args.method,
        limit=args.limit,
        device=args.device,
        dtype=args.dtype,
        device_map=args.device_map,
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        requests_per_minute=args.requests_per_minute,
        request_timeout=args.request_timeout,
        n_resamples=args.bootstrap,
        n_permutations=args.permutations,
        seed=args.seed,
    )
    try:
        result = run_requests(run, args.out)
    except ModelLoadError as exc:
        raise ValueError(str(exc)) from exc
    record = result.record
    print(f"\n{record.benchmark} ({record.task}, method {record.method}) for {record.model}:")
    for metric in record.declared_metrics:
        block, d = record.results[metric.name], metric.decimals
        overall = block.overall or NO_ITEMS
        shown = "n/a" if overall.value is None else f"{overall.value:.{d}f}"
        print(f"  {metric.title}: {shown} over {overall.n} items")
        for group, stat in block.groups.items():
            value = "n/a" if stat.value is None else f"{stat.value:.{d}f}"
            ci = f" [{stat.ci[0]:.{d}f}, {stat.ci[1]:.{d}f}]" if stat.ci else ""
            print(f"  {group:>10}: {value}{ci}  (n={stat.n})")
    if record.parse_rate is not None:
        print(f"  replies read as an answer: {100 * record.parse_rate:.1f}%")
    print(f"  signature: {record.signature}")
    print(f"wrote {result.out}/predictions.parquet, scores.json, report.md and metrics.png")
    return 0


def _run(args: argparse.Namespace) -> int:
    from queerbench.base.arguments import UserError
    from queerbench.tasks import get_task

    task = get_task(args.config)  # looked up once: it says which runner runs it
    if task.runs_requests:
        return _run_requests(args, task)
    from queerbench.methods.instructed.replies import GenerationError
    from queerbench.methods.registry import method_settings
    from queerbench.models.device import ModelLoadError
    from queerbench.models.generation import RunAbortedError
    from queerbench.reporting.tables import fmt, n_note
    from queerbench.run.pipeline import RunOptions, run_benchmark

    options = RunOptions.for_task(
        task,
        model=args.model,
        top_k=args.top_k,
        revision=args.revision,
        limit=args.limit,
        dtype=args.dtype,
        toxicity=args.toxicity,
        toxicity_input=args.toxicity_input,
        device=args.device,
        device_map=args.device_map,
        batch_size=args.batch_size,
        n_bootstrap=args.bootstrap,
        n_permutations=args.permutations,
        seed=args.seed,
        method=args.method,
        endpoint=args.endpoint,
        concurrency=args.concurrency,
        requests_per_minute=args.requests_per_minute,
        request_timeout=args.request_timeout,
        method_settings={name: getattr(args, name, None) for name in method_settings()},  # each method's own
        exclude_function_words=args.exclude_function_words,
    )
    options.scoring_options()  # validate the scorer name before loading any model
    try:
        result = run_benchmark(options, args.out)
    except ModelLoadError as exc:
        raise ValueError(str(exc)) from exc
    except GenerationError as exc:  # some calls got no reply: every other one was made and saved; rerun for these
        print(f"queerbench: error: {exc}", file=sys.stderr)
        return 1
    except RunAbortedError as exc:  # the endpoint/model failed again and again: one line, replies so far are kept
        raise UserError(str(exc)) from exc
    scores = result.scores
    method = recorded_method(scores["run"].get("method"))
    print(f"\nQueerBench ({scores['config']}, top-{scores['k']}, method {method}) for {options.model}:")
    if scores.get("scored") is False:
        print("  no sentence could be scored: no reply was parsed to one word (parse rates below, replies saved)")
    for group, value in scores[options.task.headline_metric.column].items():  # the task's first declared metric
        shown = "n/a (no toxicity scorer)" if value is None and scores["n"][group] else fmt(value)
        print(f"  {group:>10}: {shown}  ({n_note(scores, group)})")
    generation = scores.get("generation")
    if generation:
        g = generation["overall"]
        print(
            f"  replies: {g['n']}, parsed to one word {100 * g['parse_rate']:.1f}%, refusals {100 * g['refusal_rate']:.1f}%"
        )
    print(f"  signature: {scores['signature']}")
    print(f"wrote {result.out}/predictions.parquet, scores.json, report.md and figures")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from queerbench.base.files import read_json
    from queerbench.reporting.record import is_record, read_record
    from queerbench.results.compare import check_scores_document, compare_cells, compare_runs, compare_warnings
    from queerbench.results.compare_records import compare_records, record_warnings

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a file; choose a folder for compare.md, compare.csv and the heatmap")
    runs, records = [], []
    for folder in args.runs:
        path = Path(folder) / "scores.json"
        if not path.is_file():
            raise FileNotFoundError(f"{folder} has no scores.json: is it a finished `queerbench run` folder?")
        doc = read_json(path, fix="delete it and rerun `queerbench run` for that folder (it re-scores the predictions)")
        if is_record(doc):  # a request or probes run: its typed record
            records.append(read_record(path))
            continue
        check_scores_document(doc, path)  # an object with n and queerbench per group, or one line naming the file
        runs.append({"scores": doc, "meta": doc.get("run", {"model": folder}), "dir": folder})
    if records and runs:
        raise ValueError(
            "these folders mix runs of fill-in-the-blank tasks and of request or probes tasks, whose scores measure "
            "different things; compare each kind on its own"
        )
    if records:
        md = compare_records(records, [str(f) for f in args.runs], Path(args.out))
        for warning in record_warnings(records):
            print(f"warning: {warning}", file=sys.stderr)
        print(f"wrote {md}")
        return 0
    _, md = compare_runs(runs, Path(args.out))
    print(compare_cells(runs)[2].to_string())  # QB (n) per run and group; ⚠ = n < 30
    for warning in compare_warnings(runs):
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {md}")
    return 0
