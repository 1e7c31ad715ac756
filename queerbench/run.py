"""The main job: dataset → predictions → scores → report, resumable.

``run_benchmark`` builds the sentences of a config, predicts top-k with a masked LM (``mlm``), a local causal LM
(``scored``) or a chat model / endpoint (``instructed``; see :mod:`queerbench.llm.fill`) (in chunks written atomically
under ``OUT/.chunks``, so a killed run resumes where it stopped), scores them with :mod:`queerbench.scoring` and
writes ``predictions.parquet``, ``scores.json``, ``report.md`` and PNG figures into ``OUT``. A rerun of a finished
run reuses ``predictions.parquet`` and does no inference. Top-1 scores come from the same pass as top-k.
"""

from __future__ import annotations

import json
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
from queerbench.io_utils import atomic_path, write_json, write_text
from queerbench.report import render_report, write_run_figures
from queerbench.scoring.score import ScoringOptions, compute, prepare_toxicity_scorer
from queerbench.templates import build_sentences

__all__ = ["TOXICITY_INPUTS", "RunOptions", "RunResult", "default_out_dir", "run_benchmark", "score_predictions"]

TOXICITY_INPUTS = ("neutral", "full", "frame")
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
    prompt_id: str | None = None  # instructed: a prompt of queerbench/data/llm_prompts.json (None: its default)
    max_new_tokens: int | None = None  # instructed: None = the data file's default

    def __post_init__(self) -> None:
        from queerbench.llm.fill import GENERATIVE_METHODS, METHODS

        check_config(self.config)
        if self.method not in METHODS:
            raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1 (requests in flight), got {self.concurrency!r}")
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
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.toxicity_input is None:
            self.toxicity_input = "neutral" if self.config in ("default", "queergen") else "full"
        if self.toxicity_input not in TOXICITY_INPUTS:
            raise ValueError(
                f"--toxicity-input must be one of {', '.join(TOXICITY_INPUTS)}, got {self.toxicity_input!r}"
            )

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


def _check_out_dir(out: Path, key: dict[str, Any]) -> bool:
    """True when ``out`` holds this run (resume); create it if new; refuse another run's or foreign files."""
    key_path = out / KEY_FILE
    started = (
        (out / "predictions.parquet").is_file()
        or any((out / ".chunks").glob("chunk-*.parquet"))
        or (out / ".chunks" / "replies.sqlite").is_file()  # replies of an instructed run, kept as they arrive
    )
    if key_path.is_file() and not started:
        shutil.rmtree(out / ".chunks", ignore_errors=True)  # an earlier attempt that predicted nothing: start over
        write_json(key_path, key)
        return False
    if key_path.is_file():
        stored = json.loads(key_path.read_text())
        if stored != key:
            diff = {k: (stored.get(k), v) for k, v in key.items() if stored.get(k) != v}
            raise FileExistsError(
                f"output folder {out} holds another run ({', '.join(f'{k}: {a!r} there, {b!r} now' for k, (a, b) in diff.items())}); "
                "choose another --out (or delete that folder)"
            )
        return True
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"output folder {out} is not empty and holds no queerbench run; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    write_json(key_path, key)
    return False


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
    log: Callable[[str], None] = print,
) -> tuple[pd.DataFrame, dict[str, Any], int]:
    """Predict every sentence not already in ``OUT/.chunks``; return all predictions, model metadata, count run."""
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
            meta = lm.metadata()
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
        for c in todo:
            part = frame.iloc[c * CHUNK_SIZE : (c + 1) * CHUNK_SIZE]

            def tick(n: int) -> None:
                nonlocal done
                done += n
                bar.update(n)
                if progress is not None:
                    progress(min(done, len(frame)), len(frame))

            chunk = pd.DataFrame({"id": part["id"].to_numpy(), **predict_part(part, tick)})
            with atomic_path(chunk_dir / f"chunk-{c:05d}.parquet") as tmp:
                chunk.to_parquet(tmp, index=False)
            predicted += len(part)
        bar.close()
        if options.method == "instructed":
            predictor.close()  # the reply cache (its folder is removed once the predictions are written)
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
    return result, per_sentence


def run_benchmark(
    options: RunOptions,
    out: str | Path | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] = print,
) -> RunResult:
    """Run the whole benchmark for one model and config into ``out`` (resuming or reusing what is there)."""
    from queerbench.llm.fill import resolve_method

    # auto → mlm / scored / instructed from the model's configuration (no weights read); mismatches fail here
    options = replace(options, method=resolve_method(options.method, options.model, options.endpoint, options.revision))
    out = Path(out) if out is not None else default_out_dir(options)
    prepare_toxicity_scorer(options.scoring_options())  # a missing scorer source or API key fails before inference
    key = options.cache_key()
    resumed = _check_out_dir(out, key)
    timings: dict[str, float] = {}
    frame = _sentences(options)
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
        chunks, meta, n_predicted = _predict_chunks(frame, options, out, progress, log)
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
    timings["score_s"] = time.perf_counter() - t1

    run_meta = {
        "model": options.model,
        "method": options.method,
        "revision": meta.get("commit_hash") or options.revision,
        "device": meta.get("device"),
        "dtype": meta.get("dtype", options.dtype),
        "n_sentences": len(predictions),
        "limit": options.limit,
        "toxicity_input": {"neutral": "neutral_sentence", "full": "masked_sentence", "frame": "The person is <word>."}[
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
    figures = write_run_figures(scores, out)
    report = render_report(scores, per_sentence, run_meta, figures, top1=top1)
    if "queergen" in scores:
        from queerbench.queergen.compare import queergen_report_section

        report += queergen_report_section(scores["queergen"])
    if options.method in ("scored", "instructed"):
        report = report.replace("\n## Scores (top-", generation_section(run_meta, generation) + "\n## Scores (top-", 1)
    write_text(out / "report.md", report)
    document = {
        **scores,
        "top1": top1,
        **({"generation": generation} if generation is not None else {}),
        "run": {
            **run_meta,
            "options": {k: v for k, v in asdict(options).items() if k != "toxicity_kwargs"},
            "model_metadata": meta,
            "queerbench_version": __version__,
            "reused_predictions": reused,
            "timings_s": timings,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    }
    write_json(out / "scores.json", document)
    return RunResult(out=out, scores=document, reused_predictions=reused, n_predicted=n_predicted)
