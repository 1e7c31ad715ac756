"""`queerbench run` end to end on a tiny local model: outputs, resume, reuse, comparison and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.run.pipeline import RunOptions, run_benchmark
from tests.run_parts import fix_part_size
from tests.tiny_models import tiny_bert, tiny_gpt2

FAST = {"n_bootstrap": 50, "n_permutations": 50}


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tiny_bert(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module")
def finished(bert: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "run"
    run_benchmark(RunOptions(model=bert, limit=3, toxicity="none", **FAST), out, log=lambda _: None)
    return out


def test_outputs_of_a_run(finished: Path):
    for name in ("predictions.parquet", "scores.json", "report.md", "heatmap.png", "categories.png", "comparison.png"):
        assert (finished / name).is_file(), name
    preds = pd.read_parquet(finished / "predictions.parquet")
    assert len(preds) == 3 * 77 and {"id", "group", "category", "tokens", "probs", "completed", "top1"} <= set(
        preds.columns
    )
    assert all(len(t) == 5 for t in preds["tokens"]) and (preds["top1"] == [t[0] for t in preds["tokens"]]).all()
    assert preds["completed"].iloc[0][0] == preds["masked_sentence"].iloc[0].replace(
        "[MASK]", preds["tokens"].iloc[0][0]
    )
    scores = json.loads((finished / "scores.json").read_text())
    assert scores["config"] == "default" and scores["k"] == 5 and scores["top1"]["k"] == 1
    run = scores["run"]
    assert run["model_metadata"]["architecture"] == "BertForMaskedLM" and run["device"] == "cpu"
    assert run["queerbench_version"] and "predict_s" in run["timings_s"] and scores["scorers"]["hurtlex"]["version"]
    report = (finished / "report.md").read_text()
    assert report.index("Content note") < report.index("## Scores") and "![heatmap](heatmap.png)" in report


def test_rerun_reuses_and_does_no_inference(finished: Path, bert: str, monkeypatch: pytest.MonkeyPatch):
    def boom(*args, **kwargs):
        raise AssertionError("inference must not run again")

    monkeypatch.setattr("queerbench.models.masked.predict.load_masked_lm", boom)
    messages: list[str] = []
    result = run_benchmark(RunOptions(model=bert, limit=3, toxicity="none", **FAST), finished, log=messages.append)
    assert result.reused_predictions and result.n_predicted == 0 and "reusing" in messages[0]


def test_killed_run_resumes_where_it_stopped(bert: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fix_part_size(monkeypatch, 40)
    import queerbench.models.masked.predict as predict_module

    real = predict_module.predict
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(predict_module, "predict", flaky)
    options = RunOptions(model=bert, limit=2, toxicity="none", **FAST)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(options, tmp_path / "r", log=lambda _: None)
    chunks = sorted((tmp_path / "r/.chunks").glob("chunk-*.parquet"))
    assert len(chunks) == 2 and not (tmp_path / "r/predictions.parquet").exists()
    monkeypatch.setattr(predict_module, "predict", real)
    result = run_benchmark(options, tmp_path / "r", log=lambda _: None)
    assert result.n_predicted == 2 * 77 - 80  # only the sentences not yet saved
    fresh = run_benchmark(options, tmp_path / "fresh", log=lambda _: None)
    resumed = pd.read_parquet(tmp_path / "r/predictions.parquet")
    assert (
        resumed["tokens"].map(list).tolist()
        == pd.read_parquet(tmp_path / "fresh/predictions.parquet")["tokens"].map(list).tolist()
    )
    assert fresh.scores["hurtlex"] == result.scores["hurtlex"]


def test_out_dir_of_another_model_is_refused(finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    other = tiny_bert(tmp_path, name="other-bert")
    assert main(["run", "--model", str(other), "--limit", "3", "--toxicity", "none", "--out", str(finished)]) == 2
    assert "holds another run" in capsys.readouterr().err
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign/notes.txt").write_text("mine")
    assert main(["run", "--model", str(other), "--out", str(tmp_path / "foreign")]) == 2
    assert "holds no queerbench run" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "0"], "--limit must be at least 1"),
        (["--top-k", "0"], "--top-k must be a positive integer"),
        (["--top-k", "100000"], "--top-k 100000 exceeds the"),
        (["--toxicity", "detoxify"], "unknown toxicity scorer"),
    ],
)
def test_bad_run_arguments(bert: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], args, message):
    assert (
        main(
            [
                "run",
                "--model",
                bert,
                "--out",
                str(tmp_path / "x"),
                *([] if "--toxicity" in args else ["--toxicity", "none"]),
                *args,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_causal_model_with_method_mlm_is_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    gpt2 = tiny_gpt2(tmp_path)  # (with --method auto a causal LM runs `scored`: tests/test_run_generative.py)
    assert (
        main(["run", "--model", str(gpt2), "--method", "mlm", "--out", str(tmp_path / "g"), "--toxicity", "none"]) == 2
    )
    err = capsys.readouterr().err
    assert "causal LM" in err and "--method scored" in err and "Traceback" not in err


def test_missing_model_is_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert (
        main(["run", "--model", "no-such-org/no-such-model", "--out", str(tmp_path / "m"), "--toxicity", "none"]) == 2
    )
    err = capsys.readouterr().err
    assert "no-such-org/no-such-model" in err and "Traceback" not in err


def test_score_and_compare_commands(finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert (
        main(["score", str(finished / "predictions.parquet"), "--toxicity", "none", "--out", str(tmp_path / "s.json")])
        == 0
    )
    scored = json.loads((tmp_path / "s.json").read_text())
    saved = json.loads((finished / "scores.json").read_text())
    assert scored["hurtlex"] == saved["hurtlex"]
    import shutil

    twin = tmp_path / "twin"
    shutil.copytree(finished, twin)
    assert main(["compare", str(finished), str(twin), "--out", str(tmp_path / "cmp")]) == 0
    table = pd.read_csv(tmp_path / "cmp/compare.csv", index_col=0)
    # same model/k/config and settings: rows are told apart by the folder's name, not its full path
    assert len(table) == 2 and table.index[0].startswith("tiny-bert · default · top-5")
    assert table.index[1] == "tiny-bert · default · top-5 · twin"
    assert main(["compare", str(finished), str(finished), "--out", str(tmp_path / "cmp2")]) == 2
    assert list(table.columns) == ["neo", "neutral", "binary", "queer", "non-queer"]
    assert (tmp_path / "cmp/compare_heatmap.png").is_file() and (tmp_path / "cmp/compare.md").is_file()


def test_score_reproduces_a_paper_file(reference_file, capsys: pytest.CaptureFixture[str]):
    path = reference_file("upstream/queerbench/data/evaluation/bert-base-uncased_template_1.csv")
    assert main(["score", str(path), "--config", "paper", "--toxicity", "precomputed"]) == 0
    out = capsys.readouterr().out
    assert "queer: QB 4.07" in out and "non-queer: QB 3.18" in out


def test_check_predictions_command(finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    preds = pd.read_parquet(finished / "predictions.parquet")
    csv = tmp_path / "ref.csv"
    pd.DataFrame(
        {
            "template": preds["masked_sentence"],
            "queerness": "queer",
            "name": preds["subject"],
            "type": preds["category"],
            "prediction": [str(list(t)) for t in preds["tokens"]],
        }
    ).to_csv(csv, sep=";", index=False)
    assert main(["check-predictions", str(finished), "--against", str(csv)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["top1_agreement"] == 1.0 and report["exact_list_agreement"] == 1.0


def test_a_failed_start_does_not_lock_its_folder(bert: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = str(tmp_path / "r")
    assert main(["run", "--model", bert, "--limit", "1", "--top-k", "100000", "--toxicity", "none", "--out", out]) == 2
    assert main(["run", "--model", bert, "--limit", "1", "--top-k", "3", "--toxicity", "none", "--out", out]) == 0
    assert json.loads((tmp_path / "r/scores.json").read_text())["k"] == 3


def test_default_out_dir_separates_cache_keys():
    from queerbench.run.pipeline import default_out_dir

    full = default_out_dir(RunOptions(model="org/m"))
    limited = default_out_dir(RunOptions(model="org/m", limit=10))
    bf16 = default_out_dir(RunOptions(model="org/m", dtype="bfloat16", revision="v1"))
    assert len({full, limited, bf16}) == 3 and full.name == "org_m-default-k5"


def test_missing_toxicity_source_fails_before_inference(
    bert: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.delenv("PERSPECTIVE_API_KEY", raising=False)

    def boom(*args, **kwargs):
        raise AssertionError("no model may load when the scorer is unusable")

    monkeypatch.setattr("queerbench.models.masked.predict.load_masked_lm", boom)
    assert (
        main(["run", "--model", bert, "--limit", "1", "--toxicity", "perspective", "--out", str(tmp_path / "p")]) == 2
    )
    err = capsys.readouterr().err
    assert "PERSPECTIVE_API_KEY" in err and "Traceback" not in err
    assert not (tmp_path / "p").exists()
