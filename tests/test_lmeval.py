"""QueerBench as an lm-evaluation-harness task, end to end with lm-evaluation-harness from PyPI on a tiny causal LM.

``queerbench lm-eval export`` → ``lm_eval --model hf … --include_path DIR --tasks queerbench_default --log_samples``
→ ``queerbench lm-eval import`` must give the same words, labels and group scores as ``queerbench run --method
instructed --top-k 1`` on the same model and sentences; the import's bad inputs are one line each.

lm-evaluation-harness is not a dependency of queerbench: ``.ci/engines.sh`` installs it for CI. Without it these
tests skip locally and fail in CI (:mod:`tests.engines`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from tests.engines import need_engine
from tests.tiny_models import tiny_llama, train_briefly

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_NEW_TOKENS = "2"  # short replies from a tiny model: many are one word


def _need_lm_eval() -> None:
    need_engine("lm_eval", "lm-evaluation-harness (lm-eval==0.4.13)")


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A briefly trained tiny Llama without a chat template, the exported tasks and one lm_eval run over the
    sentences of the first template."""
    _need_lm_eval()
    from queerbench.tasks.queerbench.templates import build_sentences

    root = tmp_path_factory.mktemp("lmeval")
    model = train_briefly(tiny_llama(root, chat_template=False), steps=60)
    tasks = root / "tasks"
    assert main(["lm-eval", "export", str(tasks), "--configs", "default", "--max-new-tokens", MAX_NEW_TOKENS]) == 0
    frame = build_sentences("default")
    n_first = int((frame["template_id"] == frame["template_id"].min()).sum())
    output = root / "lm-eval-out"
    cmd = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={model},dtype=float32",
           "--device", "cpu", "--batch_size", "1", "--include_path", str(tasks), "--tasks", "queerbench_default",
           "--log_samples", "--output_path", str(output), "--limit", str(n_first)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"root": root, "model": model, "tasks": tasks, "output": output}


def test_export_writes_a_task_lm_eval_loads(harness: dict[str, Path]) -> None:
    tasks = harness["tasks"]
    assert {p.name for p in tasks.iterdir() if p.is_dir()} == {"queerbench_default", "queerbench_default_chat"}
    text = (tasks / "queerbench_default" / "queerbench_default.yaml").read_text()
    assert "output_type: generate_until" in text and "process_results: !function utils.process_results" in text
    results = json.loads(next(harness["output"].rglob("results_*.json")).read_text())["results"]["queerbench_default"]
    assert 0 < results["parse_rate_queer,none"] <= 1  # the per-group metrics of the harness's own table


def test_import_equals_queerbench_instructed(harness: dict[str, Path], tmp_path: Path) -> None:
    imported, own = tmp_path / "imported", tmp_path / "own"
    assert main(["lm-eval", "import", str(harness["output"]), "--out", str(imported)]) == 0
    assert main(["run", "--model", str(harness["model"]), "--method", "instructed", "--top-k", "1", "--limit", "1",
                 "--max-new-tokens", MAX_NEW_TOKENS, "--batch-size", "1", "--out", str(own)]) == 0  # fmt: skip
    a, b = pd.read_parquet(imported / "predictions.parquet"), pd.read_parquet(own / "predictions.parquet")
    assert a["id"].tolist() == b["id"].tolist()
    assert [list(t) for t in a["tokens"]] == [list(t) for t in b["tokens"]]
    assert [list(x) for x in a["label"]] == [list(x) for x in b["label"]]
    assert [r[0].strip() for r in a["reply"]] == [r[0].strip() for r in b["reply"]]
    assert sum(len(t) for t in a["tokens"]) > 5  # some replies were one word: there are scores to compare
    sa, sb = json.loads((imported / "scores.json").read_text()), json.loads((own / "scores.json").read_text())
    for key in ("queerbench", "afinn", "hurtlex", "toxicity", "n", "ci"):
        assert sa[key] == sb[key], key
    assert sa["run"]["method"] == "instructed" and sa["run"]["options"]["limit"] == 1
    assert (imported / "report.md").is_file() and any(imported.glob("*.png"))
    assert main(["compare", str(imported), str(own), "--out", str(tmp_path / "cmp")]) == 0


def _bad_import(source: Path, out: Path, capsys, *extra: str) -> str:
    code = main(["lm-eval", "import", str(source), "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    return err


def test_import_bad_folders_are_one_line(harness: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert "holds no lm-evaluation-harness samples" in _bad_import(harness["tasks"], out, capsys)
    assert "is not a folder" in _bad_import(tmp_path / "missing", out, capsys)

    other = tmp_path / "other"
    shutil.copytree(harness["output"], other)
    for samples in other.rglob("samples_queerbench_default_*.jsonl"):  # the same file, named as another task's
        samples.rename(samples.with_name(samples.name.replace("queerbench_default", "hellaswag")))
    assert "are of hellaswag, not of a queerbench task" in _bad_import(other, out, capsys)

    mixed = tmp_path / "mixed"
    shutil.copytree(harness["output"], mixed / "a")
    shutil.copytree(harness["output"], mixed / "b")
    results = next((mixed / "b").rglob("results_*.json"))
    doc = json.loads(results.read_text())
    doc["config"]["model_args"]["pretrained"] = "/elsewhere/another-model"
    results.write_text(json.dumps(doc))
    assert "from two models" in _bad_import(mixed, out, capsys)
    assert "holds no samples of queerbench_paper" in _bad_import(
        harness["output"], out, capsys, "--task", "queerbench_paper"
    )

    chat = tmp_path / "chat"
    shutil.copytree(harness["output"], chat)
    results = next(chat.rglob("results_*.json"))
    doc = json.loads(results.read_text())
    doc["chat_template"] = "{{ messages }}"  # as if run with --apply_chat_template
    results.write_text(json.dumps(doc))
    assert "use task queerbench_default_chat" in _bad_import(chat, out, capsys)
