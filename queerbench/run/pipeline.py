"""The main job: task items → predictions → scores → report, resumable.

``run_benchmark`` asks the run's task (:mod:`queerbench.tasks`) for its items, predicts top-k with whichever predictor
the method registry (:mod:`queerbench.methods.registry`) gives for the model's backend, in parts written atomically
under ``OUT/.chunks`` (:mod:`queerbench.run.parts`: a killed run resumes where it stopped), scores them by the task's
rules (:mod:`queerbench.run.scores`) and writes ``predictions.parquet``, ``scores.json``, ``report.md`` and PNG figures
into ``OUT``. A rerun of a finished run reuses ``predictions.parquet`` and does no inference. Top-1 scores come from
the same pass as top-k. The run never asks which task or method it runs: what differs is asked of them (the task's
extra scores, report sections and figures; the method's summary of its replies, report section and facts).

Everything that can be checked without inference is checked first (options, output folder, lexicons, toxicity
scorer, the model's fingerprint and what the method's predictor can check before loading weights); only then is the
output folder created and ``run.json`` written (:mod:`queerbench.run.folder`). ``run.json`` holds the run's key, its
signature (:mod:`queerbench.run.signature`) and the model's fingerprint (:mod:`queerbench.models.fingerprint`): a
resume against a model whose files changed is refused. Every output carries the signature.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench import __version__
from queerbench.base.files import atomic_path, write_text
from queerbench.base.redact import redact_url
from queerbench.methods.base import Method
from queerbench.methods.registry import in_label, resolve_method
from queerbench.methods.registry import preflight as method_preflight
from queerbench.reporting.figures import run_label
from queerbench.reporting.record import write_record
from queerbench.reporting.report import render_report, write_run_figures
from queerbench.run.blanks_record import blanks_record
from queerbench.run.folder import check_same_model, claim_out_dir, inspect_out_dir
from queerbench.run.options import TOXICITY_INPUTS, RunOptions
from queerbench.run.parts import RunInterrupted, kept, predict_chunks
from queerbench.run.runner import PREDICTIONS_FILE, held_folder, predictions_in
from queerbench.run.scores import check_predictions_table, score_predictions, task_scores, toxicity_column
from queerbench.run.signature import (
    Signature,
    default_out_dir,
    describe_sentences,
    fingerprint_label,
    signature_of,
)
from queerbench.scoring.afinn import KEY as AFINN
from queerbench.scoring.aggregate import SCORE_BLOCKS, prepare_toxicity_scorer
from queerbench.scoring.hurtlex import KEY as HURTLEX
from queerbench.scoring.hurtlex import hurtlex_categories, load_hurtlex
from queerbench.scoring.toxicity_base import KEY as TOXICITY
from queerbench.tasks import Task

__all__ = [
    "TOXICITY_INPUTS",
    "RunOptions",
    "RunResult",
    "default_out_dir",
    "run_benchmark",
    "run_items",
    "score_predictions",
]


@dataclass
class RunResult:
    """Where a run wrote its outputs, its scores, and whether inference was reused."""

    out: Path
    scores: dict[str, Any]
    reused_predictions: bool
    n_predicted: int


def _preflight(
    options: RunOptions, *, will_predict: bool = True, fingerprint: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Every check that needs no inference, cheapest first; returns the model's fingerprint.

    The model reference (one line for a path that is no folder), the lexicons (pinned checksums), the toxicity scorer
    (its weights or API key), and, when ``will_predict``, what the method's predictor can check before its model
    loads (for a masked LM: the tokenizer and ``--top-k``). A rerun of a finished run needs no model, so it can
    re-score a copied run folder offline. ``fingerprint``: the model's, known from elsewhere (an imported run, whose
    model need not be on this machine): the model is then not looked at at all.
    """
    ref = options.ref if fingerprint is None else None
    scoring = options.scoring_options()
    hurtlex_categories()
    load_hurtlex(scoring.hurtlex_lexicon_level)
    prepare_toxicity_scorer(scoring)  # a missing scorer source or API key fails before inference
    if ref is None:
        return fingerprint  # type: ignore[return-value]
    if will_predict:  # e.g. a masked LM's tokenizer against --top-k; before hashing: a folder with no model fails fast
        method_preflight(options)
    return ref.fingerprint()


def run_items(options: RunOptions) -> pd.DataFrame:
    """The items a run predicts: its task's items of the first ``--limit`` templates, in run order."""
    task = options.task
    return task.first_templates(task.items(), options.limit)


def _completed(sentences: pd.Series, tokens: pd.Series) -> list[list[str]]:
    return [[s.replace("[MASK]", t) for t in toks] for s, toks in zip(sentences, tokens, strict=True)]


def _run_record(
    run_meta: dict[str, Any], options: RunOptions, meta: dict[str, Any], reused: bool, timings: dict[str, float]
) -> dict[str, Any]:
    """The ``run`` block of ``scores.json``: what produced the run (options, model metadata, version, timings)."""
    return {
        **run_meta,
        "options": {
            k: redact_url(v) if k == "endpoint" and v else v
            for k, v in options.record().items()
            if k != "toxicity_kwargs"
        },
        "model_metadata": meta,
        "queerbench_version": __version__,
        "reused_predictions": reused,
        "timings_s": timings,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


@dataclass
class _Run:
    """One run in progress: what it runs and where (the parts the scoring step needs)."""

    options: RunOptions
    task: Task
    method: Method
    signature: Signature
    out: Path
    fingerprint: dict[str, Any] | None


def run_benchmark(
    options: RunOptions,
    out: str | Path | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] = print,
    model_fingerprint: dict[str, Any] | None = None,
) -> RunResult:
    """Run the whole benchmark for one model and task into ``out`` (resuming or reusing what is there).

    ``model_fingerprint``: for predictions made elsewhere and already in ``out`` (``queerbench lm-eval import``), the
    model's fingerprint as they record it; the model is then neither resolved nor read (it need not be on this
    machine, nor the Hub reachable), ``options.method`` is taken as given, and only scoring is done."""
    chosen = out is not None
    task = options.task
    items = task.items()  # the data files first (checksums; offline, the message names QUEERBENCH_DATA_DIR)
    n_templates = int(items["template_id"].nunique())
    changes: dict[str, Any] = {}
    if options.limit is not None and options.limit >= n_templates:
        changes["limit"] = None  # a --limit covering every template is no limit, wherever recorded
    # auto → mlm / scored / instructed from the model's configuration (no weights read); mismatches fail here
    if model_fingerprint is None:
        changes["method"] = resolve_method(
            options.method, options.model, options.endpoint, options.revision, ref=options.ref
        )
    elif options.method == "auto":
        raise ValueError("an imported run names its method; got --method auto")
    options = options.with_fields(**changes)  # one new set of options, what was resolved kept
    frame = task.first_templates(items, options.limit)
    task.check_method(options.method)
    signature = signature_of(options, n_templates=n_templates)
    out = Path(out) if out is not None else Path("runs") / signature.folder_name()
    with held_folder(out, chosen) as created:  # one writer per folder: a second run on it stops here in one line
        return _run_locked(
            options, task, frame, signature, out, chosen, created, n_templates, progress, log, model_fingerprint
        )


def _run_locked(
    options: RunOptions,
    task: Task,
    frame: pd.DataFrame,
    signature: Signature,
    out: Path,
    chosen: bool,
    created: bool,
    n_templates: int,
    progress: Callable[[int, int], None] | None,
    log: Callable[[str], None],
    model_fingerprint: dict[str, Any] | None = None,
) -> RunResult:
    """:func:`run_benchmark` once it holds the output folder's lock (``created``: the run made that folder)."""
    key = signature.key()
    state, stored = inspect_out_dir(out, key, chosen=chosen, n_templates=n_templates)  # writes nothing
    if (model_fingerprint is not None or options.sentences) and state != "finished":
        raise ValueError(
            f"{out} holds no predictions.parquet: an imported run is scored, never predicted here; import it again"
        )
    fingerprint = _preflight(options, will_predict=state != "finished", fingerprint=model_fingerprint)
    signature = replace(signature, fingerprint=fingerprint_label(fingerprint))
    if state in ("resume", "finished"):
        check_same_model(out, str(options.model), stored, fingerprint)
    record = {**key, "model_fingerprint": fingerprint, "signature": str(signature)}
    claim_out_dir(out, record, state, chosen=chosen)
    run = _Run(options, task, options.method_impl, signature, out, fingerprint)

    def predict() -> tuple[pd.DataFrame, dict[str, Any], int]:
        if state == "resume" and (out / ".chunks").is_dir():
            log(f"resuming the run in {out}")
        return predict_chunks(frame, options, out, progress, fingerprint=fingerprint, log=log)

    def assemble(chunks: pd.DataFrame, meta: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
        predictions = frame.drop(columns=["split"]).copy()
        predictions["method"] = options.method
        for col in chunks.columns.drop("id"):  # tokens, probs, token_ids (mlm); reply, label, … (generative)
            predictions[col] = [list(v) if hasattr(v, "tolist") and not isinstance(v, str) else v for v in chunks[col]]
        predictions["top1"] = [t[0] if len(t) else None for t in predictions["tokens"]]
        predictions["completed"] = _completed(predictions["masked_sentence"], predictions["tokens"])
        return predictions, meta

    made = predictions_in(
        out,
        created=created,
        predict=predict,
        assemble=assemble,
        noun="prediction",
        kept=lambda: kept(out, frame),
        check=check_predictions_table,  # a hand-edited file: one line, not a bare KeyError
        log=log,
    )
    predictions, meta, reused, n_predicted = made.frame, made.meta, made.reused, made.n_predicted
    timings: dict[str, float] = {"predict_s": made.seconds}
    label = fingerprint_label(meta.get("fingerprint")) or signature.fingerprint
    run.signature = replace(signature, fingerprint=label)
    try:
        return _score_run(run, predictions, meta, reused, n_predicted, timings)
    except KeyboardInterrupt:
        raise RunInterrupted(
            f"interrupted while scoring: the predictions of all {len(predictions)} sentences are saved in "
            f"{out / PREDICTIONS_FILE}; rerun the same command to score them (no inference)"
        ) from None


def _subset_facts(run: _Run, predictions: pd.DataFrame) -> dict[str, Any]:
    """For an imported run over other sentences than the first ``--limit`` templates: its ``sentences`` value and
    which templates it covers, in words (the report and ``compare`` show them); nothing for any other run."""
    if not run.options.sentences:
        return {}
    return {
        "sentences": run.options.sentences,
        "coverage": describe_sentences(run.task.items(), predictions["id"]),
    }


SENTENCES_FILE = "sentences.parquet"
"""Each scored sentence's scores (a_i, h_i, p_i) and per-word HurtLex categories and toxicity flags, by id: what the
report's examples and ``queerbench view`` show, so that neither scores a run again."""


def _write_sentence_scores(per_sentence: pd.DataFrame, path: Path) -> None:
    """Write the per-sentence scores a viewer needs (lists as lists; atomically)."""
    columns = [
        c for c in ("id", "words", AFINN, HURTLEX, TOXICITY, "word_hurtlex", "word_toxicity") if c in per_sentence
    ]
    frame = per_sentence[columns].copy()
    if "word_toxicity" in frame and frame["word_toxicity"].isna().all():
        frame = frame.drop(columns=["word_toxicity"])  # no toxicity scorer: nothing flagged per word
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def _write_record(
    run: _Run,
    document: dict[str, Any],
    predictions: pd.DataFrame,
    meta: dict[str, Any],
    reused: bool,
    timings: dict[str, float],
) -> None:
    """Write ``scores.json``: the run's typed record (its declared metrics per group), ``document``'s blocks beside
    it (:mod:`queerbench.run.blanks_record`)."""
    record = blanks_record(
        run.task, run.options, document, predictions, meta, run.fingerprint, reused=reused, timings=timings
    )
    write_record(run.out, record)


def _write_unscored_run(
    run: _Run,
    predictions: pd.DataFrame,
    meta: dict[str, Any],
    reused: bool,
    n_predicted: int,
    timings: dict[str, float],
) -> RunResult:
    """Outputs of a run in which no sentence got a word to score (an ``instructed`` model that never answered with
    one word): the method's summary and report, no scores.

    Every per-group score dict is empty (``n`` included) so that readers of ``scores.json`` see "no group scored"
    rather than zeros; ``generation`` holds the method's summary (label shares per group with their n).
    """
    options = run.options
    signature = str(run.signature)
    run_meta = {
        "model": options.model,
        "method": options.method,
        "config": options.config,
        "top_k": options.top_k,
        "endpoint": redact_url(options.endpoint) if options.endpoint else None,
        "fingerprint": meta.get("fingerprint") or run.fingerprint,
        "decoding": meta.get("decoding"),
        "prompt": meta.get("prompt"),
        "prompt_format": meta.get("prompt_format") or (meta.get("decoding") or {}).get("prompt_format"),
        "n_sentences": len(predictions),
        "limit": options.limit,
        **_subset_facts(run, predictions),
        "signature": signature,
    }
    generation = run.method.summarize(predictions)
    write_text(run.out / "report.md", run.method.unscored_report(run_meta, generation))
    document = {
        "config": options.config,
        "k": options.top_k,
        **{block: {} for block in SCORE_BLOCKS},
        "n": {},
        "scored": False,
        "generation": generation,
        "signature": signature,
        "run": _run_record(run_meta, options, meta, reused, timings),
    }
    _write_record(run, document, predictions, meta, reused, timings)
    return RunResult(out=run.out, scores=document, reused_predictions=reused, n_predicted=n_predicted)


def _score_run(
    run: _Run,
    predictions: pd.DataFrame,
    meta: dict[str, Any],
    reused: bool,
    n_predicted: int,
    timings: dict[str, float],
) -> RunResult:
    """Score a run's predictions and write ``scores.json``, ``report.md`` and the figures."""
    if not any(len(t) for t in predictions["tokens"]):
        # nothing to score, but the method's summary (an instructed model's parse rates) is the finding: write it
        # (report.md, scores.json) instead of failing after the whole run
        return _write_unscored_run(run, predictions, meta, reused, n_predicted, timings)

    options, task, method = run.options, run.task, run.method
    t1 = time.perf_counter()
    scoring = options.scoring_options()
    scores, per_sentence = score_predictions(predictions, scoring, str(options.toxicity_input), method=method)
    top1 = None
    if options.top_k > 1:
        top1, _ = score_predictions(predictions, scoring, str(options.toxicity_input), k=1, method=method)
    scores.update(  # the task's own scores next to the QueerBench score (QueerGen's VADER, regard, ...)
        task_scores(
            task,
            predictions,
            scores["k"],
            toxicity=options.toxicity,
            seed=options.seed,
            label=str(options.model),
            toxicity_kwargs=options.toxicity_kwargs,
        )
    )
    timings["score_s"] = time.perf_counter() - t1
    signature = str(run.signature.with_scores(scores, {"options": options.record()}))

    run_meta = {
        "model": options.model,
        "method": options.method,
        "revision": meta.get("commit_hash") or options.revision,
        "fingerprint": run.fingerprint,
        "config": options.config,
        "top_k": options.top_k,
        "toxicity": options.toxicity,
        "device": meta.get("device"),
        "dtype": meta.get("dtype", options.dtype),
        "n_sentences": len(predictions),
        "limit": options.limit,
        **_subset_facts(run, predictions),
        "toxicity_input": None  # nothing is read without a scorer
        if options.toxicity == "none"
        else toxicity_column(str(options.toxicity_input)) or "The person is <word>.",
        **method.run_facts(options, meta),
        "signature": signature,
    }
    generation = method.summarize(predictions)
    labelled = {**run_meta, "method_in_label": in_label(options.method)}  # reporting knows no method: told here
    figures = write_run_figures(scores, run.out, labelled)
    figures.update(task.figures(scores, run.out, run_label(labelled, scores)))
    section = method.report_section(run_meta, generation)
    report = render_report(
        scores,
        per_sentence,
        labelled,
        figures,
        top1=top1,
        title=task.spec.title,
        before_scores=[section] if section else [],
    )
    report += "".join(task.report_sections(scores))
    write_text(run.out / "report.md", report)
    _write_sentence_scores(per_sentence, run.out / SENTENCES_FILE)
    document = {
        **scores,
        "top1": top1,
        **({"generation": generation} if generation is not None else {}),
        "signature": signature,
        "run": _run_record(run_meta, options, meta, reused, timings),
    }
    _write_record(run, document, predictions, meta, reused, timings)
    return RunResult(out=run.out, scores=document, reused_predictions=reused, n_predicted=n_predicted)
