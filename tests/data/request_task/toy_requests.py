"""A toy ``requests`` task for the request runner's tests: 4 templates x 2 groups x 2 items, two candidates each.

The right candidate is ``label``; a fake backend's answers decide the choice, so a test knows every item's result.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from queerbench.models.requests import FillMask, Generate, Loglikelihood
from queerbench.tasks.base import Task
from queerbench.tasks.spec import TaskSpec, _spec

SPEC: TaskSpec = _spec(
    {
        "name": "toy-requests",
        "benchmark": "TOY",
        "title": "a toy requests task",
        "kind": "requests",
        "methods": ["mlm", "scored", "instructed"],
        "dataset": {"config": "toy-requests", "description": "toy"},
        "requests": {"mlm": "fill_mask", "scored": "loglikelihood", "instructed": "generate"},
        "metrics": [{"name": "accuracy", "column": "correct", "title": "Accuracy"}],
        "groups": {"column": "group", "order": ["a", "b"], "cluster": "template_id", "breakdowns": ["label"]},
        "extra": {"headline_gap": ["a", "b"]},
    },
    "toy_requests.py",
)


class ToyTask(Task):
    def items(self) -> pd.DataFrame:
        rows = []
        for t in range(4):
            for group in ("a", "b"):
                for i in range(2):
                    label = "yes" if t == 1 or (t == 2 and i == 0) else "no"
                    rows.append(
                        {
                            "id": f"t{t}-{group}-{i}",
                            "template_id": t,
                            "group": group,
                            "masked_sentence": f"Template {t} of {group}{i} says [MASK].",
                            "label": label,
                            "candidates": ["no", "yes"],
                            "split": "test",
                        }
                    )
        return pd.DataFrame(rows)

    def requests(self, item: dict[str, Any], method: str) -> list:
        if method == "mlm":
            return [FillMask(item["masked_sentence"], tuple(item["candidates"]))]
        if method == "scored":
            return [Loglikelihood("", item["masked_sentence"].replace("[MASK]", c)) for c in item["candidates"]]
        return [Generate(f"Fill the blank: {item['masked_sentence']}", 8)]

    def score_item(self, item: dict[str, Any], results: Any, method: str) -> dict[str, Any]:
        if method == "mlm":
            scores = list(results[0].logprobs)
        elif method == "scored":
            scores = [r.mean for r in results]
        else:
            reply = results[0].text.lower()
            scores = [float(c in reply) for c in item["candidates"]]
        choice = item["candidates"][scores.index(max(scores))]
        reply = results[0].text if method == "instructed" else ""
        parsed = method != "instructed" or any(c in reply for c in item["candidates"])
        return {
            "choice": choice,
            "correct": int(choice == item["label"]),
            "scores": scores,
            "reply": reply,
            "parsed": parsed,
        }


TASKS = [ToyTask(SPEC)]
