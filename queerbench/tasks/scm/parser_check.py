"""Check the reply parser against hand-labelled replies (``tests/data/scm_replies.jsonl``).

Each record holds a reply, its task and dataset row id (for the prompt, which the echo rule needs), the labels a
reader gives it from the paper's definitions (Appendix B for refusals, named in ``basis``) and a one-line ``reason``.
``queerbench scm parser-check`` prints the agreement per task and per label; the tests require every record to match.
Records marked ``held_out`` were written after the rules were fixed (their first-pass agreement is in the docs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from queerbench.tasks.scm.data import TASKS, load_terms
from queerbench.tasks.scm.dataset import scm_splits
from queerbench.tasks.scm.parse import REFUSAL_RULES, parse_reply

__all__ = [
    "DEFAULT_FILE",
    "FIELDS",
    "check_record",
    "format_agreement",
    "load_labelled",
    "parser_agreement",
    "subset_lines",
]

FIELDS: tuple[str, ...] = ("refusal", "rating", "selected", "keywords")
"""The labels a record may carry in ``expected``."""

DEFAULT_FILE = Path(__file__).resolve().parents[3] / "tests" / "data" / "scm_replies.jsonl"
"""The labelled set in a source checkout (``tests/`` is not installed with the package)."""

_REQUIRED = {"id", "task", "row_id", "response", "expected", "basis", "reason"}


def load_labelled(path: str | Path) -> list[dict[str, Any]]:
    """Read and check a labelled JSONL file: each record needs id, task, row_id, response, expected (with
    ``refusal``), basis and reason; ``row_id`` must be a dataset row of the same task."""
    rows = {r["id"]: r for split in scm_splits().values() for r in split.to_dict("records")}
    out, seen = [], set()
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({' '.join(str(exc).split())[:100]}); fix that line") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("expected"), dict):
            raise ValueError(f"{path}:{n}: each line must hold a JSON object whose 'expected' is an object; fix it")
        missing = _REQUIRED - set(rec)
        if missing or set(rec["expected"]) - set(FIELDS) or "refusal" not in rec["expected"]:
            raise ValueError(
                f"{path}:{n}: record needs {sorted(_REQUIRED)} and expected.refusal; missing {sorted(missing)}"
            )
        if rec["row_id"] not in rows or rows[rec["row_id"]]["task"] != rec["task"]:
            raise ValueError(f"{path}:{n}: unknown dataset row id {rec['row_id']!r} for task {rec['task']!r}")
        if rec["id"] in seen or not str(rec["reason"]).strip():
            raise ValueError(f"{path}:{n}: duplicate id {rec['id']!r} or empty reason")
        seen.add(rec["id"])
        out.append(rec | {"prompt": rows[rec["row_id"]]["prompt"]})
    return out


def check_record(rec: dict[str, Any], rule: str = "appendix_b") -> dict[str, tuple[Any, Any]]:
    """The labels where the parser disagrees with ``rec['expected']``: ``{field: (expected, got)}``."""
    terms = [t.term for t in load_terms()]
    got = parse_reply(rec["response"], rec["task"], rec["prompt"], terms, term=rec.get("term"), rule=rule)
    values = {"refusal": got.refusal, "rating": got.rating, "selected": got.selected, "keywords": got.keywords}
    return {k: (v, values[k]) for k, v in rec["expected"].items() if values[k] != v}


def _tally(table: dict[str, list[int]], key: str, ok: bool) -> None:
    hit = table.setdefault(key, [0, 0])
    hit[0] += ok
    hit[1] += 1


def parser_agreement(records: Iterable[dict[str, Any]], rule: str = "appendix_b") -> dict[str, Any]:
    """Agreement overall (every label of a record right), per task, per expected refusal label, per label field
    and per reply style, with counts and the disagreeing record ids."""
    if rule not in REFUSAL_RULES:
        raise ValueError(f"unknown refusal rule {rule!r}; use one of {', '.join(REFUSAL_RULES)}")
    overall: dict[str, list[int]] = {}
    per: dict[str, dict[str, list[int]]] = {"task": {}, "label": {}, "field": {}, "style": {}}
    wrong: list[dict[str, Any]] = []
    for rec in records:
        diff = check_record(rec, rule)
        if diff:
            wrong.append({"id": rec["id"], "category": rec.get("category"), "diff": diff})
        _tally(overall, "all", not diff)
        _tally(per["task"], rec["task"], not diff)
        _tally(per["label"], "refusal" if rec["expected"]["refusal"] else "answer", not diff)
        _tally(per["style"], str(rec.get("style", "other")), not diff)
        for k in rec["expected"]:
            _tally(per["field"], k, k not in diff)

    def rates(table: dict[str, list[int]], order: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
        keys = [k for k in order if k in table] + sorted(k for k in table if k not in order)
        return {k: {"agree": table[k][0], "n": table[k][1], "rate": table[k][0] / table[k][1]} for k in keys}

    return {
        "rule": rule,
        "overall": rates(overall).get("all", {"agree": 0, "n": 0, "rate": 0.0}),
        "by_task": rates(per["task"], TASKS),
        "by_label": rates(per["label"], ("refusal", "answer")),
        "by_field": rates(per["field"], FIELDS),
        "by_style": rates(per["style"]),
        "disagreements": wrong,
    }


def format_agreement(res: dict[str, Any], title: str) -> str:
    """A plain-text table of :func:`parser_agreement`'s result."""
    lines = [
        f"{title} (rule {res['rule']}): {res['overall']['agree']}/{res['overall']['n']} replies fully agree "
        f"= {res['overall']['rate']:.1%}"
    ]
    for section, name in (("by_task", "task"), ("by_label", "label"), ("by_field", "field"), ("by_style", "style")):
        lines.append(f"  per {name}:")
        lines += [f"    {k:<12} {v['agree']:>4}/{v['n']:<4} {v['rate']:7.1%}" for k, v in res[section].items()]
    for d in res["disagreements"]:
        lines.append(f"  disagrees: {d['id']} ({d['category']}): {d['diff']}")
    return "\n".join(lines)


def subset_lines(records: list[dict[str, Any]], rule: str = "appendix_b") -> list[str]:
    """One line each for the records written or labelled after the rules were fixed (``held_out``) and the real
    model replies (``real``), when they are a proper part of ``records``."""
    lines = []
    for key, name in (("held_out", "written or labelled after the rules were fixed"), ("real", "real model replies")):
        part = [r for r in records if r.get(key)]
        if part and len(part) < len(records):
            sub = parser_agreement(part, rule)["overall"]
            lines.append(f"  of which {name}: {sub['agree']}/{sub['n']} = {sub['rate']:.1%}")
    return lines
