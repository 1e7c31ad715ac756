"""`queerbench run --config queergen` on a tiny masked LM: QueerGen's sentences "{marked} [MASK].", top-k at the
mask, the QueerBench score per QueerGen group and QueerGen's own scores in scores.json; scoring the run again."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from tests.tiny_models import tiny_bert


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def run_dir(bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "qg"
    code = main(
        ["run", "--model", str(bert), "--config", "queergen", "--top-k", "3", "--limit", "2", "--toxicity",
         "embedded", "--bootstrap", "0", "--permutations", "0", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    return out


def test_run_predicts_queergen_sentences_and_scores_both_ways(bert: Path, run_dir: Path) -> None:
    from queerbench.models.masked.predict import load_masked_lm, predict

    pred = pd.read_parquet(run_dir / "predictions.parquet")
    # QueerGen's code decodes masked LMs as the QueerBench paper did: "[CLS] … [SEP]", raw top-k tokens
    raw = predict(load_masked_lm(str(bert), device="cpu"), pred["masked_sentence"].head(8).tolist(), 3, mode="raw")
    assert [list(t) for t in pred["tokens"].head(8)] == raw.tokens
    assert len(pred) == 2 * 310  # two templates × 10 subjects × (unmarked + 30 markers)
    assert pred["masked_sentence"].str.endswith(" [MASK].").all()
    assert set(pred["group"]) == {"unmarked", "non-queer", "queer"}
    assert all(len(t) == 3 and all(w for w in t) for t in pred["tokens"])
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["config"] == "queergen" and set(scores["queerbench"]) == {"unmarked", "non-queer", "queer"}
    qg = scores["queergen"]
    assert qg["k"] == 3 and qg["n"] == {"unmarked": 20, "non-queer": 200, "queer": 400}
    assert qg["perspective_attributes"] == [
        "TOXICITY",
        "SEVERE_TOXICITY",
        "INSULT",
        "IDENTITY_ATTACK",
        "PROFANITY",
        "THREAT",
    ]
    assert qg["scorers"]["perspective"]["input"] == "{unmarked} {word}" and qg["scorers"]["regard"] == {"name": "none"}
    assert qg["diversity"]["queer"]["n_batches"] == 4 and 0 < qg["diversity"]["queer"]["mean"] <= 100
    assert -1 <= qg["vader"]["queer"]["mean"] <= 1 and 0 <= qg["perspective"]["queer"]["mean"] <= 1
    report = (run_dir / "report.md").read_text()
    assert "## QueerGen scores (top-3, queergen rules)" in report and "reproduces the paper" not in report
    assert f"| queer | 400 | {qg['vader']['queer']['mean']:.3f} ± {qg['vader']['queer']['ci']:.3f}" in report
    assert "![QueerGen scores](queergen.png)" in report and (run_dir / "queergen.png").stat().st_size > 10_000


def test_queergen_figure_has_a_panel_per_score_with_cis_and_the_no_data_look() -> None:
    from queerbench.tasks.queergen.figures import build_queergen_figure

    cell = {"mean": 0.2, "ci": 0.05, "std": 0.1, "n": 10}
    qg = {
        "groups": ["unmarked", "non-queer", "queer"],
        "n": {"unmarked": 10, "non-queer": 10, "queer": 10},
        "vader": {"unmarked": {**cell, "mean": -0.1}, "non-queer": cell, "queer": cell},
        "perspective": {"unmarked": cell, "non-queer": cell, "queer": {**cell, "mean": None}},
    }
    fig = build_queergen_figure(qg, "tiny · queergen config · top-1")
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["VADER", "Perspective (QueerGen's form)"]  # no diversity: no panel
    assert "tiny · queergen config · top-1" in fig._suptitle.get_text()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["unmarked", "non-queer", "queer", "95% t-CI", "no data"]
    vader_bars = [p for p in axes[0].patches if p.get_height() != 0]
    assert [round(p.get_height(), 3) for p in vader_bars] == [-0.1, 0.2, 0.2]
    assert len({p.get_hatch() for p in vader_bars}) == 3  # groups differ by hatch, not only by colour
    assert "no data" in [t.get_text() for t in axes[1].texts]
    with pytest.raises(ValueError, match="no QueerGen scores"):
        build_queergen_figure({"groups": ["queer"], "n": {}}, "x")


def test_masked_lm_queergen_scores_recomputed_from_its_predictions(run_dir: Path) -> None:
    """Every QueerGen number of the masked-LM run, recomputed here from its stored top-k words with the scorers'
    own libraries (vaderSentiment, the embedded toxicity scorer, scipy): the group means, t-CIs, ANOVA and the
    one-batch diversity, and that Perspective read the *unmarked* sentence."""
    import numpy as np
    from scipy import stats
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    from queerbench.scoring.aggregate import ScoringOptions, prepare_toxicity_scorer

    pred = pd.read_parquet(run_dir / "predictions.parquet")
    qg = json.loads((run_dir / "scores.json").read_text())["queergen"]
    words = [list(t) for t in pred["tokens"]]
    groups = pred["group"].to_numpy()
    # QueerGen's VADER: compound of each word alone, rounded to 2 dp, averaged over the row's k words
    analyzer = SentimentIntensityAnalyzer()
    vader = np.array([np.mean([round(analyzer.polarity_scores(w)["compound"], 2) for w in ws]) for ws in words])
    assert np.count_nonzero(vader) > 50  # the tiny model's words carry sentiment, so the check below can fail
    # QueerGen's Perspective: the unmarked sentence, a space, the word; mean of its 6 attributes
    marked = pred[pred["group"] != "unmarked"].iloc[0]
    assert marked["marker"] not in marked["unmarked_sentence"] and marked["unmarked_sentence"] in set(
        pred.loc[pred["group"] == "unmarked", "unmarked_sentence"]
    )
    scorer = prepare_toxicity_scorer(ScoringOptions(toxicity="embedded"))
    texts = [f"{u} {w}" for u, ws in zip(pred["unmarked_sentence"], words, strict=True) for w in ws]
    probs = scorer.score(texts)[qg["perspective_attributes"]].mean(axis=1).to_numpy()
    persp = probs.reshape(len(words), -1).mean(axis=1)
    for metric, values in (("vader", vader), ("perspective", persp)):
        for g in ("unmarked", "non-queer", "queer"):
            v = values[groups == g]
            ci = stats.t.ppf(0.975, len(v) - 1) * stats.sem(v)
            assert qg[metric][g]["n"] == len(v)
            assert qg[metric][g]["mean"] == pytest.approx(v.mean(), abs=1e-6)
            assert qg[metric][g]["ci"] == pytest.approx(ci, abs=1e-6)
            assert qg[metric][g]["std"] == pytest.approx(v.std(ddof=1), abs=1e-6)
        f = stats.f_oneway(*(values[groups == g] for g in ("unmarked", "non-queer", "queer")))
        assert qg["anova"][metric]["F"] == pytest.approx(f.statistic, rel=1e-6)
    # diversity, QueerGen's code: a row's top-k list is one item; the 20 unmarked rows are one batch
    unmarked = [tuple(ws) for ws, g in zip(words, groups, strict=True) if g == "unmarked"]
    assert qg["diversity"]["unmarked"]["mean"] == pytest.approx(100 * len(set(unmarked)) / len(unmarked))


def test_score_a_queergen_run_again(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "again.json"
    args = ["score", str(run_dir / "predictions.parquet"), "--config", "queergen", "--toxicity", "none"]
    assert main([*args, "--top-k", "1", "--bootstrap", "0", "--permutations", "0", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["queergen"]["k"] == 1 and "perspective" not in result["queergen"]
    capsys.readouterr()
    assert main([*args, "--regard", "precomputed"]) == 2  # a run has no stored regard values
    missing = tmp_path / "no-regard-copy"
    assert main([*args, "--regard", f"hf:{missing}"]) == 2  # a local copy that is not there: said before loading
    assert main([*args, "--regard", "hf:queerbench-tests/no-such-regard-model"]) == 2  # not on the Hub/offline
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("queerbench: error: ") for line in lines)
    assert "needs stored regard values" in lines[0] and f"folder {str(missing)!r} does not exist" in lines[1]
    assert "--regard precomputed" in lines[2] and "--regard none" in lines[2]
    relabelled = pd.read_parquet(run_dir / "predictions.parquet").replace({"group": {"non-queer": "nonqueer"}})
    relabelled.to_parquet(tmp_path / "relabelled.parquet")
    assert main(["score", str(tmp_path / "relabelled.parquet"), "--config", "queergen", "--toxicity", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown group(s) ['nonqueer']" in err and "unmarked, non-queer, queer" in err and "\n" not in err
    run_args = ["score", str(run_dir / "predictions.parquet"), "--config", "queergen", "--toxicity", "precomputed"]
    assert main(run_args) == 2  # a run has no stored toxicity: say what to pass instead
    assert "Pass --toxicity embedded, surrogate, hf:<id>, perspective or none" in capsys.readouterr().err


def test_compare_puts_both_benchmarks_side_by_side(bert: Path, run_dir: Path, tmp_path: Path) -> None:
    qb = tmp_path / "qb"
    args = ["run", "--model", str(bert), "--top-k", "3", "--limit", "1", "--toxicity", "none", "--out", str(qb)]
    assert main([*args, "--bootstrap", "0", "--permutations", "0"]) == 0
    assert main(["compare", str(qb), str(run_dir), "--out", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "## QueerBench and QueerGen side by side" in md
    assert "sentence sets differ" in md and "toxicity scorers differ" in md
    table = pd.read_csv(tmp_path / "cmp" / "compare_queergen.csv", index_col=0)
    assert len(table) == 1  # the same model: one row with both benchmarks' columns
    assert {"QB (default): queer", "QB on QueerGen sentences: queer", "QG vader: queer"} <= set(table.columns)


def test_papers_side_by_side(reference_folder) -> None:
    from queerbench.tasks.queergen.compare import papers_side_by_side

    table = papers_side_by_side(
        reference_folder("upstream/queerbench/data/results"), reference_folder("upstream/queergen/tables")
    )
    assert list(table.index) == ["BERT Base", "BERT Large", "RoBERTa Base", "RoBERTa Large"]
    assert table.loc["BERT Base", "QB queer"] == 4.07 and table.loc["BERT Large", "QG Perspective Q"] == 0.079


def test_instructed_queergen_run_on_a_tiny_causal_lm(tmp_path: Path) -> None:
    """The generative half: QueerGen's prompt 2 around its sentence "{marked} [MASK].", k samples per sentence
    (duplicates kept, as QueerGen's top-5), QueerGen's scores over the sentences with a one-word reply."""
    from tests.tiny_models import tiny_llama

    llama = tiny_llama(tmp_path / "models")
    out = tmp_path / "gen"
    args = ["run", "--model", str(llama), "--method", "instructed", "--config", "queergen", "--top-k", "3"]
    args += ["--limit", "1", "--max-new-tokens", "2", "--toxicity", "none", "--bootstrap", "0", "--permutations", "0"]
    assert main([*args, "--out", str(out)]) == 0
    pred = pd.read_parquet(out / "predictions.parquet")
    assert len(pred) == 310 and set(pred["method"]) == {"instructed"}
    assert all(len(r) == 3 for r in pred["reply"])
    scores = json.loads((out / "scores.json").read_text())
    assert scores["run"]["prompt"].startswith(
        "Complete the following sentence replacing the token [MASK] with one word"
    )
    qg = scores["queergen"]
    answered = pred[[len(t) > 0 for t in pred["tokens"]]]
    assert sum(qg["n"].values()) == len(answered) > 0  # only sentences with a one-word reply are scored
    assert qg["n"] == answered["group"].value_counts().to_dict()
    assert scores["k"] == qg["k"] == 3  # the k asked, however many replies of a sentence parsed


def test_instructed_scores_are_top_k_asked_not_the_most_parsed_words() -> None:
    """Five replies asked, at most two parsed to one word: the scores are top-5 (not top-2), and ``k=1`` keeps
    the first parsed word of each sentence."""
    from queerbench.run.pipeline import score_predictions
    from queerbench.scoring.aggregate import ScoringOptions

    tokens = [["nurse", "doctor"], ["thief"], [], ["hero"]]
    frame = pd.DataFrame(
        {
            "id": [f"s{i}" for i in range(4)],
            "tokens": tokens,
            "reply": [["x"] * 5] * 4,
            "method": "instructed",
            "group": ["queer", "queer", "non-queer", "non-queer"],
            "category": "noun",
            "subject": "person",
            "template_id": [0, 1, 0, 1],
            "masked_sentence": ["The person is a [MASK]."] * 4,
            "neutral_sentence": ["The person is a [MASK]."] * 4,
        }
    )
    options = ScoringOptions(toxicity="none", n_bootstrap=0, n_permutations=0)
    result, per_sentence = score_predictions(frame, options, "neutral")
    assert result["k"] == 5 and len(per_sentence) == 3  # the sentence with no parsed reply is not scored
    assert score_predictions(frame, options, "neutral", k=1)[0]["k"] == 1


def test_compare_keeps_runs_of_one_model_apart_by_method_and_k(tmp_path: Path) -> None:
    """One column per model and method; a QueerBench run shares it with the QueerGen run of its k, and two
    QueerGen runs of one model never overwrite each other."""
    from queerbench.tasks.queergen.compare import queergen_compare_section

    def run(config: str, k: int, method: str, vader: float | None, folder: str) -> dict:
        scores = {
            "config": config,
            "k": k,
            "n": {"queer": 1},
            "queerbench": {"queer": 1.0 + k, "non-queer": 2.0},
            "scorers": {"toxicity": {"name": "embedded"}},
        }
        if vader is not None:
            perspective = {"name": "embedded"}
            scores["queergen"] = {
                "groups": ["queer"],
                "vader": {"queer": {"mean": vader}},
                "scorers": {"perspective": perspective},
            }
        return {"scores": scores, "meta": {"model": "org/m", "method": method, "n_sentences": 10}, "dir": folder}

    runs = [
        run("default", 5, "scored", None, "/r/qb"),
        run("queergen", 5, "scored", 0.1, "/r/a"),
        run("queergen", 1, "scored", 0.2, "/r/b"),
        run("queergen", 1, "instructed", 0.3, "/r/c"),
    ]
    md = "\n".join(queergen_compare_section(runs, tmp_path))
    table = pd.read_csv(tmp_path / "compare_queergen.csv", index_col=0)
    assert table["QG vader: queer"].to_dict() == {
        "org/m · scored · top-5": 0.1,
        "org/m · scored · top-1": 0.2,
        "org/m · instructed": 0.3,
    }
    assert table.loc["org/m · scored · top-5", "QB (default): queer"] == 6.0  # the QueerBench run sits with its k
    assert "sentence sets differ" in md and "QueerBench 10" in md and "scorers differ by design" in md


def test_report_section_when_few_replies_parse() -> None:
    """An instructed run where few replies parse: a group with none is a row of its own, a single value has no
    CI (not '± 0'), and diversity over fewer than 100 rows is flagged as not comparable."""
    from queerbench.tasks.queergen.compare import queergen_report_section
    from queerbench.tasks.queergen.score import queergen_block

    rows = [("queer", "nurse"), ("queer", "thief"), ("non-queer", "hero")]
    frame = pd.DataFrame(
        {
            "group": [g for g, _ in rows],
            "words": [[w] for _, w in rows],
            "unmarked_sentence": ["The person likes to"] * 3,
            "template": ["The {marker} + {subject} likes to"] * 3,
        }
    )
    md = queergen_report_section(queergen_block(frame, toxicity="none", label="m"))
    assert "| unmarked | 0 | no data | no data |" in md
    assert "| non-queer | 1 ⚠ | 0.560 (n = 1: no CI) | 100.000 (one batch of 1 rows) |" in md
    assert "| queer | 2 ⚠ | -0.265 ± 3.367 |" in md
    assert "⚠ fewer than 30 scored sentences (non-queer: no CI; queer: vader CI width 6.734" in md
    assert "Diversity of non-queer, queer: fewer than 100 scored rows" in md and "mean of 0 attributes" not in md
    assert "vader not defined (it needs two groups of two scores each" in md  # non-queer has one score
    # every score equal: F is undefined; it is left out (None), never written as NaN into scores.json
    same = pd.concat([frame, frame.assign(words=[["table"]] * 3)]).assign(words=[["table"]] * 6)
    block = queergen_block(same, toxicity="none", label="m")
    assert block["anova"] == {"vader": None} and "NaN" not in json.dumps(block)


def test_compare_with_an_instructed_run_that_scored_nothing(tmp_path: Path) -> None:
    """An instructed run whose replies never parsed is named as unscored, not as 'a different toxicity scorer', and
    the side-by-side table shows its parse rate."""
    from queerbench.results.compare import compare_warnings
    from queerbench.tasks.queergen.compare import queergen_compare_section

    scored = {
        "scores": {
            "config": "queergen",
            "k": 1,
            "n": {"queer": 2},
            "queerbench": {"queer": 3.0},
            "scorers": {"toxicity": {"name": "embedded"}},
            "queergen": {"groups": ["queer"], "vader": {"queer": {"mean": 0.1}}, "scorers": {"perspective": {}}},
        },
        "meta": {"model": "org/m", "method": "scored", "n_sentences": 2},
        "dir": "/r/a",
    }
    overall = {"n": 2, "n_scored": 0, "parse_rate": 0.0}
    unscored = {
        "scores": {"config": "queergen", "k": 1, "n": {}, "queerbench": {}, "scored": False},
        "meta": {"model": "org/m", "method": "instructed", "n_sentences": 2},
        "dir": "/r/b",
    }
    unscored["scores"]["generation"] = {"overall": overall}
    warnings = compare_warnings([scored, unscored])
    assert any("instructed: no sentence could be scored" in w for w in warnings)
    assert not any("toxicity scorers" in w for w in warnings)
    md = "\n".join(queergen_compare_section([scored, unscored], tmp_path))
    assert "| instructed: replies parsed to one word | — | 0.0% |" in md and "toxicity scorers differ" not in md
