"""Unit tests of the reliability fixes: model fingerprints and the resume pin, checks before inference, no half-made
output folders, file modes under the umask, one-line messages, the metric's input checks, and the report/figures."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import evaluate
import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
from run_parts import fix_part_size

from queerbench.fingerprint import describe_fingerprint, fingerprint_model, fingerprints_differ
from queerbench.io_utils import atomic_dir, write_text
from queerbench.run import RunOptions, run_benchmark
from tests.tiny_models import tiny_bert

METRIC = str(Path(__file__).resolve().parents[1] / "metric_queerbench")
FAST = {"n_bootstrap": 0, "n_permutations": 0}


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


def _rewrite_same_size(path: Path) -> None:
    """Change a file's bytes but keep its size and mtime (what a size + mtime check cannot see)."""
    info = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


# ------------------------------------------------------------------------------------------------- fingerprints
def test_fingerprint_sees_every_weight_and_tokenizer_change(bert: Path, tmp_path: Path):
    model = Path(shutil.copytree(bert, tmp_path / "copy"))
    first = fingerprint_model(str(model))
    assert first["kind"] == "local" and {"model.safetensors", "config.json"} <= set(first["files"])
    assert any(name.startswith(("vocab", "tokenizer")) for name in first["files"])
    assert fingerprint_model(model) == first  # stable, and the same for str and Path
    _rewrite_same_size(model / "model.safetensors")
    second = fingerprint_model(model)
    assert second["sha256"] != first["sha256"] and fingerprints_differ(first, second) == ["model.safetensors"]
    (model / "vocab.txt").write_text((model / "vocab.txt").read_text() + "newword\n")
    assert fingerprints_differ(second, fingerprint_model(model)) == ["vocab.txt"]
    assert describe_fingerprint(second) == f"local folder, fingerprint {second['sha256'][:12]}"


def test_fingerprint_of_a_single_model_file(tmp_path: Path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    first = fingerprint_model(gguf)
    assert first["kind"] == "local" and list(first["files"]) == ["model.gguf"]
    _rewrite_same_size(gguf)
    assert fingerprints_differ(first, fingerprint_model(gguf)) == ["model.gguf"]


def test_fingerprint_of_a_hub_id_and_of_an_empty_folder(tmp_path: Path):
    assert fingerprint_model("org/some-model") == {"kind": "id", "model": "org/some-model", "sha256": None}
    assert describe_fingerprint(fingerprint_model("org/some-model")) is None
    with pytest.raises(ValueError, match="holds no weight"):
        fingerprint_model(tmp_path)


def test_resume_against_changed_weights_is_refused(bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The issue's data corruption: kill a run on a local folder, replace its weights, rerun."""
    model = Path(shutil.copytree(bert, tmp_path / "model"))
    fix_part_size(monkeypatch, 40)
    import queerbench.mlm.predict as predict_module

    real, calls = predict_module.predict, {"n": 0}

    def killed_after_two_chunks(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(predict_module, "predict", killed_after_two_chunks)
    options = RunOptions(model=str(model), limit=2, toxicity="none", **FAST)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(options, tmp_path / "r", log=lambda _: None)
    chunks = {p.name: p.read_bytes() for p in (tmp_path / "r/.chunks").glob("chunk-*.parquet")}
    assert len(chunks) == 2
    monkeypatch.setattr(predict_module, "predict", real)
    _rewrite_same_size(model / "model.safetensors")
    with pytest.raises(ValueError, match=r"changed since the run .*\(model\.safetensors\)"):
        run_benchmark(options, tmp_path / "r", log=lambda _: None)
    assert {p.name: p.read_bytes() for p in (tmp_path / "r/.chunks").glob("chunk-*.parquet")} == chunks
    assert not (tmp_path / "r/predictions.parquet").exists()


def test_a_run_records_its_fingerprint(bert: Path, tmp_path: Path):
    result = run_benchmark(RunOptions(model=str(bert), limit=1, toxicity="none", **FAST), tmp_path / "r", log=print)
    stored = json.loads((tmp_path / "r/run.json").read_text())
    assert stored["model_fingerprint"] == fingerprint_model(bert)
    assert result.scores["run"]["fingerprint"]["sha256"] == stored["model_fingerprint"]["sha256"]
    report = (tmp_path / "r/report.md").read_text()
    assert f"local folder, fingerprint {stored['model_fingerprint']['sha256'][:12]}" in report
    assert "revision `unknown`" not in report and "reading `neutral_sentence`" not in report
    assert "not scored (`--toxicity none`)" in report
    assert f"*Heatmap: {bert.name} · default config · top-5.*" in report  # every figure has a caption


# ------------------------------------------------------------------------------------------ before inference
@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args, **kwargs):
        raise AssertionError("the model's weights must not load before every check has passed")

    monkeypatch.setattr("queerbench.mlm.predict.load_masked_lm", boom)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"top_k": 100000}, r"--top-k 100000 exceeds the \d+ whole-word"),
        ({"top_k": 100000, "config": "paper"}, r"--top-k 100000 exceeds the \d+ vocabulary entries"),
        ({"toxicity": "precomputed"}, "use `queerbench score"),
        ({"toxicity": "hf:/no/such/folder"}, "no such folder"),
        ({"model": "/no/such/model"}, "--model /no/such/model: no such"),
    ],
)
def test_checks_run_before_the_model_loads_and_leave_no_folder(
    bert: Path, tmp_path: Path, no_model_load: None, options: dict, message: str
):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        run_benchmark(RunOptions(**{"model": str(bert), "toxicity": "none", **options}), tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_an_unavailable_device_fails_before_the_model_loads(
    bert: Path, tmp_path: Path, no_model_load: None, monkeypatch: pytest.MonkeyPatch
):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # this machine's GPU, if any, is not there
    with pytest.raises(ValueError, match="CUDA is not available"):
        run_benchmark(RunOptions(model=str(bert), toxicity="none", device="cuda"), tmp_path / "r")
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="--dtype must be one of"):
        RunOptions(model=str(bert), dtype="int8")


def test_a_failed_model_load_leaves_no_half_made_folder(bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from queerbench.model_loading import ModelLoadError

    def broken(*args, **kwargs):
        raise ModelLoadError("weights are corrupt")

    monkeypatch.setattr("queerbench.mlm.predict.load_masked_lm", broken)
    options = RunOptions(model=str(bert), limit=1, toxicity="none", **FAST)
    with pytest.raises(ModelLoadError):
        run_benchmark(options, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # an empty folder the user made stays, and stays empty
    with pytest.raises(ModelLoadError):
        run_benchmark(options, tmp_path / "mine")
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())


def test_a_rerun_of_a_finished_run_needs_no_model(bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    options = RunOptions(model=str(bert), limit=1, toxicity="none", **FAST)
    run_benchmark(options, tmp_path / "r", log=lambda _: None)

    def boom(*args, **kwargs):
        raise AssertionError("a finished run is re-scored without loading the model or its tokenizer")

    monkeypatch.setattr("queerbench.mlm.predict.load_masked_lm_tokenizer", boom)
    assert run_benchmark(options, tmp_path / "r", log=lambda _: None).reused_predictions


# --------------------------------------------------------------------------------------------------- file modes
@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775)])
def test_outputs_honour_the_umask(bert: Path, tmp_path: Path, umask: int, file_mode: int, dir_mode: int):
    old = os.umask(umask)
    try:
        text = write_text(tmp_path / "a.txt", "x")
        with atomic_dir(tmp_path / "built", overwrite=False, is_ours=lambda _: True) as tmp:
            (tmp / "f").write_text("x")
        run_benchmark(RunOptions(model=str(bert), limit=1, toxicity="none", **FAST), tmp_path / "r", log=print)
    finally:
        os.umask(old)
    assert stat.S_IMODE(text.stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "built").stat().st_mode) == dir_mode
    for name in ("run.json", "predictions.parquet", "scores.json", "report.md", "heatmap.png", "model.json"):
        assert stat.S_IMODE((tmp_path / "r" / name).stat().st_mode) == file_mode, name


def test_cached_sources_honour_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from queerbench.sources import _tmp_in

    old = os.umask(0o002)
    try:
        assert stat.S_IMODE(_tmp_in(tmp_path).stat().st_mode) == 0o664
    finally:
        os.umask(old)


# ------------------------------------------------------------------------------------------------------ messages
def test_os_errors_become_one_line():
    from queerbench.commands.common import os_error_message

    message = os_error_message(PermissionError(13, "Permission denied", "/ro/run/run.json"))
    assert message.startswith("Permission denied: /ro/run/run.json;") and "\n" not in message and "--out" in message


def test_missing_source_message_is_short_and_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from queerbench.sources import SourceUnavailableError, fetch

    monkeypatch.delenv("QUEERBENCH_DATA_DIR", raising=False)
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path))
    with pytest.raises(SourceUnavailableError) as err:
        fetch("hurtlex_en", offline=True)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400
    assert "QUEERBENCH_DATA_DIR is not set" in message and "lexicons/hurtlex/hurtlex_EN.tsv" in message


def test_metric_add_batch_checks_types_too():
    qb = evaluate.load(METRIC, "paper", toxicity="none")
    with pytest.raises(ValueError, match=r"predictions\[1\] is None"):
        qb.add_batch(predictions=[["a"], None])


def test_hurtlex_level_is_refused_when_the_metric_loads():
    with pytest.raises(ValueError, match="unknown HurtLex level 'weird'"):
        evaluate.load(METRIC, "default", hurtlex_level="weird")


@pytest.mark.parametrize(
    ("config", "init", "inputs", "message"),
    [
        ("paper", {}, {"predictions": [None, ["doctor"]], "groups": ["q", "n"]}, r"predictions\[0\] is None"),
        (
            "default",
            {},
            {"predictions": [["doctor", None]], "groups": ["q"], "sentences": ["The person is a [MASK]."]},
            r"predictions\[0\]\[1\] is None",
        ),
        ("paper", {}, {"predictions": [[1], ["doctor"]], "groups": ["q", "n"]}, r"predictions\[0\]\[0\] is 1 \(int\)"),
        ("paper", {"toxicity": "none"}, {"predictions": [["a"], ["b"]], "groups": [None, "n"]}, r"groups\[0\] is None"),
        ("paper", {"toxicity": "none"}, {"predictions": [["a"]], "groups": [3]}, r"groups\[0\] is 3 \(int\)"),
        (
            "default",
            {},
            {"predictions": [["a"]], "groups": ["q"], "sentences": [None]},
            r"sentences\[0\] is None",
        ),
        (
            "paper",
            {},
            {"predictions": [["a"]], "groups": ["q"], "toxicity_counts": [[0, None, 0, 0, 0]]},
            r"toxicity_counts\[0\]\[1\] is None",
        ),
        ("paper", {}, {"predictions": [["a"]], "groups": ["q"], "toxicity_counts": [None]}, r"toxicity_counts\[0\]"),
        ("paper", {"toxicity": "none"}, {"predictions": [["a"]], "groups": ["q"], "prompt_types": ["x"]}, "for config"),
        ("scm", {}, {"predictions": ["4"], "groups": ["women"], "sentences": ["x"]}, "for config 'scm'"),
        ("paper", {"toxicity": "none"}, {"predictions": [["a"]], "groups": ["q"], "group": ["q"]}, "unexpected input"),
    ],
)
def test_metric_input_types_are_one_clear_error(config: str, init: dict, inputs: dict, message: str):
    qb = evaluate.load(METRIC, config, **init)
    with pytest.raises(ValueError, match=message):
        qb.compute(**inputs)


# ----------------------------------------------------------------------------------------- prediction check
def test_check_predictions_says_when_config_and_k_differ(tmp_path: Path):
    from queerbench.mlm.prediction_check import check_predictions

    run = tmp_path / "run"
    run.mkdir()
    sentences = ["The gay person is a [MASK].", "The person is a [MASK]."]
    pd.DataFrame({"id": ["a", "b"], "masked_sentence": sentences, "tokens": [["x"] * 5, ["y"] * 5]}).to_parquet(
        run / "predictions.parquet"
    )
    (run / "run.json").write_text(json.dumps({"config": "default", "top_k": 5}))
    csv = tmp_path / "bert-base-uncased_template_1.csv"
    pd.DataFrame({"template": sentences, "prediction": ["['z']", "['y']"]}).to_csv(csv, sep=";", index=False)
    report = check_predictions(run / "predictions.parquet", csv)
    assert report["run_config"] == "default" and report["run_top_k"] == 5 and report["k"] == 1
    assert any("config 'default'" in w and "--config paper" in w for w in report["warnings"])
    assert any("top-5" in w and "top-1" in w and "--top-k 1" in w for w in report["warnings"])
    (run / "run.json").write_text(json.dumps({"config": "paper", "top_k": 1}))
    assert check_predictions(run / "predictions.parquet", csv)["warnings"] == []


# ------------------------------------------------------------------------------------------- compare + figures
def _run(model: str, folder: str, *, limit=None, toxicity="embedded", queer=10.0, n=None) -> dict:
    n = n or {"queer": 3, "non-queer": 2}
    scores = {
        "config": "default",
        "k": 5,
        "n": n,
        "queerbench": {
            "queer": None if toxicity == "none" else queer,
            "non-queer": None if toxicity == "none" else 5.0,
        },
        "scorers": {"toxicity": {"name": toxicity}},
    }
    meta = {"model": model, "n_sentences": sum(n.values()), "limit": limit}
    return {"scores": scores, "meta": meta, "dir": folder}


def test_compare_labels_are_readable_and_warn_about_what_differs(tmp_path: Path):
    from queerbench.compare import compare_labels, compare_runs, compare_warnings

    runs = [
        _run("/tmp/x/mlm", "/tmp/x/run1"),
        _run("/tmp/x/mlm", "/tmp/x/run2", limit=3, toxicity="none", n={"queer": 1, "non-queer": 1}),
        _run("org/model", "/tmp/x/run3"),
    ]
    labels = compare_labels(runs)
    assert labels[0].startswith("mlm · default · top-5 · ") and "/tmp" not in labels[0]
    assert "toxicity none" in labels[1] and "3 templates" in labels[1] and labels[2] == "org/model · default · top-5"
    warnings = compare_warnings(runs)
    assert any("different templates" in w and "--limit 3" in w for w in warnings)
    assert any("different toxicity scorers" in w for w in warnings)
    table, md = compare_runs(runs, tmp_path / "cmp")
    assert np.isnan(table.loc[labels[1], "queer"]) and "Warning:** the runs cover different templates" in md.read_text()
    twins = [_run("/a/mlm", "/a/run1"), _run("/a/mlm", "/b/run2")]
    assert compare_labels(twins) == ["mlm · default · top-5 · run1", "mlm · default · top-5 · run2"]
    assert compare_warnings(twins) == []
    generative = _run("/a/mlm", "/a/gen")
    generative["meta"]["method"] = "instructed"
    assert compare_labels([twins[0], generative]) == ["mlm · default · top-5", "mlm · default · top-5 · instructed"]
    namesakes = [_run("/a/mlm", "/a/run"), _run("/a/mlm", "/b/run")]
    assert compare_labels(namesakes) == ["mlm · default · top-5 · /a/run", "mlm · default · top-5 · /b/run"]


def test_value_labels_contrast_with_their_cell():
    from queerbench.figures import text_colour_for

    assert text_colour_for(mcolors.to_rgba("#67000d")) == "white"  # the darkest red of the heatmap
    assert text_colour_for(mcolors.to_rgba("#fff5f0")) == "black"  # its lightest


def test_heatmap_labels_titles_and_no_data_look():
    from queerbench.figures import NO_DATA_LABEL, build_heatmap

    table = pd.DataFrame({"queer": [200.0, np.nan], "non-queer": [1.0, 2.0]}, index=["run a", "run b"])
    fig = build_heatmap(table, "QueerBench score", subtitle="bert · default config · top-5")
    ax = fig.axes[0]
    texts = {t.get_text(): t for t in ax.texts}
    assert texts["200.00"].get_color() == "white" and texts["1.00"].get_color() == "black"
    assert NO_DATA_LABEL in texts and "bert · default config · top-5" in ax.get_title()
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 1  # the one missing cell, not a least-harmful colour
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [NO_DATA_LABEL]


def test_run_figures_name_model_config_and_k_and_have_legends():
    from queerbench.figures import build_category_figure, build_comparison_figure

    scores = {
        "config": "paper",
        "k": 1,
        "n": {"queer": 3, "non-queer": 2},
        "queerbench": {"queer": None, "non-queer": None},
        "hurtlex": {"queer": 10.0, "non-queer": 0.0},
        "scorers": {"toxicity": {"name": "none"}},
    }
    meta = {"model": "/models/tiny-bert"}
    comparison = build_comparison_figure(scores, meta)
    ax = comparison.axes[0]
    assert "tiny-bert · paper config · top-1" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["queer", "non-queer"]
    hatches = {p.get_hatch() for p in ax.patches}
    assert len(hatches) == 2  # each group differs by hatch, not only by colour
    rounded = {**scores, "queerbench": {"queer": 5.0, "non-queer": 1.0}}
    rounded["ci"] = {"queer": {"queerbench": [5.0 + 1e-15, 5.0]}, "non-queer": {"queerbench": [0.5, 1.5]}}
    build_comparison_figure(rounded, meta)  # a CI off by float rounding draws (no negative error bar)
    categories = build_category_figure(scores, meta)
    assert "tiny-bert · paper config · top-1" in categories._suptitle.get_text()
    panel_texts = [t.get_text() for a in categories.axes for t in a.texts]
    assert any(t.startswith("no data: toxicity not scored") for t in panel_texts)


def test_compare_command_prints_its_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from queerbench.cli import main

    folders = []
    for name, limit in (("full", None), ("short", 2)):
        run = _run("/models/mlm", name, limit=limit, n={"queer": 3, "non-queer": 2} if limit is None else None)
        if limit:
            run["scores"]["n"] = {"queer": 1, "non-queer": 1}
            run["meta"]["n_sentences"] = 2
        (tmp_path / name).mkdir()
        (tmp_path / name / "scores.json").write_text(json.dumps({**run["scores"], "run": run["meta"]}))
        folders.append(str(tmp_path / name))
    assert main(["compare", *folders, "--out", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err
    assert "warning: the runs cover different templates" in err and "--limit 2" in err
    (tmp_path / "a-file").write_text("x")
    assert main(["compare", *folders, "--out", str(tmp_path / "a-file")]) == 2
    assert "is a file" in capsys.readouterr().err


def test_report_names_embedded_and_hub_weights_not_an_unknown_revision() -> None:
    sha = "ab" * 32
    assert describe_fingerprint({"kind": "embedded", "sha256": sha}) == f"embedded pinned weights, sha256 {sha[:12]}"
    assert describe_fingerprint({"kind": "hub", "commit_hash": "c0ffee"}) == "Hub commit `c0ffee`"
    assert describe_fingerprint({"kind": "hub", "commit_hash": None}) is None
    assert describe_fingerprint({"kind": "endpoint", "base_url": "http://x", "model": "m"}) is None
