"""MISGENDERED's instances, generated from its published files as its evaluation code reads them.

Hossain, Dev & Singh (ACL 2023) ask whether a model uses the pronouns a person declared. Their repository
(``tamannahossainkay/misgendered-backend`` at 383bb8c, CC BY 4.0, pinned in ``sources.json`` next to this module)
publishes 13 template files (``templates/templates.csv``: no declaration; ``explicit_template_{2,31,32,41,42,5}.csv``:
"{name}'s pronouns are …" before the sentence; ``parenth_template_*.csv``: "{name} (…)" in it — the number says which
forms are declared: 2 = nom/acc, 31 = nom/acc/pos_ind, 32 = nom/acc/pos_dep, 41 = nom/acc/pos_ind/ref,
42 = nom/acc/pos_dep/ref, 5 = all five), each with the same 50 templates (10 per form: nom, acc, pos_dep, pos_ind,
ref; row ``i`` of every file is template ``i``), 11 pronoun sets (``pronouns.csv``) and 500 names (300 unisex, 100
female, 100 male). An instance is (declaration file, template, declared set, name): the sentence with the name
filled in, the declared set's forms in the declaration slots, and the slot ``{mask_token}`` the model fills with
one of the 11 forms of the template's form. ``zero-shot/gpt2.py`` builds each instance so (``get_eval_instance``).

Counts: 13 files × 50 templates × 11 sets × 500 names = 3,575,000 instances. The data card's "3.3 million" is the 12
declaring files alone (12 × 50 × 11 × 500 = 3,300,000); its "13 declaration types" counts the no-declaration file.

The pronoun groups are the data card's three pronoun types: ``binary`` (he, she), ``neutral`` (gender-neutral:
they) and ``neo`` (neo-pronouns: thon, e, ae, co, vi, xe, ey, ze). ``pronouns.csv``'s own ``gender_type`` column
has two values only (binary, non-binary: ``they`` is "non-binary" there).

Quirks of the published files and code, kept (each is tested):

- the explicit declarations read ``{name}/'s pronouns are …``: the slash is in every row of the six explicit files;
  the evaluation code never touches it (it only substitutes ``{nom}`` … ``{ref}`` and ``{mask_token}``), so a model
  reads "Kamoni/'s pronouns are …". ``fix_slash=True`` writes "Kamoni's" instead (the paper's wording);
- ``explicit_template_42.csv`` has no ``template_id`` in rows 8, 32 and 35, so pandas reads the column as floats
  (``0.0``, ``1.0``…): the template is the row's position, which equals ``template_id`` in the 12 other files;
- ``templates.csv`` (no declaration) still declares ``({nom}/{acc})`` in templates 8, 32 and 35 (its columns are
  also in another order: template, form, template_id);
- ``pronouns.csv`` names its fourth form ``pos_indep``; the code renames the columns by position to ``pos_ind``;
- the candidates are the 11 sets' forms in file order, duplicates kept: ``em`` (e, ey) in acc and ``emself``
  (e, ey) in ref; a choice counts as correct when its word equals the label, so either ``em`` is right for e and ey;
- capitalisation: the label and every candidate are capitalised (``str.capitalize``) when
  ``sentence[sentence.find('{') - 2] == '.'`` for the sentence with the name filled in and the pronouns declared
  (the first ``{`` left is the slot's); upstream's ``label_to_cap`` returns None, not False, otherwise;
- typos stay as published ("stiches", "potrait", "Its sad", "walked into a walk", template 40 has no full stop,
  template 12 ends in a space).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from queerbench.base.sources import Source, fetch, load_manifest

__all__ = [
    "DECLARATIONS",
    "FORMS",
    "GROUPS",
    "NAME_GROUPS",
    "SLOT",
    "Data",
    "build",
    "count",
    "follows_full_stop",
    "load_data",
    "manifest",
    "pick_names",
]

HERE = Path(__file__).parent
FORMS = ("nom", "acc", "pos_dep", "pos_ind", "ref")
NAME_GROUPS = ("unisex", "female", "male")
GROUPS = ("binary", "neutral", "neo")
NEUTRAL = ("they",)
"""The data card's gender-neutral pronoun set; the other non-binary sets are its neo-pronouns."""
SLOT = "{mask_token}"
MASK = "[MASK]"
DECLARATIONS: dict[str, str] = {
    "none": "templates/templates.csv",
    **{f"explicit_{n}": f"templates/explicit_template_{n}.csv" for n in ("2", "31", "32", "41", "42", "5")},
    **{f"parenth_{n}": f"templates/parenth_template_{n}.csv" for n in ("2", "31", "32", "41", "42", "5")},
}
"""The declaration types, in report order, and their upstream files."""
_CODEBOOK = ["gender_type", "gender", "nom", "acc", "pos_dep", "pos_ind", "ref"]
_UPSTREAM = "upstream/misgendered/"


@cache
def manifest() -> dict[str, Source]:
    """The package's pinned sources (``sources.json``), by name."""
    return load_manifest(HERE / "sources.json")


def _fetch(path: str) -> Path:
    """The verified local copy of the upstream file ``path`` (e.g. ``pronouns.csv``)."""
    for source in manifest().values():
        if source.relpath == _UPSTREAM + path:
            return fetch(source)
    raise ValueError(f"MISGENDERED file {path} is not pinned in {HERE / 'sources.json'}")


@dataclass(frozen=True)
class Data:
    """The published files, read: the pronoun sets (codebook columns), each declaration's 50 (form, template) rows,
    and the names of each name group in file order."""

    pronouns: pd.DataFrame
    templates: dict[str, pd.DataFrame]
    names: dict[str, tuple[str, ...]]

    def group_of(self, declared: str) -> str:
        """The data card's pronoun type of a set: binary, neutral (they) or neo."""
        row = self.pronouns[self.pronouns["gender"] == declared].iloc[0]
        if row["gender_type"] == "binary":
            return "binary"
        return "neutral" if declared in NEUTRAL else "neo"


def _read_templates(declaration: str, path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if not {"form", "template", "template_id"} <= set(frame.columns) or len(frame) != 50:
        raise ValueError(f"MISGENDERED {path} is not a 50-row template file (form, template, template_id)")
    bad = [t for t in frame["template"] if t.count(SLOT) != 1]
    if bad or not set(frame["form"]) <= set(FORMS):
        raise ValueError(f"MISGENDERED {path}: every template needs one {SLOT} and a form of {', '.join(FORMS)}")
    return frame[["form", "template"]].assign(declaration=declaration)


@cache
def load_data() -> Data:
    """Read the 17 pinned files (each checksum-verified by :func:`queerbench.base.sources.fetch`)."""
    pronouns = pd.read_csv(_fetch("pronouns.csv"), dtype=str, keep_default_na=False)
    if len(pronouns.columns) != len(_CODEBOOK):
        raise ValueError(f"MISGENDERED pronouns.csv has {len(pronouns.columns)} columns, expected {len(_CODEBOOK)}")
    pronouns.columns = _CODEBOOK  # as upstream: by position (the file's fourth form is 'pos_indep')
    templates = {d: _read_templates(d, _fetch(p)) for d, p in DECLARATIONS.items()}
    forms = {d: list(t["form"]) for d, t in templates.items()}
    if any(f != forms["none"] for f in forms.values()):
        raise ValueError("MISGENDERED template files disagree on the form of a row; they must list the same templates")
    names = {g: tuple(_fetch(f"names/{g}.txt").read_text(encoding="utf-8").split()) for g in NAME_GROUPS}
    return Data(pronouns=pronouns, templates=templates, names=names)


def follows_full_stop(sentence: str) -> bool:
    """Upstream's capitalisation rule (``label_to_cap``), exactly: whether the character two before the first ``{``
    is a full stop (the slot after ". "). Read on the sentence with the name and the declared pronouns filled in."""
    return sentence[sentence.find("{") - 2] == "."


def declare(sentence: str, forms: dict[str, str]) -> str:
    """The declaration slots ``{nom}`` … ``{ref}`` filled with a set's forms (upstream's ``declare_pronouns``)."""
    for form in FORMS:
        sentence = sentence.replace("{" + form + "}", forms[form])
    return sentence


def pick_names(data: Data, per_group: int | None, how: str = "first") -> dict[str, tuple[str, ...]]:
    """The names used, per name group: all (``per_group`` None) or the first ``per_group`` of each list in file order
    (``how="first"``; the male and female lists are ranked by frequency, the unisex list is the paper's sample)."""
    if how != "first":
        raise ValueError(f"MISGENDERED names are picked 'first' (in file order), not {how!r}")
    if per_group is None:
        return dict(data.names)
    if per_group < 1 or any(per_group > len(n) for n in data.names.values()):
        sizes = ", ".join(f"{g} {len(n)}" for g, n in data.names.items())
        raise ValueError(
            f"MISGENDERED names_per_group must be 1 to the smallest list's size ({sizes}), got {per_group}"
        )
    return {g: names[:per_group] for g, names in data.names.items()}


def count(data: Data, declarations: Sequence[str], names: dict[str, tuple[str, ...]]) -> int:
    """How many instances :func:`build` makes (without making them)."""
    n_templates = len(data.templates["none"])
    return len(declarations) * n_templates * len(data.pronouns) * sum(len(n) for n in names.values())


def build(
    data: Data,
    declarations: Sequence[str],
    names: dict[str, tuple[str, ...]],
    *,
    prefix: str = "misgendered",
    fix_slash: bool = False,
) -> pd.DataFrame:
    """The instances, one row each, template-major (then declaration, declared set, name group, name), built column
    by column (the full set has 3.6 million rows). ``template_id`` is the (form, template) cluster, 0..49 (the row in
    every file); ``candidates`` are shared tuples (10 distinct: 5 forms, capitalised or not)."""
    unknown = [d for d in declarations if d not in DECLARATIONS]
    if unknown or not declarations:
        raise ValueError(
            f"MISGENDERED declarations must be some of {', '.join(DECLARATIONS)}, got {list(declarations)}"
        )
    sets = data.pronouns.to_dict("records")
    groups = {s["gender"]: data.group_of(s["gender"]) for s in sets}
    options = {
        (form, cap): tuple(str(s[form]).capitalize() if cap else str(s[form]) for s in sets)
        for form in FORMS
        for cap in (False, True)
    }
    named = [(g, n) for g in NAME_GROUPS for n in names.get(g, ())]
    cols: dict[str, list] = {
        c: []
        for c in (
            "id",
            "template_id",
            "form",
            "declaration",
            "declared",
            "group",
            "name",
            "name_group",
            "masked_sentence",
            "label",
            "candidates",
        )
    }
    for template_id in range(len(data.templates["none"])):
        for declaration in declarations:
            row = data.templates[declaration].iloc[template_id]
            form, template = str(row["form"]), str(row["template"])
            if fix_slash:
                template = template.replace("{name}/'s", "{name}'s")
            for s in sets:
                declared = str(s["gender"])
                with_forms = declare(template, {str(k): str(v) for k, v in s.items()})
                if with_forms.replace("{name}", "").count("{") != 1:
                    raise ValueError(f"MISGENDERED {declaration} template {template_id} has a slot other than {SLOT}")
                for name_group, name in named:
                    sentence = with_forms.replace("{name}", name)
                    cap = follows_full_stop(sentence)
                    label = str(s[form]).capitalize() if cap else str(s[form])
                    cols["id"].append(f"{prefix}-{template_id:02d}-{declaration}-{declared}-{name_group}-{name}")
                    cols["template_id"].append(template_id)
                    cols["form"].append(form)
                    cols["declaration"].append(declaration)
                    cols["declared"].append(declared)
                    cols["group"].append(groups[declared])
                    cols["name"].append(name)
                    cols["name_group"].append(name_group)
                    cols["masked_sentence"].append(sentence.replace(SLOT, MASK))
                    cols["label"].append(label)
                    cols["candidates"].append(options[(form, cap)])
    frame = pd.DataFrame(cols)
    frame["template_id"] = frame["template_id"].astype("int64")
    return frame.assign(split="test")


def read_json(path: Path) -> dict:
    """A JSON object from ``path``; a one-line ``ValueError`` naming it otherwise."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path} ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return raw
