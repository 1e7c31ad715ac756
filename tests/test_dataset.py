"""The Hub-ready dataset folder: layout, card, offline loading, determinism and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from datasets import load_dataset

from queerbench.cli import main
from queerbench.hub.dataset import build_dataset
from queerbench.tasks.queerbench.templates import COLUMNS


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("ds") / "out", ["default", "paper"])


@pytest.mark.parametrize(
    ("config", "split", "rows"),
    [("paper", "nouns", 6572), ("paper", "pronouns", 1696), ("default", "nouns", 6386), ("default", "pronouns", 1545)],
)
def test_every_config_and_split_loads_offline(built: Path, config: str, split: str, rows: int):
    ds = load_dataset(str(built), config, split=split)
    assert ds.num_rows == rows
    assert ds.column_names == list(COLUMNS)
    groups = set(ds["group"])
    assert groups == ({"queer", "non-queer"} if split == "nouns" else {"neo", "neutral", "binary"})


def test_default_config_is_default(built: Path):
    ds = load_dataset(str(built), split="pronouns")
    assert ds.num_rows == 1545


def test_card_metadata(built: Path):
    text = (built / "README.md").read_text()
    meta = yaml.safe_load(text.split("---")[1])
    configs = {c["config_name"]: c for c in meta["configs"]}
    assert configs["default"].get("default") is True and "default" not in configs["paper"]
    info = {c["config_name"]: c for c in meta["dataset_info"]}
    assert {s["name"]: s["num_examples"] for s in info["paper"]["splits"]} == {"nouns": 6572, "pronouns": 1696}
    body = text.split("---", 2)[2]
    from queerbench import __version__

    assert __version__ in body and "CC BY-NC-SA 4.0" in body and "Sosto" in body and "Ostrow" in body
    assert "`paper`" in body and "`default`" in body and "Content note" in body


def test_building_twice_is_byte_identical(built: Path, tmp_path: Path):
    again = build_dataset(tmp_path / "again", ["default", "paper"])
    for parquet in sorted(built.rglob("*.parquet")):
        assert parquet.read_bytes() == (again / parquet.relative_to(built)).read_bytes(), parquet.name
    assert (built / "README.md").read_text() == (again / "README.md").read_text()


def test_output_folder_holding_something_else_is_refused(tmp_path: Path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(FileExistsError, match="--overwrite"):
        build_dataset(out, ["default"])
    with pytest.raises(FileExistsError, match="holds something else"):
        build_dataset(out, ["default"], overwrite=True)
    assert (out / "thesis.tex").read_text() == "precious" and len(list(out.iterdir())) == 1


def test_overwrite_replaces_an_earlier_build(built: Path, tmp_path: Path):
    out = build_dataset(tmp_path / "o", ["paper"])
    build_dataset(out, ["default"], overwrite=True)
    assert (out / "default").is_dir() and not (out / "paper").exists()


def test_unknown_config_leaves_nothing_behind(tmp_path: Path):
    with pytest.raises(ValueError, match="unknown dataset config 'nope'"):
        build_dataset(tmp_path / "x", ["default", "nope"])
    assert not (tmp_path / "x").exists()
    assert not list(tmp_path.iterdir())


def test_unknown_split_is_a_clear_error(built: Path):
    with pytest.raises(ValueError, match="nouns"):
        load_dataset(str(built), "default", split="verbs")


def test_cli_builds_and_reports_errors_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["dataset", "build", "--out", str(tmp_path / "d"), "--configs", "paper"]) == 0
    assert (tmp_path / "d/paper/nouns-00000-of-00001.parquet").is_file()
    assert main(["dataset", "build", "--out", str(tmp_path / "d")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["dataset", "build", "--out", str(tmp_path / "e"), "--configs", "bogus"]) == 2
    assert "unknown dataset config 'bogus'" in capsys.readouterr().err


def test_python_dash_m_works_like_the_console_script():
    out = subprocess.run([sys.executable, "-m", "queerbench", "--version"], capture_output=True, text=True, check=True)
    from queerbench import __version__

    assert out.stdout.strip() == f"queerbench {__version__}"


def test_scm_config_in_the_hub_dataset(tmp_path: Path):
    out = build_dataset(tmp_path / "scm", ["default", "scm"])
    survey = load_dataset(str(out), "scm", split="survey")
    generation = load_dataset(str(out), "scm", split="generation")
    assert survey.num_rows > 0 and generation.num_rows > 0
    assert {"group", "prompt_type", "prompt"} <= set(survey.column_names)
    assert set(generation["task"]) == {"generation"} and len(set(survey["group"])) == 7
    meta = yaml.safe_load((out / "README.md").read_text().split("---")[1])
    assert [c["config_name"] for c in meta["configs"]] == ["default", "scm"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"pretty_name": ""}, "dataset.pretty_name must be a non-empty string"),
        ({"tags": "bias"}, "dataset.tags must be a list of strings"),
        ({"default_config_fields": None}, "dataset.default_config_fields must be a mapping"),
        ({"configs": []}, "dataset.configs is derived from the configs built: remove it"),
    ],
)
def test_a_malformed_dataset_front_matter_in_cards_yaml_is_one_line(
    monkeypatch: pytest.MonkeyPatch, change: dict, problem: str
) -> None:
    from queerbench.base import release_config
    from queerbench.hub.dataset import card_front_matter

    real = release_config.hub_config_text
    cards = yaml.safe_load(real("cards.yaml"))
    assert card_front_matter() == cards["dataset"]  # the card's front matter is the data file's, as written
    cards["dataset"].update(change)
    monkeypatch.setattr(
        release_config,
        "hub_config_text",
        lambda name, checkout=None: yaml.safe_dump(cards) if name == "cards.yaml" else real(name, checkout),
    )
    with pytest.raises(ValueError, match=rf"^hub_configs/cards.yaml: {problem}[^\n]*$"):
        card_front_matter()
