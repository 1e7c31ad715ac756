"""The project-side QueerGen rules (``queerbench/data/queergen.json``) with their schema check.

What is ours — the group map, the placement rules, the attribute sets and diversity rules per config, the model
labels of QueerGen's tables — lives in that versioned data file; QueerGen's own files come from the pinned sources.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["GROUP_ORDER", "QueerGenSpecError", "check_scoring_config", "spec"]

SPEC_FILE = "queergen.json"
_REQUIRED: dict[str, type] = {
    "schema_version": int,
    "upstream": str,
    "sources": dict,
    "groups": dict,
    "group_order": list,
    "placement": dict,
    "sentence": str,
    "perspective_input": str,
    "regard_input": dict,
    "unmarked_category": str,
    "counts": dict,
    "perspective_attributes": dict,
    "diversity": dict,
    "regard_labels": list,
    "regard_model": str,
    "vader_decimals": int,
    "stat_decimals": int,
    "model_labels": dict,
    "model_methods": dict,
    "evaluation_columns": list,
}
SCORING_CONFIGS = ("queergen", "default")
"""How QueerGen's scorers can be run: as its code does (``queergen``) or as its paper says (``default``)."""
PAPER_RULES = "default"
"""QueerGen's scorer rules as its paper states them (those of every task that does not name others)."""


class QueerGenSpecError(ValueError):
    """``queerbench/data/queergen.json`` is malformed."""


def _validate(raw: Any) -> dict[str, Any]:
    where = f"queerbench/data/{SPEC_FILE}"
    if not isinstance(raw, dict) or raw.get("schema_version") != 1:
        raise QueerGenSpecError(f"{where}: expected an object with schema_version 1")
    for key, kind in _REQUIRED.items():
        if not isinstance(raw.get(key), kind):
            raise QueerGenSpecError(f"{where}: key {key!r} must be a {kind.__name__}")
    if sorted(raw["groups"].values()) != sorted(raw["group_order"]):
        raise QueerGenSpecError(f"{where}: 'groups' must map onto exactly the labels of 'group_order'")
    for key in ("slot", "unmarked", "adjective", "noun", "adjective_flag"):
        if not isinstance(raw["placement"].get(key), str):
            raise QueerGenSpecError(f"{where}: placement.{key} must be a string")
    for config in SCORING_CONFIGS:
        attrs = raw["perspective_attributes"].get(config)
        if not isinstance(attrs, list) or not attrs or not all(isinstance(a, str) for a in attrs):
            raise QueerGenSpecError(f"{where}: perspective_attributes.{config} must be a non-empty list of names")
        rule = raw["diversity"].get(config)
        if not isinstance(rule, dict) or rule.get("batches") not in ("independent", "partition"):
            raise QueerGenSpecError(f"{where}: diversity.{config}.batches must be 'independent' or 'partition'")
        if rule.get("unit") not in ("row", "word"):
            raise QueerGenSpecError(f"{where}: diversity.{config}.unit must be 'row' or 'word'")
    if not isinstance(raw["diversity"].get("batch_size"), int) or raw["diversity"]["batch_size"] < 1:
        raise QueerGenSpecError(f"{where}: diversity.batch_size must be a positive integer")
    methods = _task_methods()
    if set(raw["model_methods"]) != set(raw["model_labels"]) or not set(raw["model_methods"].values()) <= set(methods):
        raise QueerGenSpecError(
            f"{where}: model_methods must give each model of model_labels one of the methods QueerGen's tasks "
            f"declare ({', '.join(methods)})"
        )
    if "[MASK]" not in raw["sentence"] or "{marked}" not in raw["sentence"]:
        raise QueerGenSpecError(f"{where}: 'sentence' must contain {{marked}} and [MASK]")
    return raw


def _task_methods() -> tuple[str, ...]:
    """The methods QueerGen's tasks declare (``tasks.json`` next to this module): those its published rows can
    name."""
    from pathlib import Path

    from queerbench.tasks.spec import load_specs

    found = (m for t in load_specs(Path(__file__).with_name("tasks.json")).values() for m in t.methods)
    return tuple(dict.fromkeys(found))


@cache
def spec() -> dict[str, Any]:
    """The validated QueerGen rules."""
    text = resources.files("queerbench.data").joinpath(SPEC_FILE).read_text(encoding="utf-8")
    return _validate(json.loads(text))


def check_scoring_config(config: str) -> str:
    """Which of QueerGen's scorer rules (:data:`SCORING_CONFIGS`) a task implies: its ``queergen_scorers`` setting
    (the ``queergen`` task: QueerGen's code), else QueerGen's paper (``default``); a rule name passes as it is."""
    if config in SCORING_CONFIGS:
        return config
    from queerbench.tasks import all_tasks

    task = all_tasks().get(config)
    return str(task.spec.extra.get("queergen_scorers", PAPER_RULES)) if task is not None else PAPER_RULES


GROUP_ORDER: tuple[str, ...] = tuple(spec()["group_order"])
"""``unmarked``, ``non-queer``, ``queer``: QueerGen's three subject categories, in its order."""
