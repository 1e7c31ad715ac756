"""MISGENDERED through ``queerbench run`` and ``queerbench eval`` on every kind of model: a tiny masked LM, a tiny
causal LM (whose choices are recomputed independently by the paper's rule), and a chat endpoint; the records, the
per-item columns the design names and the report's figure."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from tests.openai_server import FakeOpenAI
from tests.tiny_models import tiny_bert, tiny_gpt2, tiny_llama

COLUMNS = {"masked_sentence", "form", "declared", "label", "choice", "correct", "group", "template_id"}


def _run(*argv: str) -> int:
    return main(["run", "--config", "misgendered", "--limit", "1", "--bootstrap", "50", *argv])


def _predictions(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "predictions.parquet")


def test_a_tiny_causal_lm_chooses_by_the_papers_rule_recomputed_independently(tmp_path: Path) -> None:
    """zero-shot/gpt2.py of the paper: per candidate, the sentence's mean token loss
    ``model(input_ids, labels=input_ids).loss`` with the tokenizer's default encoding; the lowest wins."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = tiny_llama(tmp_path)  # 256 positions: the tiny GPT-2's 64 are fewer than a sentence's tokens
    out = tmp_path / "run"
    assert _run("--model", str(model_dir), "--method", "scored", "--device", "cpu", "--out", str(out)) == 0
    predictions = _predictions(out)
    assert set(predictions.columns) >= COLUMNS and len(predictions) == 11  # 1 template x 11 sets x 1 name
    assert predictions["masked_sentence"].str.count(r"\[MASK\]").eq(1).all()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    for row in predictions.to_dict("records"):
        losses = []
        for c in row["candidates"]:
            ids = tokenizer(row["masked_sentence"].replace("[MASK]", c), return_tensors="pt")["input_ids"]
            with torch.inference_mode():
                losses.append(float(model(ids, labels=ids).loss))
        best = min(range(len(losses)), key=lambda i: (losses[i], i))
        if row["choice"] != row["candidates"][best]:  # only a tie to float rounding may differ
            assert abs(losses[best] - losses[list(row["candidates"]).index(row["choice"])]) < 1e-5
        for got, loss in zip(row["scores"], losses, strict=True):
            assert got == pytest.approx(-loss, abs=1e-4)  # the mean log-probability per token is minus the loss
    record = json.loads((out / "scores.json").read_text())
    assert record["task"] == "misgendered" and record["request_type"] == "loglikelihood"
    groups = record["results"]["accuracy"]["groups"]
    assert list(groups) == ["binary", "neutral", "neo"]
    for group, stat in groups.items():
        assert stat["value"] == pytest.approx(predictions.loc[predictions["group"] == group, "correct"].mean())
    assert (out / "metrics.png").stat().st_size > 0 and "## Accuracy" in (out / "report.md").read_text()


def test_a_tiny_masked_lm_fills_the_slot_among_the_eleven_forms(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert _run("--model", str(tiny_bert(tmp_path)), "--device", "cpu", "--out", str(out)) == 0  # auto: mlm
    predictions = _predictions(out)
    assert set(predictions["method"]) == {"mlm"} and set(predictions.columns) >= COLUMNS
    for row in predictions.to_dict("records"):
        scores = list(row["scores"])
        assert len(scores) == 11 and row["choice"] == row["candidates"][scores.index(max(scores))]
        assert row["correct"] == int(row["choice"] == row["label"])
    assert json.loads((out / "scores.json").read_text())["request_type"] == "fill_mask"


def test_a_completions_endpoint_chooses_as_the_same_model_run_locally(tmp_path: Path) -> None:
    """``scored`` on a completions endpoint asks each candidate sentence's log-probabilities as ``loglikelihood``
    requests of the server (echoed prompts): served the tiny causal LM of the test above, it chooses as that model
    run locally, with the same mean log-probabilities per token."""
    from tests.completions_server import CompletionsServer

    model_dir = tiny_llama(tmp_path)  # 256 positions: the tiny GPT-2's 64 are fewer than a sentence's tokens
    assert _run("--model", str(model_dir), "--method", "scored", "--device", "cpu", "--out", str(tmp_path / "l")) == 0
    with CompletionsServer(model_dir, name="tiny") as server:
        args = ("--model", "tiny", "--endpoint", server.url, "--method", "scored", "--out", str(tmp_path / "e"))
        assert _run(*args) == 0
        assert server.prompts == 11 * 11  # each item's 11 candidate sentences, once
    local, served = _predictions(tmp_path / "l"), _predictions(tmp_path / "e")
    assert served["choice"].tolist() == local["choice"].tolist()
    for got, want in zip(served["scores"], local["scores"], strict=True):
        assert list(got) == pytest.approx(list(want), abs=1e-5)
    record = json.loads((tmp_path / "e" / "scores.json").read_text())
    assert record["request_type"] == "loglikelihood" and record["method"] == "scored"


def test_a_chat_endpoint_answers_fill_in_prompts_parsed_to_one_form(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FakeOpenAI(answer="They") as server:
        code = _run("--model", "chat-model", "--endpoint", server.url, "--out", str(out))
        prompts = [b["messages"][-1]["content"] for b in server.bodies]
    assert code == 0 and len(prompts) == 11
    predictions = _predictions(out)
    assert set(predictions["method"]) == {"instructed"}
    assert predictions["reply"].str.fullmatch(r"They \[\d+\]").all()  # the fake server adds the prompt's length
    sent = {p.split("Sentence: ")[1].split("\n")[0] for p in prompts}  # each item's sentence, its slot a blank
    assert sent == set(predictions["masked_sentence"].str.replace("[MASK]", "___", regex=False))
    right = (predictions["declared"] == "they") & (predictions["form"] == "nom")
    assert predictions["correct"].tolist() == right.astype(int).tolist()
    assert predictions["parsed"].all()
    assert json.loads((out / "scores.json").read_text())["parse_rate"] == 1.0


def test_a_request_type_the_model_lacks_is_one_line_before_any_folder(tmp_path: Path, capsys) -> None:
    out, model = tmp_path / "run", tiny_gpt2(tmp_path)
    capsys.readouterr()  # the tiny model's build output
    assert _run("--model", str(model), "--method", "mlm", "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a masked LM" in err[0] and not out.exists()


def test_a_methods_setting_is_refused_for_a_task_of_its_own_requests(tmp_path: Path, capsys) -> None:
    """``--prompt`` and ``--max-new-tokens`` are the fill-in-the-blank ``instructed``'s: a task that asks its own
    requests would ignore them, so they are one line before any model loads or folder is made."""
    out = tmp_path / "run"
    code = main(["run", "--config", "misgendered", "--model", "no/such-model", "--prompt", "nope", "--max-new-tokens",
                 "0", "--limit", "1", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists()
    assert err == (
        "queerbench: error: --prompt, --max-new-tokens: for a fill-in-the-blank task; --config misgendered asks its "
        "own requests and takes none: drop them"
    )


def test_eval_runs_misgendered_as_a_part_of_the_suite(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    code = main(
        [
            "eval",
            "--model",
            str(tiny_llama(tmp_path, chat_template=False)),
            "--tasks",
            "misgendered",
            "--limit",
            "1",
            "--bootstrap",
            "50",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert [(p["folder"], p["status"]) for p in results["parts"]] == [("misgendered-scored", "done")]
    (row,) = results["rows"]
    assert (
        row["task"] == "misgendered"
        and row["metric"] == "Accuracy"
        and set(row["scores"])
        == {
            "binary",
            "neutral",
            "neo",
        }
    )
    assert "misgendered" in (out / "card.md").read_text()


def test_a_sentence_longer_than_the_models_positions_is_one_line_and_leaves_no_folder(tmp_path: Path, capsys) -> None:
    out, model = tmp_path / "run", tiny_gpt2(tmp_path)  # 64 positions; its tiny tokenizer makes ~100 tokens of one
    capsys.readouterr()
    assert _run("--model", str(model), "--method", "scored", "--device", "cpu", "--out", str(out)) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "Loading weights" not in line]
    assert len(err) == 1 and "takes at most 64 tokens" in err[0] and "longer context" in err[0]  # after the load bar
    assert not out.exists()


def test_the_embedded_smollm2_chooses_by_the_papers_rule_recomputed_independently(tmp_path: Path) -> None:
    """The real model of this machine: through `run` (prefix sharing, batches), then one sentence at a time by the
    paper's zero-shot/gpt2.py rule; the choices agree (a difference only within float rounding of a tie)."""
    import torch

    from queerbench.models.generation import load_causal_lm

    out = tmp_path / "run"
    assert (
        _run("--model", "embedded:smollm2-135m-instruct", "--method", "scored", "--device", "cpu", "--out", str(out))
        == 0
    )
    predictions = _predictions(out)
    model, tokenizer = load_causal_lm("embedded:smollm2-135m-instruct", device="cpu")
    for row in predictions.head(6).to_dict("records"):
        losses = []
        for c in row["candidates"]:
            ids = tokenizer(row["masked_sentence"].replace("[MASK]", c), return_tensors="pt")["input_ids"]
            with torch.inference_mode():
                losses.append(float(model(ids, labels=ids).loss))
        best = min(range(len(losses)), key=lambda i: (losses[i], i))
        chosen = list(row["candidates"]).index(row["choice"])
        assert chosen == best or abs(losses[chosen] - losses[best]) < 1e-4
        assert [-x for x in row["scores"]] == pytest.approx(losses, abs=1e-3)
