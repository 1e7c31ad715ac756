"""`queerbench run` on generative LMs: both methods end to end (subprocess), resume after a kill, reuse, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.methods.instructed.replies import LABELS, parse_reply
from queerbench.reporting.record import RunRecord
from queerbench.run import pipeline as run_module
from queerbench.run.pipeline import RunOptions, run_benchmark
from tests.net import free_port
from tests.run_parts import fix_part_size
from tests.test_instructed_method import BlankServer
from tests.tiny_models import tiny_bert, tiny_gpt2, tiny_llama

FAST = ["--bootstrap", "20", "--permutations", "20", "--toxicity", "none"]
UNTHROTTLED = ["--requests-per-minute", "100000"]  # a local fake server: no need for the default 10 requests/s
ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test"}
    return subprocess.run(
        [sys.executable, "-m", "queerbench", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    return {
        "gpt2": str(tiny_gpt2(root)),
        "llama": str(tiny_llama(root)),
        "llama_plain": str(tiny_llama(root, name="plain", chat_template=False)),
        "bert": str(tiny_bert(root)),
    }


def test_scored_run_end_to_end(models: dict[str, str], tmp_path: Path):
    out = tmp_path / "scored"
    done = _cli("--model", models["gpt2"], "--limit", "2", "--top-k", "3", "--out", str(out), *FAST)
    assert done.returncode == 0, done.stderr
    assert "method scored" in done.stdout
    preds = pd.read_parquet(out / "predictions.parquet")
    assert len(preds) == 2 * 77 and set(preds["method"]) == {"scored"}
    assert all(len(t) == 3 and all(w.isalpha() and w == w.lower() for w in t) for t in preds["tokens"])
    assert all(sum(p) <= 1 + 1e-6 and list(p) == sorted(p, reverse=True) for p in preds["probs"])
    assert (
        preds["completed"].map(lambda c: c[0])
        == [s.replace("[MASK]", t[0]) for s, t in zip(preds["masked_sentence"], preds["tokens"], strict=True)]
    ).all()
    scores = json.loads((out / "scores.json").read_text())
    run = scores["run"]
    assert run["method"] == "scored" and run["decoding"]["candidates"] == 12
    assert run["fingerprint"]["kind"] == "local" and "model.safetensors" in run["fingerprint"]["files"]
    assert run["model_metadata"]["architecture"] == "GPT2LMHeadModel"
    report = (out / "report.md").read_text()
    assert "## Generative method: `scored`" in report and report.index("Generative method") < report.index("## Scores")
    # the method is in the run key, so the registry puts it in the figures' label; the flag that says so is handed to
    # the report, not stored
    assert f"*Heatmap: {Path(models['gpt2']).name} · default config · top-{scores['k']} · scored.*" in report
    assert "method_in_label" not in run
    # rerun: reused, nothing predicted (the model is not even loaded)
    again = _cli("--model", models["gpt2"], "--limit", "2", "--top-k", "3", "--out", str(out), *FAST)
    assert again.returncode == 0 and "reusing the finished predictions" in again.stdout
    assert json.loads((out / "scores.json").read_text())["run"]["reused_predictions"] is True


@pytest.mark.parametrize("kind", ["llama", "llama_plain"])
def test_instructed_local_run_end_to_end(models: dict[str, str], tmp_path: Path, kind: str):
    out = tmp_path / kind
    args = ["--model", models[kind], "--method", "instructed", "--limit", "1", "--top-k", "2", "--max-new-tokens", "4"]
    done = _cli(*args, "--out", str(out), *FAST)
    assert done.returncode == 0, done.stderr
    preds = pd.read_parquet(out / "predictions.parquet")
    assert set(preds["method"]) == {"instructed"} and len(preds) == 77
    for _, row in preds.iterrows():
        labels = list(row["label"])
        assert len(row["reply"]) == len(labels) == 2 and set(labels) <= set(LABELS)
        assert list(row["tokens"]) == [
            parse_reply(r, row["masked_sentence"]).word
            for r, lab in zip(row["reply"], labels, strict=True)
            if lab == "ok"
        ]
    scores = json.loads((out / "scores.json").read_text())
    fmt = "chat" if kind == "llama" else "plain"
    assert scores["run"]["prompt_format"] == fmt and scores["run"]["decoding"]["temperature"] == 1.0
    assert scores["generation"]["overall"]["n"] == 2 * 77
    n_ok = sum(len(t) > 0 for t in preds["tokens"])
    assert scores["generation"]["overall"]["n_scored"] == n_ok == sum(scores["n"].values())
    if kind == "llama_plain":
        assert done.stdout.count("no chat template") == 1  # said once
    report = (out / "report.md").read_text()
    assert "Parse and refusal rates per group" in report and "| all | 154 |" in report


def test_endpoint_run_killed_mid_chunk_resumes_without_asking_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    replies = {"[MASK]": ["doctor"]}
    out = tmp_path / "ep"
    with BlankServer(replies, latency=0.05) as server:
        args = ["--endpoint", server.url, "--model", "served", "--limit", "1", "--top-k", "1", "--out", str(out), *FAST]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "queerbench", "run", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 300
        while server.calls < 20 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        first = server.calls
        assert 20 <= first < 77 and not (out / "predictions.parquet").exists()
        assert main(["run", *args]) == 0  # the resume (in-process: no second interpreter start)
        assert server.calls in (77, 78)  # every sentence asked once (one reply may have been in flight at the kill)
        preds = pd.read_parquet(out / "predictions.parquet")
        assert preds["tokens"].map(list).tolist() == [["doctor"]] * 77
        assert preds["id"].tolist() == run_module.run_items(RunOptions(limit=1))["id"].tolist()
        calls = server.calls
        assert main(["run", *args]) == 0 and server.calls == calls  # a rerun makes zero calls
    scores = json.loads((out / "scores.json").read_text())
    assert scores["run"]["method"] == "instructed" and scores["run"]["endpoint"] == server.url
    assert scores["generation"]["overall"]["parse_rate"] == 1.0


def test_scored_run_killed_between_chunks_resumes(
    models: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from queerbench.methods.scored import predictor as fill

    fix_part_size(monkeypatch, 40)
    real = fill.ScoredPredictor.predict
    calls = {"n": 0}

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(fill.ScoredPredictor, "predict", flaky)
    options = RunOptions(model=models["llama"], limit=2, top_k=2, toxicity="none", n_bootstrap=20, n_permutations=20)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(options, tmp_path / "r", log=lambda _: None)
    stored = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "r/.chunks").glob("chunk-*.parquet")}
    assert len(stored) == 2
    monkeypatch.setattr(fill.ScoredPredictor, "predict", real)
    seen: list[int] = []
    original = fill.ScoredPredictor.predict

    def counting(self, ids, sentences, tick):
        seen.append(len(ids))
        return original(self, ids, sentences, tick)

    monkeypatch.setattr(fill.ScoredPredictor, "predict", counting)
    result = run_benchmark(options, tmp_path / "r", log=lambda _: None)
    assert result.n_predicted == sum(seen) == 2 * 77 - 80  # only what was not stored
    fresh = run_benchmark(options, tmp_path / "fresh", log=lambda _: None)
    a = pd.read_parquet(tmp_path / "r/predictions.parquet")["tokens"].map(list).tolist()
    assert a == pd.read_parquet(tmp_path / "fresh/predictions.parquet")["tokens"].map(list).tolist()
    assert fresh.scores["hurtlex"] == result.scores["hurtlex"]


def test_resume_with_changed_weights_is_refused(models: dict[str, str], tmp_path: Path, monkeypatch, capsys):
    import shutil

    from queerbench.methods.scored import predictor as fill

    folder = tmp_path / "model"
    shutil.copytree(models["gpt2"], folder)
    fix_part_size(monkeypatch, 40)
    real = fill.ScoredPredictor.predict
    calls = {"n": 0}

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(fill.ScoredPredictor, "predict", flaky)
    out = str(tmp_path / "r")
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(RunOptions(model=str(folder), limit=1, top_k=2, toxicity="none"), out, log=lambda _: None)
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")  # the folder's weights change between the kill and the resume
    save_file({k: v + 0.01 for k, v in weights.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    code = main(["run", "--model", str(folder), "--limit", "1", "--top-k", "2", "--toxicity", "none", "--out", out])
    err = capsys.readouterr().err
    assert code == 2 and "weights" in err and "changed" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "{gpt2}", "--method", "mlm"], "is a causal LM"),
        (["--model", "{bert}", "--method", "scored"], "is a masked LM"),
        (["--model", "{bert}", "--method", "instructed"], "--method instructed needs a causal LM"),
        (["--endpoint", "http://127.0.0.1:9/v1"], "--endpoint needs --model NAME"),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--method", "mlm"],
            "--endpoint runs --method instructed (replies) or scored",
        ),
        (["--model", "{gpt2}", "--concurrency", "0"], "--concurrency must be at least 1"),
        (["--endpoint", "ftp://x", "--model", "m"], "http(s) URL"),
        (["--model", "{llama}", "--method", "instructed", "--prompt", "nope"], "unknown prompt id"),
    ],
)
def test_bad_generative_input_is_one_line(models: dict[str, str], tmp_path: Path, capsys, args, message):
    args = [a.format(**models) for a in args]
    code = main(["run", *args, "--limit", "1", "--toxicity", "none", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_dead_endpoint_is_one_line(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    port = free_port()  # a port nothing listens on
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    options = ["--endpoint", f"http://127.0.0.1:{port}/v1", "--model", "m", "--limit", "1", "--toxicity", "none"]
    t0 = time.monotonic()
    code = main(["run", *options, "--out", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert code == 2 and f"127.0.0.1:{port}" in err and "Traceback" not in err
    assert time.monotonic() - t0 < 120


def test_instructed_run_with_no_one_word_reply_reports_rates_instead_of_failing(tmp_path: Path):
    # a model that only echoes the sentence: nothing can be scored, but the replies and their labels are the result
    out = tmp_path / "echo"
    with BlankServer({"[MASK]": ["The person is a [MASK]."]}) as server:
        args = ["--endpoint", server.url, "--model", "served", "--limit", "1", "--top-k", "1", "--out", str(out)]
        done = _cli(*args, *FAST, *UNTHROTTLED)
    assert done.returncode == 0, done.stderr
    assert "no sentence could be scored" in done.stdout
    scores = json.loads((out / "scores.json").read_text())
    assert scores["scored"] is False and scores["n"] == {} and scores["queerbench"] == {}
    overall = scores["generation"]["overall"]
    assert overall["n"] == 77 and overall["n_scored"] == 0
    # its record says the same: every declared metric has no group, the parse rate is the finding
    record = RunRecord.from_json(scores)
    assert record.kind == "blanks" and record.request_type == "generate" and record.parse_rate == 0.0
    assert all(block.groups == {} and block.headline is None for block in record.results.values())
    preds = pd.read_parquet(out / "predictions.parquet")
    assert len(preds) == 77 and all(list(lab) == ["echo"] for lab in preds["label"])
    report = (out / "report.md").read_text()
    assert "No sentence could be scored" in report and "Parse and refusal rates per group" in report


def test_refused_endpoint_leaves_no_output_folder(tmp_path: Path):
    port = free_port()  # a loopback port nobody listens on
    out = tmp_path / "dead"
    done = _cli("--endpoint", f"http://127.0.0.1:{port}/v1", "--model", "m", "--limit", "1", "--out", str(out), *FAST)
    assert done.returncode == 2 and "cannot connect" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()  # nothing was answered, so nothing half-made is left behind
