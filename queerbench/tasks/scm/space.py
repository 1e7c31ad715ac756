"""The "Generative LMs" tab of the Gradio Space: run the SCM probes on a small local model."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

__all__ = ["build_scm_tab", "run_for_space"]

COLUMNS = ("group", "Warmth", "Competence")
"""The rating table's headers (shown before a run and after a failed one too)."""


def _mean(value: Any) -> float | None:
    """A mean rating rounded for display (None when there is none)."""
    return None if value is None else round(float(value), 2)


def run_for_space(
    run: Callable[..., dict[str, Any]], model_id: str, samples: float, limit: float
) -> tuple[str, list[str], Any]:
    """Run the probes with ``run`` (the shared probe runner for this task: ``run(out, plan, model=…, log=…)``) on
    ``model_id`` (embedded SmolLM2 when empty) and return (report, figure paths, table)."""
    import pandas as pd

    from queerbench.tasks.scm.plan import scm_plan

    out = Path(tempfile.mkdtemp(prefix="scm-space-"))
    try:
        n = max(1, int(samples))
        # the paper's decoding for the model family; short replies so the demo answers in minutes on a CPU
        plan = scm_plan(
            model_id.strip() or "embedded",
            survey_samples=n,
            story_samples=n,
            max_new_tokens=120,
            story_max_new_tokens=200,
            limit=max(1, int(limit)),
        )
        res = run(out, plan, model=model_id.strip() or None, log=lambda m: None)
    except (ValueError, OSError, RuntimeError) as exc:
        return f"**Error:** {exc}", [], pd.DataFrame(columns=list(COLUMNS))
    table = pd.DataFrame(
        [
            {"group": g, "Warmth": _mean(v["Warmth"]["mean"]), "Competence": _mean(v["Competence"]["mean"])}
            for g, v in res.get("rating_constrained", res["rating_free"]).items()  # paper figure order
        ],
        columns=list(COLUMNS),
    )
    return (out / "report.md").read_text(encoding="utf-8"), sorted(str(p) for p in out.glob("*.png")), table


def build_scm_tab(run: Callable[..., dict[str, Any]]) -> None:
    """Add the "Generative LMs" tab's components, whose button runs the probes with ``run`` (the shared probe
    runner for this task); call inside an enclosing ``gr.Blocks()`` context."""
    import gradio as gr
    import pandas as pd

    with gr.Tab("Generative LMs"):
        gr.Markdown(
            "Stereotype Content Model probes (Ostrow & Lopez): survey and story prompts for seven sexual "
            "and gender minority groups, mapped onto Warmth and Competence. Leave the model empty for the "
            "embedded SmolLM2-135M-Instruct (runs on CPU)."
        )
        with gr.Row():
            model = gr.Textbox(label="Model id or path", placeholder="empty = embedded SmolLM2-135M-Instruct")
            samples = gr.Number(label="Samples per prompt", value=1, precision=0, minimum=1, maximum=10)
            limit = gr.Number(label="Prompts per split", value=20, precision=0, minimum=1, maximum=329)
        button = gr.Button("Run SCM probes", variant="primary")
        table = gr.Dataframe(pd.DataFrame(columns=list(COLUMNS)), label="Mean rating per group")
        gallery = gr.Gallery(label="Figures")
        report = gr.Markdown()
        button.click(partial(run_for_space, run), inputs=[model, samples, limit], outputs=[report, gallery, table])
