"""QueerGen's task (``queergen``): its 3,100 sentences, the QueerBench score on them, and QueerGen's own scorers.

The data is in ``tasks.json`` next to this module. The hooks add what only QueerGen has: its scores next to the
QueerBench score (VADER, Perspective-form toxicity, regard, diversity: :func:`.score.queergen_block`), their report
section and figure, the side-by-side section of ``compare.md``, the dataset's ``top5_sample`` split and licence
terms, and its published evaluation CSVs, which ``queerbench score FILE`` scores with QueerGen's scorers. Which of
QueerGen's scorer rules apply (``queergen``: as its code; ``default``: as its paper) is the ``queergen_scorers``
setting of the task the user chose (``--config``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from queerbench.tasks.base import Task, TaskSpec, load_specs

if TYPE_CHECKING:
    from queerbench.tasks.measurement import Measurement

__all__ = ["TASKS", "QueerGenTask", "scorer_rules"]

SPECS: dict[str, TaskSpec] = load_specs(Path(__file__).with_name("tasks.json"))


def scorer_rules(config: str) -> str:
    """Which of QueerGen's scorer rules the task ``config`` uses: its ``queergen_scorers`` setting, else the paper's."""
    from queerbench.tasks.queergen.spec import check_scoring_config

    return check_scoring_config(config)


class QueerGenTask(Task):
    """QueerGen's sentence set with its own scorers next to the QueerBench score."""

    def measurement(self, settings: dict[str, Any]) -> Measurement:
        """QueerGen's scorers on top-k words (the ``toxicity``, ``regard`` and ``seed`` settings)."""
        from queerbench.tasks.queergen.metric import QueerGenMeasurement

        return QueerGenMeasurement(
            self.name,
            toxicity=settings.get("toxicity", "embedded"),
            regard=settings.get("regard", "auto"),
            seed=settings.get("seed", 0),
        )

    def measurement_inputs(self) -> tuple[str, ...]:
        """QueerGen's inputs."""
        from queerbench.tasks.queergen.metric import INPUTS

        return INPUTS

    def items(self) -> pd.DataFrame:
        """The 3,100 sentences in QueerGen's order (split ``test``)."""
        from queerbench.tasks.queergen.sentences import build_queergen_sentences

        return build_queergen_sentences().assign(split="test")

    def dataset_splits(self) -> dict[str, pd.DataFrame]:
        """``test`` (every sentence) and ``top5_sample`` (the 300 rows of QueerGen's top-5 runs)."""
        from queerbench.tasks.queergen.sentences import build_queergen_sentences, queergen_sample

        return {"test": build_queergen_sentences(), "top5_sample": queergen_sample()}

    def dataset_sources(self) -> list[str]:
        """QueerGen's pinned sentence files."""
        from queerbench.tasks.queergen.spec import spec

        return list(spec()["sources"].values())

    def owned_sources(self) -> list[str]:
        """Every QueerGen source: its sentence files, stored evaluations and published tables."""
        from queerbench.base.sources import list_sources

        return [s.name for s in list_sources() if s.name.startswith("queergen_")]

    def dataset_card_extra(self) -> str:
        """QueerGen's terms of use ("academic research only")."""
        from importlib import resources

        return resources.files("queerbench.data").joinpath("queergen_card.md").read_text(encoding="utf-8").format()

    def check_predictions(self, predictions: pd.DataFrame, path: Path) -> None:
        """Refuse, in one line, a predictions table that is not a ``queergen`` run: QueerGen's columns and groups."""
        from queerbench.tasks.queergen.spec import spec

        needed = {"unmarked_sentence", "template", "group", "tokens"}
        if not needed <= set(predictions.columns):
            raise ValueError(f"{path} is not a queergen run (it lacks {sorted(needed - set(predictions.columns))})")
        groups = spec()["group_order"]
        unknown = sorted({str(g) for g in predictions["group"]} - set(groups))
        if unknown:
            raise ValueError(
                f"{path}: unknown group(s) {unknown} for --config {self.name}; a queergen run's groups are "
                f"{', '.join(groups)}"
            )

    def extra_scores(
        self, predictions: pd.DataFrame, k_reported: int, *, k: int | None = None, **settings: Any
    ) -> dict[str, Any]:
        """``{"queergen": …}``: QueerGen's scores of the answered rows' top-``k`` words (all when None)."""
        from queerbench.tasks.queergen.score import queergen_block

        rows = predictions[[len(t) > 0 for t in predictions["tokens"]]].reset_index(drop=True)
        words = [list(t)[: k or len(t)] for t in rows["tokens"]]
        scores = queergen_block(rows.assign(words=words), config=scorer_rules(self.name), **settings)
        scores["k"] = k_reported
        return {"queergen": scores}

    def owns_file(self, path: Path) -> bool:
        """One of QueerGen's stored evaluation CSVs (recognised by its columns)."""
        from queerbench.tasks.queergen.evaluations import is_queergen_csv

        return path.suffix == ".csv" and is_queergen_csv(path)

    def score_file(self, path: Path, settings: dict[str, Any]) -> dict[str, Any]:
        """Score a QueerGen evaluation CSV with QueerGen's scorers (its stored values with ``precomputed``), by the
        rules of the task the user chose (``settings["config"]``)."""
        from queerbench.tasks.queergen.score import score_queergen_csv

        if not self.owns_file(path):
            raise ValueError(
                f"{path} is not a QueerGen evaluation CSV; --config {self.name} scores QueerGen's files or runs"
            )
        return score_queergen_csv(
            path,
            config=scorer_rules(settings.get("config", self.name)),
            toxicity=settings["options"].toxicity,
            regard=settings.get("regard", "auto"),
            vader=settings.get("vader", "recompute"),
            seed=settings["options"].seed,
            top_k=settings.get("top_k"),
        )

    @property
    def summary_decimals(self) -> int:
        """QueerGen's tables print VADER and Perspective at three decimals (``stat_decimals``); its regard shares are
        shown at the same precision."""
        from queerbench.tasks.queergen.spec import spec

        return int(spec()["stat_decimals"])

    def reference_sources(self) -> list[str]:
        """QueerGen's 28 evaluation files (14 models × k = 1 and top-5), for the task with ``extra.reference``."""
        if self.spec.extra.get("reference") != "evaluations":
            return []
        from queerbench.tasks.queergen.reference import queergen_reference_sources

        return queergen_reference_sources()

    def reference_rows(self, source: str, *, n_resamples: int, seed: int, scorer: str | None = None) -> list[Any]:
        """The reference row of one QueerGen evaluation file (:mod:`.reference`)."""
        if source not in self.reference_sources():
            raise ValueError(f"{source} is not one of task {self.name}'s published files")
        from queerbench.tasks.queergen.reference import queergen_reference_row

        return [queergen_reference_row(self, source, n_resamples=n_resamples, seed=seed, scorer=scorer)]

    def report_sections(self, scores: dict[str, Any]) -> list[str]:
        """QueerGen's scores per group (when the run has them)."""
        from queerbench.tasks.queergen.compare import queergen_report_section

        return [queergen_report_section(scores["queergen"])] if "queergen" in scores else []

    def figures(self, scores: dict[str, Any], out: Path, label: str) -> dict[str, str]:
        """QueerGen's scores as a figure (``queergen.png``)."""
        qg = scores.get("queergen")
        if not qg or not any(m in qg for m in ("vader", "perspective", "diversity")):
            return {}
        from queerbench.tasks.queergen.figures import queergen_figure

        queergen_figure(qg, label, out / "queergen.png")
        return {"QueerGen scores": "queergen.png"}

    def compare_sections(self, runs: Sequence[dict[str, Any]], out: Path) -> list[str]:
        """QueerBench and QueerGen runs of the same models side by side (``compare_queergen.csv``)."""
        from queerbench.tasks.queergen.compare import queergen_compare_section

        return queergen_compare_section(runs, out)


TASKS = [QueerGenTask(spec) for spec in SPECS.values()]
