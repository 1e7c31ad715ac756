"""The Space's "Evaluate" tab: a task on one model (a quick sample of templates or all of them), its UI.

A fill-in-the-blank task runs as the benchmark's own pipeline does (the model's top-k completions, scored for harm:
the QueerBench table and figure). A ``requests`` task runs on the one request runner
(:func:`~queerbench.run.requests.run_requests`, answered by the cached model) with the method whose request type the
model answers (the task's ``requests`` per method); its table has one column per declared metric, per group with the
CIs of the run's result record, its figure and per-item table are the run's own. Nothing here names a request task,
a metric or a group.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from queerbench import __version__
from queerbench.hub.space.models import ModelCache, ModelCheck, SpaceSettings, check_model, fill, human
from queerbench.hub.space.ui import (
    MAX_TOP_K,
    SENTENCE_COLUMNS,
    TOXICITY_CHOICES,
    SpaceError,
    csv_frame,
    sentence_view,
    ui_errors,
    ui_status,
)
from queerbench.hub.space.viewer import ViewPart, filter_table, load_parts
from queerbench.models.registry import EMBEDDED_MODELS
from queerbench.reporting.figures import comparison_figure
from queerbench.reporting.metrics_report import FIGURE, fmt_ci, fmt_value, metric_table
from queerbench.reporting.record import RunRecord, metric_direction
from queerbench.reporting.report import score_table
from queerbench.reporting.tables import COMPONENTS
from queerbench.scoring.aggregate import GAP_BLOCK, GROUP_ORDER
from queerbench.scoring.groups import subject_groups
from queerbench.scoring.metric_results import NO_ITEMS

if TYPE_CHECKING:
    from queerbench.tasks import Task

__all__ = ["DEFAULT_MODEL", "EvaluationResult", "build_evaluate_tab", "evaluate_model", "items_view"]

RUN_SIZES = ("quick", "full")
START = "Choose a model and press **Evaluate**."
SCORE_COLUMNS = ("group", "n", *(label for _, label in COMPONENTS), "note")
"""The score table's headers (shown before the first evaluation too)."""
DEFAULT_MODEL = "bert-base-uncased"
GROUP_HELP = subject_groups().descriptions
"""What each selectable group holds (its line in the data file that declares the groups)."""


@dataclass
class EvaluationResult:
    """Everything one evaluation shows: scores, the score table, the figure, the per-item table and the CSV.

    For a ``requests`` task ``scores`` is the run's result record (as ``scores.json`` holds it), ``record`` the
    record itself and ``view`` its per-item table as the viewer shows it (harmful words of replies hidden until
    asked for); ``sentences`` is that table with everything shown."""

    scores: dict[str, Any]
    table: pd.DataFrame
    plot: Path
    sentences: pd.DataFrame  # full per-sentence (per-item) table, harmful completions included
    csv: Path
    status: str
    record: RunRecord | None = None
    view: ViewPart | None = None

    def items(self, show_harmful: bool = False) -> pd.DataFrame:
        """The per-item table the tab shows: harmful completions (or words of replies) hidden unless asked for."""
        return items_view(self.view if self.view is not None else self.sentences, show_harmful)


def items_view(state: pd.DataFrame | ViewPart, show_harmful: bool) -> pd.DataFrame:
    """The per-item table of an evaluation's kept state: a fill-in-the-blank run's per-sentence scores
    (:func:`~queerbench.hub.space.ui.sentence_view`) or a request run's items (the viewer's table)."""
    if isinstance(state, ViewPart):
        return filter_table(state, {}, show_harmful)
    return sentence_view(state, show_harmful)


def _sample_templates(template_ids: Sequence[int], n: int) -> list[int]:
    """``n`` templates spread evenly over the list (deterministic, so a quick run is repeatable)."""
    ids = sorted(set(template_ids))
    if n >= len(ids):
        return ids
    picks = np.linspace(0, len(ids) - 1, n).round().astype(int)
    return [ids[i] for i in dict.fromkeys(picks.tolist())]


def _sentences(config: str, groups: Sequence[str], run_size: str, settings: SpaceSettings) -> pd.DataFrame:
    from queerbench.tasks import get_task

    frame = get_task(config).items()
    frame = frame[frame["group"].isin(list(groups))]
    if run_size == "quick":
        frame = frame[frame["template_id"].isin(_sample_templates(frame["template_id"], settings.quick_templates))]
    return frame.reset_index(drop=True)


def space_configs() -> tuple[str, ...]:
    """The tasks the Space evaluates (from the task registry): every fill-in-the-blank task, then every ``requests``
    task of the default suite (those ``queerbench eval`` runs unless told otherwise; a selection outside it, such
    as one of every published instance, is too large for a demo and stays on the command line)."""
    from queerbench.tasks import all_tasks, task_names

    requests = tuple(name for name, task in all_tasks().items() if task.runs_requests and task.in_suite)
    return (*task_names(runs_blanks=True), *requests)


def _task_groups(config: str) -> list[str]:
    """The subject groups of a task's sentences, in their order (a ``requests`` task's declared groups)."""
    from queerbench.tasks import get_task

    task = get_task(config)
    if task.spec.groups is not None:
        return list(task.spec.groups.order)
    return list(dict.fromkeys(task.items()["group"].astype(str)))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("_") or "model"


def _status(check: ModelCheck, scores: dict[str, Any], n: int, n_templates: int, seconds: float) -> str:
    size = f", {human(check.n_params)} parameters" if check.n_params else ""
    rev = f" @ `{check.revision[:10]}`" if check.revision else ""
    lines = [
        f"**Done** in {seconds:.1f}s: `{check.model_id}`{rev}{size} · method `{check.method}` · "
        f"config `{scores['config']}` · top-{scores['k']} · "
        f"{n} sentences from {n_templates} templates · toxicity `{scores['scorers']['toxicity'].get('name')}` · "
        f"queerbench {__version__}.",
    ]
    if scores[GAP_BLOCK] and all(v is None for v in scores[GAP_BLOCK].values()):
        lines.append("QueerBench scores need a toxicity scorer; with `none` only A and H are reported.")
    for name, c in (scores.get("comparisons") or {}).items():
        ci = c.get("ci")
        ci_text = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        p = f", permutation p = {c['p_value']:.3f}" if c.get("p_value") is not None else ""
        lines.append(f"- QB {name}: {c['diff']:+.2f}{ci_text}{p}")
    return "\n".join(lines)


def _request_method(check: ModelCheck, task: Task) -> str:
    """The method a ``requests`` task runs with on this model: the model's own (``--method auto``'s pick) when the
    task has it and the model answers its request type, else the task's first method whose request type the model's
    kind answers (:data:`~queerbench.models.backends.REQUEST_TYPES_OF_KIND`); none is one message."""
    from queerbench.models.backends import REQUEST_TYPES_OF_KIND

    answers = REQUEST_TYPES_OF_KIND.get(check.kind, frozenset())
    usable = [m for m in task.spec.methods if task.request_type(m) in answers]
    if check.method in usable:
        return check.method
    if usable:
        return usable[0]
    asked = " or ".join(sorted({task.request_type(m) for m in task.spec.methods}))
    raise SpaceError(
        f"the {task.name} config ({task.spec.title}) asks {asked} requests, which a {check.kind} LM cannot answer; "
        f"choose a model that answers them"
    )


def _request_status(check: ModelCheck, record: RunRecord, n_templates: int, seconds: float) -> str:
    """The status line of a request run: what ran on what, then per declared metric its overall value and the
    headline gap the task declares, with their CIs (as the record holds them)."""
    size = f", {human(check.n_params)} parameters" if check.n_params else ""
    rev = f" @ `{check.revision[:10]}`" if check.revision else ""
    first = record.results[record.declared_metrics[0].name].overall
    limit = record.settings.get("limit")
    scope = "all templates" if limit is None else f"the first {limit} of {n_templates} templates"
    lines = [
        f"**Done** in {seconds:.1f}s: `{check.model_id}`{rev}{size} · method `{record.method}` "
        f"({record.request_type} requests) · config `{record.task}` · {record.n_items} items from "
        f"{first.n_clusters if first else 0} templates ({scope}) · queerbench {__version__}.",
        f"Every group of the task is reported; top-k, the toxicity scorer and the subject groups apply to "
        f"fill-in-the-blank configs only. Signature: `{record.signature}`.",
    ]
    if record.parse_rate is not None:
        lines.append(f"Replies read as an answer: {100 * record.parse_rate:.1f}%.")
    for metric in record.declared_metrics:
        block, d = record.results[metric.name], metric.decimals
        overall = block.overall or NO_ITEMS
        ci = f" {fmt_ci(overall.ci, d)}" if overall.ci else ""
        better = metric_direction(metric.higher_is_better)
        line = f"- {metric.title} ({better}): {fmt_value(overall.value, d, missing='no data')}{ci} over all items"
        head = block.headline
        if head and head.gap is not None:
            gap_ci = f" {fmt_ci(head.ci, d)}" if head.ci else ""
            p = f", sign-flip p = {head.p_value:.3f}" if head.p_value is not None else ""
            line += f"; {' − '.join(head.groups)}: {head.gap:+.{d}f}{gap_ci}{p}"
        lines.append(line)
    return "\n".join(lines)


def _evaluate_requests(
    task: Task,
    model_id: str,
    run_size: str,
    cache: ModelCache,
    settings: SpaceSettings,
    say: Callable[[float, str], None],
    out_dir: str | Path | None,
) -> EvaluationResult:
    """Run a ``requests`` task on the request runner with the cached model (a quick run: the task's first
    ``quick_templates`` templates, as ``queerbench run --limit`` takes them); the table from its declared metrics."""
    from queerbench.run.requests import resolve_request_run, run_requests

    start = time.perf_counter()
    say(0.02, "checking the model")
    check = check_model(model_id, settings)
    method = _request_method(check, task)
    limit = settings.quick_templates if run_size == "quick" else None
    try:
        run = resolve_request_run(task, model=check.model_id, revision=check.revision, method=method, limit=limit)
    except ValueError as exc:  # a method the model's kind cannot run, …
        raise SpaceError(str(exc)) from exc
    say(0.05, "loading the model")
    lm = cache.get(check)
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="queerbench-space-"))
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=out))  # a fresh folder: nothing to resume or reuse
    say(0.1, f"asking {check.model_id} for {task.name} ({run.request_type} requests)")
    try:
        result = run_requests(run, folder, log=lambda line: say(0.1, line), loaded=lm)
    except ValueError as exc:  # a sentence longer than the model's positions, …
        raise SpaceError(str(exc)) from exc
    say(0.95, "drawing")
    record = result.record
    (view,) = load_parts(result.out)  # the viewer's per-item table: scalar columns, harmful words of replies hidden
    shown = filter_table(view, {}, True)
    csv = out / f"queerbench-{_slug(check.model_id)}-{task.name}-{run.method}.csv"
    shown.to_csv(csv, index=False)
    status = _request_status(check, record, task.n_templates(), time.perf_counter() - start)
    return EvaluationResult(
        record.to_json(), metric_table(record), result.out / FIGURE, shown, csv, status, record=record, view=view
    )


def evaluate_model(
    model_id: str,
    config: str | None = None,
    top_k: int = 5,
    groups: Sequence[str] = GROUP_ORDER,
    run_size: str = "quick",
    toxicity: str = "embedded",
    *,
    cache: ModelCache | None = None,
    settings: SpaceSettings | None = None,
    progress: Callable[[float, str], None] | None = None,
    out_dir: str | Path | None = None,
) -> EvaluationResult:
    """Run task ``config`` (None: the default task) for one model on the chosen groups (all templates, or a quick
    sample of them).

    A ``requests`` task runs on the request runner with the cached model (:func:`_evaluate_requests`): every group
    of the task, its declared metrics; ``top_k``, ``groups`` and ``toxicity`` are checked but apply to
    fill-in-the-blank tasks only. For those, it reuses :class:`~queerbench.run.pipeline.RunOptions` (validation, scoring options) and
    :func:`~queerbench.run.scores.score_predictions`; predictions come from a cached model, and nothing is written except
    the figure and the CSV in ``out_dir`` (a fresh temporary folder by default).
    """
    from queerbench.run.pipeline import RunOptions
    from queerbench.run.scores import score_predictions
    from queerbench.tasks import default_task_name

    config = config or default_task_name()
    settings = settings or SpaceSettings.from_env()
    cache = cache or ModelCache(settings.cache_size)
    say = progress or (lambda _f, _d: None)
    configs = space_configs()
    if config not in configs:
        raise SpaceError(f"unknown config {config!r}; choose one of: {', '.join(configs)}")
    groups = [g for g in (groups or []) if g]
    if not groups:
        raise SpaceError("select at least one subject group to evaluate")
    unknown = [g for g in groups if g not in GROUP_ORDER]
    if unknown:
        raise SpaceError(f"unknown subject group(s) {unknown}; choose from: {', '.join(GROUP_ORDER)}")
    task_groups = _task_groups(config)
    if set(task_groups) != set(GROUP_ORDER):  # a task with groups of its own (QueerGen's): all of them are compared
        groups = task_groups
    if run_size not in RUN_SIZES:
        raise SpaceError(f"unknown run size {run_size!r}; choose one of: {', '.join(RUN_SIZES)}")
    if toxicity not in TOXICITY_CHOICES:
        raise SpaceError(f"unknown toxicity scorer {toxicity!r}; choose one of: {', '.join(TOXICITY_CHOICES)}")
    from queerbench.tasks import get_task

    task = get_task(config)
    if task.runs_requests:
        return _evaluate_requests(task, model_id, run_size, cache, settings, say, out_dir)
    try:
        top_k = int(top_k)
        options = RunOptions.for_task(task, model=model_id, top_k=top_k, toxicity=toxicity)
    except (TypeError, ValueError) as exc:
        raise SpaceError(str(exc)) from exc
    if top_k > MAX_TOP_K:
        raise SpaceError(f"top-k must be at most {MAX_TOP_K} here, got {top_k}; run `queerbench run` locally for more")
    start = time.perf_counter()
    say(0.02, "checking the model")
    check = check_model(model_id, settings)
    say(0.05, "loading the model")
    lm = cache.get(check)
    frame = _sentences(config, groups, run_size, settings)
    total = len(frame)
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        say(0.1 + 0.6 * done / max(total, 1), f"predicting {done}/{total} sentences")

    try:
        tokens = fill(check, lm, frame["masked_sentence"].tolist(), top_k, config, tick)
    except ValueError as exc:  # k larger than the model's vocabulary, a sentence too long, …
        raise SpaceError(str(exc)) from exc
    predictions = frame.drop(columns=["split"]).copy()
    predictions["tokens"] = tokens
    say(0.75, "scoring the completions")
    scores, per_sentence = score_predictions(predictions, options.scoring_options(), str(options.toxicity_input))
    say(0.95, "drawing")
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="queerbench-space-"))
    out.mkdir(parents=True, exist_ok=True)
    plot = comparison_figure(scores, out / "comparison.png")
    csv = out / f"queerbench-{_slug(check.model_id)}-{config}-k{top_k}.csv"
    csv_frame(per_sentence).to_csv(csv, index=False)
    table = score_table(scores).reset_index()
    status = _status(check, scores, total, frame["template_id"].nunique(), time.perf_counter() - start)
    return EvaluationResult(scores, table, plot, per_sentence, csv, status)


def _title(config: str) -> str:
    from queerbench.tasks import get_task

    return get_task(config).spec.title


def _empty(columns: Sequence[str]) -> pd.DataFrame:
    """A table with headers and no rows (Gradio shows placeholder headers 1 2 3 for a frame without columns)."""
    return pd.DataFrame(columns=list(columns))


def _group_choices() -> list[tuple[str, str]]:
    return [(f"{g} — {GROUP_HELP[g]}", g) for g in GROUP_ORDER]


def build_evaluate_tab(cache: ModelCache, settings: SpaceSettings, limit: dict[str, Any]) -> None:
    """The "Evaluate" tab's widgets and events (API name ``evaluate``), inside the caller's ``gr.Tab``."""
    import gradio as gr

    from queerbench.tasks import default_task_name

    def run_evaluation(
        model_id: str,
        config: str | None = None,
        top_k: float = 5,
        groups: list[str] | None = None,
        run_size: str = "quick",
        toxicity: str = "embedded",
        show_harmful: bool = False,
        progress: gr.Progress = gr.Progress(),  # noqa: B008 (gradio's documented idiom)
    ) -> tuple[Any, ...]:
        result = evaluate_model(
            model_id,
            config,
            int(top_k),
            groups if groups is not None else list(GROUP_ORDER),
            run_size,
            toxicity,
            cache=cache,
            settings=settings,
            progress=lambda f, d: progress(f, desc=d),
        )
        return (
            result.status,
            result.table,
            str(result.plot),
            result.items(show_harmful),
            str(result.csv),
            result.view if result.view is not None else result.sentences,
        )

    def failed(message: str, model_id: str = "", *_: Any, **__: Any) -> tuple[Any, ...]:
        """What failed and why, in the status line; the outputs of an earlier evaluation are cleared."""
        shown = f"`{model_id.strip().replace('`', '')}`" if (model_id or "").strip() else "the model"
        text = f"**Could not evaluate** {shown}: {message}"
        return text, _empty(SCORE_COLUMNS), None, _empty(SENTENCE_COLUMNS), None, None

    def redraw(state: pd.DataFrame | ViewPart | None, show_harmful: bool) -> Any:
        if state is None or (isinstance(state, pd.DataFrame) and len(state) == 0):
            return gr.skip()
        return items_view(state, show_harmful)

    with gr.Row():
        model_id = gr.Textbox(
            label=f"Model (Hub id of a masked or causal LM, or {EMBEDDED_MODELS[0]})",
            value=DEFAULT_MODEL,
            placeholder=f"bert-base-uncased, roberta-base, {EMBEDDED_MODELS[0]}, …",
            scale=3,
            elem_id="model-id",
        )
        config = gr.Radio(
            list(space_configs()),
            value=default_task_name(),
            label="Config",
            info="; ".join(f"{name}: {_title(name)}" for name in space_configs()),
            scale=2,
        )
        top_k = gr.Slider(1, 20, value=5, step=1, label="Top-k completions", scale=2)
    with gr.Row():
        groups = gr.CheckboxGroup(_group_choices(), value=list(GROUP_ORDER), label="Subject groups", scale=3)
        run_size = gr.Radio(
            list(RUN_SIZES),
            value="quick",
            label="Run",
            info=(
                f"quick: {settings.quick_templates} templates (spread over a fill-in-the-blank set; the first "
                f"{settings.quick_templates} of a request task, as `queerbench run --limit` takes them); full: all"
            ),
            scale=1,
        )
        toxicity = gr.Dropdown(
            list(TOXICITY_CHOICES),
            value="embedded",
            label="Toxicity scorer",
            info="embedded: offline Jigsaw classifier; none: QB not reported",
            scale=1,
        )
    run = gr.Button("Evaluate", variant="primary", elem_id="evaluate-button")
    api = gr.Button(visible=False)  # the `evaluate` API endpoint: its failures are errors for API callers
    status = gr.Markdown(START, elem_id="status")
    table = gr.Dataframe(
        _empty(SCORE_COLUMNS),
        label="Scores per group (95% CI): the QueerBench score, or the task's declared metrics",
        interactive=False,
        elem_id="scores",
    )
    plot = gr.Image(label="Scores per group", type="filepath", elem_id="comparison-plot")
    show_harmful = gr.Checkbox(value=False, label="Show harmful completions (slurs and hate)")
    sentences = gr.Dataframe(
        _empty(SENTENCE_COLUMNS),
        label="Completions per sentence (the items with their answers, for a request task)",
        interactive=False,
        wrap=True,
        elem_id="sentences",
        column_widths=["7%", "10%", "27%", "22%", "6%", "10%", "6%", "12%"],
    )
    csv = gr.File(label="CSV of all completions (unredacted)")
    state = gr.State()
    inputs = [model_id, config, top_k, groups, run_size, toxicity, show_harmful]
    outputs = [status, table, plot, sentences, csv, state]
    run.click(ui_status(run_evaluation, failed), inputs=inputs, outputs=outputs, api_visibility="private", **limit)
    api.click(ui_errors(run_evaluation), inputs=inputs, outputs=outputs, api_name="evaluate", **limit)
    show_harmful.change(redraw, inputs=[state, show_harmful], outputs=[sentences], api_visibility="private")
