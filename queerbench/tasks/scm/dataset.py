"""The SCM prompts as concrete rows: splits ``survey`` and ``generation`` (one row per prompt).

Each row carries what the runners and the analysis need: the task and prompt type, the group, the attribute term
and its axis for rating prompts, and ``options`` (the answers constrained scoring compares: the digits 1–5 for
rating, the 22 terms for selection, none otherwise). ``id`` is stable across builds.
"""

from __future__ import annotations

import pandas as pd

from queerbench.tasks.scm.data import Group, PromptTemplate, Term, load_groups, load_prompts, load_terms

__all__ = ["COLUMNS", "RATING_OPTIONS", "fill_template", "scm_splits", "select_rows", "shuffled_selection_rows"]

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
    """At most ``limit`` rows, spread evenly over prompt types × groups × (for rating) both axes.

    Why: the full survey split lists rating rows term-first (Warmth terms before Competence), so a plain head
    of ``--limit 20`` rows would have only Warmth ratings and few groups. Rows come in units from cells
    (prompt type, group): a rating cell's unit is a Warmth and a Competence term together (a pair, each cell
    starting at a different term), other cells give one row per unit. Units are taken greedily: lowest rank in
    its cell first, then the (task, group) pair, the task, the group and the prompt type picked least so far (rating
    variants are pooled, as in the paper, so a second rating unit goes to a group without ratings). So ``--limit 20`` has every group,
    every prompt type and both axes, with Warmth × Competence points for several groups.
    The picked rows keep the frame's order.
    """
    if limit is None:
        return frame.reset_index(drop=True)
    if limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    types = {t: i for i, t in enumerate(dict.fromkeys(frame["prompt_type"]))}
    groups = {g: i for i, g in enumerate(dict.fromkeys(frame["group"]))}
    axes = ("Warmth", "Competence")
    units: list[tuple[int, int, int, int, list[int]]] = []  # (rank, diagonal, prompt type, group, row positions)
    per_term_cells = 0
    for (pt, grp), cell in frame.reset_index(drop=True).groupby(["prompt_type", "group"], sort=False):
        pt_i, g_i = types[pt], groups[grp]
        diag = (g_i - pt_i) % max(len(groups), 1)
        pos = list(cell.index)
        if (cell["axis"].isin(axes)).all() and cell["axis"].nunique() == 2:
            by_axis = [[p for p in pos if frame.iloc[p]["axis"] == a] for a in axes]
            n = min(len(b) for b in by_axis)
            shift = per_term_cells
            per_term_cells += 1
            pairs = [[by_axis[0][(j + shift) % n], by_axis[1][(j + shift) % n]] for j in range(n)]
            extra = [p for b in by_axis for p in b if not any(p in q for q in pairs)]
            chunks = pairs + [[p] for p in extra]
        else:
            chunks = [[p] for p in pos]
        units += [(rank, diag, pt_i, g_i, chunk) for rank, chunk in enumerate(chunks)]
    picked: list[int] = []
    used_group = [0] * len(groups)
    used_type = [0] * len(types)
    task_of = [frame.loc[frame["prompt_type"] == t, "task"].iloc[0] for t in types]
    used_task_group: dict[tuple[str, int], int] = {}
    used_task: dict[str, int] = {}
    todo = sorted(units, key=lambda u: (u[0], u[1], u[2], u[4][0]))

    def key(i: int) -> tuple[int, ...]:
        rank, _, pt_i, g_i, _ = todo[i]
        task = task_of[pt_i]
        return (rank, used_task_group.get((task, g_i), 0), used_task.get(task, 0), used_group[g_i], used_type[pt_i], i)

    while todo and len(picked) < limit:  # greedy: lowest rank, then the least-covered (task, group), group, type
        _, _, pt_i, g_i, chunk = todo.pop(min(range(len(todo)), key=key))
        picked += chunk[: limit - len(picked)]
        used_group[g_i] += 1
        used_type[pt_i] += 1
        used_task_group[(task_of[pt_i], g_i)] = used_task_group.get((task_of[pt_i], g_i), 0) + 1
        used_task[task_of[pt_i]] = used_task.get(task_of[pt_i], 0) + 1
    return frame.iloc[sorted(picked)].reset_index(drop=True)


def shuffled_selection_rows(rows: pd.DataFrame, samples: int, seed: int) -> pd.DataFrame:
    """One row per (selection row, sample) with the term list in a seeded random order (an option; the paper
    lists the terms in one fixed order). ``sample`` says which sample each row is; ``options`` holds the order
    shown, so constrained scoring and parsing use the same list. The prompt text changes with the order, so
    each sample is its own cached call. Non-selection rows are returned unchanged (``sample`` = -1)."""
    import random

    terms = load_terms()
    by_name = {t.term: t for t in terms}
    templates = {p.prompt_type: p for p in load_prompts()}
    group_of = {g.id: g for g in load_groups()}
    out = []
    for rec in rows.to_dict("records"):
        if rec["task"] != "selection":
            out.append(rec | {"sample": -1})
            continue
        for k in range(samples):
            order = [t.term for t in terms]
            random.Random(f"{seed}:{rec['id']}:{k}").shuffle(order)
            shown = tuple(by_name[t] for t in order)
            prompt = fill_template(templates[rec["prompt_type"]], group_of[rec["group"]], None, shown)
            out.append(rec | {"prompt": prompt, "options": order, "sample": k})
    return pd.DataFrame(out)
