"""Check the reply parser against hand-labelled replies (``tests/data/scm_replies.jsonl``).

Each record holds a reply, its task and dataset row id (for the prompt, which the echo rule needs) and the labels a
reader gives it from the paper's definitions (Appendix B for refusals, with the line cited in ``basis``). The
benchmark ``benchmarks/scm_parser_agreement.py`` prints the agreement; the tests require every record to match.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from queerbench.scm.data import load_terms
from queerbench.scm.dataset import scm_splits
from queerbench.scm.parse import parse_reply

__all__ = ["FIELDS", "check_record", "load_labelled", "parser_agreement"]

FIELDS: tuple[str, ...] = ("refusal", "rating", "selected", "keywords")
"""The labels a record may carry in ``expected``."""


def load_labelled(path: str | Path) -> list[dict[str, Any]]:
    """Read and check a labelled JSONL file: every record needs id, task, row_id, response and ``expected``."""
    prompts = {r["id"]: r["prompt"] for split in scm_splits().values() for r in split.to_dict("records")}
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        missing = {"id", "task", "row_id", "response", "expected", "basis"} - set(rec)
        if missing or set(rec["expected"]) - set(FIELDS) or "refusal" not in rec["expected"]:
            raise ValueError(f"{path}:{n}: record needs id, task, row_id, response, basis and expected.refusal")
        if rec["row_id"] not in prompts:
            raise ValueError(f"{path}:{n}: unknown dataset row id {rec['row_id']!r}")
        out.append(rec | {"prompt": prompts[rec["row_id"]]})
    return out


def check_record(rec: dict[str, Any], rule: str = "appendix_b") -> dict[str, tuple[Any, Any]]:
    """The labels where the parser disagrees with ``rec['expected']``: ``{field: (expected, got)}``."""
    terms = [t.term for t in load_terms()]
    got = parse_reply(rec["response"], rec["task"], rec["prompt"], terms, term=rec.get("term"), rule=rule)
    values = {"refusal": got.refusal, "rating": got.rating, "selected": got.selected, "keywords": got.keywords}
    return {k: (v, values[k]) for k, v in rec["expected"].items() if values[k] != v}


def parser_agreement(records: Iterable[dict[str, Any]], rule: str = "appendix_b") -> dict[str, Any]:
    """Agreement per label and per (survey/story) refusal, with counts, and the disagreeing record ids."""
    tally: dict[str, list[int]] = {}
    wrong: list[str] = []
    for rec in records:
        diff = check_record(rec, rule)
        if diff:
            wrong.append(rec["id"])
        split = "story" if rec["task"] == "generation" else "survey"
        for k in rec["expected"]:
            for key in (k, f"refusal[{split}]") if k == "refusal" else (k,):
                hit = tally.setdefault(key, [0, 0])
                hit[0] += k not in diff
                hit[1] += 1
    return {
        "rule": rule,
        "agreement": {k: {"agree": a, "n": n, "rate": a / n} for k, (a, n) in sorted(tally.items())},
        "disagreements": wrong,
    }
