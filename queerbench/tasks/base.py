"""What a task is: one benchmark declared as data (its entry in a task data file) plus a few hooks.

In the spirit of lm-evaluation-harness's task configs, everything the harness needs to know about a benchmark is
either a field of its :class:`TaskSpec` — read from a versioned JSON file with a schema check — or a method of its
:class:`Task` that the benchmark's task module overrides:

- data: the name (also the ``--config`` value), the benchmark it belongs to, a one-line title, its kind (``blanks``:
  fill-in-the-blank sentences that ``queerbench run`` predicts; ``probes``: prompts with a pipeline of their own), the
  methods that apply, the masked-LM mode, what the toxicity scorer reads, the scoring rules, the dataset config and
  the lm-evaluation-harness task name;
- hooks: the items (:meth:`Task.items`), the first ``--limit`` templates of them, the dataset splits and card text,
  extra scores next to the QueerBench score, report sections, figures and comparison sections, the upstream
  files the benchmark's own results come in, and the reference rows its published files give the leaderboard.

Generic code (the run, scoring, reporting, comparison, the Space, the dataset builder, the lm-eval bridge) asks a
task for these and never compares a task's name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from queerbench.scoring.aggregate import ScoringOptions
from queerbench.scoring.rules import ScoringRules

if TYPE_CHECKING:
    from collections.abc import Sequence

    from queerbench.reporting.rows import ResultRow

__all__ = ["KINDS", "MLM_MODES", "TOXICITY_INPUTS", "EvalPass", "Task", "TaskSpec", "TemplateTask", "load_specs"]

KINDS = ("blanks", "probes")
"""``blanks``: sentences with one ``[MASK]`` that a method fills (``queerbench run``); ``probes``: prompts that a task
runs through a pipeline of its own (the SCM probes)."""
MLM_MODES = ("whole_word", "raw")
"""How a masked LM's top-k is read: whole words only (``whole_word``) or the raw top-k tokens (``raw``, as the papers'
code read them)."""
TOXICITY_INPUTS = ("neutral", "full", "frame")
"""What the toxicity scorer reads: the subject-blind neutral sentence, the full sentence, or 'The person is <word>.'"""
_METHODS = ("mlm", "scored", "instructed")


@dataclass(frozen=True)
class EvalPass:
    """One pass ``queerbench eval`` makes over a task for a model that supports its method (an entry of the task's
    ``eval_passes``): the method, its ``k`` (None: the eval's ``--top-k``), the prompt of an ``instructed`` pass
    (None: the default prompt) and a note saying why it is run (the published rows whose settings it matches)."""

    method: str
    k: int | None = None
    prompt: str | None = None
    note: str = ""


@dataclass(frozen=True)
class TaskSpec:
    """The data part of a task (one entry of a task data file)."""

    name: str
    benchmark: str
    title: str
    kind: str
    methods: tuple[str, ...]
    dataset_config: str
    dataset_description: str
    mlm_mode: str | None = None
    toxicity_input: str | None = None
    rules: ScoringRules = field(default_factory=ScoringRules)
    lmeval_task: str | None = None
    build_by_default: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    """Task-specific settings its hooks read (the generic code does not)."""
    eval_passes: tuple[EvalPass, ...] | None = None
    """The passes ``queerbench eval`` makes over the task (None: each of its methods at the eval's ``--top-k``)."""


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "benchmark": str,
    "title": str,
    "kind": str,
    "methods": list,
    "dataset": dict,
}


def _spec(raw: Any, where: str) -> TaskSpec:
    """One task entry, checked: a one-line ``ValueError`` naming the file, the task and the field."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: each entry of 'tasks' must be an object")
    label = f"{where} (task {raw.get('name')!r})"
    for key, kind in _REQUIRED.items():
        if not isinstance(raw.get(key), kind):
            raise ValueError(f"{label}: {key!r} is required and must be a {getattr(kind, '__name__', kind)}")
    if raw["kind"] not in KINDS:
        raise ValueError(f"{label}: 'kind' must be one of {', '.join(KINDS)}")
    unknown = [m for m in raw["methods"] if m not in _METHODS]
    if unknown or not raw["methods"]:
        raise ValueError(f"{label}: 'methods' must name some of {', '.join(_METHODS)}, got {raw['methods']}")
    blanks = raw["kind"] == "blanks"
    if blanks and raw.get("mlm_mode") not in MLM_MODES:
        raise ValueError(f"{label}: a blanks task needs 'mlm_mode', one of {', '.join(MLM_MODES)}")
    if blanks and raw.get("toxicity_input") not in TOXICITY_INPUTS:
        raise ValueError(f"{label}: a blanks task needs 'toxicity_input', one of {', '.join(TOXICITY_INPUTS)}")
    dataset = raw["dataset"]
    if not isinstance(dataset.get("config"), str) or not isinstance(dataset.get("description"), str):
        raise ValueError(f"{label}: 'dataset' needs a 'config' name and a 'description'")
    lmeval = raw.get("lmeval")
    if lmeval is not None and not isinstance((lmeval or {}).get("task"), str):
        raise ValueError(f"{label}: 'lmeval' must be null or an object with the task name under 'task'")
    extra = raw.get("extra") or {}
    if not isinstance(extra, dict):
        raise ValueError(f"{label}: 'extra' must be an object")
    if "in_suite" in extra and not isinstance(extra["in_suite"], bool):
        raise ValueError(f"{label}: 'extra.in_suite' must be true or false")
    gap = extra.get("headline_gap")
    if gap is not None and not (isinstance(gap, list) and len(gap) == 2 and all(isinstance(g, str) for g in gap)):
        raise ValueError(f"{label}: 'extra.headline_gap' must be a list of two group names")
    passes = _eval_passes(raw.get("eval_passes"), label, raw["methods"])
    known = {*_REQUIRED, "mlm_mode", "toxicity_input", "scoring", "lmeval", "extra", "eval_passes"}
    stray = sorted(set(raw) - known)
    if stray:
        raise ValueError(f"{label}: unknown field(s) {stray}")
    return TaskSpec(
        name=raw["name"],
        benchmark=raw["benchmark"],
        title=raw["title"],
        kind=raw["kind"],
        methods=tuple(raw["methods"]),
        dataset_config=dataset["config"],
        dataset_description=dataset["description"],
        mlm_mode=raw.get("mlm_mode"),
        toxicity_input=raw.get("toxicity_input"),
        rules=ScoringRules.from_dict(raw.get("scoring", "default"), label),
        lmeval_task=(lmeval or {}).get("task"),
        build_by_default=bool(dataset.get("build_by_default", True)),
        extra=dict(raw.get("extra") or {}),
        eval_passes=passes,
    )


_PASS_FIELDS = {"method", "k", "prompt", "note"}


def _eval_passes(raw: Any, label: str, methods: list[str]) -> tuple[EvalPass, ...] | None:
    """A task's ``eval_passes``, checked: absent or null (None: each method at the eval's ``--top-k``), else a
    non-empty list of ``{"method": one of the task's methods, "k": a positive integer (absent: --top-k), "prompt": a
    prompt id (instructed only), "note": why}``, no two alike; anything else is one line naming the field."""
    if raw is None:
        return None
    fix = 'e.g. [{"method": "mlm", "k": 1}, {"method": "instructed", "k": 1, "prompt": "queergen-2"}]'
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{label}: 'eval_passes' must be a non-empty list of passes ({fix}) or absent")
    passes = []
    for i, entry in enumerate(raw):
        where = f"{label}: eval_passes[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object ({fix})")
        stray = sorted(set(entry) - _PASS_FIELDS)
        if stray:
            raise ValueError(f"{where}: unknown field(s) {stray}; a pass has {', '.join(sorted(_PASS_FIELDS))}")
        method, k, prompt, note = entry.get("method"), entry.get("k"), entry.get("prompt"), entry.get("note", "")
        if method not in methods:
            raise ValueError(
                f"{where}: 'method' must be one of the task's methods ({', '.join(methods)}), got {method!r}"
            )
        if k is not None and not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
            raise ValueError(f"{where}: 'k' must be a positive integer (or absent: the eval's --top-k), got {k!r}")
        if prompt is not None and (method != "instructed" or not isinstance(prompt, str) or not prompt):
            raise ValueError(
                f"{where}: 'prompt' names the prompt id of an instructed pass, got {prompt!r} for {method}"
            )
        if not isinstance(note, str):
            raise ValueError(f"{where}: 'note' must be a string, got {note!r}")
        passes.append(EvalPass(method=method, k=k, prompt=prompt, note=note))
    seen = [(p.method, p.k, p.prompt) for p in passes]
    if len(set(seen)) != len(seen):
        raise ValueError(f"{label}: 'eval_passes' names one pass twice (same method, k and prompt)")
    return tuple(passes)


def load_specs(path: str | Path) -> dict[str, TaskSpec]:
    """The task specs of a data file ``{"schema_version": 1, "tasks": [...]}``, by name, checked."""
    path = Path(path)
    where = f"task file {path.name}"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where} cannot be read ({exc})") from None
    if not isinstance(raw, dict) or raw.get("schema_version") != 1 or not isinstance(raw.get("tasks"), list):
        raise ValueError(f"{where}: expected an object with schema_version 1 and a list 'tasks'")
    specs = [_spec(entry, where) for entry in raw["tasks"]]
    return {s.name: s for s in specs}


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
        return ScoringOptions(config=self.name, rules=self.spec.rules, **settings)

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
    def headline_gap(self) -> tuple[str, str]:
        """The two groups whose score difference the card and the leaderboard show (``extra.headline_gap``, else
        queer − non-queer)."""
        pair = self.spec.extra.get("headline_gap") or ("queer", "non-queer")
        return str(pair[0]), str(pair[1])

    def leaderboard_metrics(self) -> dict[str, str]:
        """The metrics this task's result rows report (their ``metric``), each with the short id that names it in a
        Hub task id (an eval's ``.eval_results`` entries and the benchmark's ``eval.yaml``): a ``blanks`` task's rows
        hold the QueerBench score; a ``probes`` task names its own."""
        return {"QueerBench score": "score"} if self.runs_blanks else {}

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

    def run(self, out: Path, *, quick: bool = False, **settings: Any) -> dict[str, Any]:
        """Run a ``probes`` task into ``out`` with ``settings`` (model, endpoint, limit, log, …): its own pipeline;
        ``quick``: a quick pass (``eval --limit``), which the task may make cheaper."""
        raise ValueError(f"task {self.name} is run by `queerbench run --config {self.name}`")

    def folder_rows(self, folder: Path) -> list[ResultRow]:
        """The result rows of a folder this task's own pipeline wrote (none when ``folder`` is not one)."""
        return []

    def folder_table(self, folder: Path) -> pd.DataFrame | None:
        """The per-item table of a folder this task's own pipeline wrote, for ``queerbench view`` (columns it can
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
        """``(label, build)`` of a Space tab of the task's own (``build()`` adds its widgets inside the tab), or None."""
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
