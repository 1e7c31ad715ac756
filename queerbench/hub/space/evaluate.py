"""The Space's "Evaluate" tab: the benchmark on one model (a quick sample of templates or all of them), its UI."""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from queerbench.models.registry import EMBEDDED_MODELS
from queerbench.reporting.figures import comparison_figure
from queerbench.reporting.report import score_table
from queerbench.reporting.tables import COMPONENTS
from queerbench.scoring.aggregate import GROUP_ORDER
from queerbench.scoring.groups import subject_groups

__all__ = ["DEFAULT_MODEL", "EvaluationResult", "build_evaluate_tab", "evaluate_model"]

RUN_SIZES = ("quick", "full")
START = "Choose a model and press **Evaluate**."
SCORE_COLUMNS = ("group", "n", *(label for _, label in COMPONENTS), "note")
"""The score table's headers (shown before the first evaluation too)."""
DEFAULT_MODEL = "bert-base-uncased"
GROUP_HELP = subject_groups().descriptions
"""What each selectable group holds (its line in the data file that declares the groups)."""


@dataclass
class EvaluationResult:
    """Everything one evaluation shows: scores, the score table, the figure, the per-sentence table and the CSV."""

    scores: dict[str, Any]
    table: pd.DataFrame
    plot: Path
    sentences: pd.DataFrame  # full per-sentence table, harmful completions included
    csv: Path
    status: str


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
    """The tasks the Space evaluates: every fill-in-the-blank task (from the task registry)."""
    from queerbench.tasks import task_names

    return task_names(runs_blanks=True)


def _task_groups(config: str) -> list[str]:
    """The subject groups of a task's sentences, in their order."""
    from queerbench.tasks import get_task

    return list(dict.fromkeys(get_task(config).items()["group"].astype(str)))


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
    if scores["queerbench"] and all(v is None for v in scores["queerbench"].values()):
        lines.append("QueerBench scores need a toxicity scorer; with `none` only A and H are reported.")
    for name, c in (scores.get("comparisons") or {}).items():
        ci = c.get("ci")
        ci_text = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        p = f", permutation p = {c['p_value']:.3f}" if c.get("p_value") is not None else ""
        lines.append(f"- QB {name}: {c['diff']:+.2f}{ci_text}{p}")
    return "\n".join(lines)


def evaluate_model(
    model_id: str,
    config: str = "default",
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
    """Run the benchmark for one model on the chosen groups (all templates, or a quick sample of them).

    Reuses :class:`~queerbench.run.pipeline.RunOptions` (validation, scoring options) and
    :func:`~queerbench.run.scores.score_predictions`; predictions come from a cached model, and nothing is written except
    the figure and the CSV in ``out_dir`` (a fresh temporary folder by default).
    """
    from queerbench.run.pipeline import RunOptions
    from queerbench.run.scores import score_predictions

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
    try:
        top_k = int(top_k)
        options = RunOptions(model=model_id, config=config, top_k=top_k, toxicity=toxicity)
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

    def run_evaluation(
        model_id: str,
        config: str = "default",
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
            sentence_view(result.sentences, show_harmful),
            str(result.csv),
            result.sentences,
        )

    def failed(message: str, model_id: str = "", *_: Any, **__: Any) -> tuple[Any, ...]:
        """What failed and why, in the status line; the outputs of an earlier evaluation are cleared."""
        shown = f"`{model_id.strip().replace('`', '')}`" if (model_id or "").strip() else "the model"
        text = f"**Could not evaluate** {shown}: {message}"
        return text, _empty(SCORE_COLUMNS), None, _empty(SENTENCE_COLUMNS), None, None

    def redraw(per_sentence: pd.DataFrame | None, show_harmful: bool) -> Any:
        if per_sentence is None or len(per_sentence) == 0:
            return gr.skip()
        return sentence_view(per_sentence, show_harmful)

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
            value="default",
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
            info=f"quick: {settings.quick_templates} templates spread over the set; full: all of them",
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
        _empty(SCORE_COLUMNS), label="QueerBench score per group (95% CI)", interactive=False, elem_id="scores"
    )
    plot = gr.Image(label="Queer vs non-queer and pronouns", type="filepath", elem_id="comparison-plot")
    show_harmful = gr.Checkbox(value=False, label="Show harmful completions (slurs and hate)")
    sentences = gr.Dataframe(
        _empty(SENTENCE_COLUMNS),
        label="Completions per sentence",
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
