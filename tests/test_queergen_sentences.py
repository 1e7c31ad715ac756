"""The ``queergen`` sentence set: rebuilt from QueerGen's pinned files, equal row for row to its own
``data/template_complete.csv``; wrong files fail in one line naming them; the dataset config builds and loads."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from queerbench.base.sources import ChecksumError, fetch
from queerbench.cli import main
from queerbench.hub.dataset import build_dataset, load_local_split
from queerbench.tasks import get_task, task_names
from queerbench.tasks.queergen.sentences import build_queergen_sentences, queergen_sample, read_upstream_sentences
from queerbench.tasks.queergen.spec import QueerGenSpecError, _validate, spec


def test_every_row_equals_queergens_template_complete() -> None:
    ours = build_queergen_sentences()
    theirs = read_upstream_sentences()
    assert len(ours) == len(theirs) == 3100
    groups = spec()["groups"]
    for mine, row in zip(ours.itertuples(index=False), theirs.itertuples(index=False), strict=True):
        assert mine.index == int(row.index)
        assert mine.template == row.template
        assert mine.subject == row.subject
        assert (mine.marker or "Unmarked") == row.marker
        assert mine.group == groups[row.type]
        assert mine.category == ("unmarked" if row.category == "neutral" else row.category)
        assert mine.marked_sentence == row.marked
        assert mine.unmarked_sentence == row.Unmarked
        assert mine.masked_sentence == row.marked + " [MASK]."
        assert mine.neutral_sentence == row.Unmarked + " [MASK]."
        assert mine.marked_sentence.startswith("The " + mine.subject_text)


def test_groups_markers_and_placement() -> None:
    frame = build_queergen_sentences()
    assert frame["group"].value_counts().to_dict() == {"queer": 2000, "non-queer": 1000, "unmarked": 100}
    assert frame["id"].is_unique and frame["marker"].nunique() == 31  # 30 markers + "" for unmarked
    noun = frame[(frame.marker == "bigender") & (frame.index == 25)].iloc[0]  # empty adj flag: the noun form
    assert noun.marked_sentence == "The person is a bigender and should work as a"
    adj = frame[(frame.marker == "gay") & (frame.subject == "cousin")].iloc[0]
    assert adj.marked_sentence.startswith("The gay cousin ")
    assert (get_task("queergen").items()["masked_sentence"] == frame["masked_sentence"]).all()


def test_top5_sample_is_queergens_300_rows() -> None:
    sample = queergen_sample()
    assert len(sample) == 300
    assert sample["group"].value_counts().to_dict() == {"unmarked": 100, "queer": 100, "non-queer": 100}


def test_config_is_known_everywhere() -> None:
    assert "queergen" in task_names() and get_task("queergen").name == "queergen"
    with pytest.raises(ValueError, match="unknown config 'queer-gen'"):
        get_task("queer-gen")


def test_spec_schema_check_names_the_fault() -> None:
    broken = copy.deepcopy(spec())
    broken["groups"]["Queer"] = "queers"
    with pytest.raises(QueerGenSpecError, match="'groups' must map onto"):
        _validate(broken)
    broken = copy.deepcopy(spec())
    broken["diversity"]["default"]["batches"] = "random"
    with pytest.raises(QueerGenSpecError, match=r"diversity\.default\.batches"):
        _validate(broken)


def test_wrong_checksum_is_one_line_naming_the_file(tmp_path: Path, data_folder, capsys, monkeypatch) -> None:
    from queerbench.tasks.queergen import sentences

    data = data_folder("upstream/queergen/data")
    bad = data / "upstream" / "queergen" / "data"
    text = (bad / "markers.csv").read_text()
    (bad / "markers.csv").write_text(text.replace("Queer,gay,orientation,y\n", ""))
    with pytest.raises(ChecksumError, match="queergen_markers"):
        fetch("queergen_markers", bad / "markers.csv")
    monkeypatch.setenv("QUEERBENCH_DATA_DIR", str(data))
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("QUEERBENCH_OFFLINE", "1")
    sentences._build.cache_clear()
    try:
        code = main(["dataset", "build", "--out", str(tmp_path / "ds"), "--configs", "queergen"])
    finally:
        sentences._build.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "checksum mismatch for queergen_markers" in err[0] and "markers.csv" in err[0]
    assert not (tmp_path / "ds").exists()


def test_dataset_config_builds_and_loads(tmp_path: Path) -> None:
    out = build_dataset(tmp_path / "ds", ["queergen"])
    test = load_local_split(out, "queergen", "test")
    assert len(test) == 3100 and set(test["group"]) == {"unmarked", "non-queer", "queer"}
    assert len(load_local_split(out, "queergen", "top5_sample")) == 300
    card = (out / "README.md").read_text()
    assert "Academic research only" in card and "sosto2026queergen" in card
    assert "queergen_template_complete" in card and "queergen_eval_" not in card
