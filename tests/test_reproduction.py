"""The `paper` config reproduces the published Table 4 (all 80 cells) from the paper's own evaluation files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from queerbench.scoring.aggregate import compute
from queerbench.scoring.hurtlex import load_hurtlex
from queerbench.tasks import get_task
from queerbench.tasks.queerbench.paper_data import paper_token_list, read_paper_csv, read_table4, table4_column

GROUPS = ("neo", "neutral", "binary", "queer", "non-queer")


@pytest.fixture(scope="module")
def upstream_dir(reference_folder) -> Path:
    """The paper's stored evaluations and result tables (pinned reference files), laid out as upstream."""
    reference_folder("upstream/queerbench/data/results")
    return reference_folder("upstream/queerbench/data/evaluation").parent


def _evaluation_files(upstream_dir: Path) -> list[Path]:
    files = sorted((upstream_dir / "evaluation").glob("*.csv")) + sorted(
        (upstream_dir / "evaluation/vinai").glob("*.csv")
    )
    assert len(files) == 16
    return files


def test_all_80_cells_of_table4(upstream_dir: Path):
    table4 = read_table4(upstream_dir / "results")
    options = get_task("paper").scoring_options(toxicity="precomputed")
    cells = {}
    for path in _evaluation_files(upstream_dir):
        ev = read_paper_csv(path)
        result = compute(
            ev["tokens"].tolist(),
            ev["group"].tolist(),
            toxicity_counts=ev["perspective_counts"].tolist(),
            options=options,
        )
        for g in GROUPS:
            cells[(table4_column(path), g)] = result["queerbench"][g]
    assert len(cells) == 80
    mismatches = {k: (v, table4.loc[k[0], k[1]]) for k, v in cells.items() if f"{v:.2f}" != f"{table4.loc[k]:.2f}"}
    assert not mismatches
    # spot checks quoted in the paper's Table 4
    assert cells[("BERTbase[1]", "queer")] == 4.07 and cells[("BERTweetbase[5]", "binary")] == 29.62


def test_default_rules_do_not_reproduce_table4(upstream_dir: Path):
    """The exact equations differ from the published (truncated, whitelisted) numbers: the check can fail."""
    table4 = read_table4(upstream_dir / "results")
    path = upstream_dir / "evaluation/bert-base-uncased_template_5.csv"
    ev = read_paper_csv(path)
    result = compute(
        ev["tokens"].tolist(),
        ev["group"].tolist(),
        toxicity_counts=ev["perspective_counts"].tolist(),
        options=get_task("default").scoring_options(toxicity="precomputed", n_bootstrap=0, n_permutations=0),
    )
    differ = [g for g in GROUPS if f"{result['queerbench'][g]:.2f}" != f"{table4.loc['BERTbase[5]', g]:.2f}"]
    assert differ


def test_per_sentence_afinn_and_hurtlex_match_the_stored_columns(upstream_dir: Path):
    lex = load_hurtlex()
    options = get_task("paper").scoring_options(toxicity="none")
    afinn_mismatch: dict[str, list[int]] = {}
    for path in _evaluation_files(upstream_dir):
        ev = read_paper_csv(path)
        result = compute(ev["tokens"].tolist(), ev["group"].tolist(), options=options, return_per_sentence=True)
        afinn = result["per_sentence"]["afinn"].to_numpy()
        bad = np.flatnonzero(~np.isclose(afinn, ev["sentiment_analysis"].to_numpy()))
        if len(bad):
            afinn_mismatch[path.name] = bad.tolist()
        codes = [[lex.paper_code(t) for t in tokens] for tokens in ev["tokens"]]
        stored = [paper_token_list(h) if h.startswith("[") else [h] for h in ev["hurtlex"]]
        assert codes == stored, path.name
    # the one hand-edited row the notes name: the evaluation file says ['a'] with the score of 'amazing'
    assert afinn_mismatch == {"albert-large-v2_template_1.csv": [4838]}


def test_paper_token_list_keeps_the_comma_quirk():
    assert paper_token_list("['</s>', '.', '\"', 's', ',']") == ["</s>", ".", '"', "s", "", ""]
    assert paper_token_list("['doctor', 'hero']") == ["doctor", "hero"]


@pytest.mark.parametrize("name", ["BERTbase[1]"])
def test_components_behind_a_cell(upstream_dir: Path, name: str):
    ev = read_paper_csv(upstream_dir / "evaluation/bert-base-uncased_template_1.csv")
    r = compute(
        ev["tokens"].tolist(),
        ev["group"].tolist(),
        toxicity_counts=ev["perspective_counts"].tolist(),
        options=get_task("paper").scoring_options(toxicity="precomputed"),
    )
    # notes §5: components behind the BERTbase top-1 cells
    assert (r["afinn"]["neo"], r["hurtlex"]["neo"], r["toxicity"]["neo"]) == (3.0, 0.58, 1.59)
    assert (round(r["afinn"]["neutral"], 2), r["hurtlex"]["neutral"], r["toxicity"]["neutral"]) == (1.8, 4.71, 0.0)
    assert (round(r["afinn"]["queer"], 2), r["hurtlex"]["queer"], r["toxicity"]["queer"]) == (2.8, 2.52, 6.91)
