"""The main job: dataset → predictions → scores → report, resumable.

``run_benchmark`` builds the sentences of a config, predicts top-k with whichever predictor the method registry
(:mod:`queerbench.methods.registry`) gives (``mlm``, ``scored``, ``instructed``), in chunks written atomically under
``OUT/.chunks`` (so a killed run resumes where it stopped), scores them (:mod:`queerbench.run.scores`) and writes
``predictions.parquet``, ``scores.json``, ``report.md`` and PNG figures into ``OUT``. A rerun of a finished run
reuses ``predictions.parquet`` and does no inference. Top-1 scores come from the same pass as top-k.

Everything that can be checked without inference is checked first (options, output folder, lexicons, toxicity
scorer, the model's fingerprint and, for a masked LM, its tokenizer against ``--top-k``); only then is the output
folder created and ``run.json`` written (:mod:`queerbench.run.folder`). ``run.json`` holds the cache key and the
model's fingerprint (:mod:`queerbench.models.fingerprint`): a resume against a model whose files changed is refused.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench import __version__, check_config
from queerbench.base.files import atomic_path, read_json, read_parquet, write_json, write_text
from queerbench.methods.registry import METHODS, get_method, resolve_method
from queerbench.methods.registry import preflight as method_preflight
from queerbench.models.fingerprint import check_model_reference, fingerprint_model
from queerbench.models.generation.settings import DEFAULT_CONCURRENCY, DEFAULT_REQUESTS_PER_MINUTE
from queerbench.reporting.report import render_report, write_run_figures
from queerbench.run.folder import check_same_model, claim_out_dir, inspect_out_dir, unclaim_out_dir
from queerbench.run.parts import RunInterrupted, interruption, predict_chunks
from queerbench.run.scores import (
    TOXICITY_INPUTS,
    default_toxicity_input,
    queergen_of_predictions,
    score_predictions,
    toxicity_column,
)
from queerbench.scoring.aggregate import (
    TOXICITY_CHOICES,
    ScoringOptions,
    check_toxicity_scorer,
    prepare_toxicity_scorer,
)
from queerbench.scoring.hurtlex import hurtlex_categories, load_hurtlex
from queerbench.tasks.queerbench.templates import build_sentences

__all__ = [
    "TOXICITY_INPUTS",
    "RunOptions",
    "RunResult",
    "default_out_dir",
    "run_benchmark",
    "score_predictions",
]

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class RunOptions:
    """Everything that defines a run (the first six fields form its cache key; for generative methods also the
    method, endpoint, prompt and decoding settings)."""

    model: str | None = "bert-base-uncased"  # None: bert-base-uncased (mlm), the embedded SmolLM2 (generative)
    config: str = "default"
    top_k: int = 5
    revision: str | None = None
    limit: int | None = None  # use only the first N templates (every subject of each)
    dtype: str = "float32"
    toxicity: str = "embedded"
    toxicity_input: str | None = None  # None: "neutral" in default, "full" in paper
    device: str = "auto"
    device_map: str | None = None  # accelerate's placement of a local model (not part of the key: same results)
    batch_size: int = 64
    n_bootstrap: int = 1000
    n_permutations: int = 1000
    seed: int = 0
    toxicity_kwargs: dict[str, Any] = field(default_factory=dict)
    method: str = "auto"  # auto | mlm | scored | instructed (see queerbench.methods.registry.resolve_method)
    endpoint: str | None = None  # an OpenAI-compatible base URL: instructed on the served model `model`
    concurrency: int = DEFAULT_CONCURRENCY  # endpoint requests in flight
    requests_per_minute: float = DEFAULT_REQUESTS_PER_MINUTE  # endpoint rate limit (not part of the key)
    prompt_id: str | None = None  # instructed: a prompt of queerbench/data/llm_prompts.json (None: its default)
    max_new_tokens: int | None = None  # instructed: None = the data file's default
    exclude_function_words: bool = False  # scoring only (not in the cache key): see queerbench.scoring.function_words

    def __post_init__(self) -> None:
        check_config(self.config)
        if self.method not in METHODS:
            raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1 (requests in flight), got {self.concurrency!r}")
        if not self.requests_per_minute > 0:
            raise ValueError(f"--requests-per-minute must be > 0, got {self.requests_per_minute!r}")
        if self.endpoint and self.revision:
            raise ValueError(
                "--revision pins a Hub model's commit; an --endpoint serves its own weights: drop --revision"
            )
        if self.model is None:
            if self.endpoint:
                raise ValueError("--endpoint needs --model NAME (the model name the endpoint serves, e.g. gpt-4o-mini)")
            self.model = get_method(self.method).default_model
        if self.prompt_id is not None:
            from queerbench.methods.instructed.replies import load_prompts

            if self.prompt_id not in load_prompts()["prompts"]:
                known = ", ".join(load_prompts()["prompts"])
                raise ValueError(f"unknown prompt id {self.prompt_id!r} (--prompt); choose one of {known}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"--top-k must be a positive integer, got {self.top_k!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be at least 1 template (or omitted for all), got {self.limit}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.device_map is not None and self.endpoint:
            raise ValueError("--device-map places a local model's layers; an --endpoint serves its own: drop it")
        from queerbench.models.memory import check_device_map

        check_device_map(self.device_map)  # an unknown value or a missing accelerate fails before anything loads
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.toxicity_input is None:
            self.toxicity_input = default_toxicity_input(self.config)
        if self.toxicity_input not in TOXICITY_INPUTS:
            raise ValueError(
                f"--toxicity-input must be one of {', '.join(TOXICITY_INPUTS)}, got {self.toxicity_input!r}"
            )
        if self.toxicity == "precomputed":
            raise ValueError(
                "--toxicity precomputed reads flags stored in a file, which a new run does not have; use "
                "`queerbench score FILE --toxicity precomputed` for such a file, or run with --toxicity embedded, "
                "hf:<model id or path>, perspective or none"
            )
        check_toxicity_scorer(self.toxicity, tuple(c for c in TOXICITY_CHOICES if c != "precomputed"))
        self.scoring_options()  # an unknown scorer name fails here, before anything is loaded

    def cache_key(self) -> dict[str, Any]:
        """What must match for stored predictions to be reused: model, revision, config/mode, k, limit, dtype."""
        key = {
            "model": self.model,
            "revision": self.revision,
            "config": self.config,
            "mode": self.config,
            "top_k": self.top_k,
            "limit": self.limit,
            "dtype": self.dtype,
        }
        method = get_method(self.method)  # masked-LM keys stay as they were, so old run folders still resume
        if method.in_key:
            key["method"] = self.method
            key.update({name: getattr(self, name) for name in method.key_fields})
        return key

    def scoring_options(self) -> ScoringOptions:
        """The scoring options this run implies."""
        return ScoringOptions(
            config=self.config,
            toxicity=self.toxicity,
            toxicity_input="frame" if self.toxicity_input == "frame" else "sentence",
            n_bootstrap=self.n_bootstrap,
            n_permutations=self.n_permutations,
            seed=self.seed,
            toxicity_kwargs=self.toxicity_kwargs,
            exclude_function_words=self.exclude_function_words,
        )


@dataclass
class RunResult:
    """Where a run wrote its outputs, its scores, and whether inference was reused."""

    out: Path
    scores: dict[str, Any]
    reused_predictions: bool
    n_predicted: int


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("_") or "x"


def default_out_dir(options: RunOptions) -> Path:
    """``runs/<model>-<config>-k<k>``, plus ``-limit<N>``, ``-rev<revision>``, ``-<dtype>`` when those are set, so
    that runs with different cache keys never share a folder."""
    name = f"{_slug(str(options.model))}-{options.config}-k{options.top_k}"
    if get_method(options.method).in_key:
        name += f"-{options.method}"
    if options.limit is not None:
        name += f"-limit{options.limit}"
    if options.revision:
        name += f"-rev{_slug(options.revision)}"
    if options.dtype != "float32":
        name += f"-{options.dtype}"
    return Path("runs") / name


def _preflight(options: RunOptions, *, will_predict: bool = True) -> dict[str, Any]:
    """Every check that needs no inference, cheapest first; returns the model's fingerprint.

    Lexicons (pinned checksums), the toxicity scorer (its weights or API key), the model's files, and, when
    ``will_predict``, what the prediction method needs before its model loads (for a masked LM: the tokenizer and
    ``--top-k``). A rerun of a finished run needs no model, so it can re-score a copied run folder offline.
    """
    check_model_reference(options.model)  # a path that is no folder: one line, before anything loads
    scoring = options.scoring_options()
    hurtlex_categories()
    load_hurtlex("conservative" if options.config == "paper" else scoring.hurtlex_level)
    prepare_toxicity_scorer(scoring)  # a missing scorer source or API key fails before inference
    if will_predict:  # e.g. a masked LM's tokenizer against --top-k; before hashing: a folder with no model fails fast
        method_preflight(options)
    return fingerprint_model(options.model)


def _sentences(options: RunOptions) -> pd.DataFrame:
    frame = build_sentences(options.config)
    if options.limit is not None:
        keep = sorted(frame["template_id"].unique())[: options.limit]
        frame = frame[frame["template_id"].isin(keep)]
    return frame.reset_index(drop=True)


def _completed(sentences: pd.Series, tokens: pd.Series) -> list[list[str]]:
    return [[s.replace("[MASK]", t) for t in toks] for s, toks in zip(sentences, tokens, strict=True)]


def _run_record(
    run_meta: dict[str, Any], options: RunOptions, meta: dict[str, Any], reused: bool, timings: dict[str, float]
) -> dict[str, Any]:
    """The ``run`` block of ``scores.json``: what produced the run (options, model metadata, version, timings)."""
    return {
        **run_meta,
        "options": {k: v for k, v in asdict(options).items() if k != "toxicity_kwargs"},
        "model_metadata": meta,
        "queerbench_version": __version__,
        "reused_predictions": reused,
        "timings_s": timings,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _write_unscored_run(
    predictions: pd.DataFrame,
    options: RunOptions,
    out: Path,
    meta: dict[str, Any],
    fingerprint: dict[str, Any] | None,
    reused: bool,
    n_predicted: int,
    timings: dict[str, float],
) -> RunResult:
    """Outputs of a generative run in which no sentence got a one-word answer: parse rates, no scores.

    Every per-group score dict is empty (``n`` included) so that readers of ``scores.json`` see "no group scored"
    rather than zeros; ``generation`` holds the label shares per group with their n.
    """
    from queerbench.methods.instructed.replies import parse_summary
    from queerbench.reporting.report import render_unscored_report

    run_meta = {
        "model": options.model,
        "method": options.method,
        "config": options.config,
        "top_k": options.top_k,
        "endpoint": options.endpoint,
        "fingerprint": meta.get("fingerprint") or fingerprint,
        "decoding": meta.get("decoding"),
        "prompt": meta.get("prompt"),
        "prompt_format": meta.get("prompt_format") or (meta.get("decoding") or {}).get("prompt_format"),
        "n_sentences": len(predictions),
        "limit": options.limit,
    }
    generation = parse_summary(predictions) if "label" in predictions.columns else None
    write_text(out / "report.md", render_unscored_report(run_meta, generation))
    document = {
        "config": options.config,
        "k": options.top_k,
        "queerbench": {},
        "afinn": {},
        "hurtlex": {},
        "toxicity": {},
        "n": {},
        "scored": False,
        "generation": generation,
        "run": _run_record(run_meta, options, meta, reused, timings),
    }
    write_json(out / "scores.json", document)
    return RunResult(out=out, scores=document, reused_predictions=reused, n_predicted=n_predicted)


def run_benchmark(
    options: RunOptions,
    out: str | Path | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] = print,
) -> RunResult:
    """Run the whole benchmark for one model and config into ``out`` (resuming or reusing what is there)."""
    chosen = out is not None
    frame = _sentences(options)  # the data files first (checksums; offline, the message names QUEERBENCH_DATA_DIR)

    # auto → mlm / scored / instructed from the model's configuration (no weights read); mismatches fail here
    options = replace(options, method=resolve_method(options.method, options.model, options.endpoint, options.revision))
    out = Path(out) if out is not None else default_out_dir(options)
    key = options.cache_key()
    state, stored = inspect_out_dir(out, key, chosen=chosen)  # writes nothing
    fingerprint = _preflight(options, will_predict=state != "finished")
    if state in ("resume", "finished"):
        check_same_model(out, str(options.model), stored, fingerprint)
    created = claim_out_dir(out, {**key, "model_fingerprint": fingerprint}, state, chosen=chosen)
    resumed = state == "resume"
    timings: dict[str, float] = {}
    pred_path = out / "predictions.parquet"
    t0 = time.perf_counter()
    if pred_path.is_file():
        predictions = read_parquet(pred_path, fix="delete it and rerun the same command (it predicts again)")
        model_json = out / "model.json"
        meta = read_json(model_json, fix="delete it and rerun the same command") if model_json.is_file() else {}
        reused, n_predicted = True, 0
        log(f"reusing the finished predictions in {pred_path} (no inference); scoring again")
    else:
        if resumed and (out / ".chunks").is_dir():
            log(f"resuming the run in {out}")
        try:
            chunks, meta, n_predicted = predict_chunks(frame, options, out, progress, fingerprint=fingerprint, log=log)
        except BaseException as exc:
            removed = unclaim_out_dir(out, created)  # a start that saved nothing leaves no folder behind
            if isinstance(exc, KeyboardInterrupt):
                raise interruption(out, frame, removed) from None
            raise
        predictions = frame.drop(columns=["split"]).copy()
        predictions["method"] = options.method
        for col in chunks.columns.drop("id"):  # tokens, probs, token_ids (mlm); reply, label, … (generative)
            predictions[col] = [list(v) if hasattr(v, "tolist") and not isinstance(v, str) else v for v in chunks[col]]
        predictions["top1"] = [t[0] if len(t) else None for t in predictions["tokens"]]
        predictions["completed"] = _completed(predictions["masked_sentence"], predictions["tokens"])
        with atomic_path(pred_path) as tmp:
            predictions.to_parquet(tmp, index=False)
        write_json(out / "model.json", meta)
        shutil.rmtree(out / ".chunks", ignore_errors=True)
        reused = n_predicted == 0
    timings["predict_s"] = time.perf_counter() - t0
    try:
        return _score_run(predictions, options, out, meta, fingerprint, reused, n_predicted, timings)
    except KeyboardInterrupt:
        raise RunInterrupted(
            f"interrupted while scoring: the predictions of all {len(predictions)} sentences are saved in "
            f"{pred_path}; rerun the same command to score them (no inference)"
        ) from None


def _score_run(
    predictions: pd.DataFrame,
    options: RunOptions,
    out: Path,
    meta: dict[str, Any],
    fingerprint: dict[str, Any] | None,
    reused: bool,
    n_predicted: int,
    timings: dict[str, float],
) -> RunResult:
    """Score a run's predictions and write ``scores.json``, ``report.md`` and the figures."""
    if not any(len(t) for t in predictions["tokens"]):
        # an instructed model that never answered with one word: nothing to score, but its replies and parse rates
        # are the finding; write them (report.md, scores.json) instead of failing after the whole run
        return _write_unscored_run(predictions, options, out, meta, fingerprint, reused, n_predicted, timings)

    t1 = time.perf_counter()
    scoring = options.scoring_options()
    scores, per_sentence = score_predictions(predictions, scoring, str(options.toxicity_input))
    top1 = None
    if options.top_k > 1:
        top1, _ = score_predictions(predictions, scoring, str(options.toxicity_input), k=1)
    if options.config == "queergen":  # QueerGen's own scorers next to the QueerBench score
        scores["queergen"] = queergen_of_predictions(
            predictions,
            scores["k"],
            toxicity=options.toxicity,
            seed=options.seed,
            label=str(options.model),
            toxicity_kwargs=options.toxicity_kwargs,
        )
    timings["score_s"] = time.perf_counter() - t1

    run_meta = {
        "model": options.model,
        "method": options.method,
        "revision": meta.get("commit_hash") or options.revision,
        "fingerprint": fingerprint,
        "config": options.config,
        "top_k": options.top_k,
        "toxicity": options.toxicity,
        "device": meta.get("device"),
        "dtype": meta.get("dtype", options.dtype),
        "n_sentences": len(predictions),
        "limit": options.limit,
        "toxicity_input": None  # nothing is read without a scorer
        if options.toxicity == "none"
        else toxicity_column(str(options.toxicity_input)) or "The person is <word>.",
    }
    generation = None
    generative = get_method(options.method).generative
    if generative:
        from queerbench.methods.instructed.replies import parse_summary
        from queerbench.reporting.report import generation_section

        run_meta.update(
            endpoint=options.endpoint,
            fingerprint=meta.get("fingerprint"),
            decoding=meta.get("decoding"),
            prompt=meta.get("prompt"),
            prompt_format=meta.get("prompt_format") or (meta.get("decoding") or {}).get("prompt_format"),
        )
        generation = parse_summary(predictions) if "label" in predictions.columns else None  # replies were parsed
    figures = write_run_figures(scores, out, run_meta)
    report = render_report(scores, per_sentence, run_meta, figures, top1=top1)
    if "queergen" in scores:
        from queerbench.tasks.queergen.compare import queergen_report_section

        report += queergen_report_section(scores["queergen"])
    if generative:
        report = report.replace(
            "\n## Scores (top-", "\n" + generation_section(run_meta, generation) + "\n## Scores (top-", 1
        )
    write_text(out / "report.md", report)
    document = {
        **scores,
        "top1": top1,
        **({"generation": generation} if generation is not None else {}),
        "run": _run_record(run_meta, options, meta, reused, timings),
    }
    write_json(out / "scores.json", document)
    return RunResult(out=out, scores=document, reused_predictions=reused, n_predicted=n_predicted)
