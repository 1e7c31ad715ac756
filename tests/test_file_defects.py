"""The file defects of the fault probe (issue 30): what ``--overwrite`` may delete, what an ``lm-eval import`` of part
of the sentences records, an import that must not need the model, and files of the wrong shape (a JSON list where an
object belongs, a reply cache of another schema) — each one line naming the file and the fix, never a traceback.

The lm-evaluation-harness output here is written by hand in the layout ``lm_eval --log_samples`` writes
(``<model>/samples_<task>_<time>.jsonl`` next to ``results_<time>.json``), so these tests need neither lm_eval nor a
model; ``tests/test_lmeval.py`` checks that layout against a real lm_eval run.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.base.files import CorruptOutputError, read_json_object, replace_own_files
from queerbench.cli import main
from queerbench.tasks.queerbench.templates import build_sentences

TIME = "2025-01-01T00-00-00.000000"
HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("queerbench: error: "), err
    return lines[0]


# ------------------------------------------------------------------------------------ lm_eval's output, by hand
def _sentences(templates: list[int] | None = None, first: int | None = None) -> pd.DataFrame:
    """The default task's sentences in run order: of the templates at ``templates`` (positions in the sorted
    template ids), or the ``first`` N (lm_eval's ``--limit N``)."""
    frame = build_sentences("default")
    if first is not None:
        return frame.head(first)
    ids = sorted(frame["template_id"].unique())
    return frame[frame["template_id"].isin([ids[i] for i in templates or [0]])]


def _lm_eval_output(
    root: Path,
    sentences: pd.DataFrame,
    *,
    model_args: str = "pretrained=/models/tiny,dtype=float32",
    model_sha: str = "",
    reply: str = "teacher",
) -> Path:
    """A folder as ``lm_eval --model hf --log_samples --output_path root`` leaves it for queerbench_default."""
    folder = root / "models__tiny"
    folder.mkdir(parents=True)
    with (folder / f"samples_queerbench_default_{TIME}.jsonl").open("w", encoding="utf-8") as fh:
        for row in sentences.itertuples():
            doc = {"id": row.id, "masked_sentence": row.masked_sentence}
            fh.write(json.dumps({"doc_id": row.Index, "doc": doc, "filtered_resps": [reply]}) + "\n")
    results = {
        "results": {"queerbench_default": {}},
        "configs": {
            "queerbench_default": {
                "metadata": {"config": "default", "prompt_id": "queergen-2", "toxicity": "none"},
                "generation_kwargs": {"max_gen_toks": 32},
            }
        },
        "config": {"model": "hf", "model_args": model_args, "model_sha": model_sha, "device": "cpu"},
        "chat_template": None,
        "lm_eval_version": "0.4.13",
    }
    (folder / f"results_{TIME}.json").write_text(json.dumps(results), encoding="utf-8")
    return root


def _import(source: Path, out: Path) -> dict[str, Any]:
    assert main(["lm-eval", "import", str(source), "--out", str(out)]) == 0
    return json.loads((out / "scores.json").read_text())


# ------------------------------------------------------------------------------ 1. --overwrite deletes nothing else
def test_dataset_overwrite_replaces_its_own_files_and_keeps_the_researchers(tmp_path: Path, capsys):
    out = tmp_path / "ds"
    assert main(["dataset", "build", "--out", str(out), "--configs", "paper"]) == 0
    (out / "NOTES.md").write_text("my notes")
    (out / ".gitattributes").write_text("*.parquet filter=lfs")
    (out / "paper" / "checked.txt").write_text("rows checked by hand")
    assert main(["dataset", "build", "--out", str(out), "--configs", "default", "--overwrite"]) == 0
    assert (out / "NOTES.md").read_text() == "my notes"
    assert (out / ".gitattributes").read_text() == "*.parquet filter=lfs"
    assert (out / "paper" / "checked.txt").read_text() == "rows checked by hand"
    assert not list((out / "paper").glob("*.parquet"))  # the earlier build's own files are replaced
    assert (out / "default" / "nouns-00000-of-00001.parquet").is_file()
    assert "config_name: default" in (out / "README.md").read_text()
    assert "config_name: paper" not in (out / "README.md").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind
    capsys.readouterr()

    # a file at a path the build writes, which the earlier build did not write: one line, nothing changed
    (out / "paper").mkdir(exist_ok=True)
    (out / "paper" / "nouns-00000-of-00001.parquet").write_bytes(b"a colleague's file")
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert main(["dataset", "build", "--out", str(out), "--configs", "paper", "--overwrite"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "paper/nouns-00000-of-00001.parquet" in line and "did not write" in line
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    assert (out / "paper" / "nouns-00000-of-00001.parquet").read_bytes() == b"a colleague's file"


def test_overwrite_help_says_other_files_are_kept(capsys):
    for argv in (["dataset", "build", "--help"], ["lm-eval", "export", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert "other files" in text and "left" in text, argv


def test_export_overwrite_replaces_its_own_files_and_keeps_the_researchers(tmp_path: Path):
    from queerbench.lmeval.export import export_tasks

    out = tmp_path / "tasks"
    export_tasks(out, ["default"], toxicity="none")
    (out / "README.txt").write_text("how I ran lm_eval")
    (out / "queerbench_default" / "my_prompt_notes.md").write_text("notes")
    pycache = out / "queerbench_default" / "__pycache__"  # what lm_eval leaves after importing utils.py
    pycache.mkdir()
    (pycache / "utils.cpython-311.pyc").write_bytes(b"\0")
    export_tasks(out, ["paper"], toxicity="none", overwrite=True)
    assert (out / "README.txt").read_text() == "how I ran lm_eval"
    assert (out / "queerbench_default" / "my_prompt_notes.md").read_text() == "notes"
    assert sorted(p.name for p in (out / "queerbench_default").iterdir()) == ["my_prompt_notes.md"]
    assert not (out / "queerbench_default_chat").exists()  # only its own files were there: gone with them
    assert (out / "queerbench_paper" / "queerbench_paper.yaml").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_failure_while_moving_the_new_files_in_puts_the_old_ones_back(tmp_path: Path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "own.txt").write_text("old output")
    (out / "sub").mkdir()
    (out / "sub" / "own.txt").write_text("old output 2")
    (out / "mine.txt").write_text("the researcher's")
    real, calls = os.replace, []

    def flaky(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) == 3:  # both old files moved aside, the first new one about to move in
            raise OSError(28, "No space left on device")
        real(src, dst)

    from queerbench.base import files

    monkeypatch.setattr(files.os, "replace", flaky)
    own = ["own.txt", "sub/own.txt"]
    with (
        pytest.raises(OSError, match="No space"),
        replace_own_files(out, overwrite=True, own_files=lambda _: own, command="x") as tmp,
    ):
        (tmp / "own.txt").write_text("new output")
        (tmp / "new.txt").write_text("new")
    monkeypatch.setattr(files.os, "replace", real)
    assert (out / "own.txt").read_text() == "old output"
    assert (out / "sub" / "own.txt").read_text() == "old output 2"
    assert (out / "mine.txt").read_text() == "the researcher's"
    assert not (out / "new.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# --------------------------------------------------------------- 2. an import of part of the sentences says which
def test_import_of_a_later_template_records_its_sentences(tmp_path: Path):
    scores = _import(_lm_eval_output(tmp_path / "lm", _sentences([1])), tmp_path / "run")
    signature = scores["signature"]
    assert "|limit:subset|sentences:77@" in signature, signature  # not "limit:all": it is not every template
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["limit"] is None and record["sentences"].startswith("77@")
    assert record["signature"].split("|sentences:")[1][:16] == signature.split("|sentences:")[1][:16]
    report = (tmp_path / "run" / "report.md").read_text()
    template = int(_sentences([1])["template_id"].iloc[0])
    assert f"template {template} (77 of 77)" in report, report[:2000]
    assert scores["run"]["n_sentences"] == 77


def test_import_of_lm_eval_limit_100_records_the_part_template(tmp_path: Path):
    scores = _import(_lm_eval_output(tmp_path / "lm", _sentences(first=100)), tmp_path / "run")
    assert "|limit:subset|sentences:100@" in scores["signature"]
    ids = sorted(_sentences(first=100)["template_id"].unique())
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"templates {ids[0]} (77 of 77), {ids[1]} (23 of 77)" in report


def test_import_of_the_first_template_is_limit_1(tmp_path: Path):
    scores = _import(_lm_eval_output(tmp_path / "lm", _sentences([0])), tmp_path / "run")
    assert "|limit:1|" in scores["signature"] and "sentences:" not in scores["signature"]


def test_compare_warns_when_two_imports_cover_other_sentences(tmp_path: Path, capsys):
    a = tmp_path / "a"
    _import(_lm_eval_output(tmp_path / "lm-a", _sentences([1])), a)
    b = tmp_path / "b"
    _import(_lm_eval_output(tmp_path / "lm-b", _sentences([2])), b)
    same = tmp_path / "same"
    _import(_lm_eval_output(tmp_path / "lm-same", _sentences([1]), reply="doctor"), same)
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err
    assert "cover different sentences" in err, err
    assert "cover different sentences" in (tmp_path / "cmp" / "compare.md").read_text()
    assert main(["compare", str(a), str(same), "--out", str(tmp_path / "cmp2")]) == 0
    assert "cover different" not in capsys.readouterr().err  # the same 77 sentences: nothing to warn of


# -------------------------------------------------------------------- 3. an import needs no model, and no Hub
@pytest.mark.parametrize(
    ("model_args", "model_sha", "fingerprint"),
    [
        (
            "pretrained=no-such-org/no-such-model-qb30,dtype=float32",
            HUB_COMMIT,
            {"kind": "hub", "commit_hash": HUB_COMMIT},
        ),
        (
            "pretrained=no-such-org/no-such-model-qb30",
            "",
            {"kind": "id", "model": "no-such-org/no-such-model-qb30", "sha256": None},
        ),
        (
            "pretrained=/cluster/where/lm_eval/ran/model",  # a folder of another machine
            "",
            {"kind": "id", "model": "/cluster/where/lm_eval/ran/model", "sha256": None},
        ),
    ],
)
def test_import_of_a_model_not_here_is_fast_and_offline(
    tmp_path: Path, monkeypatch, model_args: str, model_sha: str, fingerprint: dict
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = _lm_eval_output(tmp_path / "lm", _sentences([0]), model_args=model_args, model_sha=model_sha)
    start = time.perf_counter()
    scores = _import(source, tmp_path / "run")
    took = time.perf_counter() - start
    assert took < 20, f"the import took {took:.1f} s"
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["model_fingerprint"] == fingerprint
    assert record["model"] == model_args.split(",")[0].removeprefix("pretrained=")
    assert ("|fp:0123456789ab|" in scores["signature"]) == bool(model_sha)
    assert scores["n"] and sum(scores["n"].values()) == 77  # every reply is scored, no model needed
    meta = json.loads((tmp_path / "run" / "model.json").read_text())
    assert meta["fingerprint"]["kind"] == "lm-eval" and meta["fingerprint"]["model_sha"] == (model_sha or None)


# --------------------------------------------------------------------- 4. files of the wrong shape: one line
def test_read_json_object_names_the_file_and_what_it_must_hold(tmp_path: Path):
    path = tmp_path / "run.json"
    path.write_text("[1, 2]")
    with pytest.raises(CorruptOutputError, match=r"run\.json must hold a JSON object, not a JSON list; fix it"):
        read_json_object(path, fix="fix it")
    path.write_text('{"a": 1}')
    assert read_json_object(path) == {"a": 1}


@pytest.fixture()
def imported(tmp_path: Path) -> Path:
    """A finished run folder (an lm-eval import of the first template)."""
    out = tmp_path / "imported"
    _import(_lm_eval_output(tmp_path / "lm", _sentences([0])), out)
    return out


def test_compare_of_a_scores_json_holding_a_list_is_one_line(imported: Path, tmp_path: Path, capsys):
    (imported / "scores.json").write_text("[]")
    capsys.readouterr()
    assert main(["compare", str(imported), "--out", str(tmp_path / "cmp")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(imported / "scores.json") in line and "JSON list" in line and "object" in line, line


def test_score_of_a_run_whose_run_json_holds_a_list_is_one_line(imported: Path, capsys):
    (imported / "run.json").write_text("[]")
    capsys.readouterr()
    code = main(["score", str(imported / "predictions.parquet"), "--toxicity", "none", "--bootstrap", "0",
                 "--permutations", "0"])  # fmt: skip
    assert code == 2
    assert f"{imported / 'run.json'} must hold a JSON object" in _one_error_line(capsys.readouterr().err)


def test_rescoring_a_run_whose_model_json_holds_a_list_is_one_line(imported: Path, capsys):
    from queerbench.run.pipeline import RunOptions, run_benchmark

    (imported / "model.json").write_text("[]")
    record = json.loads((imported / "run.json").read_text())
    options = RunOptions(model=record["model"], method="instructed", top_k=1, limit=1, toxicity="none")
    with pytest.raises(ValueError, match=r"model\.json must hold a JSON object"):
        run_benchmark(options, imported, model_fingerprint=record["model_fingerprint"], log=lambda _: None)


@pytest.mark.parametrize(
    ("what", "text", "expected"),
    [
        ("results", "[]", "must hold a JSON object"),
        ("results", "{not json", "is corrupt or truncated"),
        ("samples", "[1, 2]\n", "line 1 must hold a JSON object"),
        ("samples", "{not json\n", "line 1 is not JSON"),
    ],
)
def test_import_of_lm_eval_files_of_the_wrong_shape_is_one_line(
    tmp_path: Path, capsys, what: str, text: str, expected: str
):
    source = _lm_eval_output(tmp_path / "lm", _sentences([0]))
    path = next(source.rglob(f"{what}_*.json*"))
    path.write_text(text)
    assert main(["lm-eval", "import", str(source), "--out", str(tmp_path / "run")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(path) in line and expected in line, line
    assert not (tmp_path / "run").exists()


def test_scm_compare_of_an_scm_json_holding_a_list_is_one_line(tmp_path: Path, capsys):
    run = tmp_path / "scm-run"
    run.mkdir()
    (run / "scm.json").write_text("[]")
    assert main(["scm", "compare", str(run), str(run), "--out", str(tmp_path / "cmp")]) == 2
    assert f"{run / 'scm.json'} must hold a JSON object" in _one_error_line(capsys.readouterr().err)


def _foreign_cache(path: Path, schema: str) -> Path:
    db = sqlite3.connect(path)
    db.executescript(schema)
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize(
    "schema",
    [
        "CREATE TABLE responses (key TEXT PRIMARY KEY, reply TEXT); INSERT INTO responses VALUES ('k', 'hi');",
        "CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO experiments VALUES (1, 'x');",
    ],
    ids=["another-version", "another-program"],
)
def test_a_reply_cache_of_another_schema_is_one_line(tmp_path: Path, schema: str):
    from queerbench.models.generation import ResponseCache

    path = _foreign_cache(tmp_path / "replies.sqlite", schema)
    with pytest.raises(ValueError) as info:
        ResponseCache(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "not a queerbench reply cache" in message and "delete it" in message and "--out" in message
    db = sqlite3.connect(path)  # the file is left as it was: no table added, not switched to WAL
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    db.close()
    assert tables == ({"responses"} if "responses" in schema else {"experiments"}) and mode != "wal"


def test_a_reply_cache_of_this_schema_still_opens(tmp_path: Path):
    from queerbench.models.generation import ResponseCache

    with ResponseCache(tmp_path / "replies.sqlite") as cache:
        cache.put("k", "p", 0, "hello", {})
    with ResponseCache(tmp_path / "replies.sqlite") as cache:
        assert cache.get("k") == {"text": "hello", "meta": {}}
