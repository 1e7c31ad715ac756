"""A run's signature, in the manner of sacrebleu's: one short, stable string of what produced a score.

``task:default|method:mlm|model:bert-base-uncased|fp:1a2b3c4d5e6f|k:5|limit:all|dtype:float32|tox:embedded@03ed4c3f|
input:neutral|hurtlex:1.2/conservative/all|afinn:0.1|fw:included|ci:1000/1000/0|qb:0.1.0``

Two parts. What decides the predictions — the task, the method and its own settings (an endpoint, a prompt, a reply
length, a seed), the model with its revision and weights' fingerprint, k, the templates (``--limit``) and the dtype —
is the run's identity: its cache key (``run.json``), the name of its default output folder and what two runs must
share to be one run (a resume, a reuse of finished predictions). What decides the scores from those predictions —
the toxicity scorer with its version and what it reads, HurtLex, AFINN, whether function words were excluded, the
uncertainty settings and the queerbench version — completes the signature of a score; ``compare`` says in which
fields two runs differ.

Settings are compared by what they mean: a default written out (``--prompt queergen-2``) equals the default left out,
and a ``--limit`` at or above the number of templates equals no limit.

A run covers the first ``--limit`` templates; an imported run (``queerbench lm-eval import``) may cover other
sentences (``lm_eval --limit 100`` ends inside a template; a run of later templates starts after the first). Its
signature then says ``limit:subset|sentences:<n>@<hash of the sentence ids>`` (:func:`sentence_subset`), so that two
runs of different sentences never read as the same measurement.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queerbench import __version__
from queerbench.base.signature import format_signature, parse_signature, short_hash, show
from queerbench.methods.registry import get_method, recorded_method
from queerbench.run.options import RunOptions
from queerbench.scoring.afinn import signature_field as afinn_signature
from queerbench.scoring.function_words import signature_field as function_words_signature
from queerbench.scoring.hurtlex import signature_field as hurtlex_signature
from queerbench.scoring.toxicity_base import signature_fields as toxicity_signature
from queerbench.scoring.uncertainty import signature_field as uncertainty_signature

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Signature", "cache_key", "default_out_dir", "describe_sentences", "sentence_subset", "signature_of"]

_show, _short = show, short_hash


def fingerprint_label(fingerprint: dict[str, Any] | None) -> str | None:
    """The short form of a weights' fingerprint in a signature: a hash's first 12 hex digits, a Hub commit's, or
    the endpoint and model name; None when it names no weights."""
    if not fingerprint:
        return None
    kind = fingerprint.get("kind")
    if kind in ("local", "embedded"):
        return _short(fingerprint.get("sha256"))
    if kind == "hub":
        return _short(fingerprint.get("commit_hash"))
    if kind == "endpoint":
        return f"{fingerprint.get('base_url')}#{fingerprint.get('model')}"
    return None


def _scorer_part(scores: dict[str, Any], run: dict[str, Any] | None = None) -> tuple[tuple[str, str], ...]:
    """The scoring part of a signature from a scores document: each scorer's own fields (toxicity, HurtLex, AFINN),
    the function-word rule's and the uncertainty's, in that order (sacrebleu's way: each part signs for itself)."""
    scorers = scores.get("scorers") or {}
    toxicity_input = ((run or {}).get("options") or {}).get("toxicity_input")
    return (
        *toxicity_signature(scorers, toxicity_input),
        hurtlex_signature(scorers),
        afinn_signature(scorers),
        function_words_signature(scores),
        uncertainty_signature(scores),
    )


@dataclass(frozen=True)
class Signature:
    """What produced a run (its prediction part) and, once scored, its scores (the scoring part)."""

    task: str
    method: str
    model: str
    revision: str | None
    dtype: str
    k: int
    limit: int | None
    sentences: str | None = None
    """``<n>@<hash>`` of an imported run whose sentences are not the first ``limit`` templates (:func:`sentence_subset`);
    None for the first ``limit`` templates."""
    settings: tuple[tuple[str, Any], ...] = ()
    """The method's own key settings (an endpoint, a prompt, ...), by what they mean."""
    fingerprint: str | None = None
    """The weights' short fingerprint (not part of the key: a resume compares the full fingerprint itself)."""
    scorers: tuple[tuple[str, str], ...] = ()
    version: str = field(default=__version__)
    method_in_key: bool | None = field(default=None, compare=False, repr=False)
    """Whether the method is part of the key (:attr:`~queerbench.methods.base.Method.in_key`), as the method that
    made the signature said it; None: asked of the registered method of that name when needed."""

    def _method_in_key(self) -> bool:
        return self.method_in_key if self.method_in_key is not None else get_method(self.method).in_key

    # ----------------------------------------------------------------------------------------- the identity --
    def key(self) -> dict[str, Any]:
        """The cache key stored in ``run.json``: what must match for stored predictions to be reused (masked-LM keys
        keep the fields they always had, so run folders of earlier versions resume)."""
        key: dict[str, Any] = {
            "model": self.model,
            "revision": self.revision,
            "config": self.task,
            "top_k": self.k,
            "limit": self.limit,
            "dtype": self.dtype,
        }
        if self.sentences:  # only then: the keys of runs over whole templates are as they always were
            key["sentences"] = self.sentences
        if self._method_in_key():
            key["method"] = self.method
            key.update(dict(self.settings))
        return key

    @classmethod
    def from_key(cls, record: dict[str, Any], *, n_templates: int | None = None) -> Signature:
        """The prediction part of the signature a ``run.json`` (of this or an earlier version) records."""
        method = str(recorded_method(record.get("method")))
        impl = get_method(method)
        settings = impl.key_settings(record) if impl.in_key else {}
        limit = record.get("limit")
        if limit is not None and n_templates is not None and int(limit) >= n_templates:
            limit = None
        return cls(
            task=str(record.get("config")),
            method=method,
            model=str(record.get("model")),
            revision=record.get("revision"),
            dtype=str(record.get("dtype") or "float32"),
            k=int(record.get("top_k") or 0),
            limit=limit,
            sentences=record.get("sentences") or None,
            settings=tuple(sorted(settings.items())),
            method_in_key=impl.in_key,
        )

    def prediction_part(self) -> Signature:
        """This signature without the fingerprint and the scoring part (what a run's key compares)."""
        return replace(self, fingerprint=None, scorers=(), version=__version__)

    def with_scores(self, scores: dict[str, Any], run: dict[str, Any] | None = None) -> Signature:
        """This signature completed by the scoring part of a scores document."""
        return replace(self, scorers=_scorer_part(scores, run))

    def folder_name(self) -> str:
        """``<model>-<task>-k<k>``, plus ``-<method>`` for methods in the key, ``-limit<N>``, ``-rev<revision>`` and
        ``-<dtype>`` when those are set, so that runs with different keys never share a folder."""
        name = f"{_slug(self.model)}-{self.task}-k{self.k}"
        if self._method_in_key():
            name += f"-{self.method}"
        if self.limit is not None:
            name += f"-limit{self.limit}"
        if self.sentences:
            name += f"-sentences{_slug(self.sentences)}"
        if self.revision:
            name += f"-rev{_slug(self.revision)}"
        if self.dtype != "float32":
            name += f"-{self.dtype}"
        return name

    # -------------------------------------------------------------------------------------------- the string --
    def fields(self) -> list[tuple[str, str]]:
        """The signature as ordered ``(name, value)`` pairs (what :meth:`__str__` joins)."""
        pairs = [
            ("task", self.task),
            ("method", self.method),
            ("model", self.model),
            *([("rev", str(self.revision))] if self.revision else []),
            *([("fp", self.fingerprint)] if self.fingerprint else []),
            ("k", str(self.k)),
            ("limit", "subset" if self.sentences else "all" if self.limit is None else str(self.limit)),
            *([("sentences", self.sentences)] if self.sentences else []),
            ("dtype", self.dtype),
            *((name, "none" if value is None else value) for name, value in self.settings),
            *self.scorers,
            ("qb", self.version),
        ]
        return [(name, str(value)) for name, value in pairs]

    def __str__(self) -> str:
        return format_signature(self.fields())

    def differences(self, other: Signature) -> list[str]:
        """The field names in which two signatures differ (the fingerprint and version included)."""
        mine, theirs = dict(self.fields()), dict(other.fields())
        return [name for name in dict.fromkeys([*mine, *theirs]) if mine.get(name) != theirs.get(name)]


def parse(text: str) -> dict[str, str]:
    """A signature string back into its ``{name: value}`` fields (for reading a score's provenance)."""
    return parse_signature(text)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("_") or "x"


def signature_of(
    options: RunOptions, *, n_templates: int | None = None, fingerprint: dict[str, Any] | None = None
) -> Signature:
    """The prediction part of a run's signature (``options.method`` resolved; ``n_templates``: the task's, so that a
    ``--limit`` covering every template means no limit; the task is asked when not given)."""
    method = options.method_impl
    limit = options.limit
    if limit is not None:
        total = n_templates if n_templates is not None else options.task.n_templates()
        if limit >= total:
            limit = None
    settings = method.key_settings(options.key_values())
    return Signature(
        task=options.config,
        method=method.name,
        model=str(options.model),
        revision=options.revision,
        dtype=options.dtype,
        k=options.top_k,
        limit=limit,
        sentences=getattr(options, "sentences", None),
        settings=tuple(sorted(settings.items())) if method.in_key else (),
        fingerprint=fingerprint_label(fingerprint),
        method_in_key=method.in_key,
    )


def cache_key(options: RunOptions, *, n_templates: int | None = None) -> dict[str, Any]:
    """The cache key of a run's options (:meth:`Signature.key`)."""
    return signature_of(options, n_templates=n_templates).key()


def default_out_dir(options: RunOptions, *, n_templates: int | None = None) -> Path:
    """``runs/<the signature's folder name>`` (:meth:`Signature.folder_name`)."""
    return Path("runs") / signature_of(options, n_templates=n_templates).folder_name()


def _templates_of(items: pd.DataFrame, ids: Iterable[str]) -> list[tuple[Any, int, int]]:
    """``(template id, sentences of it in ids, sentences it has)`` for every template of ``items`` (in run order)
    that ``ids`` touch."""
    wanted = set(ids)
    out = []
    for template, group in items.groupby("template_id", sort=True):
        hit = int(group["id"].isin(wanted).sum())
        if hit:
            out.append((template, hit, len(group)))
    return out


def sentence_subset(items: pd.DataFrame, ids: Iterable[str]) -> tuple[int | None, str | None]:
    """How a run over the sentences ``ids`` of a task (its ``items``) is recorded: ``(limit, None)`` when they are
    the first ``limit`` templates (``(None, None)``: every template), else ``(None, "<n>@<hash>")``: ``n`` sentences,
    the first 12 hex digits of the sha256 of their sorted ids (the same sentences give the same value)."""
    wanted = sorted(set(ids))
    templates = sorted(items["template_id"].unique())
    touched = _templates_of(items, wanted)
    whole = all(hit == size for _, hit, size in touched)
    if whole and [t for t, _, _ in touched] == templates[: len(touched)]:
        return (None if len(touched) == len(templates) else len(touched)), None
    digest = hashlib.sha256("\n".join(wanted).encode("utf-8")).hexdigest()[:12]
    return None, f"{len(wanted)}@{digest}"


def describe_sentences(items: pd.DataFrame, ids: Iterable[str], *, most: int = 12) -> str:
    """Which templates ``ids`` cover, in words, for a report: ``100 of 7,931 sentences: templates 0 (77 of 77), 1 (23
    of 77)``; a stretch of whole templates reads ``3–9 (all)``; at most ``most`` pieces are listed."""
    wanted = set(ids)
    touched = _templates_of(items, wanted)
    position = {t: n for n, t in enumerate(sorted(items["template_id"].unique()))}

    def whole_next(j: int) -> bool:  # the next touched template follows template j and both are whole
        (a, hit_a, size_a), (b, hit_b, size_b) = touched[j], touched[j + 1]
        return position[b] == position[a] + 1 and hit_a == size_a and hit_b == size_b

    pieces: list[str] = []
    i = 0
    while i < len(touched):
        j = i
        while j + 1 < len(touched) and whole_next(j):
            j += 1
        template, hit, size = touched[i]
        pieces.append(f"{template}–{touched[j][0]} (all)" if j > i else f"{template} ({hit} of {size})")
        i = j + 1
    shown = ", ".join(pieces[:most]) + (f", … ({len(pieces) - most} more)" if len(pieces) > most else "")
    single = len(touched) == 1
    return f"{len(wanted):,} of {len(items):,} sentences: {'template' if single else 'templates'} {shown}"
