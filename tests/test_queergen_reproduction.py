"""QueerGen's published tables regenerated from its own stored per-sentence files, cell for cell.

Ground truth: QueerGen's ``tables/`` and ``tables_top_5/`` (pinned sources, via ``QUEERBENCH_DATA_DIR``), computed by
its code from its ``evaluations/prompt_1/`` and ``evaluations_top_5/`` files. Findings, each asserted exactly:

1. VADER recomputed with vaderSentiment equals the stored column in every row of all 28 files but one:
   ``evaluations/prompt_1/gemma3.csv`` row 2520 ("The individual is seen as a", LGBT+ ally). Its prediction reads
   "supportive" (VADER 0.3 wherever else it occurs) but every stored score of that row (VADER 0.0, Perspective,
   regard, POS) belongs to another word: the prediction cell was changed after scoring. The published VADER table
   is unaffected at 3 decimals; the published ANOVA for Gemma 3 4B's VADER (F 1.771) needs the stored value
   (recomputed: F 1.863).
2. Diversity (k=1, marked groups) depends on QueerGen's unseeded batches (``random_state=random.randint``). We
   compare the exact expectation of one batch (hypergeometric) with the published mean ± its printed 95% CI:
   27 of 28 cells lie inside. RoBERTa Base / Non Queer (published 41.20 ± 1.34, expected 42.94) lies 1.3 CI
   half-widths out — what chance gives one 95% interval in 28 (P(at least one miss) = 1 − 0.95^28 ≈ 0.76); a
   seeded rerun of QueerGen's procedure misses about 1 in 6 cells, since two random estimates are compared.
   Unmarked cells (one batch of all 100 rows) and all top-5 cells (every group is one batch) are deterministic
   and equal exactly.
3. The k=1 JSD table (pooled over the 14 models, base-2 JS distance) reproduces; the top-5 one (0.621 / 0.615 /
   0.508) matches none of flattened words (0.590 / 0.583 / 0.462), first words, per-row sets or stringified
   lists: its input is not recoverable from the stored files, so it is not asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from queerbench.base.sources import fetch
from queerbench.cli import main
from queerbench.tasks.queergen.aggregate import jsd_between_groups
from queerbench.tasks.queergen.evaluations import read_evaluation_csv, score_rows
from queerbench.tasks.queergen.score import reproduce_published_tables
from queerbench.tasks.queergen.spec import spec

KNOWN_OUTSIDE_CI = {("RoBERTa Base", "Non Queer")}
STALE_ROW = ("gemma3", 2520)


@pytest.fixture(scope="module")
def queergen_dir(reference_folder) -> Path:
    return reference_folder("upstream/queergen")


@pytest.fixture(scope="module")
def k1(queergen_dir: Path):
    return reproduce_published_tables(queergen_dir / "evaluations" / "prompt_1")


@pytest.fixture(scope="module")
def top5(queergen_dir: Path):
    return reproduce_published_tables(queergen_dir / "evaluations_top_5")


def _published(name: str) -> pd.DataFrame:
    return pd.read_csv(fetch(name))


def _cells(table: pd.DataFrame, metric: str) -> dict[tuple[str, str], tuple[float, float, float]]:
    return {(r.Model, r.type): (r[metric], r.CI, r.STD) for _, r in table.iterrows()}


@pytest.mark.parametrize("which", ["k1", "top5"])
@pytest.mark.parametrize("metric", ["VADER", "Perspective"])
def test_vader_and_perspective_tables_every_cell(which: str, metric: str, request) -> None:
    tables, _ = request.getfixturevalue(which)
    source = f"queergen_table_{'top5_' if which == 'top5' else ''}{metric.lower()}_all"
    published = _cells(_published(source), metric)
    ours = _cells(tables[f"{metric}_all"], metric)
    assert len(published) == 42 and list(ours) == list(published)  # 14 models × 3 groups, same order
    for cell, expected in published.items():
        assert ours[cell] == pytest.approx(expected, abs=1e-12), cell


def test_top5_diversity_every_cell_exactly(top5) -> None:
    tables, _ = top5
    published = _cells(_published("queergen_table_top5_diversity_all"), "Diversity")
    ours = _cells(tables["Diversity_all"], "Diversity")
    assert list(ours) == list(published)
    for cell, expected in published.items():
        assert ours[cell] == pytest.approx(expected, abs=1e-12), cell
    # the saturation QueerGen's stringified-list bug causes: MLM top-5 lists are always distinct strings
    assert all(ours[(m, g)][0] >= 99 for m in ("BERT Base", "RoBERTa Large") for g in ("Unmarked", "Queer"))


def test_k1_diversity_unmarked_exact_and_marked_within_printed_ci(k1) -> None:
    tables, results = k1
    published = _cells(_published("queergen_table_diversity_all"), "Diversity")
    ours = _cells(tables["Diversity_all"], "Diversity")
    assert list(ours) == list(published)
    outside = set()
    for (model, group), (mean, ci, std) in published.items():
        if group == "Unmarked":
            assert ours[(model, group)] == pytest.approx((mean, ci, std), abs=1e-12)
            continue
        ours_group = {"Non Queer": "non-queer", "Queer": "queer"}[group]
        entry = results[model]["diversity"][ours_group]
        assert entry["n_batches"] == {"non-queer": 10, "queer": 20}[ours_group]
        if abs(entry["expected"] - mean) > ci:
            outside.add((model, group))
    assert outside == KNOWN_OUTSIDE_CI  # finding 2 in the module docstring


def test_vader_recomputed_equals_stored_column_but_one_stale_row(queergen_dir: Path) -> None:
    differing = []
    n_rows = 0
    for folder in ("evaluations/prompt_1", "evaluations_top_5"):
        for stem in spec()["model_labels"]:
            frame = read_evaluation_csv(queergen_dir / folder / f"{stem}.csv")
            _, meta = score_rows(frame, vader="recompute", regard="none", toxicity="none")
            n_rows += meta["vader_check"]["rows"]
            differing += [
                (stem, d["index"], d["stored"], d["recomputed"]) for d in meta["vader_check"]["differ_from_stored"]
            ]
    assert n_rows == 14 * (3100 + 300)
    assert differing == [(*STALE_ROW, 0.0, 0.3)]  # finding 1


def test_anova_table_every_cell(queergen_dir: Path) -> None:
    published = _published("queergen_table_statistical_testing").set_index("Model")
    _, stored = reproduce_published_tables(queergen_dir / "evaluations" / "prompt_1", vader="stored")
    names = {"VADER": "vader", "Perspective": "perspective"} | {
        f"Regard {x}": f"regard_{x.lower()}" for x in ("Negative", "Neutral", "Positive")
    }
    for model, row in published.iterrows():
        for tool, key in names.items():
            test = stored[model]["anova"][key]
            assert np.round(test["F"], 3) == pytest.approx(row[f"{tool} F-statistic"], abs=1e-12), (model, tool)
            assert np.round(test["p"], 3) == pytest.approx(row[f"{tool} P-value"], abs=1e-12), (model, tool)


def test_pooled_jsd_k1(queergen_dir: Path) -> None:
    frames = [
        read_evaluation_csv(queergen_dir / "evaluations" / "prompt_1" / f"{stem}.csv")[["group", "words"]]
        for stem in spec()["model_labels"]
    ]
    ours = jsd_between_groups(pd.concat(frames, ignore_index=True))
    published = pd.read_csv(fetch("queergen_table_jsd")).to_numpy()
    assert ours["unmarked - non-queer"] == pytest.approx(published[0, 1], abs=1e-12)
    assert ours["unmarked - queer"] == pytest.approx(published[0, 2], abs=1e-12)
    assert ours["non-queer - queer"] == pytest.approx(published[1, 2], abs=1e-12)


def test_cli_scores_a_queergen_file(tmp_path: Path, queergen_dir: Path, capsys) -> None:
    path = queergen_dir / "evaluations" / "prompt_1" / "BERT_large.csv"
    out = tmp_path / "result.json"
    code = main(
        [
            "score",
            str(path),
            "--config",
            "queergen",
            "--toxicity",
            "precomputed",
            "--out",
            str(out),
            "--tables",
            str(tmp_path / "t"),
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["source"]["pinned"] == "queergen_eval_bert_large" and result["model"] == "BERT Large"
    assert result["perspective_attributes"] == spec()["perspective_attributes"]["queergen"]
    vader = pd.read_csv(tmp_path / "t" / "VADER_all.csv")
    assert vader.to_numpy().tolist() == _published("queergen_table_vader_all").iloc[3:6].to_numpy().tolist()
    # the paper's rule (config default): 5 attributes, a different number than the published 6-attribute mean
    main(["score", str(path), "--config", "default", "--toxicity", "precomputed", "--out", str(out)])
    paper = json.loads(out.read_text())
    assert paper["perspective_attributes"] == ["TOXICITY", "INSULT", "IDENTITY_ATTACK", "PROFANITY", "THREAT"]
    assert paper["perspective"]["queer"]["mean"] != pytest.approx(result["perspective"]["queer"]["mean"])


def test_bad_queergen_input_is_one_line(tmp_path: Path, queergen_dir: Path, capsys) -> None:
    text = (queergen_dir / "evaluations" / "prompt_1" / "gpt-4o.csv").read_text().splitlines()
    short = tmp_path / "gpt-4o.csv"
    short.write_text("\n".join(text[:-5]) + "\n")
    assert main(["score", str(short), "--config", "queergen", "--toxicity", "precomputed"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(short) in err[0] and "3095 rows" in err[0]
    assert text[2].startswith("1,")
    shifted = tmp_path / "shifted.csv"  # row 1 claims to be sentence 5
    shifted.write_text("\n".join([text[0], text[1], "5," + text[2][2:], *text[3:]]) + "\n")
    assert main(["score", str(shifted), "--config", "queergen", "--toxicity", "precomputed"]) == 2
    assert "1 rows are not the QueerGen sentence of their index" in capsys.readouterr().err
    path = queergen_dir / "evaluations_top_5" / "gpt-4o.csv"
    assert (
        main(["score", str(path), "--config", "queergen", "--toxicity", "precomputed", "--regard", "hf:sasha/regardv3"])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--regard hf:<local folder" in err[0] and "--regard none" in err[0]
