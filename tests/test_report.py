"""Report text and figures: compare tables and their warnings, value labels, titles, legends and the no-data look,
and the provenance a report names."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest

from queerbench.models.fingerprint import describe_fingerprint
from tests.tiny_models import tiny_bert


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


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
    from queerbench.results.compare import compare_labels, compare_runs, compare_warnings

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
    from queerbench.reporting.figures import text_colour_for

    assert text_colour_for(mcolors.to_rgba("#67000d")) == "white"  # the darkest red of the heatmap
    assert text_colour_for(mcolors.to_rgba("#fff5f0")) == "black"  # its lightest


def test_heatmap_labels_titles_and_no_data_look():
    from queerbench.reporting.figures import NO_DATA_LABEL, build_heatmap

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
    from queerbench.reporting.figures import build_category_figure, build_comparison_figure

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
