"""The Space's Blocks: the header, the "Evaluate" and "Playground" tabs and, when installed, the SCM tab."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queerbench import __version__
from queerbench.hub.space.evaluate import build_evaluate_tab
from queerbench.hub.space.models import ModelCache, SpaceSettings
from queerbench.hub.space.playground import build_playground_tab
from queerbench.hub.space.ui import log
from queerbench.reporting.report import CONTENT_NOTE

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


def _scm_tab() -> Callable[[], Any] | None:
    """``queerbench.tasks.scm.space.build_scm_tab`` when that optional part is installed, else ``None``."""
    try:
        from queerbench.tasks.scm.space import build_scm_tab
    except ImportError as exc:
        log.info("no Generative LMs tab: %s", exc)
        return None
    return build_scm_tab


def build_demo(settings: SpaceSettings | None = None) -> gr.Blocks:
    """The Space: an "Evaluate" tab (API name ``evaluate``), a "Playground" tab and, if available, "Generative LMs"."""
    import gradio as gr

    settings = settings or SpaceSettings.from_env()
    cache = ModelCache(settings.cache_size)
    limit = {"concurrency_limit": settings.concurrency, "concurrency_id": "model"}

    with gr.Blocks(title="QueerBench") as demo:
        gr.Markdown(_header())
        with gr.Tab("Evaluate a masked LM"):
            build_evaluate_tab(cache, settings, limit)
        with gr.Tab("Playground"):
            build_playground_tab(cache, settings, limit)
        build_scm_tab = _scm_tab()
        if build_scm_tab is not None:
            with gr.Tab("Generative LMs"):
                build_scm_tab()
    demo.queue(max_size=32)
    return demo


def launch_kwargs() -> dict[str, Any]:
    """Arguments for ``demo.launch`` on a Space (Gradio 6 takes the theme at launch time)."""
    return {"show_error": False}
