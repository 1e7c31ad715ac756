"""``queerbench eval``, ``leaderboard build|show``, ``results push`` and ``view``: results a researcher can read.

Thin commands over :mod:`queerbench.results` (the eval, the card, the reference rows, the leaderboard) and
:mod:`queerbench.hub` (the results dataset, the local viewer).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from queerbench.base.arguments import endpoint_arguments

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``eval``, ``leaderboard``, ``results`` and ``view`` to the CLI."""
    ev = sub.add_parser(
        "eval",
        help="run the whole suite on one model (each task with each method the model supports) into one folder, "
        "with a report card (card.md, results.json, a figure, a model-index block) and the Hub's .eval_results",
    )
    ev.add_argument("--model", default=None, help="Hub id, local folder or embedded:… (default: the embedded SmolLM2)")
    endpoint_arguments(ev, endpoint_help="an OpenAI-compatible base URL serving --model")
    ev.add_argument("--revision", default=None, help="the Hub commit, branch or tag of --model")
    ev.add_argument("--tasks", default=None, help="comma-separated tasks (default: the suite: default, queergen, scm)")
    ev.add_argument("--limit", type=int, default=None, help="a quick pass: the first N templates of each task")
    ev.add_argument("--top-k", type=int, default=5, help="completions per sentence (default: 5)")
    ev.add_argument(
        "--toxicity", default="embedded", help="embedded, surrogate, hf:<id>, perspective, none (default: embedded)"
    )
    ev.add_argument("--device", default="auto", help="auto, cpu, cuda, mps (default: auto)")
    ev.add_argument("--dtype", default="float32", help="float32, float16, bfloat16 (default: float32)")
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the CIs (default: 1000)")
    ev.add_argument("--permutations", type=int, default=1000, help="permutations for the p-values (default: 1000)")
    ev.add_argument("--seed", type=int, default=0, help="seed for bootstrap and permutations (default: 0)")
    ev.add_argument(
        "--reference",
        default=None,
        help="reference_rows.json the card ranks the model among (default: the one `leaderboard build` wrote, else "
        "the bundled copy)",
    )
    ev.add_argument("--out", required=True, help="output folder (a rerun resumes it)")
    ev.set_defaults(func=_eval)

    lb = sub.add_parser("leaderboard", help="reference rows from the papers' published files, and your runs among them")
    lsub = lb.add_subparsers(dest="leaderboard_command", metavar="ACTION", required=True)
    build = lsub.add_parser(
        "build", help="compute the reference rows (the papers' 22 models) from their pinned published files"
    )
    build.add_argument(
        "--out",
        default=None,
        help="the reference_rows.json to write, or a folder to write it in (default: the queerbench cache)",
    )
    build.add_argument("--resamples", type=int, default=1000, help="bootstrap and permutation resamples (default 1000)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--workers", type=int, default=None, help="processes (default: one per CPU core)")
    build.add_argument(
        "--toxicity",
        action="append",
        default=[],
        metavar="SCORER",
        help="also re-score every published file with this offline scorer (e.g. hf:<model id or path>; repeatable), "
        "besides the stored Perspective values and the scorers listed in queerbench/data/scorer_caveats.json "
        "(reference_scorers: embedded)",
    )
    build.add_argument(
        "--stored-only",
        action="store_true",
        help="only the stored Perspective values (and any --toxicity): skip the listed scorers (under a minute)",
    )
    build.set_defaults(func=_build)
    show = lsub.add_parser("show", help="write leaderboard.md, leaderboard.csv and a figure with your runs placed")
    show.add_argument("folders", nargs="*", metavar="RUN_OR_EVAL_DIR", help="run, eval or scm run folders to place")
    show.add_argument(
        "--out",
        required=True,
        help="folder for leaderboard.md, leaderboard.csv, leaderboard.png (made if missing; those files are replaced)",
    )
    show.add_argument(
        "--reference",
        default=None,
        help="reference_rows.json to use (default: the one `leaderboard build` wrote, else the bundled copy)",
    )
    show.set_defaults(func=_show)

    res = sub.add_parser("results", help="publish results to the Hub's results dataset")
    rsub = res.add_subparsers(dest="results_command", metavar="ACTION", required=True)
    push = rsub.add_parser(
        "push", help="upload a run's or an eval's card, results and signatures (dry run unless --yes)"
    )
    push.add_argument("folder", metavar="DIR", help="a run, eval or scm run folder")
    push.add_argument("--repo", default=None, help="the results dataset (default: hub_configs/release.json's results)")
    push.add_argument("--with-predictions", action="store_true", help="also upload the per-sentence predictions")
    push.add_argument("--yes", action="store_true", help="really upload (default: say what would be uploaded)")
    push.add_argument(
        "--pull-request",
        action="store_true",
        help="instead, open a pull request adding an eval's .eval_results/*.yaml to the model's own Hub repo, where "
        "the model page and the benchmark's leaderboards show them (dry run unless --yes)",
    )
    push.add_argument(
        "--model-repo",
        default=None,
        metavar="ID",
        help="with --pull-request: the model's Hub repo (default: the eval's --model, when that is a Hub id)",
    )
    push.set_defaults(func=_push)

    view = sub.add_parser("view", help="open a run, eval or scm run folder in the local Gradio app")
    view.add_argument("folder", metavar="DIR")
    view.add_argument("--port", type=_port, default=None, help="port to serve on, 1-65535 (default: Gradio's)")
    view.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    view.set_defaults(func=_view)


def _port(text: str) -> int:
    """A TCP port number (1-65535) for ``view --port``; anything else is argparse's one-line error."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number from 1 to 65535, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 1 to 65535, got {port}")
    return port


def _eval(args: argparse.Namespace) -> int:
    from queerbench.results.eval import EvalSettings, run_eval

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1 (templates per task), got {args.limit}")
    if args.top_k < 1:
        raise ValueError(f"--top-k must be at least 1, got {args.top_k}")
    settings = EvalSettings(
        model=args.model,
        endpoint=args.endpoint,
        revision=args.revision,
        tasks=tuple(t.strip() for t in args.tasks.split(",") if t.strip()) if args.tasks else None,
        limit=args.limit,
        top_k=args.top_k,
        toxicity=args.toxicity,
        device=args.device,
        dtype=args.dtype,
        concurrency=args.concurrency,
        requests_per_minute=args.requests_per_minute,
        request_timeout=args.request_timeout,
        n_bootstrap=args.bootstrap,
        n_permutations=args.permutations,
        seed=args.seed,
    )
    document = run_eval(settings, Path(args.out), reference=Path(args.reference) if args.reference else None)
    failed = [p for p in document["parts"] if p["status"] == "failed"]
    print(f"wrote {args.out}/card.md, results.json, model-index.yaml, .eval_results/ ({len(document['rows'])} rows)")
    for part in document["parts"]:
        print(f"  {part['folder']}: {part['status']}" + (f" ({part['note']})" if part.get("note") else ""))
    return 1 if failed else 0


def _build(args: argparse.Namespace) -> int:
    from queerbench.results.reference import build_reference_rows, reference_scorer_names

    build_reference_rows(
        Path(args.out) if args.out else None,
        n_resamples=args.resamples,
        seed=args.seed,
        workers=args.workers,
        scorers=reference_scorer_names(args.toxicity, stored_only=args.stored_only),
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    from queerbench.results.leaderboard import check_out_folder, show_leaderboard
    from queerbench.results.reference import reference_rows_for_show

    check_out_folder(Path(args.out))  # one line before the reference rows are read
    references, note = reference_rows_for_show(Path(args.reference) if args.reference else None)
    if note:
        print(note)
    rows = show_leaderboard([Path(f) for f in args.folders], Path(args.out), references)
    print(f"wrote {args.out}/leaderboard.md, leaderboard.csv, leaderboard.png ({len(rows)} rows)")
    return 0


def _push(args: argparse.Namespace) -> int:
    from queerbench.hub.results import push_results

    if args.pull_request:
        from queerbench.hub.results_pr import push_eval_results_pr

        other = [
            flag for flag, given in (("--repo", args.repo), ("--with-predictions", args.with_predictions)) if given
        ]
        if other:
            raise ValueError(
                f"{' and '.join(other)} set where the results dataset is pushed to, and --pull-request sends only an "
                "eval's .eval_results files to the model's repo; drop one of them"
            )
        push_eval_results_pr(Path(args.folder), model_repo=args.model_repo, yes=args.yes)
        return 0
    if args.model_repo is not None:
        raise ValueError("--model-repo names the model's repo for --pull-request; add --pull-request or drop it")
    push_results(Path(args.folder), repo_id=args.repo, yes=args.yes, with_predictions=args.with_predictions)
    return 0


def _view(args: argparse.Namespace) -> int:
    from queerbench.hub.space.viewer import build_viewer

    # one line for a folder that holds no results, or without Gradio (the space extra), before anything starts
    app = build_viewer(Path(args.folder))
    folder = str(Path(args.folder).resolve())  # the figures are served from the folder itself
    app.launch(server_port=args.port, inbrowser=not args.no_browser, allowed_paths=[folder])
    return 0
