"""One-line errors: an output file that is corrupt or truncated names itself and the fix ("delete it and rerun"); a
bad flag value lists the valid ones in one line (exit status 2, no usage block); ``run.json`` records the embedded
model's checksum, and an older ``run.json`` that recorded none still resumes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from queerbench.base.files import CorruptOutputError, read_json, read_parquet
from queerbench.cli import main
from queerbench.models.fingerprint import fingerprint_model, fingerprints_differ
from queerbench.models.generation import DEFAULT_MODEL, ResponseCache
from queerbench.run import pipeline as run_module
from queerbench.run.pipeline import RunOptions


def _truncated_parquet(path: Path) -> Path:
    pd.DataFrame({"id": ["a", "b"], "tokens": [["x"], ["y"]]}).to_parquet(path, index=False)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a copy cut short: no footer, no magic bytes at the end
    return path


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("queerbench: error: "), err
    return lines[0]


# ------------------------------------------------------------------------------------------- the readers
def test_a_truncated_parquet_names_the_file_and_the_fix(tmp_path: Path):
    path = _truncated_parquet(tmp_path / "predictions.parquet")
    with pytest.raises(CorruptOutputError) as info:
        read_parquet(path)
    message = str(info.value)
    assert message.startswith(f"{path} is corrupt or truncated (") and message.endswith("; delete it and rerun")
    assert "\n" not in message and isinstance(info.value, ValueError)
    (tmp_path / "empty.parquet").write_bytes(b"")
    with pytest.raises(CorruptOutputError, match=r"empty\.parquet is corrupt or truncated"):
        read_parquet(tmp_path / "empty.parquet")
    with pytest.raises(FileNotFoundError):  # a missing file is not a corrupt one
        read_parquet(tmp_path / "absent.parquet")


def test_a_truncated_json_names_the_file_and_the_fix(tmp_path: Path):
    path = tmp_path / "scores.json"
    path.write_text('{"queerbench": {"queer": 1.')
    with pytest.raises(
        CorruptOutputError, match=r"scores.json is corrupt or truncated \(JSONDecodeError: .*\); fix it"
    ):
        read_json(path, fix="fix it")
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CorruptOutputError, match="UnicodeDecodeError"):
        read_json(path)
    (tmp_path / "ok.json").write_text("[1]")
    assert read_json(tmp_path / "ok.json") == [1]


def test_a_corrupt_reply_cache_is_one_line(tmp_path: Path):
    path = tmp_path / "replies.sqlite"
    with ResponseCache(path) as cache:
        cache.put("k", "p0", 0, "a reply", {})
    data = path.read_bytes()
    path.write_bytes(b"this is not a database" + data[100:200])
    with pytest.raises(CorruptOutputError) as info:
        ResponseCache(path)
    assert str(info.value).startswith(f"{path} is corrupt or truncated (DatabaseError: ")
    assert "delete it and rerun (the replies it held are asked again)" in str(info.value)


def test_a_locked_cache_is_not_called_corrupt(tmp_path: Path):
    path = tmp_path / "replies.sqlite"
    ResponseCache(path).close()
    holder = sqlite3.connect(str(path), timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            cache = ResponseCache(path)
            cache.put("k", "p0", 0, "a reply", {})
    finally:
        holder.rollback()
        holder.close()


# ------------------------------------------------------------------------------------------- the commands
def test_score_of_a_truncated_predictions_file(tmp_path: Path, capsys):
    path = _truncated_parquet(tmp_path / "predictions.parquet")
    assert main(["score", str(path), "--toxicity", "none"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{path} is corrupt or truncated" in line and "delete it and rerun `queerbench run`" in line


def test_compare_of_a_truncated_scores_json(tmp_path: Path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "scores.json").write_text('{"config": "default", "k"')
    assert main(["compare", str(run), "--out", str(tmp_path / "cmp")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{run / 'scores.json'} is corrupt or truncated" in line and "delete it and rerun `queerbench run`" in line


def test_scm_report_of_a_truncated_responses_file(tmp_path: Path, capsys):
    (tmp_path / "scm.json").write_text(json.dumps({"run": {"model": "m"}}))
    _truncated_parquet(tmp_path / "responses.parquet")
    assert main(["scm", "report", str(tmp_path)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "responses.parquet is corrupt or truncated" in line and "delete it and rerun `queerbench scm run`" in line


def test_check_predictions_of_a_truncated_file(tmp_path: Path, capsys, reference_file):
    path = _truncated_parquet(tmp_path / "predictions.parquet")
    against = reference_file("upstream/queerbench/data/prediction/bert-base-uncased_template_5.csv")
    assert main(["check-predictions", str(path), "--against", str(against)]) == 2
    assert f"{path} is corrupt or truncated" in _one_error_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------------------- bad flag values
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--config", "nonsense"], "argument --config: invalid choice: 'nonsense' (choose from "),
        (["run", "--method", "nonsense"], "argument --method: invalid choice: 'nonsense' (choose from 'auto', "),
        (["score", "x.parquet", "--config", "nonsense"], "argument --config: invalid choice: 'nonsense'"),
        (["run", "--top-k", "five"], "argument --top-k: invalid int value: 'five'"),
        (["scm", "run", "--scoring", "best"], "argument --scoring: invalid choice: 'best' (choose from "),
        (["compare"], "the following arguments are required: runs, --out"),
    ],
)
def test_a_bad_flag_value_is_one_line_listing_the_valid_ones(args, expected, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    captured = capsys.readouterr()
    line = _one_error_line(captured.err)
    assert expected in line and "usage:" not in captured.err and line.endswith("--help`")
    if "--config" in args:
        assert "'default', 'paper', 'queergen'" in line


def test_help_still_prints_the_usage(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0 and "usage: queerbench run" in capsys.readouterr().out


def test_a_bad_toxicity_scorer_is_one_line_listing_the_valid_ones(tmp_path: Path, capsys):
    assert main(["run", "--toxicity", "nonsense", "--out", str(tmp_path / "x")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert (
        "unknown toxicity scorer 'nonsense'; choose one of: embedded, surrogate, hf:<model id or path>, perspective, none"
        in line
    )
    assert "precomputed" not in line  # a new run has no stored flags: `score FILE` takes that one
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------- run.json checksum
def test_run_json_records_the_embedded_models_checksum():
    fingerprint = fingerprint_model(DEFAULT_MODEL)
    assert fingerprint == fingerprint_model(None, hub="commit")  # the record scores.json gets from the loaded model
    assert fingerprint["kind"] == "embedded" and len(fingerprint["sha256"]) == 64
    options = RunOptions(model=DEFAULT_MODEL, method="scored", toxicity="none")
    assert run_module._preflight(options, will_predict=False) == fingerprint  # what run.json stores


def test_an_older_run_json_without_the_checksum_still_resumes_and_other_weights_are_refused():
    old = {"kind": "id", "model": DEFAULT_MODEL, "sha256": None}  # what run.json recorded before
    now = fingerprint_model(DEFAULT_MODEL)
    assert fingerprints_differ(old, now) == [] and fingerprints_differ(None, now) == []
    assert fingerprints_differ({"kind": "embedded", "sha256": None}, now) == []
    assert fingerprints_differ(dict(now), now) == []
    assert fingerprints_differ({"kind": "embedded", "sha256": "0" * 64}, now) == ["embedded weights"]
