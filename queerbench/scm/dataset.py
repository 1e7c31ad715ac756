"""The SCM prompts as concrete rows: splits ``survey`` and ``generation`` (one row per prompt).

Each row carries what the runners and the analysis need: the task and prompt type, the group, the attribute term
and its axis for rating prompts, and ``options`` (the answers constrained scoring compares: the digits 1–5 for
rating, the 22 terms for selection, none otherwise). ``id`` is stable across builds.
"""

from __future__ import annotations

import pandas as pd

from queerbench.scm.data import Group, PromptTemplate, Term, load_groups, load_prompts, load_terms

__all__ = ["COLUMNS", "RATING_OPTIONS", "fill_template", "scm_splits", "select_rows"]

COLUMNS: tuple[str, ...] = (
    "id",
    "task",
    "prompt_type",
    "variant",
    "group",
    "group_label",
    "term",
    "axis",
    "human_subset",
    "prompt",
    "options",
)
RATING_OPTIONS: list[str] = ["1", "2", "3", "4", "5"]


def fill_template(tpl: PromptTemplate, group: Group, term: Term | None, terms: tuple[Term, ...]) -> str:
    """Instantiate one template for a group (and term); the list of terms is comma-separated in Table 1 order."""
    values = {
        "term": term.term if term else "",
        "group_plural": group.plural,
        "group_name": group.label.lower(),  # the Table 1 term itself, as in "the [group] sexual orientation/gender"
        "terms_list": ", ".join(t.term for t in terms),
        "a_singular": f"{group.article} {group.singular}",
        "subject": group.subject,
        "object": group.object,
        "be": group.be,
    }
    return tpl.template.format(**values)


def _rows(split: str) -> list[dict]:
    groups, terms = load_groups(), load_terms()
    rows = []
    for tpl in (p for p in load_prompts() if p.split == split):
        for group in groups:
            for term in terms if tpl.per_term else (None,):
                suffix = f"-{term.term}" if term else ""
                options = (
                    RATING_OPTIONS
                    if tpl.task == "rating"
                    else [t.term for t in terms]
                    if tpl.task == "selection"
                    else []
                )
                rows.append(
                    {
                        "id": f"scm-{tpl.prompt_type}-{group.id}{suffix}",
                        "task": tpl.task,
                        "prompt_type": tpl.prompt_type,
                        "variant": tpl.variant,
                        "group": group.id,
                        "group_label": group.label,
                        "term": term.term if term else "",
                        "axis": term.axis if term else "",
                        "human_subset": bool(term.human_subset) if term else False,
                        "prompt": fill_template(tpl, group, term, terms),
                        "options": list(options),
                    }
                )
    return rows


def scm_splits() -> dict[str, pd.DataFrame]:
    """The ``scm`` dataset config: ``survey`` (329 rows) and ``generation`` (35 rows) as DataFrames."""
    out = {}
    for split in ("survey", "generation"):
        frame = pd.DataFrame(_rows(split), columns=list(COLUMNS))
        frame["variant"] = frame["variant"].astype("int64")
        out[split] = frame
    return out


def select_rows(frame: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """The first ``limit`` rows in round-robin order over (task, prompt type, group), so small runs cover all groups.

    Why: ``--limit 20`` should still touch every group and prompt type rather than only the first group's ratings.
    """
    if limit is None:
        return frame.reset_index(drop=True)
    if limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    rank = frame.groupby(["prompt_type", "group"], sort=False).cumcount()
    types = {t: i for i, t in enumerate(dict.fromkeys(frame["prompt_type"]))}
    groups = {g: i for i, g in enumerate(dict.fromkeys(frame["group"]))}
    pt_idx = frame["prompt_type"].map(types)
    diagonal = (frame["group"].map(groups) - pt_idx) % max(len(groups), 1)  # spread groups over prompt types
    keyed = frame.assign(_rank=rank, _diag=diagonal, _pt=pt_idx, _pos=range(len(frame)))
    order = keyed.sort_values(["_rank", "_diag", "_pt", "_pos"], kind="stable")
    picked = order.head(limit).sort_values("_pos")
    return picked.drop(columns=["_rank", "_diag", "_pt", "_pos"]).reset_index(drop=True)
