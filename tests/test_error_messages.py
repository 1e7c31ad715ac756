"""One-line messages: file-system errors, a missing source, the metric's input checks."""

from __future__ import annotations

from pathlib import Path

import evaluate
import pytest

METRIC = str(Path(__file__).resolve().parents[1] / "metric_queerbench")


# ------------------------------------------------------------------------------------------------------ messages
def test_os_errors_become_one_line():
    from queerbench.base.arguments import os_error_message

    message = os_error_message(PermissionError(13, "Permission denied", "/ro/run/run.json"))
    assert message.startswith("Permission denied: /ro/run/run.json;") and "\n" not in message and "--out" in message


def test_missing_source_message_is_short_and_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from queerbench.base.sources import SourceUnavailableError, fetch

    monkeypatch.delenv("QUEERBENCH_DATA_DIR", raising=False)
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path))
    with pytest.raises(SourceUnavailableError) as err:
        fetch("hurtlex_en", offline=True)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400
    assert "QUEERBENCH_DATA_DIR is not set" in message and "lexicons/hurtlex/hurtlex_EN.tsv" in message


def test_metric_add_batch_checks_types_too():
    qb = evaluate.load(METRIC, "paper", toxicity="none")
    with pytest.raises(ValueError, match=r"predictions\[1\] is None"):
        qb.add_batch(predictions=[["a"], None])


def test_hurtlex_level_is_refused_when_the_metric_loads():
    with pytest.raises(ValueError, match="unknown HurtLex level 'weird'"):
        evaluate.load(METRIC, "default", hurtlex_level="weird")


@pytest.mark.parametrize(
    ("config", "init", "inputs", "message"),
    [
        ("paper", {}, {"predictions": [None, ["doctor"]], "groups": ["q", "n"]}, r"predictions\[0\] is None"),
        (
            "default",
            {},
            {"predictions": [["doctor", None]], "groups": ["q"], "sentences": ["The person is a [MASK]."]},
            r"predictions\[0\]\[1\] is None",
        ),
        ("paper", {}, {"predictions": [[1], ["doctor"]], "groups": ["q", "n"]}, r"predictions\[0\]\[0\] is 1 \(int\)"),
        ("paper", {"toxicity": "none"}, {"predictions": [["a"], ["b"]], "groups": [None, "n"]}, r"groups\[0\] is None"),
        ("paper", {"toxicity": "none"}, {"predictions": [["a"]], "groups": [3]}, r"groups\[0\] is 3 \(int\)"),
        (
            "default",
            {},
            {"predictions": [["a"]], "groups": ["q"], "sentences": [None]},
            r"sentences\[0\] is None",
        ),
        (
            "paper",
            {},
            {"predictions": [["a"]], "groups": ["q"], "toxicity_counts": [[0, None, 0, 0, 0]]},
            r"toxicity_counts\[0\]\[1\] is None",
        ),
        ("paper", {}, {"predictions": [["a"]], "groups": ["q"], "toxicity_counts": [None]}, r"toxicity_counts\[0\]"),
        ("paper", {"toxicity": "none"}, {"predictions": [["a"]], "groups": ["q"], "prompt_types": ["x"]}, "for config"),
        ("scm", {}, {"predictions": ["4"], "groups": ["women"], "sentences": ["x"]}, "for config 'scm'"),
        ("paper", {"toxicity": "none"}, {"predictions": [["a"]], "groups": ["q"], "group": ["q"]}, "unexpected input"),
    ],
)
def test_metric_input_types_are_one_clear_error(config: str, init: dict, inputs: dict, message: str):
    qb = evaluate.load(METRIC, config, **init)
    with pytest.raises(ValueError, match=message):
        qb.compute(**inputs)
