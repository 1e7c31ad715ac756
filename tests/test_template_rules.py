"""The ``default`` grammar rules one at a time on small custom templates, the public ``subjects()`` and the frame's
shape: each expectation is written by hand from English grammar and the dataset contract, not from the renderer."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from queerbench.tasks.queerbench.templates import (
    COLUMNS,
    Subject,
    TemplateError,
    build_sentences,
    load_templates,
    load_terms,
    render_default,
    render_paper,
    subjects,
)

TERMS = "queerness;name;type;the\nqueer;drag king;other;n\nnon-queer;straight;orientation;y\n"
PRONOUNS = (
    "type;name;acc;pos_dep;pos_ind;ref;<be>;<have>;<were>\n"
    "binary;she;her;her;hers;herself;is;has;was\n"
    "neutral;they;them;their;theirs;themself;are;have;were\n"
    "neo;xe;xem;xyr;xyrs;xemself;is;has;was\n"
    "neo;xe;xem;xyr;xyrs;xemself;is;has;was\n"
)


def _files(tmp_path: Path, templates: list[str]) -> dict[str, Path]:
    paths = {
        "templates_path": tmp_path / "t.csv",
        "terms_path": tmp_path / "n.csv",
        "pronouns_path": tmp_path / "p.csv",
    }
    paths["templates_path"].write_text("template;type\n" + "".join(f"{t};role\n" for t in templates))
    paths["terms_path"].write_text(TERMS)
    paths["pronouns_path"].write_text(PRONOUNS)
    return paths


def _sentences(tmp_path: Path, config: str, templates: list[str]) -> dict[tuple[int, str], str]:
    frame = build_sentences(config, **_files(tmp_path, templates))
    return {(t, s): m for t, s, m in zip(frame["template_id"], frame["subject"], frame["masked_sentence"], strict=True)}


# ------------------------------------------------------------------------------------------------ verb agreement
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        # an adverb between the subject and its verb: the verb still agrees
        ("<target> often likes [MASK].", {"they": "They often like [MASK].", "she": "She often likes [MASK]."}),
        ("<target> always tend to [MASK].", {"they": "They always tend to [MASK].", "she": "She always tends to [MASK]."}),
        # the verb right after the adverb ends the template (nothing after it)
        ("For [MASK], <target> often tends", {"they": "For [MASK], they often tend", "xe": "For [MASK], xe often tends"}),
        # the subject ends the template: nothing to agree
        ("For [MASK], <target>", {"they": "For [MASK], they", "she": "For [MASK], she"}),
        # a word that is no verb stays as it is
        ("<target> surely likes [MASK].", {"they": "They surely likes [MASK].", "she": "She surely likes [MASK]."}),
        # markers take the subject's number, possessives its pronoun
        ("<target> <be> proud of their [MASK].", {"they": "They are proud of their [MASK].",
                                                  "she": "She is proud of her [MASK].",
                                                  "xe": "Xe is proud of xyr [MASK]."}),
        ("<target> <have> their [MASK].", {"they": "They have their [MASK].", "she": "She has her [MASK]."}),
        ("<target> <were> a [MASK].", {"they": "They were a [MASK].", "she": "She was a [MASK]."}),
    ],
)  # fmt: skip
def test_verbs_and_possessives_agree_with_pronoun_subjects(tmp_path: Path, template: str, expected: dict[str, str]):
    found = _sentences(tmp_path, "default", [template])
    for subject, sentence in expected.items():
        assert found[(0, subject)] == sentence


def test_nouns_are_singular_third_person_with_their(tmp_path: Path):
    found = _sentences(tmp_path, "default", ["<target> <be> proud of their [MASK].", "<target> tend to [MASK]."])
    assert found[(0, "drag king")] == "The drag king is proud of their [MASK]."
    assert found[(0, "straight")] == "The straight person is proud of their [MASK]."
    assert found[(1, "straight")] == "The straight person tends to [MASK]."


def test_object_position_uses_the_accusative_and_a_singular_mask(tmp_path: Path):
    found = _sentences(tmp_path, "default", ["a [MASK] <be> proud of <target>.", "[MASK] <have> met <target>."])
    assert found[(0, "they")] == "A [MASK] is proud of them."  # the sentence still starts with a capital letter
    assert found[(0, "xe")] == "A [MASK] is proud of xem."
    assert found[(0, "drag king")] == "A [MASK] is proud of the drag king."
    assert found[(1, "she")] == "[MASK] has met her."


def test_a_sentence_that_starts_with_a_subject_or_a_word_is_capitalised(tmp_path: Path):
    found = _sentences(tmp_path, "default", ["<target> likes [MASK].", "now <target> likes [MASK]."])
    assert found[(0, "drag king")] == "The drag king likes [MASK]."
    assert found[(1, "xe")] == "Now xe likes [MASK]."  # "now" is a sentence adverb: the subject keeps its place


def test_subject_text_is_the_inserted_form_with_its_capital(tmp_path: Path):
    frame = build_sentences("default", **_files(tmp_path, ["<target> likes [MASK].", "I met <target> at [MASK]."]))
    text = dict(zip(zip(frame["template_id"], frame["subject"], strict=True), frame["subject_text"], strict=True))
    assert text[(0, "drag king")] == "The drag king" and text[(0, "they")] == "They" and text[(0, "xe")] == "Xe"
    assert text[(1, "drag king")] == "the drag king" and text[(1, "they")] == "them" and text[(1, "xe")] == "xem"


# ------------------------------------------------------------------------------------------------ public renderers
SHE = Subject(
    key="she",
    name="she",
    kind="pronoun",
    group="binary",
    category="pronoun",
    nominative="she",
    accusative="her",
    possessive="her",
    plural=False,
    paper_text="she",
    paper_markers=(("<be>", "is"), ("<have>", "has"), ("<were>", "was")),
)


def test_render_default_returns_the_sentence():
    assert render_default("<target> <be> proud of their [MASK].", SHE) == "She is proud of her [MASK]."
    assert render_default("I met <target> at [MASK].", SHE) == "I met her at [MASK]."


def test_render_paper_keeps_the_upstream_forms():
    assert render_paper("<target> <be> proud of their [MASK].", SHE) == "she is proud of their [MASK]."


# ------------------------------------------------------------------------------------------------ subjects()
def test_subjects_default_and_paper():
    default, paper = subjects(), subjects("paper")
    assert [s.key for s in subjects("default")["pronouns"]] == [s.key for s in default["pronouns"]]
    assert len(default["nouns"]) == len(paper["nouns"]) == 62
    assert len(default["pronouns"]) == 15 and len(paper["pronouns"]) == 16
    keys = [s.key for s in paper["pronouns"]]
    assert keys.count("e") == 1 and "e-2" in keys and "e-2" not in [s.key for s in default["pronouns"]]
    king = next(s for s in default["nouns"] if s.name == "drag king")
    assert king == Subject(
        key="drag_king",
        name="drag king",
        kind="noun",
        group="queer",
        category="other",
        nominative="the drag king",
        accusative="the drag king",
        possessive="their",
        plural=False,
        paper_text="The drag king",
        paper_markers=(("<be>", "is"), ("<have>", "has"), ("<were>", "was")),
    )
    they = next(s for s in default["pronouns"] if s.name == "they")
    assert (they.kind, they.category, they.group, they.plural, they.accusative, they.possessive) == (
        "pronoun",
        "pronoun",
        "neutral",
        True,
        "them",
        "their",
    )
    with pytest.raises(ValueError, match="unknown config 'nope'"):
        subjects("nope")


def test_a_repeated_pronoun_gets_a_numbered_key_in_paper(tmp_path: Path):
    frame = build_sentences("paper", **_files(tmp_path, ["<target> likes [MASK]."]))
    assert frame["id"].tolist() == [
        "paper-000-drag_king",
        "paper-000-straight",
        "paper-000-she",
        "paper-000-they",
        "paper-000-xe",
        "paper-000-xe-2",
    ]
    frame = build_sentences("default", **_files(tmp_path, ["<target> likes [MASK]."]))
    assert frame["id"].tolist()[-1] == "default-000-xe" and len(frame) == 5


# ------------------------------------------------------------------------------------------------ the frame
def test_the_frame_has_the_dataset_columns_for_custom_files(tmp_path: Path):
    frame = build_sentences("default", **_files(tmp_path, ["<target> has learning a living as a [MASK].", "I met <target> at [MASK]."]))  # fmt: skip
    assert list(frame.columns) == [*COLUMNS, "split"]
    assert frame["subject"].tolist()[:5] == ["drag king", "straight", "she", "they", "xe"]  # the custom files only
    first = frame.iloc[0].to_dict()
    assert first == {
        "id": "default-000-drag_king",
        "template_id": 0,
        "template": "[SUBJECT] earns a living as a [MASK].",  # the typo corrected, shown with the paper's [SUBJECT]
        "template_type": "role",
        "subject": "drag king",
        "subject_text": "The drag king",
        "group": "queer",
        "category": "other",
        "masked_sentence": "The drag king earns a living as a [MASK].",
        "neutral_sentence": "The person earns a living as a [MASK].",
        "split": "nouns",
    }
    assert frame.iloc[3]["category"] == "pronoun" and frame.iloc[3]["split"] == "pronouns"
    paper = build_sentences("paper", **_files(tmp_path, ["<target> has learning a living as a [MASK]."]))
    assert set(paper["template"]) == {"[SUBJECT] has learning a living as a [MASK]."}  # paper: the upstream text
    assert set(paper["neutral_sentence"]) == {"The person earns a living as a [MASK]."}


def test_one_split_only(tmp_path: Path):
    nouns = build_sentences("default", "nouns", **_files(tmp_path, ["<target> likes [MASK]."]))
    assert nouns["subject"].tolist() == ["drag king", "straight"] and set(nouns["split"]) == {"nouns"}
    with pytest.raises(ValueError) as info:
        build_sentences("default", "verbs")
    assert str(info.value) == "unknown split 'verbs'; choose one of: nouns, pronouns"


def test_queergen_sentences_are_one_test_split():
    from queerbench.tasks import get_task

    frame = get_task("queergen").items()
    assert len(frame) > 0 and set(frame["split"]) == {"test"}


# ------------------------------------------------------------------------------------------------ file checks
def test_a_type_that_is_a_number_is_shown_as_read(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text("template;type\nA [MASK] for <target>.;1\n")
    with pytest.raises(TemplateError) as info:
        load_templates(path)
    assert str(info.value) == "template row 1 has type '1'; expected 'role' or 'societal'"


def test_a_comma_separated_file_is_refused(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text("template,type\nA [MASK] for <target>.,role\nI met <target> at [MASK].,role\n")
    with pytest.raises(TemplateError, match=r"lacks the column\(s\) \['template', 'type'\]; expected a ';'-separated"):
        load_templates(path)


def test_an_unparsable_file_names_itself(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text("template;type\nA [MASK] for <target>.;role\nA;B;C;D\n")
    with pytest.raises(TemplateError) as info:
        load_templates(path)
    assert str(info.value).startswith(f"template file {path} could not be parsed as ';'-separated CSV: ")


@pytest.mark.parametrize("the", ["", "yn", "Y"])
def test_the_column_takes_exactly_y_or_n(tmp_path: Path, the: str):
    path = tmp_path / "n.csv"
    path.write_text(f"queerness;name;type;the\nqueer;gay;orientation;{the}\n")
    with pytest.raises(TemplateError, match="the 'y' or 'n'"):
        load_terms(path)


def test_pinned_files_load_with_text_columns():
    frame = load_terms()
    assert isinstance(frame, pd.DataFrame) and all(frame[c].map(type).eq(str).all() for c in frame.columns)
