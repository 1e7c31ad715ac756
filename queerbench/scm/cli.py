"""``queerbench scm run``: the SCM probes from the command line (binding flags: see DESIGN.md, issue 6)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``scm run`` to the ``queerbench`` subcommands."""
    scm = sub.add_parser("scm", help="Stereotype Content Model probes for generative LMs (Ostrow & Lopez)")
    scm_sub = scm.add_subparsers(dest="scm_command", metavar="SCM_COMMAND")
    run = scm_sub.add_parser("run", help="run the SCM survey and story prompts on a model; write results into --out")
    src = run.add_argument_group("model (with neither flag: the embedded SmolLM2-135M-Instruct)")
    src.add_argument("--model", help="local model id or path (a folder or a .gguf file); with --endpoint: model name")
    src.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. https://api.openai.com/v1")
    src.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    src.add_argument("--requests-per-minute", type=float, default=60.0, help="endpoint rate limit (default 60)")
    src.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="endpoint requests in flight at once (default 8; within the rate limit)",
    )
    run.add_argument("--samples", type=int, default=1, help="replies per prompt (paper: 10 survey, 5–10 stories)")
    run.add_argument("--limit", type=int, default=None, help="at most N prompts per split (spread over groups)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--temperature", type=float, default=0.6, help="paper: 0.6 (LLaMA), 0.9 (GPT, Gemini)")
    run.add_argument("--top-p", type=float, default=0.9)
    run.add_argument("--max-new-tokens", type=int, default=200)
    run.add_argument("--batch-size", type=int, default=8)
    run.add_argument("--device", default="cpu", help="cpu, cuda, auto, …")
    run.add_argument("--no-constrained", action="store_true", help="skip constrained scoring of local models")
    run.add_argument("--out", required=True, help="output folder (reruns resume from its cache)")
    run.set_defaults(func=_run)
    scm.set_defaults(func=lambda args: (scm.print_help(), 2)[1])


def _run(args: argparse.Namespace) -> int:
    from queerbench.llm import GenerationSettings, RunAbortedError, load_runner
    from queerbench.scm.pipeline import run_scm

    if args.endpoint and not args.model:
        raise ValueError("--endpoint needs --model NAME (the model the endpoint serves)")
    if args.concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {args.concurrency}")
    settings = GenerationSettings(
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        samples=args.samples,
        batch_size=args.batch_size,
    )
    if not args.endpoint:
        print(f"loading {args.model or 'the embedded SmolLM2-135M-Instruct'} …", file=sys.stderr)
    # checked before anything runs: the URL, the API key rule, a missing folder, a masked LM given as --model
    runner = load_runner(
        args.model,
        args.endpoint,
        device=args.device,
        concurrency=args.concurrency,
        api_key_env=args.api_key_env,
        requests_per_minute=args.requests_per_minute,
    )
    try:
        res = run_scm(
            args.out,
            model=args.model,
            endpoint=args.endpoint,
            settings=settings,
            limit=args.limit,
            device=args.device,
            api_key_env=args.api_key_env,
            requests_per_minute=args.requests_per_minute,
            constrained=not args.no_constrained,
            runner=runner,
        )
    except RunAbortedError as exc:
        print(f"queerbench: error: {exc}", file=sys.stderr)
        return 1
    print(
        f"wrote {args.out}/responses.parquet, scm.json, report.md ({res['n_responses']} responses, "
        f"{res['n_errors']} failed)"
    )
    return 1 if res["n_errors"] else 0
