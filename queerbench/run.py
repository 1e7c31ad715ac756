"""The main job: dataset → predictions → scores → report, resumable.

``run_benchmark`` builds the sentences of a config, predicts top-k with a masked LM (``mlm``), a local causal LM
(``scored``) or a chat model / endpoint (``instructed``; see :mod:`queerbench.llm.fill`) (in chunks written atomically
under ``OUT/.chunks``, so a killed run resumes where it stopped), scores them with :mod:`queerbench.scoring` and
writes ``predictions.parquet``, ``scores.json``, ``report.md`` and PNG figures into ``OUT``. A rerun of a finished
run reuses ``predictions.parquet`` and does no inference. Top-1 scores come from the same pass as top-k.

Order of work (:func:`run_benchmark`): everything that can be checked without inference is checked first — the
options, the output folder (a file? another run's? writable?), the lexicons' checksums, the toxicity scorer, the
model's fingerprint and, for a masked LM, its tokenizer against ``--top-k`` — and only then is the output folder
created and ``run.json`` written, so a failed start leaves nothing behind. ``run.json`` holds the cache key and the
model's fingerprint (:mod:`queerbench.fingerprint`): a resume, or a rerun of a finished run, against a local model
folder whose files changed is refused, for every method, so that no output mixes two models.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench import __version__, check_config
from queerbench.fingerprint import check_model_reference, fingerprint_model, fingerprints_differ
from queerbench.io_utils import atomic_path, write_json, write_text
from queerbench.report import render_report, write_run_figures
from queerbench.scoring.hurtlex import hurtlex_categories, load_hurtlex
from queerbench.scoring.score import ScoringOptions, compute, prepare_toxicity_scorer
from queerbench.templates import build_sentences

__all__ = ["TOXICITY_INPUTS", "RunOptions", "RunResult", "default_out_dir", "run_benchmark", "score_predictions"]

TOXICITY_INPUTS = ("neutral", "full", "frame")
DTYPES = ("float32", "bfloat16", "float16")
CHUNK_SIZE = 512
KEY_FILE = "run.json"


@dataclass
class RunOptions:
    """Everything that defines a run (the first six fields form its cache key; for generative methods also the
    method, endpoint, prompt and decoding settings)."""

    model: str | None = (
        "bert-base-uncased"  # None: bert-base-uncased for mlm, the embedded SmolLM2 for scored/instructed
    )
    config: str = "default"
    top_k: int = 5
    revision: str | None = None
    limit: int | None = None  # use only the first N templates (every subject of each)
    dtype: str = "float32"
    toxicity: str = "embedded"
    toxicity_input: str | None = None  # None: "neutral" in default, "full" in paper
    device: str = "auto"
    batch_size: int = 64
    n_bootstrap: int = 1000
    n_permutations: int = 1000
    seed: int = 0
    toxicity_kwargs: dict[str, Any] = field(default_factory=dict)
    method: str = "auto"  # auto | mlm | scored | instructed (see queerbench.llm.fill.resolve_method)
    endpoint: str | None = None  # an OpenAI-compatible base URL: instructed on the served model `model`
    concurrency: int = 8  # endpoint requests in flight
    requests_per_minute: float = 600.0  # endpoint rate limit, on top of --concurrency (not part of the key)
    prompt_id: str | None = None  # instructed: a prompt of queerbench/data/llm_prompts.json (None: its default)
    max_new_tokens: int | None = None  # instructed: None = the data file's default
    exclude_function_words: bool = False  # scoring only (not in the cache key): see queerbench.scoring.function_words

    def __post_init__(self) -> None:
        from queerbench.llm.fill import GENERATIVE_METHODS, METHODS

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
            from queerbench.llm import DEFAULT_MODEL

            self.model = DEFAULT_MODEL if self.method in GENERATIVE_METHODS else "bert-base-uncased"
        if self.prompt_id is not None:
            from queerbench.llm.instructed import load_prompts

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
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.toxicity_input is None:
            self.toxicity_input = "neutral" if self.config in ("default", "queergen") else "full"
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
        if self.method not in ("auto", "mlm"):  # masked-LM keys stay as they were, so old run folders still resume
            key["method"] = self.method
            key["endpoint"] = self.endpoint
            if self.method == "instructed":
                key["prompt_id"] = self.prompt_id
                key["max_new_tokens"] = self.max_new_tokens
                key["seed"] = self.seed  # it seeds the sampled replies
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
    if options.method not in ("auto", "mlm"):
        name += f"-{options.method}"
    if options.limit is not None:
        name += f"-limit{options.limit}"
    if options.revision:
        name += f"-rev{_slug(options.revision)}"
    if options.dtype != "float32":
        name += f"-{options.dtype}"
    return Path("runs") / name


def _unwritable(out: Path, reason: str, chosen: bool) -> ValueError:
    where = "--out" if chosen else f"the default output folder (relative to the current directory {Path.cwd()})"
    fix = "choose an --out in a folder you can write to" if chosen else "pass --out DIR in a folder you can write to"
    return ValueError(f"cannot write the output folder {out} ({where}): {reason}; {fix}")


def _check_writable(out: Path, chosen: bool) -> None:
    """Refuse an ``out`` that is, or lies below, a file, or whose nearest existing folder is not writable."""
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file" if probe == out else f"lies below {probe}, which is a file"
        raise _unwritable(out, f"it {what}, not a folder", chosen)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _unwritable(out, f"{probe} is not writable (permission denied)", chosen)
    try:  # permission bits do not tell everything (immutable folders, read-only mounts, root): try for real
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".queerbench-write-test-"))
    except OSError as exc:
        raise _unwritable(out, f"{probe} is not writable ({exc.strerror or type(exc).__name__})", chosen) from None


def _inspect_out_dir(out: Path, key: dict[str, Any], *, chosen: bool = True) -> tuple[str, dict[str, Any] | None]:
    """What ``out`` holds, without writing anything: ``("new" | "restart" | "resume" | "finished", run.json)``.

    ``restart``: an earlier attempt with this key predicted nothing. Refuses (``FileExistsError``/``ValueError``,
    one line) a folder that holds another run or foreign files, a file, and a place that cannot be written.
    """
    _check_writable(out, chosen)
    key_path = out / KEY_FILE
    if key_path.is_file():
        try:
            stored = json.loads(key_path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"{key_path} is unreadable ({exc}); delete the folder {out} or choose another --out"
            ) from exc
        diff = {k: (stored.get(k), v) for k, v in key.items() if stored.get(k) != v}
        if diff:
            raise FileExistsError(
                f"output folder {out} holds another run ({', '.join(f'{k}: {a!r} there, {b!r} now' for k, (a, b) in diff.items())}); "
                "choose another --out (or delete that folder)"
            )
        if (out / "predictions.parquet").is_file():
            return "finished", stored
        if any((out / ".chunks").glob("chunk-*.parquet")) or (out / ".chunks" / "replies.sqlite").is_file():
            return "resume", stored  # replies of an instructed run are kept as they arrive
        return "restart", stored
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"output folder {out} is not empty and holds no queerbench run; choose another --out")
    return "new", None


def _check_same_model(
    out: Path, options: RunOptions, stored: dict[str, Any] | None, fingerprint: dict[str, Any]
) -> None:
    """Refuse to resume (or re-score) a run whose local model folder changed since it started."""
    changed = fingerprints_differ((stored or {}).get("model_fingerprint"), fingerprint)
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise ValueError(
            f"the files of model folder {options.model} changed since the run in {out} started ({shown}); resuming "
            f"would mix two models' outputs: delete {out} to start over with the new files, or choose another --out"
        )


def _claim_out_dir(out: Path, record: dict[str, Any], state: str, *, chosen: bool = True) -> bool:
    """Create ``out`` and write ``run.json`` (new run, or a restart of one that predicted nothing); True when this
    call created the folder. A write that fails (read-only or immutable folder, full disk) is one line."""
    created = not out.exists()
    try:
        if state == "restart":
            shutil.rmtree(out / ".chunks", ignore_errors=True)
        if state in ("new", "restart"):
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / KEY_FILE, record)
    except OSError as exc:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise _unwritable(out, exc.strerror or type(exc).__name__, chosen) from exc
    return created


def _stored_replies(path: Path) -> int:
    """How many replies a generative run's cache holds (0 when it does not exist): only those are worth keeping."""
    if not path.is_file():
        return 0
    from queerbench.llm import ResponseCache

    cache = ResponseCache(path)
    try:
        return cache.count()
    finally:
        cache.close()


def _unclaim_out_dir(out: Path, created: bool) -> None:
    """Undo :func:`_claim_out_dir` after a start that predicted nothing (nothing half-made is left behind)."""
    chunks = out / ".chunks"
    if (
        (out / "predictions.parquet").exists()
        or any(chunks.glob("chunk-*.parquet"))
        or _stored_replies(chunks / "replies.sqlite") > 0
    ):
        return
    if created:
        shutil.rmtree(out, ignore_errors=True)
    else:
        shutil.rmtree(out / ".chunks", ignore_errors=True)
        (out / KEY_FILE).unlink(missing_ok=True)


def _check_masked_lm(options: RunOptions) -> None:
    """Check the device, then load the masked LM's config and tokenizer only (not its weights) and check
    ``--top-k`` against the vocabulary it may predict from, so that a bad ``--top-k`` fails before the model loads."""
    from queerbench.predict import load_masked_lm_tokenizer, max_top_k, resolve_device

    resolve_device(options.device)  # --device cuda on a machine without CUDA fails here, not after the claim
    if Path(options.model).expanduser().is_file():
        raise ValueError(f"--model {options.model} is a file; a masked LM is a folder saved with save_pretrained")
    config, tokenizer = load_masked_lm_tokenizer(options.model, revision=options.revision)
    limit = max_top_k(config, tokenizer, options.config)
    if options.top_k > limit:
        what = "whole-word vocabulary entries" if options.config == "default" else "vocabulary entries"
        raise ValueError(
            f"--top-k {options.top_k} exceeds the {limit} {what} of {options.model}; choose --top-k <= {limit}"
        )


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
    if will_predict and options.method == "mlm":  # the generative predictors check their model when they load
        _check_masked_lm(options)  # before hashing: a folder that holds no model fails in a second
    return fingerprint_model(options.model)


def _sentences(options: RunOptions) -> pd.DataFrame:
    frame = build_sentences(options.config)
    if options.limit is not None:
        keep = sorted(frame["template_id"].unique())[: options.limit]
        frame = frame[frame["template_id"].isin(keep)]
    return frame.reset_index(drop=True)


def _predict_chunks(
    frame: pd.DataFrame,
    options: RunOptions,
    out: Path,
    progress: Callable[[int, int], None] | None,
    fingerprint: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> tuple[pd.DataFrame, dict[str, Any], int]:
    """Predict every sentence not already in ``OUT/.chunks``; return all predictions, model metadata, count run."""
    from queerbench.llm.instructed import GenerationError
    from queerbench.predict import load_masked_lm, predict

    chunk_dir = out / ".chunks"
    chunk_dir.mkdir(exist_ok=True)
    n_chunks = (len(frame) + CHUNK_SIZE - 1) // CHUNK_SIZE
    todo = [c for c in range(n_chunks) if not (chunk_dir / f"chunk-{c:05d}.parquet").is_file()]
    meta_path = chunk_dir / "model.json"
    done = (n_chunks - len(todo)) * CHUNK_SIZE
    meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    predicted = 0
    if todo:
        if options.method in ("scored", "instructed"):
            from queerbench.llm.fill import load_predictor, same_weights

            predictor = load_predictor(options, chunk_dir / "replies.sqlite", log)
            meta = predictor.metadata()
            if meta_path.is_file() and not same_weights(json.loads(meta_path.read_text()), meta):
                raise ValueError(
                    f"the weights of {options.model} changed since the saved chunks in {chunk_dir} were predicted; "
                    "delete that folder to start over (a run never mixes two models' rows)"
                )

            def predict_part(part: pd.DataFrame, tick: Callable[[int], None]) -> dict[str, Any]:
                return predictor.predict(part["id"].tolist(), part["masked_sentence"].tolist(), tick)
        else:
            # a resumed run must use the very weights of its first chunks: pin the commit they came from
            revision = options.revision or (meta.get("commit_hash") if done else None)
            lm = load_masked_lm(options.model, device=options.device, dtype=options.dtype, revision=revision)
            meta = {**lm.metadata(), "fingerprint": fingerprint}
            if (
                done
                and meta_path.is_file()
                and meta.get("commit_hash") != json.loads(meta_path.read_text()).get("commit_hash")
            ):
                raise RuntimeError(
                    f"{options.model} now resolves to commit {meta.get('commit_hash')}, but the saved chunks in "
                    f"{chunk_dir} came from another commit; delete that folder to start over"
                )

            def predict_part(part: pd.DataFrame, tick: Callable[[int], None]) -> dict[str, Any]:
                result = predict(
                    lm,
                    part["masked_sentence"].tolist(),
                    options.top_k,
                    mode="paper" if options.config == "queergen" else options.config,  # QueerGen: raw top-k
                    batch_size=options.batch_size,
                    progress=tick,
                )
                return {"tokens": result.tokens, "token_ids": result.ids, "probs": result.probs}

        write_json(meta_path, meta)
        from tqdm.auto import tqdm

        bar = tqdm(
            total=len(frame),
            initial=min(done, len(frame)),
            desc="predicting",
            unit="sent",
            disable=progress is not None,
        )
        failed = []  # instructed: the parts whose calls did not all get a reply (reported once all were asked)
        for c in todo:
            part = frame.iloc[c * CHUNK_SIZE : (c + 1) * CHUNK_SIZE]

            def tick(n: int) -> None:
                nonlocal done
                done += n
                bar.update(n)
                if progress is not None:
                    progress(min(done, len(frame)), len(frame))

            try:
                chunk = pd.DataFrame({"id": part["id"].to_numpy(), **predict_part(part, tick)})
            except GenerationError as exc:  # not saved: the other chunks go on, a rerun asks only the failed calls
                failed.append(exc)
                continue
            with atomic_path(chunk_dir / f"chunk-{c:05d}.parquet") as tmp:
                chunk.to_parquet(tmp, index=False)
            predicted += len(part)
        bar.close()
        if options.method == "instructed":
            predictor.close()  # the reply cache (its folder is removed once the predictions are written)
        if failed:
            raise GenerationError.merge(failed, total=len(frame) * options.top_k)  # of all the run's calls
    chunks = pd.concat(
        [pd.read_parquet(chunk_dir / f"chunk-{c:05d}.parquet") for c in range(n_chunks)], ignore_index=True
    )
    if chunks["id"].tolist() != frame["id"].tolist():
        raise RuntimeError(
            f"the saved chunks in {chunk_dir} do not match this run's sentences; delete that folder and rerun"
        )
    return chunks, meta, predicted


def _completed(sentences: pd.Series, tokens: pd.Series) -> list[list[str]]:
    return [[s.replace("[MASK]", t) for t in toks] for s, toks in zip(sentences, tokens, strict=True)]


def score_predictions(
    predictions: pd.DataFrame, options: ScoringOptions, toxicity_input: str, k: int | None = None
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Score a predictions table (a run's ``predictions.parquet``) with ``options``; top-``k`` (all when None).

    Returns the metric result and the per-sentence table (with the sentence columns the report shows).
    """
    # instructed runs: a sentence none of whose replies gave one word has no tokens; scores use the `ok` answers only
    predictions = predictions[[len(t) > 0 for t in predictions["tokens"]]].reset_index(drop=True)
    tokens = [list(t)[: k or len(t)] for t in predictions["tokens"]]
    column = {"neutral": "neutral_sentence", "full": "masked_sentence", "frame": None}[toxicity_input]
    result = compute(
        tokens,
        predictions["group"].tolist(),
        sentences=None if column is None else predictions[column].tolist(),
        template_ids=predictions["template_id"].tolist(),
        options=options,
        return_per_sentence=True,
    )
    per_sentence = result.pop("per_sentence")
    for col in ("id", "group", "category", "subject", "masked_sentence"):
        per_sentence[col] = predictions[col].to_numpy()
    if "reply" in predictions and "method" in predictions and set(predictions["method"]) == {"instructed"}:
        # k replies were asked per sentence and only the one-word ones are scored (0..k words a sentence): the run
        # is top-k, not top-<most words any sentence got>
        asked = max(len(r) for r in predictions["reply"])
        result["k"] = min(k, asked) if k else asked
    return result, per_sentence


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
    from queerbench.llm.instructed import parse_summary
    from queerbench.report import CONTENT_NOTE, generation_section

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
    report = "\n".join(
        [
            f"# QueerBench report: `{options.model}`",
            "",
            CONTENT_NOTE,
            "",
            f"- config: `{options.config}`, top-k = {options.top_k}, sentences = {len(predictions)}"
            + (f" (first {options.limit} templates)" if options.limit else ""),
            f"- queerbench {__version__}",
            "",
            generation_section(run_meta, generation),
            "## Scores",
            "",
            "**No sentence could be scored**: no reply was parsed to one word (see the labels above and the raw "
            "replies in `predictions.parquet`). The parse and refusal rates are this run's result.",
            "",
        ]
    )
    write_text(out / "report.md", report)
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

    from queerbench.llm.fill import resolve_method

    # auto → mlm / scored / instructed from the model's configuration (no weights read); mismatches fail here
    options = replace(options, method=resolve_method(options.method, options.model, options.endpoint, options.revision))
    out = Path(out) if out is not None else default_out_dir(options)
    key = options.cache_key()
    state, stored = _inspect_out_dir(out, key, chosen=chosen)  # writes nothing
    fingerprint = _preflight(options, will_predict=state != "finished")
    if state in ("resume", "finished"):
        _check_same_model(out, options, stored, fingerprint)
    created = _claim_out_dir(out, {**key, "model_fingerprint": fingerprint}, state, chosen=chosen)
    resumed = state == "resume"
    timings: dict[str, float] = {}
    pred_path = out / "predictions.parquet"
    t0 = time.perf_counter()
    if pred_path.is_file():
        predictions = pd.read_parquet(pred_path)
        meta = json.loads((out / "model.json").read_text()) if (out / "model.json").is_file() else {}
        reused, n_predicted = True, 0
        log(f"reusing the finished predictions in {pred_path} (no inference); scoring again")
    else:
        if resumed and (out / ".chunks").is_dir():
            log(f"resuming the run in {out}")
        try:
            chunks, meta, n_predicted = _predict_chunks(frame, options, out, progress, fingerprint=fingerprint, log=log)
        except BaseException:
            _unclaim_out_dir(out, created)  # a start that predicted nothing leaves no folder behind
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
        from queerbench.queergen.score import queergen_block

        answered = predictions[[len(t) > 0 for t in predictions["tokens"]]]  # instructed: `ok` replies only
        scores["queergen"] = queergen_block(
            answered.assign(words=answered["tokens"].map(list)),
            toxicity=options.toxicity,
            seed=options.seed,
            label=options.model,
            toxicity_kwargs=options.toxicity_kwargs,
        )
        scores["queergen"]["k"] = scores["k"]  # instructed: the k asked, not the most one-word replies a sentence got
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
        else {"neutral": "neutral_sentence", "full": "masked_sentence", "frame": "The person is <word>."}[
            str(options.toxicity_input)
        ],
    }
    generation = None
    if options.method in ("scored", "instructed"):
        from queerbench.llm.instructed import parse_summary
        from queerbench.report import generation_section

        run_meta.update(
            endpoint=options.endpoint,
            fingerprint=meta.get("fingerprint"),
            decoding=meta.get("decoding"),
            prompt=meta.get("prompt"),
            prompt_format=meta.get("prompt_format") or (meta.get("decoding") or {}).get("prompt_format"),
        )
        generation = parse_summary(predictions) if options.method == "instructed" else None
    figures = write_run_figures(scores, out, run_meta)
    report = render_report(scores, per_sentence, run_meta, figures, top1=top1)
    if "queergen" in scores:
        from queerbench.queergen.compare import queergen_report_section

        report += queergen_report_section(scores["queergen"])
    if options.method in ("scored", "instructed"):
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
