"""An SCM run as the shared probe runner (:mod:`queerbench.run.probes`) runs it: the probes' own part.

:func:`scm_plan` checks the user's settings and resolves the decoding (the paper's per model family, each
overridable); :class:`ScmPlan` then gives the runner the survey and story prompts as ``generate`` requests, reads
the replies (parse, refusals, constrained option scores of a local model, the Warmth/Competence analysis), names
its signature fields and writes the report. The runner owns the folder, the model, the reply cache and the record.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import atomic_path, read_parquet
from queerbench.models.backends import GenerateBackend, RequestFailedError, scores_chat_replies
from queerbench.models.generation import GenerationSettings
from queerbench.scoring.metric_results import MetricSpec, ResultGroups
from queerbench.tasks.probes import ProbeAnalysis
from queerbench.tasks.scm.analysis import (
    RATING_READ_FROM,
    RATING_REQUEST_TYPES,
    analyze,
    display_order,
    parse_frame,
    rating_metric,
    rating_sources,
)
from queerbench.tasks.scm.constrained import SCORING_METHODS, constrained_scores
from queerbench.tasks.scm.data import AXES
from queerbench.tasks.scm.dataset import scm_splits, select_rows, shuffled_selection_rows
from queerbench.tasks.scm.parse import REFUSAL_RULES
from queerbench.tasks.scm.pipeline import make_mapper, resolve_settings, truncated
from queerbench.tasks.scm.report import write_figures, write_report

__all__ = ["SCORES_FILE", "ScmPlan", "scm_plan"]

SCORES_FILE = "scores.parquet"
"""The constrained option scores of a local model's run, reused by a rerun of the same weights and scoring."""
RATING_BLOCKS = ("rating_free", "rating_constrained")
"""The rating blocks a declared metric may read (``<block>.<axis>``): the free and the constrained rating."""
PARSE_COLUMNS = ("rating", "selected", "keywords", "parsed", "refusal", "refusal_kind", "analysed")
"""The columns :func:`~queerbench.tasks.scm.analysis.parse_frame` adds (dropped before a re-analysis)."""


@dataclass(frozen=True)
class ScmPlan:
    """One SCM run's settings, checked and resolved: survey and story decoding with their provenance, the prompts
    per split (``limit``), constrained scoring, the selection order, the refusal rule, the system prompt and an
    endpoint's extra body, and the axis mapper's factory (its flags checked already)."""

    survey: GenerationSettings
    story: GenerationSettings
    provenance: dict[str, Any] | None = None
    limit: int | None = None
    constrained: bool = True
    scoring: str = "calibrated"
    shuffle_selection: bool = False
    refusal_rule: str = "appendix_b"
    system_prompt: str | None = None
    extra_body: dict[str, Any] | None = None
    mapper_factory: Callable[[], Any] | None = None
    metrics: tuple[MetricSpec, ...] = ()
    """The task's declared metrics, each a rating block and its axis (``rating_free.Warmth``): the result record's."""

    def generator_options(self) -> dict[str, Any]:
        """The system prompt before every prompt, the JSON merged into every endpoint request, and the rows per
        forward pass of a local model's option scoring (the survey's batch size)."""
        return {
            "system_prompt": self.system_prompt,
            "extra_body": self.extra_body,
            "batch_size": self.survey.batch_size,
        }

    def rows(self) -> dict[str, pd.DataFrame]:
        """The prompts asked: at most ``limit`` per split, spread over groups and axes."""
        splits = scm_splits()
        return {
            "survey": select_rows(splits["survey"], self.limit),
            "generation": select_rows(splits["generation"], self.limit),
        }

    def describe(self) -> str:
        """How many survey and story replies are asked."""
        rows = self.rows()
        n_s, n_g = len(rows["survey"]) * self.survey.samples, len(rows["generation"]) * self.story.samples
        return f"collecting {n_s} survey replies ({self.survey.samples} per prompt) and {n_g} story replies …"

    def _groups(self) -> list[tuple[pd.DataFrame, GenerationSettings, bool]]:
        """Every group of requests, with whether it is the shuffled selection prompts (one request per sample, each
        with its own term order)."""
        rows = self.rows()
        groups: list[tuple[pd.DataFrame, GenerationSettings, bool]] = []
        for frame, settings, shuffle in (
            (rows["survey"], self.survey, self.shuffle_selection),
            (rows["generation"], self.story, False),
        ):
            if frame.empty:
                continue
            plain = frame[frame["task"] != "selection"] if shuffle else frame
            if not plain.empty:
                groups.append((plain, settings, False))
            if shuffle and (frame["task"] == "selection").any():
                sel = shuffled_selection_rows(frame[frame["task"] == "selection"], settings.samples, settings.seed)
                sel = sel.assign(base_id=sel["id"], id=sel["id"] + "#shuffle" + sel["sample"].astype(str))
                groups.append((sel.drop(columns=["sample"]), dataclasses.replace(settings, samples=1), True))
        return groups

    def request_groups(self) -> list[tuple[pd.DataFrame, GenerationSettings]]:
        """The survey prompts with the survey decoding and the story prompts with the story decoding (the shuffled
        selection prompts, with ``--shuffle-selection``, one request per sample)."""
        return [(rows, settings) for rows, settings, _ in self._groups()]

    def merge_replies(self, replies: list[pd.DataFrame]) -> pd.DataFrame:
        """One frame of every reply, shuffled selection replies under their prompt's id with their sample number,
        each marked ``truncated`` when it hit its token limit (True, False or None: unknown)."""
        frames = []
        for got, (_, settings, was_shuffled) in zip(replies, self._groups(), strict=True):
            if was_shuffled:
                k = got["id"].str.rsplit("#shuffle", n=1).str[1].astype(int)
                got = got.assign(id=got["base_id"], sample=k).drop(columns=["base_id"])
            flags: list[Any] = [truncated(m, settings.max_new_tokens) for m in got["meta"]]
            frames.append(got.assign(truncated=flags))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def _constrained_scores(
        self, backend: GenerateBackend, out: Path, log: Callable[[str], None]
    ) -> pd.DataFrame | None:
        """A local model's option scores for the rating and selection prompts (:mod:`.constrained`), asked as
        ``loglikelihood`` requests of its backend and reused from ``out/scores.parquet`` when the same weights
        (the fingerprint its replies are cached under) were scored the same way."""
        if not self.constrained or not scores_chat_replies(backend):  # an endpoint: its replies are read, no option
            return None  # is scored (its completions route scores no reply to a chat prompt)
        score_rows = self.rows()["survey"]
        if self.shuffle_selection:
            score_rows = shuffled_selection_rows(score_rows, self.survey.samples, self.survey.seed)
        fp = json.dumps(backend.generator().fingerprint(), sort_keys=True)
        spath = out / SCORES_FILE
        old = read_parquet(spath) if spath.exists() else None  # corrupt: one line, delete it and rerun
        wanted = score_rows[score_rows["task"].isin(["rating", "selection"])]
        if (
            old is not None
            and {"fingerprint", "scoring"} <= set(old.columns)
            and len(old) == len(wanted)
            and set(old["id"]) == set(wanted["id"])
            and (old["fingerprint"] == fp).all()
            and (old["scoring"] == self.scoring).all()
        ):
            return old  # a rerun makes no new model calls
        log(f"constrained scoring of rating and selection prompts ({self.scoring}) …")
        try:
            scores = constrained_scores(backend, score_rows, self.scoring).assign(fingerprint=fp)
        except RequestFailedError as exc:  # e.g. a prompt longer than the model's positions
            raise RequestFailedError(f"{exc}; or skip constrained scoring with --no-constrained") from None
        with atomic_path(spath) as tmp:
            scores.to_parquet(tmp, index=False)
        return scores

    def analyze(
        self, replies: pd.DataFrame, backend: GenerateBackend, out: Path, log: Callable[[str], None]
    ) -> ProbeAnalysis:
        """Parse the replies, score a local model's options, map the story words onto the axes and aggregate."""
        parsed = parse_frame(replies, self.refusal_rule)
        scores = self._constrained_scores(backend, out, log)
        res = _analysis(parsed, scores, self.mapper_factory, self.refusal_rule)
        fmt = sorted(set(parsed["prompt_format"]) - {""})
        meta = {
            "settings": {
                "survey": self.survey.decoding() | {"samples": self.survey.samples},
                "story": self.story.decoding() | {"samples": self.story.samples},
                "batch_size": self.survey.batch_size,
                "limit": self.limit,
                "system_prompt": self.system_prompt,
                "extra_body_keys": sorted(self.extra_body) if self.extra_body else [],
                "shuffle_selection": self.shuffle_selection,
                "refusal_rule": self.refusal_rule,
                "scoring": self.scoring if scores is not None else None,
            },
            "defaults": self.provenance,
            "prompt_format": ",".join(fmt) or "unknown",
            "constrained": scores is not None,
        }
        return ProbeAnalysis(result=res, replies=_stored(parsed), meta=meta, **self._record_parts(parsed, scores, res))

    def _record_parts(self, parsed: pd.DataFrame, scores: pd.DataFrame | None, res: dict[str, Any]) -> dict[str, Any]:
        """The result record's part of an analysis: each declared metric per group (the groups in the paper's
        order), the groups, and the rating prompts' parse rate."""
        sources = rating_sources(parsed, scores)
        order = display_order(list(dict.fromkeys(parsed["group"])))
        metrics = {}
        for metric in self.metrics:
            block, axis = metric.column.split(".", 1)
            ratings, column = sources[block]
            metrics[metric.name] = rating_metric(
                ratings, column, axis, order, RATING_READ_FROM[block], RATING_REQUEST_TYPES[block]
            )
        return {
            "metrics": metrics,
            "groups": ResultGroups(column="group", order=order, cluster="id", unit="ratings", interval="Student-t"),
            "parse_rate": (res.get("parse_rate") or {}).get("rating"),
        }

    def reanalyze(self, replies: pd.DataFrame, record: dict[str, Any], out: Path) -> ProbeAnalysis:
        """Parse the stored replies again with this plan's refusal rule and mapper; the stored option scores are
        read back, not recomputed."""
        frame = replies.drop(columns=[c for c in PARSE_COLUMNS if c in replies.columns])
        spath = out / SCORES_FILE
        fix = "delete it and rerun `queerbench scm run` with the same --out (cached replies are reused)"
        scores = read_parquet(spath, fix=fix) if spath.exists() else None
        parsed = parse_frame(frame, self.refusal_rule)
        res = _analysis(parsed, scores, self.mapper_factory, self.refusal_rule)
        run = record.get("run")
        meta = dict(run) if isinstance(run, dict) else {}
        meta["settings"] = dict(meta.get("settings", {})) | {"refusal_rule": self.refusal_rule}
        return ProbeAnalysis(result=res, replies=_stored(parsed), meta=meta, **self._record_parts(parsed, scores, res))

    def signature_fields(self, meta: dict[str, Any], result: dict[str, Any]) -> list[tuple[str, Any]]:
        """Survey and story decoding, the prompts covered, the refusal rule, the option scoring and the axis
        mapping."""
        s = meta.get("settings") or {}

        def decoding(d: dict[str, Any]) -> str:
            return f"T{d.get('temperature')}/p{d.get('top_p')}/x{d.get('samples')}/{d.get('max_new_tokens')}tok"

        mapper = result.get("mapper") or {}
        mapping = f"sadcat+{mapper.get('embedder')}@{mapper.get('threshold')}" if mapper.get("embedder") else "sadcat"
        return [
            ("survey", decoding(s.get("survey") or {})),
            ("story", decoding(s.get("story") or {})),
            ("limit", s.get("limit") or "all"),
            ("refusal", s.get("refusal_rule")),
            ("scoring", s.get("scoring") or "none"),
            ("axes", mapping),
        ]

    def write_report(self, result: dict[str, Any], meta: dict[str, Any], out: Path) -> None:
        """``report.md`` and the figures."""
        write_report(result, meta, write_figures(result, out), out)


def _analysis(
    parsed: pd.DataFrame, scores: pd.DataFrame | None, mapper_factory: Callable[[], Any] | None, rule: str
) -> dict[str, Any]:
    res = analyze(parsed, scores=scores, mapper_factory=mapper_factory or make_mapper(), rule=rule)
    if "constrained_diagnostics" in res:
        res["constrained_diagnostics"]["description"] = SCORING_METHODS.get(res["constrained_diagnostics"]["method"])
    return res


def _stored(parsed: pd.DataFrame) -> pd.DataFrame:
    """The parsed replies as Parquet stores them (keyword and option tuples as lists)."""
    return parsed.assign(keywords=parsed["keywords"].map(list), options=parsed["options"].map(list))


def scm_plan(
    model_label: str,
    *,
    endpoint: bool = False,
    quick: dict[str, Any] | None = None,
    temperature: float | None = None,
    top_p: float | str | None = "paper",
    survey_samples: int | None = None,
    story_samples: int | None = None,
    samples: int | None = None,
    max_new_tokens: int | None = None,
    story_max_new_tokens: int | None = None,
    seed: int = 0,
    batch_size: int = 8,
    limit: int | None = None,
    constrained: bool = True,
    scoring: str = "calibrated",
    shuffle_selection: bool = False,
    refusal_rule: str = "appendix_b",
    system_prompt: str | None = None,
    extra_body: dict[str, Any] | None = None,
    embedder: str = "minilm",
    threshold: float | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    mapper_factory: Callable[[], Any] | None = None,
    settings: GenerationSettings | None = None,
    story_settings: GenerationSettings | None = None,
    provenance: dict[str, Any] | None = None,
    metrics: tuple[MetricSpec, ...] = (),
) -> ScmPlan:
    """An SCM run's plan, every value checked (one line each) before any model loads.

    Decoding values left out take the paper's for ``model_label``'s family (:func:`resolve_settings`); ``quick``
    (the task's ``extra.quick``, for ``queerbench eval --limit``) gives shorter defaults. ``settings`` and
    ``story_settings`` (with their ``provenance``) replace the resolution altogether (a library caller's own).
    ``embedder`` and ``threshold`` make the axis mapper (checked now, built when the stories are analysed) unless a
    ``mapper_factory`` is given.
    """
    if extra_body is not None and not isinstance(extra_body, dict):
        raise ValueError("--extra-body must be a JSON object, e.g. '{\"safety_settings\": [...]}'")
    if extra_body and not endpoint:
        raise ValueError("--extra-body only applies to --endpoint runs (it is merged into each request body)")
    counts = {
        "survey_samples": survey_samples,
        "story_samples": story_samples,
        "samples": samples,
        "max_new_tokens": max_new_tokens,
        "story_max_new_tokens": story_max_new_tokens,
    }
    for flag, value in counts.items():
        if value is not None and value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    known = [f"{block}.{axis}" for block in RATING_BLOCKS for axis in AXES]
    for metric in metrics:
        if metric.column not in known:
            raise ValueError(
                f"the task's metric {metric.name!r} reads {metric.column!r}, which an SCM run does not compute; "
                f"give one of {', '.join(known)}"
            )
    if scoring not in SCORING_METHODS:
        raise ValueError(f"--scoring {scoring!r}: use one of {', '.join(SCORING_METHODS)}")
    if refusal_rule not in REFUSAL_RULES:
        raise ValueError(f"--refusal-rule {refusal_rule!r}: use one of {', '.join(REFUSAL_RULES)}")
    if settings is None:
        given = {
            "temperature": temperature,
            "top_p": top_p,
            "survey_samples": survey_samples or samples,
            "story_samples": story_samples or samples,
            "max_new_tokens": max_new_tokens,
            "story_max_new_tokens": story_max_new_tokens,
        }
        defaults = {k: v for k, v in (quick or {}).items() if given.get(k) in (None, "paper")}
        settings, story_default, provenance = resolve_settings(
            model_label, **{**given, **defaults}, seed=seed, batch_size=batch_size
        )
        story_settings = story_settings or story_default
    return ScmPlan(
        survey=settings,
        story=story_settings or settings,
        provenance=provenance,
        limit=limit,
        constrained=constrained,
        scoring=scoring,
        shuffle_selection=shuffle_selection,
        refusal_rule=refusal_rule,
        system_prompt=system_prompt,
        extra_body=extra_body,
        mapper_factory=mapper_factory or make_mapper(embedder, threshold, api_key_env=api_key_env),
        metrics=tuple(metrics),
    )
