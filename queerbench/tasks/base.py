"""What a task is: one benchmark declared as data (its entry in a task data file) plus a few hooks.

In the spirit of lm-evaluation-harness's task configs, everything the harness needs to know about a benchmark is
either a field of its :class:`TaskSpec` — read from a versioned JSON file with a schema check — or a method of its
:class:`Task` that the benchmark's task module overrides:

- data: the name (also the ``--config`` value), the benchmark it belongs to, a one-line title, its kind (``blanks``:
  fill-in-the-blank sentences that ``queerbench run`` predicts; ``probes``: prompts a generative model answers, run by the probe runner), the
  methods that apply, the masked-LM mode, what the toxicity scorer reads, the scoring rules, the dataset config and
  the lm-evaluation-harness task name;
- hooks: the items (:meth:`Task.items`), the first ``--limit`` templates of them, the dataset splits and card text,
  extra scores next to the QueerBench score, report sections, figures and comparison sections, the upstream
  files the benchmark's own results come in, and the reference rows its published files give the leaderboard.

Generic code (the run, scoring, reporting, comparison, the Space, the dataset builder, the lm-eval bridge) asks a
task for these and never compares a task's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from queerbench.scoring.aggregate import ScoringOptions
from queerbench.tasks.spec import (
    KINDS,
    MLM_MODES,
    TOXICITY_INPUTS,
    EvalPass,
    GroupSpec,
    MetricSpec,
    TaskSpec,
    load_specs,
)

if TYPE_CHECKING:
    from queerbench.models.requests import Request, Result
    from queerbench.reporting.rows import ResultRow
    from queerbench.tasks.measurement import Measurement
    from queerbench.tasks.probes import ProbePlan

__all__ = [
    "KINDS",
    "MLM_MODES",
    "TOXICITY_INPUTS",
    "EvalPass",
    "GroupSpec",
    "MetricSpec",
    "Task",
    "TaskSpec",
    "TemplateTask",
    "load_specs",
]


class Task:
    """A benchmark as the harness sees it: its :class:`TaskSpec` and the hooks a task module overrides.

    The defaults describe a template-style benchmark whose items carry ``template_id`` and ``group`` and whose
    only score is the QueerBench score; a task module overrides :meth:`items` and whatever else it adds.
    """

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec

    def __repr__(self) -> str:
        return f"<Task {self.spec.name} ({self.spec.benchmark})>"

    # ------------------------------------------------------------------------------------------------ data --
    @property
    def name(self) -> str:
        """The task's name: the ``--config`` value and the ``task:`` field of a run's signature."""
        return self.spec.name

    @property
    def benchmark(self) -> str:
        """The benchmark (paper) the task belongs to; runs of two benchmarks score different item sets."""
        return self.spec.benchmark

    @property
    def runs_blanks(self) -> bool:
        """Whether ``queerbench run`` predicts this task's items (a ``blanks`` task)."""
        return self.spec.kind == "blanks"

    def check_method(self, method: str) -> None:
        """A one-line ``ValueError`` unless ``method`` applies to this task."""
        if method not in self.spec.methods:
            raise ValueError(
                f"--method {method} does not apply to --config {self.name} ({self.spec.title}); it runs with "
                f"{', '.join(self.spec.methods)}"
            )

    def scoring_options(self, **settings: Any) -> ScoringOptions:
        """The scoring options of this task's rules with ``settings`` (toxicity scorer, bootstrap, ...); the form of
        text its scorer reads (``text_form``) is the task's ``toxicity_input`` unless the frame is asked for."""
        if "text_form" not in settings:
            frame = settings.get("toxicity_input") == "frame"
            settings["text_form"] = "frame" if frame else self.spec.toxicity_input
        extra = self.spec.extra
        if extra.get("group_order") is not None:  # the task's own groups, in its order (else the shipped ones)
            settings.setdefault("group_order", tuple(extra["group_order"]))
        if extra.get("comparisons") is not None:
            settings.setdefault("comparisons", tuple((str(a), str(b)) for a, b in extra["comparisons"]))
        return ScoringOptions(config=self.name, rules=self.spec.rules, **settings)

    # ------------------------------------------------------------------------------------------ measurement --
    def measurement(self, settings: dict[str, Any]) -> Measurement:
        """This task's config of the ``evaluate`` measurement (``metric_queerbench``), built from the init keywords
        it was loaded with (each task reads those it takes): a fill-in-the-blank task's is its scoring rules on top-k
        words. A task of another kind has none unless its module gives one (a request task is scored per item on the
        request runner)."""
        from queerbench.tasks.measurement import BlanksMeasurement, blanks_options

        if not self.runs_blanks:
            raise ValueError(f"config {self.name!r} has no evaluate measurement: run it with `queerbench run`")
        return BlanksMeasurement(blanks_options(self, settings))

    def measurement_inputs(self) -> tuple[str, ...]:
        """Every input besides ``predictions`` and ``groups`` that this task's measurement can take."""
        from queerbench.tasks.measurement import BLANKS_INPUTS

        return BLANKS_INPUTS if self.runs_blanks else ()

    # ----------------------------------------------------------------------------------------------- items --
    def items(self) -> pd.DataFrame:
        """Every item of the task, in run order, with the dataset columns and ``split``."""
        raise NotImplementedError(f"task {self.name} defines no items")

    def first_templates(self, items: pd.DataFrame, limit: int | None) -> pd.DataFrame:
        """The items of the first ``limit`` templates (all when ``None``), in run order (``--limit``)."""
        if limit is not None:
            keep = sorted(items["template_id"].unique())[:limit]
            items = items[items["template_id"].isin(keep)]
        return items.reset_index(drop=True)

    def n_templates(self) -> int:
        """How many templates the task has (so a ``--limit`` at least that large means all of them)."""
        return int(self.items()["template_id"].nunique())

    # --------------------------------------------------------------------------------------------- dataset --
    def dataset_splits(self) -> dict[str, pd.DataFrame]:
        """The splits of the task's dataset config (the items by their ``split`` column, without it)."""
        items = self.items()
        return {
            str(split): frame.drop(columns=["split"]).reset_index(drop=True)
            for split, frame in items.groupby("split", sort=False)
        }

    def dataset_sources(self) -> list[str]:
        """Pinned sources (``lexicons/sources.json`` names) the dataset card lists when this config is built."""
        return []

    def owned_sources(self) -> list[str]:
        """The pinned sources that are this benchmark's alone (its sentence files, stored evaluations and tables): a
        dataset card lists only those of the configs it holds (:meth:`dataset_sources`)."""
        return []

    def dataset_card_extra(self) -> str:
        """Text the dataset card adds when this config is built (licence terms of its sources, ...)."""
        return ""

    # --------------------------------------------------------------------------------------------- scoring --
    def check_predictions(self, predictions: pd.DataFrame, path: Path) -> None:
        """Refuse, in one line, a predictions table that is not one of this task's runs (before any scoring)."""

    def extra_scores(
        self, predictions: pd.DataFrame, k_reported: int, *, k: int | None = None, **settings: Any
    ) -> dict[str, Any]:
        """Scores the task reports next to the QueerBench score, as ``{key: block}`` entries of ``scores.json``."""
        return {}

    def owns_file(self, path: Path) -> bool:
        """Whether ``path`` is one of this benchmark's own published files (which it scores itself)."""
        return False

    def score_file(self, path: Path, settings: dict[str, Any]) -> dict[str, Any]:
        """Score one of the benchmark's published files (``queerbench score FILE``)."""
        raise ValueError(f"{path}: --config {self.name} does not read published files; pass a run's predictions")

    # ------------------------------------------------------------------------------------------- reporting --
    def report_sections(self, scores: dict[str, Any]) -> list[str]:
        """Markdown sections the run's report adds after its generic part."""
        return []

    def figures(self, scores: dict[str, Any], out: Path, label: str) -> dict[str, str]:
        """Figures the task adds to a run's (written into ``out``): ``{caption: file name}``."""
        return {}

    def compare_sections(self, runs: Sequence[dict[str, Any]], out: Path) -> list[str]:
        """Markdown lines ``compare.md`` adds for this task's runs among ``runs``."""
        return []

    # ----------------------------------------------------------------------------------------------- results --
    @property
    def declares_headline_gap(self) -> bool:
        """Whether the task names the gap its card and leaderboard show (``extra.headline_gap``)."""
        return bool(self.spec.extra.get("headline_gap"))

    @property
    def headline_gap(self) -> tuple[str, str]:
        """The two groups whose score difference the card and the leaderboard show (``extra.headline_gap``); a
        one-line ``ValueError`` when the task declares none (ask :attr:`declares_headline_gap` first)."""
        pair = self.spec.extra.get("headline_gap")
        if not pair:
            raise ValueError(f"task {self.name} declares no headline gap ('extra.headline_gap': [group, group])")
        return str(pair[0]), str(pair[1])

    def leaderboard_metrics(self) -> dict[str, str]:
        """The metrics this task's result rows report (their ``metric``), each with the short id that names it in a
        Hub task id (an eval's ``.eval_results`` entries and the benchmark's ``eval.yaml``): a ``requests`` task's
        rows hold its declared metrics (by title, with their names); a ``blanks`` task's row its first declared
        metric (the QueerBench score; the others are that row's components); a ``probes`` task names its own."""
        if self.runs_requests:
            return {m.title: m.name for m in self.spec.metrics}
        if self.runs_blanks:
            return {self.headline_metric.title: self.headline_metric.name}
        return {}

    @property
    def headline_metric(self) -> MetricSpec:
        """The metric a ``blanks`` or ``requests`` task's headline gap and leaderboard rank by: its first declared
        one (a one-line ``ValueError`` for a task that declares none)."""
        if not self.spec.metrics:
            raise ValueError(f"task {self.name} declares no metrics ('metrics': [{{name, column, title}}, ...])")
        return self.spec.metrics[0]

    @property
    def summary_decimals(self) -> int:
        """The decimals the leaderboard prints this task's own figures at (``extra["summary"]`` of its rows, e.g.
        QueerGen's VADER and Perspective): its paper's precision. Files keep every digit."""
        return 2

    @property
    def in_suite(self) -> bool:
        """Whether ``queerbench eval`` runs this task unless ``--tasks`` names others (``extra.in_suite``, default
        true)."""
        return bool(self.spec.extra.get("in_suite", True))

    @property
    def eval_passes(self) -> tuple[EvalPass, ...]:
        """The passes ``queerbench eval`` makes over this task (its spec's ``eval_passes``: e.g. the published rows'
        methods and k; without them, each of its methods at the eval's ``--top-k``)."""
        if self.spec.eval_passes is not None:
            return self.spec.eval_passes
        return tuple(EvalPass(method=m) for m in self.spec.methods)

    def eval_limit(self, limit: int | None) -> int | None:
        """The task's own ``limit`` for ``queerbench eval --limit N`` (templates for a blanks task; a probes task
        scales it by ``extra.rows_per_limit`` so that a quick pass still covers every group)."""
        scale = int(self.spec.extra.get("rows_per_limit", 1))
        return None if limit is None else limit * scale

    # ---------------------------------------------------------------------------------------- request tasks --
    @property
    def runs_requests(self) -> bool:
        """Whether this task runs on the shared request runner (a ``requests`` task)."""
        return self.spec.kind == "requests"

    def request_type(self, method: str) -> str:
        """The request type (``fill_mask``, ``loglikelihood``, ``generate``) ``method`` turns this task's items
        into (its spec's ``requests``)."""
        self.check_method(method)
        return self.spec.requests[method]

    def requests(self, item: dict[str, Any], method: str) -> list[Request]:
        """The requests one item needs under ``method`` (all of :meth:`request_type`'s type)."""
        raise NotImplementedError(f"task {self.name} makes no requests")

    def score_item(self, item: dict[str, Any], results: Sequence[Result], method: str) -> dict[str, Any]:
        """The per-item prediction columns from the results of :meth:`requests` (e.g. the choice, and the columns
        the declared metrics average). A ``parsed`` column (true when a generated reply was read as an answer) is
        the run's parse rate, which the record, the report and the result rows carry for ``generate`` requests."""
        raise NotImplementedError(f"task {self.name} scores no requests")

    def probe_plan(
        self, model_label: str, *, endpoint: bool = False, quick: bool = False, **settings: Any
    ) -> ProbePlan:
        """A ``probes`` task's run, resolved from ``settings`` (its own flags: decoding, limit, reply rules, …, and
        ``api_key_env``, the variable holding an API key, for endpoints of its own) for
        the model ``model_label`` (a local model's id or path, ``embedded``, or the name an ``endpoint`` serves),
        each value checked (a one-line ``ValueError``) before any model loads; ``quick``: a quick pass
        (``queerbench eval --limit``), which the task may make cheaper. The shared runner
        (:mod:`queerbench.run.probes`) runs it."""
        raise ValueError(f"task {self.name} is run by `queerbench run --config {self.name}`")

    def folder_rows(self, folder: Path) -> list[ResultRow]:
        """The result rows of a folder this task's probe run wrote (none when ``folder`` is not one)."""
        return []

    def folder_table(self, folder: Path) -> pd.DataFrame | None:
        """The per-item table of a folder this task's probe run wrote, for ``queerbench view`` (columns it can
        filter on: ``group``, ``template``, ``label``, ``refusal_kind``, ``harmful``); None when not one."""
        return None

    def reference_sources(self) -> list[str]:
        """The pinned published files the task's reference rows come from (one job each; none by default)."""
        return []

    def reference_rows(self, source: str, *, n_resamples: int, seed: int, scorer: str | None = None) -> list[ResultRow]:
        """The reference rows (:class:`~queerbench.reporting.rows.ResultRow`) one published file gives: the
        published model's scores recomputed from it, with their CIs and gap test. ``scorer`` None: with the toxicity
        values stored in the file (the row's ``toxicity`` is ``perspective``); else the offline scorer of that
        ``--toxicity`` name scores the file's texts by the task's protocol, exactly as ``queerbench score FILE
        --toxicity SCORER`` does, with ``toxicity_kwargs={"held_out_model": <the row's model>}`` (a scorer fitted on
        the published files scores the model with a fit that never saw its outputs); the row's ``toxicity`` is
        ``scorer``."""
        raise ValueError(f"task {self.name} has no published results")

    # ----------------------------------------------------------------------------------------------- Space --
    def subject_names(self) -> list[str]:
        """The subjects a user's own template can be filled with (the Space's playground); none by default."""
        return []

    def render_template(self, template: str, subjects: Sequence[str]) -> list[tuple[str, str, str, str]]:
        """A user template (one ``[SUBJECT]``, one ``[MASK]``) as ``(subject, group, sentence, neutral sentence)``
        per subject, by the task's grammar (for a task with :meth:`subject_names`)."""
        raise ValueError(f"task {self.name} does not fill user templates")

    def space_tab(self) -> tuple[str, Any] | None:
        """``(label, build)`` of a Space tab of the task's own, or None: ``build(run)`` adds its widgets inside the tab,
        ``run`` being the shared probe runner for a ``probes`` task (``run(out, plan, model=…, log=…)``; None for
        another)."""
        return None


class TemplateTask(Task):
    """A template-style benchmark from two CSV files next to its task module, named in its spec's ``extra``:
    ``templates`` (columns ``template`` with one ``[SUBJECT]`` and one ``[MASK]``, and ``type``) and ``subjects``
    (``subject``, ``group``, ``category``). Every template is filled with every subject, template-major; the neutral
    sentence puts ``neutral_subject`` (default "the person") in the subject's place. A new benchmark of this shape is a
    task module of three lines and its data files: ``TASKS = [TemplateTask(s, folder=HERE) for s in load_specs(...)]``.
    """

    SUBJECT = "[SUBJECT]"
    MASK = "[MASK]"

    def __init__(self, spec: TaskSpec, *, folder: str | Path) -> None:
        super().__init__(spec)
        self.folder = Path(folder)

    def _csv(self, key: str, columns: Sequence[str]) -> pd.DataFrame:
        name = self.spec.extra.get(key)
        if not isinstance(name, str):
            raise ValueError(f"task {self.name}: its spec's 'extra' must name the {key} file ('{key}': 'FILE.csv')")
        path = self.folder / name
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError) as exc:
            raise ValueError(f"task {self.name}: cannot read its {key} file {path} ({exc})") from None
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ValueError(f"task {self.name}: {path} lacks the column(s) {missing}")
        return frame

    def items(self) -> pd.DataFrame:
        """Every template filled with every subject (split ``test``), with the dataset columns."""
        templates = self._csv("templates", ("template", "type"))
        subjects = self._csv("subjects", ("subject", "group", "category"))
        neutral_subject = str(self.spec.extra.get("neutral_subject", "the person"))
        rows = []
        for template_id, (template, kind) in enumerate(zip(templates["template"], templates["type"], strict=True)):
            if template.count(self.SUBJECT) != 1 or template.count(self.MASK) != 1:
                raise ValueError(
                    f"task {self.name}: template {template_id + 1} ({template!r}) needs one {self.SUBJECT} and one "
                    f"{self.MASK}"
                )
            for subject, group, category in zip(
                subjects["subject"], subjects["group"], subjects["category"], strict=True
            ):
                rows.append(
                    {
                        "id": f"{self.name}-{template_id:03d}-{subject.replace(' ', '_')}",
                        "template_id": template_id,
                        "template": template,
                        "template_type": kind,
                        "subject": subject,
                        "subject_text": subject,
                        "group": group,
                        "category": category,
                        "masked_sentence": _capital(template.replace(self.SUBJECT, subject)),
                        "neutral_sentence": _capital(template.replace(self.SUBJECT, neutral_subject)),
                        "split": "test",
                    }
                )
        return pd.DataFrame(rows)


def _capital(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]
