"""``queerbench scm compare`` and the presentation rules of the run figures."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from queerbench.base.files import write_json
from queerbench.cli import main
from queerbench.tasks.scm.analysis import analyze
from queerbench.tasks.scm.compare import compare_runs, load_human_reference
from queerbench.tasks.scm.report import _bars, no_data_figure, write_figures

ORDER = ["nonbinary", "women", "bisexual", "gay_men", "lesbians", "heterosexual", "men"]


def _run_dir(path, model: str, warmth: dict, competence: dict, keywords: dict) -> str:
    rows = []
    for g in ORDER:
        for axis, table in (("Warmth", warmth), ("Competence", competence)):
            if table.get(g) is not None:
                rows.append(
                    {
                        "task": "rating",
                        "prompt_type": "rating_v1",
                        "group": g,
                        "axis": axis,
                        "response": f"Rating: {table[g]}",
                        "status": "ok",
                    }
                )
        if g in keywords:
            rows.append(
                {
                    "task": "elicitation",
                    "prompt_type": "elicitation",
                    "group": g,
                    "axis": "",
                    "response": "\n".join(f"{i + 1}. {k}" for i, k in enumerate(keywords[g])),
                    "status": "ok",
                }
            )
    res = analyze(pd.DataFrame(rows))
    res["run"] = {"model": model, "settings": {"survey": {"temperature": 0.9}}}
    path.mkdir()
    write_json(path / "scm.json", res)
    return str(path)


@pytest.fixture()
def runs(tmp_path):
    comp = dict(zip(ORDER, [1, 2, 2, 3, 3, 4, 5], strict=True))
    a = _run_dir(
        tmp_path / "a",
        "model-a",
        dict(zip(ORDER, [2, 5, 2, 3, 3, 4, 3], strict=True)),
        comp,
        {"women": ["nurturing", "caring"], "men": ["strong"]},
    )
    b = _run_dir(
        tmp_path / "b",
        "model-b",
        dict(zip(ORDER, [3, 4, 2, 3, 3, 4, 2], strict=True)),
        dict(zip(ORDER, [5, 4, 3, 3, 2, 2, 1], strict=True)) | {"nonbinary": None},
        {"women": ["nurturing", "emotional"], "men": ["leader"]},
    )
    return a, b


def test_compare_two_models_with_the_bundled_reference(runs, tmp_path) -> None:
    res = compare_runs(runs, tmp_path / "cmp")
    assert res["models"] == ["model-a", "model-b"]
    assert "Competence order" in res["human_reference"]
    pair = res["spearman_between_models"]["model-a vs model-b"]
    from scipy.stats import spearmanr

    want = spearmanr([2, 2, 3, 3, 4, 5], [4, 3, 3, 2, 2, 1]).statistic  # nonbinary has no Competence in run b
    assert pair["Competence"]["rho"] == pytest.approx(want) and pair["Competence"]["n"] == 6 and want < -0.8
    assert res["spearman_vs_human"]["model-a"]["Competence"]["rho"] > 0.9
    assert res["spearman_vs_human"]["model-a"]["Warmth"]["rho"] is None  # the paper gives no Warmth order
    women = res["table3_keywords"]["model-a"]["women"]
    assert women[0] == {"word": "nurturing", "shared_models": ["model-b"], "human": False, "axes": ""}
    assert women[1]["shared_models"] == []
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "*nurturing*" in md and "*caring*" not in md
    assert (tmp_path / "cmp" / "wc_map_compare.png").stat().st_size > 1000


def test_compare_with_a_human_file_gives_warmth_rho_and_bold_marks(runs, tmp_path) -> None:
    human = tmp_path / "human.csv"
    human.write_text(
        "group,warmth,competence,keywords\n"
        + "\n".join(
            f"{g},{w},{c},{kw}"
            for g, w, c, kw in zip(
                ORDER,
                [2, 4, 2.5, 3, 3, 3.5, 3],
                [2, 2.5, 2.6, 2.8, 3, 3.5, 4],
                ["confused", "nurturing;caring", "", "", "", "normal", "strong"],
                strict=True,
            )
        ),
        encoding="utf-8",
    )
    assert main(["scm", "compare", *runs, "--out", str(tmp_path / "c2"), "--human", str(human), "--names", "A,B"]) == 0
    res = json.loads((tmp_path / "c2" / "compare.json").read_text())
    assert res["spearman_vs_human"]["A"]["Warmth"]["rho"] is not None
    assert res["table3_keywords"]["A"]["women"][0]["human"] is True
    assert "***nurturing***" in (tmp_path / "c2" / "compare.md").read_text()  # shared with B and with humans


def test_compare_bad_inputs(runs, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"scm\.json"):
        compare_runs([str(tmp_path)], tmp_path / "o")
    with pytest.raises(ValueError, match="--names"):
        compare_runs(runs, tmp_path / "o", names=["x"])
    bad = tmp_path / "bad.csv"
    bad.write_text("group,warmth\nmartians,3\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown group"):
        load_human_reference(bad)


def test_missing_values_are_not_drawn_as_zero_and_empty_figures_say_no_data(tmp_path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    _bars(ax, ["women", "men"], {"Warmth": [40.0, None], "Competence": [None, 10.0]}, [3, 0])
    heights = sorted(round(p.get_height(), 3) for p in ax.patches)
    assert heights == [10.0, 40.0]  # two bars, no zero-height bars for the missing values
    assert sum(t.get_text() == "n/a" for t in ax.texts) == 2
    assert "(n = 0)" in ax.get_xticklabels()[1].get_text()
    plt.close(fig)
    note = no_data_figure("t", "why")
    assert any(t.get_text() == "NO DATA" for t in note.axes[0].texts)
    res = analyze(
        pd.DataFrame(
            [
                {
                    "task": "rating",
                    "prompt_type": "rating_v1",
                    "group": "women",
                    "axis": "Warmth",
                    "response": "Rating: 9",
                    "status": "ok",
                }
            ]
        )
    )
    res["run"] = {"model": "m", "settings": {"survey": {"temperature": 0.6, "top_p": None, "samples": 1}}}
    names = write_figures(res, tmp_path)
    assert "wc_map_rating_free.png" in names and "refusals_by_group.png" in names
    assert res["rating_free"]["women"]["Warmth"]["mean"] is None  # 9 is off the scale: not a rating


def test_rating_intervals_are_clipped_to_the_scale() -> None:
    rows = [
        {
            "task": "rating",
            "prompt_type": "rating_v1",
            "group": "men",
            "axis": "Competence",
            "response": f"Rating: {r}",
            "status": "ok",
        }
        for r in (5, 5, 4)
    ]
    ci = analyze(pd.DataFrame(rows))["rating_free"]["men"]["Competence"]
    assert ci["hi"] == 5.0 and ci["lo"] >= 1.0 and ci["n"] == 3
