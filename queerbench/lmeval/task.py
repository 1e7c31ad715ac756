"""What lm-evaluation-harness calls while it runs an exported queerbench task: prompt, per-reply results, aggregation.

An exported task folder's ``utils.py`` builds one :class:`TaskHooks` and hands its bound methods to the task YAML
(``!function utils.doc_to_text`` …), so the logic lives here once:

- :meth:`TaskHooks.doc_to_text`: the ``instructed`` prompt (:func:`queerbench.methods.instructed.replies.build_prompt`) around
  the sentence; for the ``raw`` prompt format followed by the newline the local runner adds to a prompt without a
  chat template, for ``chat`` alone (lm-evaluation-harness's ``--apply_chat_template`` makes it the user turn);
- :meth:`TaskHooks.process_results`: the reply parsed by :func:`~queerbench.methods.instructed.replies.parse_reply` and, for a
  one-word reply, the sentence's AFINN, HurtLex and toxicity values from
  :func:`~queerbench.scoring.aggregate.score_sentences`; the same record is every metric's per-sample value;
- :meth:`TaskHooks.aggregation`: per group, the QueerBench score (:func:`~queerbench.scoring.aggregate.aggregate` over
  the one-word sentences, as ``queerbench run`` scores them) or the share of replies parsed to one word.

A group with no scored sentence, or a run without a toxicity scorer, gives ``nan`` for its QueerBench score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from queerbench.scoring.afinn import KEY as AFINN
from queerbench.scoring.hurtlex import KEY as HURTLEX
from queerbench.scoring.rules import composite_block
from queerbench.scoring.toxicity_base import KEY as TOXICITY

__all__ = ["METRIC_KINDS", "TaskHooks", "metric_name"]

COMPOSITE_BLOCK = composite_block()
METRIC_KINDS: tuple[str, ...] = (COMPOSITE_BLOCK, "parse_rate")
"""Per-group metrics every exported task reports: the QueerBench score and the share of one-word replies."""
PROMPT_FORMATS: tuple[str, ...] = ("raw", "chat")


def metric_name(kind: str, group: str) -> str:
    """``queerbench_non_queer`` for (``queerbench``, ``non-queer``): a metric (and Python function) name."""
    return f"{kind}_{group.replace('-', '_')}"


class TaskHooks:
    """The hooks of one exported task: its config, prompt, prompt format and toxicity scorer (as for a run)."""

    def __init__(self, *, config: str, prompt_id: str, prompt_format: str, toxicity: str, groups: Sequence[str]):
        from queerbench.run.pipeline import RunOptions
        from queerbench.run.scores import toxicity_column

        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
        self.options = RunOptions(
            model="lm-eval",
            config=config,
            top_k=1,
            method="instructed",
            method_settings={"prompt_id": prompt_id},
            toxicity=toxicity,
            n_bootstrap=0,
            n_permutations=0,
        )
        self.prompt_id, self.prompt_format, self.groups = prompt_id, prompt_format, list(groups)
        self.scoring = self.options.scoring_options()
        self.column = toxicity_column(str(self.options.toxicity_input))

    def metric_names(self) -> list[str]:
        """Every metric the task reports, in the YAML's order."""
        return [metric_name(kind, g) for g in self.groups for kind in METRIC_KINDS]

    def doc_to_text(self, doc: dict[str, Any]) -> str:
        """The prompt for one sentence (see the module doc)."""
        from queerbench.methods.instructed.replies import build_prompt

        prompt = build_prompt(doc["masked_sentence"], self.prompt_id)
        return prompt + "\n" if self.prompt_format == "raw" else prompt

    def process_results(self, doc: dict[str, Any], results: Sequence[Any]) -> dict[str, dict[str, Any]]:
        """One reply → its record (id, group, word, label and, for a one-word reply, the per-sentence scores)."""
        from queerbench.methods.instructed.replies import parse_reply
        from queerbench.scoring.aggregate import score_sentences

        reply = results[0] if results else ""
        parsed = parse_reply(reply if isinstance(reply, str) else "", doc["masked_sentence"])
        record: dict[str, Any] = {"id": doc["id"], "group": doc["group"], "word": parsed.word, "label": parsed.label}
        if parsed.label == "ok" and parsed.word is not None:  # the word is set exactly when the label is "ok"
            sentences = None if self.column is None else [doc[self.column]]
            frame, _ = score_sentences([[parsed.word]], self.scoring, sentences=sentences)
            row = frame.iloc[0]
            toxicity = float(row[TOXICITY])
            record.update(
                {
                    AFINN: float(row[AFINN]),
                    HURTLEX: float(row[HURTLEX]),
                    TOXICITY: None if math.isnan(toxicity) else toxicity,
                    "toxicity_counts": row["toxicity_counts"],
                    "hurtlex_category_counts": {k: int(v) for k, v in row["hurtlex_category_counts"].items()},
                }
            )
        return dict.fromkeys(self.metric_names(), record)

    def aggregation(self, kind: str, group: str) -> Callable[[Sequence[dict[str, Any]]], float]:
        """The aggregation function of metric ``kind`` for ``group`` (its items: :meth:`process_results` records)."""
        if kind not in METRIC_KINDS:
            raise ValueError(f"unknown metric kind {kind!r}; one of {', '.join(METRIC_KINDS)}")

        def aggregate_group(items: Sequence[dict[str, Any]]) -> float:
            mine = [r for r in items if r["group"] == group]
            if kind == "parse_rate":
                return sum(r["label"] == "ok" for r in mine) / len(mine) if mine else math.nan
            return self._queerbench_score(group, [r for r in mine if r["label"] == "ok"])

        aggregate_group.__name__ = metric_name(kind, group)
        return aggregate_group

    def _queerbench_score(self, group: str, rows: list[dict[str, Any]]) -> float:
        import pandas as pd

        from queerbench.scoring.aggregate import aggregate

        if not rows:
            return math.nan
        frame = pd.DataFrame(
            {
                AFINN: [r[AFINN] for r in rows],
                HURTLEX: [r[HURTLEX] for r in rows],
                TOXICITY: [math.nan if r[TOXICITY] is None else r[TOXICITY] for r in rows],
                "toxicity_counts": [r["toxicity_counts"] for r in rows],
                "hurtlex_category_counts": [r["hurtlex_category_counts"] for r in rows],
            }
        )
        value = aggregate(frame, [group] * len(rows), self.scoring)[COMPOSITE_BLOCK][group]
        return math.nan if value is None else float(value)
