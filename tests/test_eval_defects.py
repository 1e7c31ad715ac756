"""``queerbench eval`` and its report card against the defects of issue 38 (W8, W9, T4, U9, U10, U12, U13).

The evals run a tiny masked LM (``tests/tiny_models.py``) on the first template of ``default`` without a toxicity
scorer and with few resamples (a few seconds each); the endpoint eval runs against the fake chat-only server
(``tests/openai_server.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from queerbench.cli import main
from queerbench.reporting.rows import ResultRow
from queerbench.results import eval as eval_module
from queerbench.results.card import card_markdown, score_ceiling
from queerbench.scoring.aggregate import ScoringOptions, compute
from queerbench.tasks import get_task
from tests.openai_server import FakeOpenAI
from tests.tiny_models import tiny_bert

FAST = ["--limit", "1", "--toxicity", "none", "--bootstrap", "20", "--permutations", "20"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


def _eval(bert: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "--model", str(bert), "--tasks", "default", "--out", str(out), *FAST, *extra]


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("queerbench: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# ------------------------------------------------------------------------------------------------ W8
def test_a_task_named_twice_runs_and_is_listed_once(bert: Path, tmp_path: Path):
    out = tmp_path / "eval"
    # with a toxicity scorer, so that the rows have scores and model-index.yaml lists metrics
    args = ["eval", "--model", str(bert), "--tasks", "default,default", "--out", str(out), *FAST]
    assert main([*args, "--toxicity", "embedded"]) == 0
    document = json.loads((out / "results.json").read_text())
    assert [p["folder"] for p in document["parts"]] == ["default-mlm"]
    assert [(r["task"], r["method"]) for r in document["rows"]] == [("default", "mlm")]
    assert document["settings"]["tasks"] == ["default"]
    card = (out / "card.md").read_text()
    assert card.count("| QueerBench `default` | mlm |") == 1 and card.count("- `default`/mlm: `task:default") == 1
    index = yaml.safe_load((out / "model-index.yaml").read_text())["model-index"]
    metrics = [m["type"] for entry in index for result in entry["results"] for m in result["metrics"]]
    assert metrics and len(metrics) == len(set(metrics))
    # the same eval named once resumes it: the two are one eval
    again = ["eval", "--model", str(bert), "--tasks", "default", "--out", str(out), *FAST, "--toxicity", "embedded"]
    assert main(again) == 0


# ------------------------------------------------------------------------------------------------ W9
def test_the_resamples_are_part_of_the_eval_and_an_old_folder_resumes_with_the_defaults(
    bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    out = tmp_path / "eval"
    assert main(_eval(bert, out)) == 0
    record = json.loads((out / "eval.json").read_text())
    assert record["key"]["n_bootstrap"] == 20 and record["key"]["n_permutations"] == 20
    capsys.readouterr()
    for flag in ("--bootstrap", "--permutations"):
        assert main([*_eval(bert, out), flag, "30"]) == 2
        err = _one_line(capsys)
        name = "n_bootstrap" if flag == "--bootstrap" else "n_permutations"
        assert f"holds another eval ({name}: 20 there, 30 now)" in err
    # an eval folder written before the key held the resamples ran with the defaults (1000 each)
    for name in ("n_bootstrap", "n_permutations"):
        del record["key"][name]
    (out / "eval.json").write_text(json.dumps(record))
    assert main(_eval(bert, out)) == 2
    assert "(n_bootstrap: 1000 there, 20 now, n_permutations: 1000 there, 20 now)" in _one_line(capsys)

    def refuse(*args, **kwargs):
        raise AssertionError("a finished part ran again")

    monkeypatch.setattr(eval_module, "run_benchmark", refuse)
    defaults = [a for a in _eval(bert, out) if a not in ("--bootstrap", "--permutations", "20")]
    assert main(defaults) == 0 and "default-mlm: finished earlier, reused" in capsys.readouterr().out
    assert json.loads((out / "eval.json").read_text())["key"]["n_bootstrap"] == 1000  # recorded from now on


# ------------------------------------------------------------------------------------------------ T4
@pytest.mark.parametrize(
    ("parts", "said"),
    [
        (["default-mlm"], "'parts' must be an object of part folder → state, not a JSON list"),
        ({"default-mlm": "done"}, "the state of part 'default-mlm' must be an object"),
        ({"default-mlm": {"status": ["done"]}}, "the state of part 'default-mlm' must be an object"),
    ],
)
def test_a_malformed_eval_record_is_one_line_naming_the_file_and_the_fix(
    bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], parts: object, said: str
):
    out = tmp_path / "eval"
    out.mkdir()
    key = eval_module.EvalSettings(model=str(bert), tasks=("default",), limit=1, toxicity="none").key()
    (out / "eval.json").write_text(json.dumps({"key": key, "parts": parts}))
    assert main(_eval(bert, out)) == 2
    err = _one_line(capsys)
    assert f"{out / 'eval.json'}: {said}" in err and f"delete {out}" in err and "choose another --out" in err


# ------------------------------------------------------------------------------------------------ U9
def test_a_finished_part_that_lost_its_scores_is_scored_again_from_its_predictions(
    bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    out = tmp_path / "eval"
    assert main(_eval(bert, out)) == 0
    first = json.loads((out / "results.json").read_text())["rows"]
    (out / "default-mlm" / "scores.json").unlink()

    def no_inference(*args, **kwargs):
        raise AssertionError("the part predicted again")

    monkeypatch.setattr("queerbench.run.pipeline.predict_chunks", no_inference)
    capsys.readouterr()
    assert main(_eval(bert, out)) == 0
    said = capsys.readouterr().out
    assert "default-mlm: finished earlier but its results are missing; scoring its saved predictions again" in said
    assert (out / "default-mlm" / "scores.json").is_file()
    assert json.loads((out / "results.json").read_text())["rows"] == first
    assert main(_eval(bert, out)) == 0  # and the next rerun reuses it


def test_a_finished_request_part_whose_record_was_damaged_is_scored_again_not_refused_on_every_rerun(
    bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "eval"
    argv = ["eval", "--model", str(bert), "--tasks", "misgendered", "--out", str(out), *FAST]
    assert main(argv) == 0
    first = json.loads((out / "results.json").read_text())["rows"]
    scores = out / "misgendered-mlm" / "scores.json"
    document = json.loads(scores.read_text())
    document["results"]["accuracy"]["groups"]["binary"].pop("n")  # a hand-edited record
    scores.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "misgendered-mlm: finished earlier but its results cannot be read (" in said
    # no inference: the run reuses the part's predictions.parquet
    assert "scoring its saved predictions again" in said and "reusing the finished predictions" in said
    assert json.loads(scores.read_text())["results"]["accuracy"]["groups"]["binary"]["n"] > 0  # rewritten
    assert json.loads((out / "results.json").read_text())["rows"] == first
    capsys.readouterr()
    assert main(argv) == 0 and "misgendered-mlm: finished earlier, reused" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ U10
@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--concurrency", "0", "--concurrency must be at least 1 (requests in flight), got 0"),
        ("--toxicity", "banana", "unknown toxicity scorer 'banana'; choose one of:"),
        ("--seed", "-1", "--seed must be a non-negative integer (it seeds the resamples), got -1"),
        ("--bootstrap", "-1", "n_bootstrap and n_permutations must be >= 0"),
        ("--permutations", "-1", "n_bootstrap and n_permutations must be >= 0"),
    ],
)
def test_bad_options_are_refused_before_any_folder_or_request_with_runs_message(
    bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
):
    assert main(["run", "--model", str(bert), "--out", str(tmp_path / "run"), *FAST, flag, value]) == 2
    run_said = _one_line(capsys)
    assert message in run_said and not (tmp_path / "run").exists()
    assert main([*_eval(bert, tmp_path / "eval"), flag, value]) == 2
    assert _one_line(capsys) == run_said and not (tmp_path / "eval").exists()
    with FakeOpenAI() as server:  # an endpoint eval asks nothing of the server first
        args = ["eval", "--model", "m", "--endpoint", server.url, "--out", str(tmp_path / "ep"), *FAST, flag, value]
        assert main(args) == 2
        assert _one_line(capsys) == run_said and server.calls == 0 and not (tmp_path / "ep").exists()


def test_an_unknown_device_is_refused_before_any_folder_with_runs_message(
    bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """U10 for ``--device`` (a local model): ``run`` refuses it before anything is written, so ``eval`` must too,
    not write a folder and a 0-row card of parts each failed with the same reason."""
    assert main(["run", "--model", str(bert), "--out", str(tmp_path / "run"), *FAST, "--device", "banana"]) == 2
    run_said = _one_line(capsys)
    assert "unknown device 'banana'" in run_said and not (tmp_path / "run").exists()

    def refuse(*args, **kwargs):
        raise AssertionError("a part ran")

    monkeypatch.setattr(eval_module, "run_benchmark", refuse)
    assert main(["eval", "--model", str(bert), "--out", str(tmp_path / "eval"), *FAST, "--device", "banana"]) == 2
    assert _one_line(capsys) == run_said and not (tmp_path / "eval").exists()


# ------------------------------------------------------------------------------------------------ U12
def test_the_card_blames_the_switched_off_scorer_and_states_the_scores_real_range(bert: Path, tmp_path: Path):
    out = tmp_path / "eval"
    assert main(_eval(bert, out)) == 0
    card = (out / "card.md").read_text()
    assert "`default`/mlm: no QueerBench score: the toxicity scorer was switched off (`--toxicity none`)" in card
    assert "no reply it is computed from could be read" not in card and "(0–100)" not in card

    # a k = 1 reply "idiot", flagged on every toxicity attribute, scores far above 100 under the default rules
    options = ScoringOptions(toxicity="precomputed", n_bootstrap=0, n_permutations=0)
    scores = compute([["idiot"]], ["queer"], toxicity_counts=[[1, 1, 1, 1, 1]], options=options)
    idiot = scores["queerbench"]["queer"]
    ceiling = score_ceiling(get_task("default").spec.rules, 1)
    assert 100 < idiot <= ceiling
    row = ResultRow(
        task="default", benchmark="QueerBench", model="m", method="instructed", k=1, toxicity="embedded",
        scores={"queer": idiot}, n={"queer": 1},
    )  # fmt: skip
    document = {"rows": [row.to_dict()], "settings": {"limit": None, "top_k": 1, "toxicity": "embedded"}}
    text = card_markdown(document, None)
    assert f"the highest possible score is `default` at k = 1: {ceiling:.2f}" in text and "(0–100)" not in text
    assert score_ceiling(get_task("paper").spec.rules, 5) == pytest.approx((100 + 500 + 500) / 3)


# ------------------------------------------------------------------------------------------------ U13
def test_a_chat_only_endpoint_skips_scored_with_the_probes_reason_and_the_eval_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    # the fake server answers no GET (HTTP 501): what the server says of itself is not tested here
    monkeypatch.setattr("queerbench.models.causal_blanks.endpoint_probe.identify", lambda runner: {})
    out = tmp_path / "eval"
    with FakeOpenAI(answer="kind") as server:
        args = ["eval", "--model", "m", "--endpoint", server.url, "--tasks", "default", "--out", str(out), *FAST]
        args += ["--requests-per-minute", "100000"]
        for _ in range(2):  # and again on a rerun
            assert main(args) == 0
            parts = {p["folder"]: p for p in json.loads((out / "results.json").read_text())["parts"]}
            assert parts["default-instructed"]["status"] == "done"
            scored = parts["default-scored"]
            assert scored["status"] == "skipped" and "has no /completions route" in scored["note"]
            said = capsys.readouterr().out
            assert "  default-scored: skipped (" in said and "failed" not in said
    card = (out / "card.md").read_text()
    assert "- `default-scored` (skipped): " in card and "has no /completions route" in card
    assert not (out / "default-scored").exists() and not (out / "probe.sqlite").exists()


def test_an_endpoint_urls_credentials_never_reach_the_eval_record() -> None:
    """S2 for eval: eval.json's key and results.json name the endpoint without its userinfo or secret query values."""
    settings = eval_module.EvalSettings(
        model="m", endpoint="http://user:hunter2@127.0.0.1:9/v1?api-key=s3cret&api-version=1"
    )
    shown = json.dumps(settings.key())
    assert "hunter2" not in shown and "s3cret" not in shown
    assert "127.0.0.1:9/v1" in shown and "api-version=1" in shown
