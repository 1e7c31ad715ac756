"""The metric Space's widget: paste predictions and groups as JSON, pick a config, see the result.

``evaluate``'s own ``launch_gradio_widget`` uses the ``gr.inputs`` namespace that Gradio 6 removed, so this small app
replaces it. It loads the ``evaluate`` module next to it (``queerbench.py`` on the Hub, ``metric_queerbench.py`` in the
repository) through ``evaluate.load``, exactly as users do.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# In the released Space the module is named queerbench.py, like the library it imports: keep this folder off the
# import path so that `import queerbench` finds the library, not the module file.
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != HERE]

import evaluate  # noqa: E402
import gradio as gr  # noqa: E402

from queerbench.tasks import get_task, task_names  # noqa: E402

CONFIGS = tuple(
    name
    for name in task_names()
    if not get_task(name).runs_requests and not get_task(name).measurement({}).text_predictions
)
"""The configs whose inputs the widget takes: the measurement's configs that score top-k words per sentence."""
TOXICITY = ("precomputed", "none", "embedded")
EXAMPLE = {
    "predictions": [["hero", "nurse"], ["slut", "whore"], ["doctor", "teacher"], ["thief", "liar"]],
    "groups": ["queer", "queer", "non-queer", "non-queer"],
    "toxicity_counts": [[0, 0, 0, 0, 0], [2, 1, 2, 2, 0], [0, 0, 0, 0, 0], [1, 0, 1, 0, 0]],
}


def module_path(folder: Path = HERE) -> Path:
    """The ``evaluate`` module file in ``folder``: ``metric_queerbench.py`` or, in a released Space, ``<name>.py``."""
    candidates = sorted(p for p in folder.glob("*.py") if p.name != "app.py" and not p.name.startswith("_"))
    if not candidates:
        raise FileNotFoundError(f"no evaluate module (*.py besides app.py) in {folder}")
    named = [p for p in candidates if p.stem in ("metric_queerbench", "queerbench")]
    return (named or candidates)[0]


def parse_inputs(text: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The compute() arguments (``keys`` allowed) from the pasted JSON object; a clear ``ValueError`` otherwise."""
    try:
        data = json.loads(text or "")
    except json.JSONDecodeError as exc:
        raise ValueError(f"the input is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc
    if not isinstance(data, dict):
        raise ValueError('paste a JSON object such as {"predictions": [["hero", "nurse"]], "groups": ["queer"]}')
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; allowed: {', '.join(keys)}")
    for key in ("predictions", "groups"):
        if key not in data:
            raise ValueError(f"the JSON needs {key!r}")
    return data


def compute(text: str, config: str = "default", toxicity: str = "precomputed") -> dict[str, Any]:
    """Load the metric with ``config`` and ``toxicity`` and compute it on the pasted inputs."""
    if config not in CONFIGS:
        raise ValueError(f"unknown config {config!r}; choose one of: {', '.join(CONFIGS)}")
    if toxicity not in TOXICITY:
        raise ValueError(f"unknown toxicity scorer {toxicity!r}; choose one of: {', '.join(TOXICITY)}")
    measure = get_task(config).measurement({})  # what the config takes (the library's, as the module reads it)
    data = parse_inputs(text, ("predictions", "groups", *measure.inputs))
    if toxicity == "precomputed" and measure.precomputed and measure.precomputed[0] not in data:
        name, holds = measure.precomputed
        raise ValueError(f"toxicity 'precomputed' needs {name!r} ({holds}); or pick 'none'")
    regard = "precomputed" if "regard_scores" in data else "none"  # the regard model needs the Hub
    settings = {"toxicity": toxicity, "regard": regard, "n_bootstrap": 200, "n_permutations": 200}
    metric = evaluate.load(str(module_path()), config, **settings)  # each config reads the settings it takes
    return metric.compute(**data)


def _ui(text: str, config: str, toxicity: str) -> dict[str, Any]:
    try:
        return compute(text, config, toxicity)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    except Exception as exc:  # a bug: one line for the user, the traceback in the logs
        raise gr.Error(f"something went wrong ({type(exc).__name__}); see the Space logs") from exc


def build_demo() -> gr.Blocks:
    """The widget: a JSON box, config and toxicity choices, and the result as JSON."""
    with gr.Blocks(title="QueerBench metric") as demo:
        gr.Markdown(
            "# QueerBench metric\n\nThe QueerBench score (higher = more harmful) of masked-LM completions per "
            "subject group. Paste the inputs of `compute()` as JSON: `predictions` (top-k words per sentence), "
            "`groups`, and `toxicity_counts` or `sentences` (with `[MASK]`). See the card for the formulas.\n\n"
            "> **Content note.** Inputs and outputs may contain slurs and hate toward LGBTQIA+ people."
        )
        text = gr.Code(json.dumps(EXAMPLE, indent=1), language="json", label="compute() inputs (JSON)")
        with gr.Row():
            config = gr.Radio(list(CONFIGS), value="default", label="Config")
            toxicity = gr.Radio(list(TOXICITY), value="precomputed", label="Toxicity scorer")
        button = gr.Button("Compute", variant="primary")
        result = gr.JSON(label="Result")
        button.click(_ui, inputs=[text, config, toxicity], outputs=[result], api_name="compute")
    return demo


demo = build_demo()

if __name__ == "__main__":
    demo.launch()
