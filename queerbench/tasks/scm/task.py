"""The Stereotype Content Model probes as a task (``scm``): prompts a generative model answers, on the probe runner.

Its data is in ``tasks.json`` next to this module, its commands in ``commands.json``. The probes are not
fill-in-the-blank sentences: a generative model answers survey and story prompts several times each, and the replies
are parsed and mapped onto Warmth and Competence. The task gives the harness its items (the ``survey`` and
``generation`` splits, also the dataset's ``scm`` config) and its plan (:meth:`ScmTask.probe_plan`,
:mod:`.plan`), which the shared probe runner (:mod:`queerbench.run.probes`) runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from queerbench.tasks.base import Task, TaskSpec, load_specs
from queerbench.tasks.probes import ProbePlan

if TYPE_CHECKING:
    from queerbench.tasks.measurement import Measurement

__all__ = ["COMMANDS", "TASKS", "ScmTask"]

SPECS: dict[str, TaskSpec] = load_specs(Path(__file__).with_name("tasks.json"))
FREE_RATING = "SCM free rating: Warmth (1–5)"
CONSTRAINED_RATING = "SCM constrained rating: Warmth (1–5)"


class ScmTask(Task):
    """The SCM survey and story prompts."""

    def measurement(self, settings: dict[str, Any]) -> Measurement:
        """The response analysis of the SCM probes (the ``axis_mapping`` setting: map elicited words and stories
        onto Warmth and Competence)."""
        from queerbench.tasks.scm.metric import ScmMeasurement

        return ScmMeasurement(self.name, axis_mapping=settings.get("axis_mapping", True))

    def measurement_inputs(self) -> tuple[str, ...]:
        """The probes' inputs: prompt types, rated terms, prompt texts."""
        from queerbench.tasks.scm.metric import INPUTS

        return INPUTS

    def items(self) -> pd.DataFrame:
        """Every prompt, ``survey`` then ``generation`` (the split in ``split``)."""
        from queerbench.tasks.scm.dataset import scm_splits

        return pd.concat([frame.assign(split=name) for name, frame in scm_splits().items()], ignore_index=True)

    def dataset_splits(self) -> dict[str, pd.DataFrame]:
        """``survey`` and ``generation``."""
        from queerbench.tasks.scm.dataset import scm_splits

        return scm_splits()

    def leaderboard_metrics(self) -> dict[str, str]:
        """The free rating's and the constrained rating's Warmth (two measurements: never one leaderboard)."""
        return {FREE_RATING: "warmth_free", CONSTRAINED_RATING: "warmth_constrained"}

    def space_tab(self) -> tuple[str, Any] | None:
        """The Space's "Generative LMs" tab (when its optional parts are installed)."""
        import logging

        try:
            from queerbench.tasks.scm.space import build_scm_tab
        except ImportError as exc:
            logging.getLogger(__name__).info("no Generative LMs tab: %s", exc)
            return None
        return "Generative LMs", build_scm_tab

    def probe_plan(
        self, model_label: str, *, endpoint: bool = False, quick: bool = False, **settings: Any
    ) -> ProbePlan:
        """The SCM run's plan (:func:`queerbench.tasks.scm.plan.scm_plan` with ``settings``, the flags of
        ``queerbench scm run`` as keywords; ``no_constrained`` as the flag says); ``quick`` (``queerbench eval
        --limit``): the decoding of ``extra.quick`` (one sample, shorter replies) where no value is given."""
        from queerbench.tasks.scm.plan import scm_plan

        if "no_constrained" in settings:
            settings["constrained"] = not settings.pop("no_constrained")
        return scm_plan(
            model_label,
            endpoint=endpoint,
            quick=self.spec.extra.get("quick") if quick else None,
            metrics=self.spec.metrics,
            **settings,
        )

    def folder_rows(self, folder: Path) -> list[Any]:
        """The rows of an ``scm run`` folder (its ``scm.json``): the free rating's Warmth per group (1–5) with its
        CI, Competence beside it, the survey's refusal rate and the rating prompts' parse rate; and for a local model,
        whose rating options were scored from its probabilities, the constrained rating's Warmth as a second row
        (method ``scored``: it has a value for every rating prompt, answered or not)."""
        path = Path(folder) / "scm.json"
        if not path.is_file():
            return []
        from queerbench.base.files import read_json_object
        from queerbench.reporting.rows import ResultRow

        res = read_json_object(path, fix="rerun `queerbench scm run` with the same --out (replies are cached)")
        run = res.get("run") or {}
        survey = ((res.get("refusals") or {}).get("survey") or {}).get("overall") or {}

        def row(key: str, method: str, metric: str, **rates: Any) -> ResultRow:
            rating = res.get(key) or {}
            warmth = {g: (c.get("Warmth") or {}) for g, c in rating.items() if isinstance(c, dict)}
            competence = {g: (c.get("Competence") or {}) for g, c in rating.items() if isinstance(c, dict)}
            return ResultRow(
                task=self.name,
                benchmark=self.benchmark,
                model=str(run.get("model")),
                method=method,
                k=None,
                toxicity="none",
                scores={g: c.get("mean") for g, c in warmth.items()},
                ci={g: [c["lo"], c["hi"]] if c.get("lo") is not None else None for g, c in warmth.items()},
                n={g: int(c.get("n") or 0) for g, c in warmth.items()},
                limit=(run.get("settings") or {}).get("limit"),
                metric=metric,
                extra={"summary": {f"Competence {g}": c.get("mean") for g, c in competence.items()}},
                signature=str(res.get("signature") or ""),
                source=str(folder),
                **rates,
            )

        rows = [
            row(
                "rating_free",
                "instructed",
                FREE_RATING,
                parse_rate=(res.get("parse_rate") or {}).get("rating"),
                refusal_rate=survey.get("rate"),
            )
        ]
        constrained = res.get("rating_constrained") or {}
        if any(((c or {}).get("Warmth") or {}).get("mean") is not None for c in constrained.values()):
            rows.append(row("rating_constrained", "scored", CONSTRAINED_RATING))
        return rows

    def folder_table(self, folder: Path) -> pd.DataFrame | None:
        """Every reply of an ``scm run`` folder with how it was read: the parsed rating or selection, whether it
        parsed, and its refusal kind (``responses.parquet``)."""
        path = Path(folder) / "responses.parquet"
        if not path.is_file() or not (Path(folder) / "scm.json").is_file():
            return None
        from queerbench.base.files import read_parquet

        frame = read_parquet(path, fix="rerun `queerbench scm run` with the same --out (replies are cached)")
        table = pd.DataFrame(
            {
                "group": frame["group"],
                "template": frame["prompt_type"],
                "prompt": frame["prompt"],
                "reply": frame["response"],
                "label": frame["parsed"].map({True: "parsed", False: "not parsed"}),
                "rating": frame.get("rating"),
                "selected": frame.get("selected"),
                "refusal_kind": frame["refusal_kind"],
            }
        )
        return table


TASKS = [ScmTask(spec) for spec in SPECS.values()]

COMMANDS = Path(__file__).with_name("commands.json")
"""The probes' commands (``queerbench scm run | calibrate | report | parser-check | compare``), declared as data;
the CLI builds them."""
