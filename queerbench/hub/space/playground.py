"""The Space's "Playground" tab: the user's own template, completed for each chosen subject side by side."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pandas as pd

from queerbench.hub.space.evaluate import DEFAULT_MODEL
from queerbench.hub.space.models import ModelCache, SpaceSettings, check_model, fill
from queerbench.hub.space.ui import (
    MASK,
    MAX_TOP_K,
    SUBJECT,
    TOXICITY_CHOICES,
    SpaceError,
    sentence_view,
    ui_errors,
    ui_status,
)
from queerbench.scoring.aggregate import score_sentences

__all__ = ["build_playground_tab", "playground", "render_template", "subject_choices"]

DEFAULT_PLAYGROUND_TEMPLATE = "[SUBJECT] dreams of being a [MASK]."
DEFAULT_PLAYGROUND_SUBJECTS = ("gay", "lesbian", "transgender", "straight", "he", "she", "they", "xe")
PLAYGROUND_START = "Write a template, pick subjects and press **Complete**."
PLAYGROUND_COLUMNS = ("subject", "group", "sentence", "harmful", "HurtLex", "AFINN", "toxicity flags")
"""The headers of the table before anything is completed (the ``#1 … #k`` columns come with a result)."""


@functools.cache
def _task() -> Any:
    """The task whose grammar fills a user's template: the first that names subjects for it (QueerBench's
    ``default``)."""
    from queerbench.tasks import all_tasks

    return next(t for t in all_tasks().values() if t.subject_names())


@functools.cache
def _subject_index() -> dict[str, int]:
    """Every subject a user can pick, in the task's order (nouns, then pronouns)."""
    return {name: i for i, name in enumerate(_task().subject_names())}


def subject_choices() -> list[str]:
    """The subject names a playground user can pick."""
    return list(_subject_index())


def render_template(template: str, subjects: Sequence[str]) -> list[tuple[str, str, str, str]]:
    """(subject, group, sentence, neutral sentence) for a user template with ``[SUBJECT]`` and ``[MASK]``, by the
    task's grammar."""
    template = " ".join((template or "").split())
    if template.count(MASK) != 1:
        raise SpaceError(
            f"the template needs exactly one {MASK} (where the model predicts a word); it has {template.count(MASK)}"
        )
    if template.count(SUBJECT) != 1:
        raise SpaceError(
            f"the template needs exactly one {SUBJECT} (where each subject goes); it has {template.count(SUBJECT)}"
        )
    if "<target>" in template:
        raise SpaceError(f"write {SUBJECT} for the subject, not <target>")
    subjects = [s for s in (subjects or []) if s]
    if not subjects:
        raise SpaceError("select at least one subject")
    index = _subject_index()
    unknown = [s for s in subjects if s not in index]
    if unknown:
        raise SpaceError(f"unknown subject(s) {unknown}")
    return _task().render_template(template, subjects)


def playground(
    template: str,
    subjects: Sequence[str],
    model_id: str = DEFAULT_MODEL,
    top_k: int = 5,
    toxicity: str = "none",
    show_harmful: bool = False,
    *,
    cache: ModelCache | None = None,
    settings: SpaceSettings | None = None,
) -> pd.DataFrame:
    """Completions of the user's template for each chosen subject, side by side, harmful ones marked (and hidden)."""
    settings = settings or SpaceSettings.from_env()
    cache = cache or ModelCache(settings.cache_size)
    rendered = render_template(template, subjects)
    if toxicity not in TOXICITY_CHOICES:
        raise SpaceError(f"unknown toxicity scorer {toxicity!r}; choose one of: {', '.join(TOXICITY_CHOICES)}")
    try:
        top_k = int(top_k)
    except (TypeError, ValueError) as exc:
        raise SpaceError(f"top-k must be a whole number, got {top_k!r}") from exc
    if not 1 <= top_k <= MAX_TOP_K:
        raise SpaceError(f"top-k must be between 1 and {MAX_TOP_K}, got {top_k}")
    check = check_model(model_id, settings)
    lm = cache.get(check)
    sentences = [r[2] for r in rendered]
    task = _task()
    try:
        tokens = fill(check, lm, sentences, top_k, task.name)
    except ValueError as exc:
        raise SpaceError(str(exc)) from exc
    per_sentence, _ = score_sentences(
        tokens, task.scoring_options(toxicity=toxicity), sentences=[r[3] for r in rendered]
    )
    per_sentence["group"] = [r[1] for r in rendered]
    per_sentence["subject"] = [r[0] for r in rendered]
    per_sentence["masked_sentence"] = sentences
    view = sentence_view(per_sentence, show_harmful)
    words = view["completions"].str.split(", ")
    for j in range(top_k):
        view[f"#{j + 1}"] = [w[j] if j < len(w) else "" for w in words]
    return view[
        [
            "subject",
            "group",
            "sentence",
            *[f"#{j + 1}" for j in range(top_k)],
            "harmful",
            "HurtLex",
            "AFINN",
            "toxicity flags",
        ]
    ]


def build_playground_tab(cache: ModelCache, settings: SpaceSettings, limit: dict[str, Any]) -> None:
    """The "Playground" tab's widgets and events (API name ``playground``), inside the caller's ``gr.Tab``."""
    import gradio as gr

    def run_playground(
        template: str, subjects: list[str], model_id: str, top_k: float, toxicity: str, show_harmful: bool
    ) -> pd.DataFrame:
        return playground(
            template, subjects, model_id, int(top_k), toxicity, show_harmful, cache=cache, settings=settings
        )

    def complete_in_ui(*args: Any) -> tuple[Any, str]:
        frame = run_playground(*args)
        return frame, f"**Done**: {len(frame)} subject(s) completed with `{str(args[2]).strip()}`."

    def failed(message: str, template: str = "", subjects: Any = None, model_id: str = "", *_: Any) -> tuple:
        """What failed and why, in the status line; an earlier table is cleared."""
        shown = f"`{model_id.strip().replace('`', '')}`" if (model_id or "").strip() else "the model"
        return pd.DataFrame(columns=list(PLAYGROUND_COLUMNS)), f"**Could not complete** with {shown}: {message}"

    gr.Markdown(
        f"Write a sentence with {SUBJECT} where the subject goes and {MASK} where the model predicts a word. "
        'Subjects are inserted with the benchmark\'s grammar rules ("the gay person", "they are"); you may '
        "write `<be>`, `<have>` or `<were>` for verbs that agree with the subject."
    )
    with gr.Row():
        p_template = gr.Textbox(
            value=DEFAULT_PLAYGROUND_TEMPLATE, label="Template", scale=3, elem_id="playground-template"
        )
        p_model = gr.Textbox(value=DEFAULT_MODEL, label="Model", scale=2)
        p_k = gr.Slider(1, 10, value=5, step=1, label="Top-k", scale=1)
    p_subjects = gr.CheckboxGroup(
        subject_choices(),
        value=[s for s in DEFAULT_PLAYGROUND_SUBJECTS if s in _subject_index()],
        label="Subjects",
    )
    with gr.Row():
        p_toxicity = gr.Dropdown(list(TOXICITY_CHOICES), value="none", label="Toxicity scorer")
        p_show = gr.Checkbox(value=False, label="Show harmful completions")
    p_run = gr.Button("Complete", variant="primary", elem_id="playground-button")
    p_api = gr.Button(visible=False)  # the `playground` API endpoint: its failures are errors for API callers
    p_status = gr.Markdown(PLAYGROUND_START, elem_id="playground-status")
    p_out = gr.Dataframe(
        pd.DataFrame(columns=list(PLAYGROUND_COLUMNS)), label="Completions side by side", interactive=False, wrap=True
    )
    inputs = [p_template, p_subjects, p_model, p_k, p_toxicity, p_show]
    p_run.click(
        ui_status(complete_in_ui, failed), inputs=inputs, outputs=[p_out, p_status], api_visibility="private", **limit
    )
    p_api.click(ui_errors(run_playground), inputs=inputs, outputs=[p_out], api_name="playground", **limit)
