"""QueerBench's two tasks: ``default`` (the method done right) and ``paper`` (the published procedure, bugs included).

Their data — methods, masked-LM mode, toxicity input, scoring rules, dataset config, lm-eval task — is in
``tasks.json`` next to this module; the hooks below build their sentences (:mod:`.templates`) and read the paper's own
published prediction and evaluation files (:mod:`.paper_data`) for ``queerbench score FILE``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from queerbench.tasks.base import Task, TaskSpec, load_specs
from queerbench.tasks.queerbench.templates import (
    COLUMNS,
    NEUTRAL_SUBJECT,
    SPLITS,
    SUBJECT_PLACEHOLDER,
    TARGET,
    build_sentences,
    published_sentences,
    render_default,
    subjects,
)

if TYPE_CHECKING:
    from queerbench.tasks.measurement import Measurement

__all__ = ["COMMANDS", "TASKS", "QueerBenchTask"]

SPECS: dict[str, TaskSpec] = load_specs(Path(__file__).with_name("tasks.json"))
_READS = {"neutral": "subject-blind neutral sentence", "frame": "'The person is <word>.' frame"}
"""What a task's toxicity input is, in words (for the warning of a published file scored by another rule)."""


class QueerBenchTask(Task):
    """A QueerBench task: the templates × subjects of the upstream files, by the task's sentence rules."""

    def measurement(self, settings: dict[str, Any]) -> Measurement:
        """The task's scoring rules on top-k words; with ``queergen=True``, QueerGen's scorers of the same words
        too (under ``queergen``, with this config's toxicity scorer and seed, and the ``regard`` setting)."""
        from queerbench.tasks.measurement import BlanksMeasurement, blanks_options
        from queerbench.tasks.queergen.metric import QueerGenMeasurement

        options = blanks_options(self, settings)
        also: dict[str, Measurement] = {}
        if settings.get("queergen"):
            also["queergen"] = QueerGenMeasurement(
                options.config, toxicity=options.toxicity, regard=settings.get("regard", "auto"), seed=options.seed
            )
        return BlanksMeasurement(options, also)

    def measurement_inputs(self) -> tuple[str, ...]:
        """The scoring rules' inputs and, with ``queergen=True``, QueerGen's."""
        from queerbench.tasks.queergen.metric import INPUTS

        return (*super().measurement_inputs(), *INPUTS)

    def items(self) -> pd.DataFrame:
        """Every sentence with the dataset columns and ``split`` (``nouns``/``pronouns``), template-major."""
        return build_sentences(self.name)

    def n_templates(self) -> int:
        """The number of templates (read from the sentences)."""
        return int(self.items()["template_id"].nunique())

    def dataset_splits(self) -> dict[str, pd.DataFrame]:
        """``nouns`` and ``pronouns``, with the dataset columns only."""
        frame = self.items()
        return {split: frame[frame["split"] == split][list(COLUMNS)].reset_index(drop=True) for split in SPLITS}

    def subject_names(self) -> list[str]:
        """Every subject of the grammatical set (nouns, then pronouns); none for the published one."""
        if published_sentences(self.name):
            return []
        found = subjects(self.name)
        return [s.name for split in SPLITS for s in found[split]]

    def render_template(self, template: str, names: Sequence[str]) -> list[tuple[str, str, str, str]]:
        """A user's template (``[SUBJECT]``, ``[MASK]``) filled for each subject by the grammatical rules, with the
        subject-blind neutral sentence the toxicity scorer reads."""
        index = {s.name: s for split in SPLITS for s in subjects(self.name)[split]}
        unknown = [s for s in names if s not in index]
        if unknown:
            raise ValueError(f"unknown subject(s) {unknown}")
        body = template.replace(SUBJECT_PLACEHOLDER, TARGET)
        neutral = render_default(body, NEUTRAL_SUBJECT)
        return [(s, index[s].group, render_default(body, index[s]), neutral) for s in names]

    def reference_sources(self) -> list[str]:
        """The paper's 16 evaluation files, for the task that replicates its procedure (``extra.reference``)."""
        if self.spec.extra.get("reference") != "table4":
            return []
        from queerbench.tasks.queerbench.reference import paper_reference_sources

        return paper_reference_sources()

    def reference_rows(self, source: str, *, n_resamples: int, seed: int, scorer: str | None = None) -> list[Any]:
        """Table 4's row of one evaluation file, with CIs and the gap test (:mod:`.reference`)."""
        if source not in self.reference_sources():
            raise ValueError(f"{source} is not one of task {self.name}'s published files")
        from queerbench.tasks.queerbench.reference import paper_reference_row

        return [paper_reference_row(self, source, n_resamples=n_resamples, seed=seed, scorer=scorer)]

    def check_predictions(self, predictions: pd.DataFrame, path: Path) -> None:
        """Refuse, in one line naming the row, the value and this task's groups, a row whose group is none of this
        task's (it would be scored as a group of its own)."""
        known = list(dict.fromkeys(s.group for split in SPLITS for s in subjects(self.name)[split]))
        for i, group in enumerate(predictions["group"]):
            if group not in known:
                raise ValueError(
                    f"{path} row {i}: group {group!r} is not a group of --config {self.name} ({', '.join(known)}); "
                    "score a run with the --config it was made with"
                )

    def score_file(self, path: Path, settings: dict[str, Any]) -> dict[str, Any]:
        """Score one of the paper's prediction or evaluation CSVs (``;``-separated, read by header name) with this
        task's rules; ``--toxicity precomputed`` uses the file's stored Perspective counts."""
        from queerbench.scoring.aggregate import compute
        from queerbench.tasks.queerbench.paper_data import read_paper_csv

        try:
            frame = read_paper_csv(path)
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
            reason = "it is empty" if isinstance(exc, pd.errors.EmptyDataError) else f"{type(exc).__name__}"
            raise ValueError(
                f"{path} is not a readable QueerBench CSV ({reason}); expected an upstream "
                "data/prediction or data/evaluation/<model>_template_<k>.csv (';'-separated)"
            ) from None
        published = build_sentences("paper")  # the paper's files hold the paper's sentences, whatever the task
        _check_repeats(frame, published, path)
        top_k, toxicity = settings.get("top_k"), settings["options"].toxicity
        tokens = [t[:top_k] if top_k else t for t in frame["tokens"]]
        stored = "perspective_counts" in frame
        counts = frame["perspective_counts"].tolist() if toxicity == "precomputed" and stored else None
        if toxicity == "precomputed" and counts is None:
            raise ValueError(f"{path} has no stored perspective column; choose another --toxicity")
        aligned = len(frame) == len(published) and (frame["name"].to_numpy() == published["subject"].to_numpy()).all()
        if counts is None and toxicity != "none" and self.spec.toxicity_input != "full":
            what = _READS.get(str(self.spec.toxicity_input), str(self.spec.toxicity_input))
            print(
                "warning: the paper's files hold the paper's sentences; the toxicity scorer reads them in full "
                f"(not the {what} of the {self.name} config)",
                file=sys.stderr,
            )
        from queerbench.tasks.queerbench.reference import published_model

        options = settings["options"]
        # the paper's files hold full sentences (the text Perspective scored): a fitted scorer uses that protocol's fit,
        # and for a published model's own file one that never saw it, as its reference rows are scored
        held = published_model(path) if counts is None and toxicity != "none" else None
        kwargs = {**options.toxicity_kwargs, **({"held_out_model": held} if held else {})}
        options = dataclasses.replace(options, text_form="full", toxicity_kwargs=kwargs)
        return compute(
            tokens,
            frame["group"].tolist(),
            sentences=frame["template"].tolist(),
            toxicity_counts=counts,
            template_ids=published["template_id"].tolist() if aligned else None,  # bootstrap/permutation clusters
            options=options,
        )


def _check_repeats(frame: pd.DataFrame, published: pd.DataFrame, path: Path) -> None:
    """Refuse a paper CSV with repeated rows (one line naming the sentence, its lines and the fix).

    These files have no id: a row is its sentence (``template``, the full text) and its group. The paper's own
    sentence set holds 337 repeats (three templates listed twice, the pronoun ``e`` listed twice), so a sentence
    may occur as often as it does there (once when it is not one of the paper's); a row beyond that was repeated,
    and would be scored twice (n doubles, the CIs narrow)."""
    keys = list(zip(frame["template"], frame["group"], strict=True))
    allowed = Counter(zip(published["masked_sentence"], published["group"], strict=True))
    over = {key: n - max(1, allowed[key]) for key, n in Counter(keys).items() if n > max(1, allowed[key])}
    if over:
        key = next(iter(over))  # the first in file order
        lines = [i + 2 for i, other in enumerate(keys) if other == key]  # line 1 is the header
        raise ValueError(
            f"{path}: the sentence {key[0]!r} (group {key[1]}) is on lines {lines}, {over[key]} time(s) more than in "
            f"the paper's sentence set ({sum(over.values())} repeated row(s) in all); a repeated row is scored twice "
            "(n doubles, the CIs narrow): drop the repeated rows"
        )


TASKS = [QueerBenchTask(spec) for spec in SPECS.values()]

COMMANDS = Path(__file__).with_name("commands.json")
"""The benchmark's own command (``queerbench check-predictions``), declared as data; the CLI builds it."""
