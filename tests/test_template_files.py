"""The template, noun and pronoun files: custom paths load like the pinned ones, and malformed rows are named exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from queerbench.tasks.queerbench.templates import TemplateError, load_pronouns, load_templates, load_terms


def test_custom_paths_load_what_the_pinned_files_hold(tmp_path: Path):
    for loader, name in ((load_templates, "t"), (load_terms, "n"), (load_pronouns, "p")):
        pinned = loader()
        path = tmp_path / f"{name}.csv"
        pinned.to_csv(path, sep=";", index=False)
        assert loader(path).equals(pinned) and loader(str(path)).equals(pinned)


def test_values_that_look_missing_stay_text(tmp_path: Path):
    path = tmp_path / "n.csv"
    path.write_text("queerness;name;type;the\nqueer;NA;identity;y\nqueer;null;orientation;n\n")
    assert load_terms(path)["name"].tolist() == ["NA", "null"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "template;type\nA [MASK] for <target>.;role\n<target> is nice.;role\n",
            "template row 2 ('<target> is nice.') has 0 '[MASK]' placeholders; each template needs exactly one [MASK] "
            "where the model predicts a word",
        ),
        (
            "template;type\nA [MASK] for <target>.;role\n<target> met <target> at [MASK].;role\n",
            "template row 2 ('<target> met <target> at [MASK].') has 2 '<target>' placeholders; each template needs "
            "exactly one <target> (the paper's [SUBJECT]) where the subject goes",
        ),
        (
            "template;type\nA [MASK] for <target>.;role\nA [MASK] for <target>.;job\n",
            "template row 2 has type 'job'; expected 'role' or 'societal'",
        ),
    ],
)
def test_malformed_templates_word_for_word(tmp_path: Path, text: str, message: str):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(TemplateError) as info:
        load_templates(path)
    assert str(info.value) == message


def test_missing_columns_word_for_word(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text("text;kind\nx;y\n")
    with pytest.raises(TemplateError) as info:
        load_templates(path)
    assert str(info.value) == (
        f"template file {path} lacks the column(s) ['template', 'type']; expected a ';'-separated header with "
        "['template', 'type']"
    )
    with pytest.raises(TemplateError) as info:
        load_terms(path)
    assert str(info.value).startswith(f"terms file {path} lacks the column(s) ['queerness', 'name', 'type', 'the']")
    with pytest.raises(TemplateError) as info:
        load_pronouns(path)
    assert str(info.value).startswith(f"pronouns file {path} lacks the column(s) ['type', 'name', 'acc'")


@pytest.mark.parametrize(
    "row", ["straight;man;identity;x", "queer;gay;colour;y", "unknown;gay;identity;y"], ids=["the", "type", "group"]
)
def test_malformed_terms_name_the_row(tmp_path: Path, row: str):
    path = tmp_path / "n.csv"
    path.write_text(f"queerness;name;type;the\nqueer;gay;orientation;n\n{row}\n")
    with pytest.raises(TemplateError) as info:
        load_terms(path)
    message = str(info.value)
    assert message.startswith("terms row 2 (") and "is malformed: queerness must be one of ['queer', " in message
    assert message.endswith("the 'y' or 'n'") and "type one of ['identity', " in message


def test_malformed_pronouns_name_the_rows(tmp_path: Path):
    pinned = load_pronouns()
    bad = pinned.copy()
    bad.loc[[1, 3], "type"] = "plural"
    path = tmp_path / "p.csv"
    bad.to_csv(path, sep=";", index=False)
    with pytest.raises(TemplateError) as info:
        load_pronouns(path)
    assert str(info.value).startswith("pronouns rows [2, 4] have a type outside ['")
