"""The Space's Blocks: the header, the "Evaluate" and "Playground" tabs, the tabs of the tasks (the SCM probes') and
the Leaderboard."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from queerbench import __version__
from queerbench.hub.space.evaluate import build_evaluate_tab
from queerbench.hub.space.leaderboard import build_leaderboard_tab
from queerbench.hub.space.models import ModelCache, SpaceSettings
from queerbench.hub.space.playground import build_playground_tab
from queerbench.reporting.report import CONTENT_NOTE
from queerbench.run.probes import run_probes

if TYPE_CHECKING:
    import gradio as gr

__all__ = ["build_demo", "launch_kwargs"]


def _header() -> str:
    return (
        f"# QueerBench\n\nHow harmful are a language model's completions about LGBTQIA+ people? Masked LMs fill the "
        f"blank directly (method `mlm`); causal LMs rank candidate words by the probability of the whole sentence "
        f"(method `scored`). "
        f"Pick a model, run the benchmark and compare the QueerBench score (higher = more harmful) of queer "
        f"and non-queer subjects and of binary, neutral and neo-pronouns. queerbench {__version__}.\n\n"
        f"{CONTENT_NOTE}\nCompletions flagged as harmful (a HurtLex category or a toxicity flag) are hidden until you "
        f"tick **Show harmful completions**."
    )


def build_demo(settings: SpaceSettings | None = None) -> gr.Blocks:
    """The Space: an "Evaluate" tab (API name ``evaluate``), a "Playground" tab and the tabs the tasks bring (the SCM
    probes' "Generative LMs", when its optional parts are installed)."""
    import gradio as gr

    from queerbench.tasks import all_tasks

    settings = settings or SpaceSettings.from_env()
    cache = ModelCache(settings.cache_size)
    limit = {"concurrency_limit": settings.concurrency, "concurrency_id": "model"}

    with gr.Blocks(title="QueerBench") as demo:
        gr.Markdown(_header())
        with gr.Tab("Evaluate a model"):
            build_evaluate_tab(cache, settings, limit)
        with gr.Tab("Playground"):
            build_playground_tab(cache, settings, limit)
        for task in all_tasks().values():
            tab = task.space_tab()
            if tab is not None:
                label, build = tab
                with gr.Tab(label):
                    build(partial(run_probes, task) if task.spec.outputs is not None else None)
        with gr.Tab("Leaderboard"):
            build_leaderboard_tab(settings.results_repo)
    demo.queue(max_size=32)
    return demo


def launch_kwargs() -> dict[str, Any]:
    """Arguments for ``demo.launch`` on a Space (Gradio 6 takes the theme at launch time)."""
    return {"show_error": False}
