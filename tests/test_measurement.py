"""The ``evaluate`` measurement asks each config's task how to measure (queerbench.tasks.measurement): the module
takes the inputs the tasks declare, reads predictions in the form the task gives, and scores through the task, so
that it compares no config name."""

from __future__ import annotations

import ast
from pathlib import Path

import evaluate
import pytest

from queerbench.tasks import get_task, task_names
from queerbench.tasks.measurement import BLANKS_INPUTS, BlanksMeasurement

METRIC = Path(__file__).resolve().parents[1] / "metric_queerbench"
CONFIGS = [name for name in task_names() if not get_task(name).runs_requests]


def test_each_config_measures_as_its_task_says() -> None:
    forms = {name: get_task(name).measurement({}).text_predictions for name in CONFIGS}
    assert forms == {"default": False, "paper": False, "queergen": False, "scm": True}
    for name in CONFIGS:
        measure = get_task(name).measurement({})
        assert set(measure.inputs) <= set(get_task(name).measurement_inputs())
    blanks = get_task("paper").measurement({"toxicity": "none", "seed": 4, "axis_mapping": False})
    assert isinstance(blanks, BlanksMeasurement) and blanks.inputs == BLANKS_INPUTS
    assert (blanks.options.config, blanks.options.toxicity, blanks.options.seed) == ("paper", "none", 4)


def test_queergen_added_to_a_blanks_config_takes_its_inputs_and_reports_under_its_key() -> None:
    measure = get_task("default").measurement({"toxicity": "none", "queergen": True, "regard": "none"})
    assert measure.inputs == (*BLANKS_INPUTS, *get_task("queergen").measurement_inputs())
    predictions = [["kind", "smart"], ["happy", "bad"], ["evil", "sad"], ["nice", "good"]]
    result = measure.compute(predictions, ["queer", "non-queer", "queer", "non-queer"], {})
    assert result["config"] == "default" and set(result["queergen"]["vader"]) == {"queer", "non-queer"}
    assert result["queergen"]["config"] == "default"  # QueerGen's scorers, recorded as the config they were added to


def test_the_module_takes_every_input_a_config_declares_and_refuses_another_configs() -> None:
    scm = evaluate.load(str(METRIC), "scm", axis_mapping=False)
    assert scm.info.features["predictions"].dtype == "string"  # one response per prediction
    with pytest.raises(ValueError, match=r"^unexpected input\(s\) \['sentences'\] for config 'scm'$"):
        scm.compute(predictions=["Rating: 4"], groups=["women"], prompt_types=["rating"], sentences=["a [MASK]"])
    qg = evaluate.load(str(METRIC), "queergen", toxicity="none", regard="none")
    with pytest.raises(ValueError, match=r"^unexpected input\(s\) \['prompt_types'\] for config 'queergen'$"):
        qg.compute(predictions=[["kind"]], groups=["queer"], prompt_types=["rating"])


def test_the_module_and_its_widget_compare_no_config_name() -> None:
    """No comparison in the module's or the widget's code, and no constant it defines, is a config's name (``default``
    aside: ``evaluate``'s name for a module loaded without one); the init keyword ``queergen`` is an interface."""
    names = set(CONFIGS) - {"default"}
    found = []
    for path in (METRIC / "metric_queerbench.py", METRIC / "app.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
            elif isinstance(node, ast.Assign):
                values = [node.value]
            else:
                continue
            for value in values:
                for leaf in ast.walk(value):
                    if isinstance(leaf, ast.Constant) and leaf.value in names and isinstance(node, ast.Compare):
                        found.append(f"{path.name}:{leaf.lineno} compares {leaf.value!r}")
                if isinstance(value, ast.Constant) and value.value in names:
                    found.append(f"{path.name}:{value.lineno} defines {value.value!r}")
    assert found == []
