"""``queerbench scm run | calibrate | report | parser-check | compare``: the SCM task's commands, which its task module
registers with the CLI (:func:`queerbench.tasks.register_commands`).

Decoding defaults are the paper's per model family (``data/paper_defaults.json``); every flag left out takes it,
and ``scm.json`` / ``report.md`` record which values were defaults and which were overridden.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queerbench.base.arguments import endpoint_arguments

if TYPE_CHECKING:
    from queerbench.models.generation import GenerationSettings

__all__ = ["register"]


def _top_p(value: str) -> float | str:
    if value.lower() in ("unset", "none", "paper"):
        return value.lower().replace("none", "unset")
    try:
        p = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--top-p takes a number in (0, 1] or 'unset', got {value!r}") from None
    if not 0 < p <= 1:
        raise argparse.ArgumentTypeError(f"--top-p must be in (0, 1], got {p}")
    return p


def _json_object(value: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--extra-body is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("--extra-body must be a JSON object, e.g. '{\"safety_settings\": []}'")
    return obj


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``scm run``, ``calibrate``, ``report``, ``parser-check`` and ``compare`` to the ``queerbench`` subcommands."""
    scm = sub.add_parser("scm", help="Stereotype Content Model probes for generative LMs (Ostrow & Lopez)")
    scm_sub = scm.add_subparsers(dest="scm_command", metavar="SCM_COMMAND")
    run = scm_sub.add_parser("run", help="run the SCM survey and story prompts on a model; write results into --out")
    src = run.add_argument_group("model (with neither flag: the embedded SmolLM2-135M-Instruct)")
    src.add_argument("--model", help="local model id or path (a folder or a .gguf file); with --endpoint: model name")
    endpoint_arguments(src, endpoint_help="OpenAI-compatible base URL, e.g. https://api.openai.com/v1")
    src.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    src.add_argument("--system-prompt", default=None, help="a system message before every prompt (paper: none)")
    src.add_argument(
        "--extra-body",
        type=_json_object,
        default=None,
        metavar="JSON",
        help="endpoint only: a JSON object merged into every request body (e.g. Gemini safety settings)",
    )
    dec = run.add_argument_group("decoding (default: the paper's value for the model family, see the README)")
    dec.add_argument(
        "--survey-samples",
        type=int,
        default=None,
        help="replies per survey prompt row (paper: 10 per variant × "
        "group × term for rating, 10 per variant × group for selection and elicitation)",
    )
    dec.add_argument(
        "--story-samples",
        type=int,
        default=None,
        help="replies per story prompt × group (paper: 10, i.e. 50 per group)",
    )
    dec.add_argument("--samples", type=int, default=None, help="set both sample counts at once")
    dec.add_argument("--temperature", type=float, default=None, help="paper: 0.9 GPT/Gemini, 0.6 LLaMA and others")
    dec.add_argument(
        "--top-p", type=_top_p, default="paper", help="number or 'unset' (not sent); paper: unset GPT/Gemini, 0.9 LLaMA"
    )
    dec.add_argument("--max-new-tokens", type=int, default=None, help="survey replies' token limit (default 512)")
    dec.add_argument("--story-max-new-tokens", type=int, default=None, help="story token limit (default 1024)")
    dec.add_argument("--seed", type=int, default=0)
    dec.add_argument("--batch-size", type=int, default=8)
    run.add_argument("--limit", type=int, default=None, help="at most N prompts per split (spread over groups, axes)")
    run.add_argument(
        "--device", default="auto", help="auto (cuda → mps → cpu), cpu, cuda, cuda:1, mps (default: %(default)s)"
    )
    run.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"), help="local model dtype")
    run.add_argument(
        "--device-map",
        default=None,
        help="local models: place the layers with accelerate over all visible GPUs (and CPU RAM): auto, balanced, "
        "balanced_low_0, sequential (default: none, the whole model on --device)",
    )
    ana = run.add_argument_group("analysis")
    ana.add_argument("--no-constrained", action="store_true", help="skip constrained scoring of local models")
    ana.add_argument(
        "--scoring", default="calibrated", choices=["calibrated", "mean", "sum"], help="constrained option scoring"
    )
    ana.add_argument(
        "--shuffle-selection",
        action="store_true",
        help="list the 22 terms in a seeded random order per sample (paper: one fixed order, Table 1's)",
    )
    ana.add_argument(
        "--refusal-rule", default="appendix_b", choices=["appendix_b", "patterns"], help="refusal definition"
    )
    ana.add_argument("--embedder", default="minilm", help="'minilm' (offline) or URL#MODEL for an /embeddings endpoint")
    ana.add_argument(
        "--threshold", type=float, default=None, help="cosine threshold (default: the embedder's calibrated value)"
    )
    run.add_argument("--out", required=True, help="output folder (reruns resume from its cache)")
    run.set_defaults(func=_run)

    cal = scm_sub.add_parser("calibrate", help="pick the embedding threshold by agreement with SADCAT")
    cal.add_argument("--embedder", default="minilm", help="'minilm' or URL#MODEL")
    cal.add_argument("--api-key-env", default="OPENAI_API_KEY")
    cal.add_argument(
        "--population",
        default="story-words",
        choices=["story-words", "sadcat"],
        help="words to calibrate on: content words seen in stories, labelled by SADCAT (default), or SADCAT's keys",
    )
    cal.add_argument(
        "--stories",
        action="append",
        default=None,
        metavar="PATH",
        help="run folder or labelled .jsonl whose story replies give the words (repeatable; default: the shipped "
        "data/story_words.json)",
    )
    cal.add_argument("--save-words", default=None, metavar="PATH", help="write the story words used to this file")
    cal.add_argument(
        "--coverage",
        action="store_true",
        help="with --stories: share of story words mapped per axis at the chosen threshold and at 0.37 / 0.55",
    )
    cal.add_argument("--max-words", type=int, default=None, help="sadcat population: a seeded sample (default: all)")
    cal.add_argument("--out", default=None, help="write the result as JSON here")
    cal.set_defaults(func=_calibrate)

    rep = scm_sub.add_parser("report", help="analyse a finished run again from its stored replies (no model calls)")
    rep.add_argument("run", metavar="RUN_DIR", help="output folder of `queerbench scm run`")
    rep.add_argument("--refusal-rule", default="appendix_b", choices=["appendix_b", "patterns"])
    rep.add_argument("--embedder", default="minilm", help="'minilm' (offline) or URL#MODEL")
    rep.add_argument("--threshold", type=float, default=None, help="cosine threshold (default: calibrated value)")
    rep.add_argument("--api-key-env", default="OPENAI_API_KEY")
    rep.set_defaults(func=_report)

    chk = scm_sub.add_parser(
        "parser-check", help="agreement of the reply parser with hand-labelled replies, per task and per label"
    )
    chk.add_argument(
        "--file", default=None, help="labelled JSONL (default: tests/data/scm_replies.jsonl of a checkout)"
    )
    chk.add_argument("--rule", default="appendix_b", choices=["appendix_b", "patterns", "both"])
    chk.add_argument("--held-out", action="store_true", help="only the records written after the rules were fixed")
    chk.add_argument("--json", default=None, metavar="PATH", help="also write the figures as JSON here")
    chk.add_argument(
        "--min-agreement", type=float, default=None, help="exit 1 when the overall agreement is below this (0-1)"
    )
    chk.set_defaults(func=_parser_check)

    cmp = scm_sub.add_parser("compare", help="compare SCM runs of several models (Figure 2, Tables 3 and 5, ρ)")
    cmp.add_argument("runs", nargs="+", metavar="RUN_DIR", help="output folders of `queerbench scm run`")
    cmp.add_argument("--out", required=True, help="folder for compare.json, compare.md and the figure")
    cmp.add_argument(
        "--human",
        default=None,
        help="CSV with group,warmth,competence human means (default: the paper's Competence order only)",
    )
    cmp.add_argument("--names", default=None, help="comma-separated display names, one per RUN_DIR")
    cmp.set_defaults(func=_compare)
    scm.set_defaults(func=lambda args: (scm.print_help(), 2)[1])


def _run(args: argparse.Namespace) -> int:
    from queerbench.base.lock import folder_lock
    from queerbench.tasks.scm.pipeline import check_scm_folder, make_mapper, resolve_settings

    if args.endpoint and not args.model:
        raise ValueError("--endpoint needs --model NAME (the model the endpoint serves)")
    if args.extra_body and not args.endpoint:
        raise ValueError("--extra-body only applies to --endpoint runs")
    for flag in ("survey_samples", "story_samples", "samples", "max_new_tokens", "story_max_new_tokens"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    if args.concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {args.concurrency}")
    survey, story, provenance = resolve_settings(
        args.model if args.endpoint else (args.model or "embedded"),
        temperature=args.temperature,
        top_p=args.top_p,
        survey_samples=args.survey_samples or args.samples,
        story_samples=args.story_samples or args.samples,
        max_new_tokens=args.max_new_tokens,
        story_max_new_tokens=args.story_max_new_tokens,
        seed=args.seed,
        batch_size=args.batch_size,
    )
    mapper_factory = make_mapper(args.embedder, args.threshold, api_key_env=args.api_key_env)  # checked now
    out = Path(args.out)
    check_scm_folder(out)  # a file, or a folder of something else: refused before any model loads
    with folder_lock(out, "scm run"):  # one writer per folder, from before the model loads until the report
        return _run_locked(args, out, survey, story, provenance, mapper_factory)


def _run_locked(
    args: argparse.Namespace,
    out: Path,
    survey: GenerationSettings,
    story: GenerationSettings,
    provenance: dict[str, Any],
    mapper_factory: Callable[[], Any],
) -> int:
    """``scm run`` once it holds the output folder's lock."""
    from queerbench.models.generation import RunAbortedError
    from queerbench.models.registry import model_ref, open_generator
    from queerbench.tasks.scm.pipeline import run_scm

    if not args.endpoint:
        print(f"loading {args.model or 'the embedded SmolLM2-135M-Instruct'} …", file=sys.stderr)
    # checked before anything runs: the URL, the API key rule, a missing folder, a masked LM given as --model
    runner = open_generator(
        model_ref(args.model, args.endpoint, check_paths=False),  # the loader says what is missing
        device=args.device,
        dtype=args.dtype,
        device_map=args.device_map,
        concurrency=args.concurrency,
        system_prompt=args.system_prompt,
        api_key_env=args.api_key_env,
        requests_per_minute=args.requests_per_minute,
        extra_body=args.extra_body,
        **({"timeout": args.request_timeout} if args.endpoint else {}),  # a local model has no requests
    )
    try:
        res = run_scm(
            args.out,
            model=args.model,
            endpoint=args.endpoint,
            settings=survey,
            story_settings=story,
            provenance=provenance,
            limit=args.limit,
            device=args.device,
            dtype=args.dtype,
            device_map=args.device_map,
            api_key_env=args.api_key_env,
            requests_per_minute=args.requests_per_minute,
            constrained=not args.no_constrained,
            scoring=args.scoring,
            shuffle_selection=args.shuffle_selection,
            refusal_rule=args.refusal_rule,
            system_prompt=args.system_prompt,
            extra_body=args.extra_body,
            mapper_factory=mapper_factory,
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


def _calibrate(args: argparse.Namespace) -> int:
    from queerbench.base.files import write_json
    from queerbench.tasks.scm.axes import calibrate_threshold, make_embedder

    embed, name = make_embedder(args.embedder, api_key_env=args.api_key_env)
    if args.population == "sadcat":
        res = calibrate_threshold(embed, max_words=args.max_words, embedder_name=name, compare_at=(0.37,))
    else:
        from queerbench.tasks.scm.analysis import content_words
        from queerbench.tasks.scm.calibration import (
            calibrate_on_story_words,
            coverage_report,
            load_story_words,
            save_story_words,
            story_texts,
        )

        if args.stories:
            words = sorted({w for ws in content_words(story_texts(args.stories)) for w in ws})
        else:
            words = load_story_words()
        if args.save_words:
            note = "Content words (spaCy NOUN/ADJ/VERB, lower-cased) of the non-refusal story replies in: " + ", ".join(
                Path(p).name for p in args.stories or ["data/story_words.json"]
            )
            save_story_words(args.save_words, words, note)
        res = calibrate_on_story_words(embed, words, embedder_name=name)
        if args.coverage and args.stories:
            res["coverage"], lines = coverage_report(story_texts(args.stories), embed, name, res["threshold"])
            for line in lines:
                print(line)
    at = res["at_paper_threshold"]
    print(
        f"{name}: threshold {res['threshold']:.2f} ({res['metric']} = {res['macro_f1']:.3f}; "
        + ", ".join(f"{a} F1 {v['f1']:.3f} (share passing {v['share_passing']:.3f})" for a, v in res["axes"].items())
        + f"); at 0.55: {at['macro_f1']:.3f}; "
        + "".join(f"at {t}: {v['macro_f1']:.3f}; " for t, v in res.get("at", {}).items())
        + f"{res['n_words']} words ({res['population']}), positives {res['n_positive']}"
    )
    if args.out:
        write_json(args.out, res)
    return 0


def _report(args: argparse.Namespace) -> int:
    from queerbench.tasks.scm.pipeline import make_mapper, reanalyze

    res = reanalyze(
        args.run,
        refusal_rule=args.refusal_rule,
        mapper_factory=make_mapper(args.embedder, args.threshold, api_key_env=args.api_key_env),
    )
    print(f"rewrote {args.run}/scm.json and report.md ({res['n_responses']} responses)")
    return 0


def _parser_check(args: argparse.Namespace) -> int:
    from queerbench.base.files import write_json
    from queerbench.tasks.scm.parser_check import (
        DEFAULT_FILE,
        format_agreement,
        load_labelled,
        parser_agreement,
        subset_lines,
    )

    path = Path(args.file) if args.file else DEFAULT_FILE
    if not path.is_file():
        raise ValueError(
            f"labelled replies not found at {path}; pass --file PATH (a JSONL like tests/data/scm_replies.jsonl)"
        )
    records = [r for r in load_labelled(path) if r.get("held_out") or not args.held_out]
    print(f"{len(records)} labelled replies from {path}")
    results = {}
    for rule in ("appendix_b", "patterns") if args.rule == "both" else (args.rule,):
        results[rule] = parser_agreement(records, rule)
        print(format_agreement(results[rule], "agreement"))
        for line in subset_lines(records, rule):
            print(line)
    if args.json:
        write_json(args.json, {"file": str(path), "n": len(records), "results": results})
    first = next(iter(results.values()))["overall"]["rate"]
    return 1 if args.min_agreement is not None and first < args.min_agreement else 0


def _compare(args: argparse.Namespace) -> int:
    from queerbench.tasks.scm.compare import compare_runs

    names = args.names.split(",") if args.names else None
    res = compare_runs(args.runs, args.out, human=args.human, names=names)
    print(
        f"wrote {args.out}/compare.json, compare.md and {len(res['figures'])} figure(s) for {len(res['models'])} runs"
    )
    return 0
