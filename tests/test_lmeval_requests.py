"""The lm-evaluation-harness export of a ``requests`` task (:mod:`queerbench.lmeval.request_task`), on MISGENDERED.

The task YAML, the hooks lm_eval calls (on the exported Parquet file, read back as lm_eval's datasets reads it:
list columns as lists) and the overwrite of an earlier export need no lm_eval; the last tests load the exported task
with lm_eval's own TaskManager and run it end to end on a tiny causal LM. lm-evaluation-harness is not a dependency
of queerbench: ``.ci/engines.sh`` installs it for CI; without it those tests skip locally and fail in CI
(:mod:`tests.engines`).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.lmeval.export import _TaskLoader, export_tasks
from queerbench.lmeval.request_task import RequestHooks
from queerbench.models.requests import Generate, GenerateResult
from queerbench.tasks import get_task
from tests.engines import need_engine

pytestmark = pytest.mark.usefixtures("one_thread")

METRICS = ["accuracy_binary", "accuracy_neutral", "accuracy_neo"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``queerbench lm-eval export DIR --configs misgendered``."""
    out = tmp_path_factory.mktemp("lmeval-requests") / "tasks"
    assert main(["lm-eval", "export", str(out), "--configs", "misgendered"]) == 0
    return out


def _hooks(folder: Path) -> Any:
    """The exported ``utils.py`` of the task in ``folder``, imported as lm_eval imports it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"utils_{folder.name}", folder / "utils.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prompt(item: dict[Any, Any]) -> str:
    """The prompt of the misgendered ``instructed`` request of ``item``, as the task makes it."""
    (request,) = get_task("misgendered").requests({str(k): v for k, v in item.items()}, "instructed")
    assert isinstance(request, Generate)
    return request.prompt


def _docs(folder: Path) -> list[dict[str, Any]]:
    """The exported items as lm_eval's docs (``datasets``' parquet reader: lists for list columns)."""
    import datasets

    data = datasets.load_dataset("parquet", data_files={"test": str(folder / "items.parquet")}, split="test")
    return [dict(row) for row in data]


def test_export_writes_one_generate_until_task_with_a_metric_per_group(exported: Path) -> None:
    assert sorted(p.name for p in exported.iterdir()) == [".queerbench-lm-eval", "misgendered"]  # no _chat twin
    folder = exported / "misgendered"
    assert sorted(p.name for p in folder.iterdir()) == ["items.parquet", "misgendered.yaml", "utils.py"]
    import yaml

    config = yaml.load((folder / "misgendered.yaml").read_text(), Loader=_TaskLoader)
    task = get_task("misgendered")
    (prompt,) = task.requests({str(k): v for k, v in task.items().iloc[0].to_dict().items()}, "instructed")
    assert isinstance(prompt, Generate)
    assert config["task"] == "misgendered" and config["output_type"] == "generate_until"
    assert config["doc_to_text"] == ("!function", "utils.doc_to_text")
    assert config["process_results"] == ("!function", "utils.process_results")
    assert config["generation_kwargs"] == {
        "until": [],
        "do_sample": False,
        "temperature": 0.0,
        "max_gen_toks": prompt.max_new_tokens,
    }
    assert [m["metric"] for m in config["metric_list"]] == METRICS
    assert [m["aggregation"] for m in config["metric_list"]] == [("!function", f"utils.{m}") for m in METRICS]
    assert all(m["higher_is_better"] is True for m in config["metric_list"])
    assert config["dataset_kwargs"]["data_files"]["test"] == str(folder / "items.parquet")
    assert config["metadata"]["config"] == "misgendered" and config["metadata"]["method"] == "instructed"
    items = pd.read_parquet(folder / "items.parquet")
    assert items["id"].tolist() == task.items()["id"].tolist()  # run order
    assert [list(c) for c in items["candidates"]] == [list(c) for c in task.items()["candidates"]]


def test_hooks_ask_the_task_for_the_prompt_and_the_score(exported: Path) -> None:
    utils, task = _hooks(exported / "misgendered"), get_task("misgendered")
    docs = _docs(exported / "misgendered")
    items = task.items().to_dict("records")
    assert len(docs) == len(items)
    for doc, item in zip(docs[:40], items[:40], strict=True):
        assert utils.doc_to_text(doc) == _prompt(item)
        wrong = next(c for c in item["candidates"] if c != item["label"])
        right = utils.process_results(doc, [f"{item['label']}"])
        assert list(right) == METRICS
        assert right[f"accuracy_{item['group']}"] == 1
        assert utils.process_results(doc, [wrong])[f"accuracy_{item['group']}"] == 0
        assert utils.process_results(doc, ["I cannot say."])[f"accuracy_{item['group']}"] == 0
        assert all(v is None for k, v in right.items() if k != f"accuracy_{item['group']}")


def test_aggregation_is_the_mean_over_the_groups_items(exported: Path) -> None:
    utils, task = _hooks(exported / "misgendered"), get_task("misgendered")
    docs = _docs(exported / "misgendered")[:120]
    replies = [doc["label"] if i % 3 else "none of them" for i, doc in enumerate(docs)]  # every third one wrong
    per_doc = [utils.process_results(doc, [reply]) for doc, reply in zip(docs, replies, strict=True)]
    for group in ("binary", "neutral", "neo"):
        values = [p[f"accuracy_{group}"] for p in per_doc]  # as lm_eval collects them: one per doc
        mine = [
            task.score_item(doc, [GenerateResult(reply)], "instructed")["correct"]
            for doc, reply in zip(docs, replies, strict=True)
            if doc["group"] == group
        ]
        assert mine and 0 < sum(mine) < len(mine)
        assert getattr(utils, f"accuracy_{group}")(values) == pytest.approx(sum(mine) / len(mine))
    assert math.isnan(utils.accuracy_neo([None, None, float("nan")]))  # no item of the group: NaN


def test_requests_hooks_refuse_a_method_that_is_not_generate() -> None:
    hooks = RequestHooks(config="misgendered", method="scored", columns=["id"])
    with pytest.raises(ValueError, match="has no generate method 'scored'"):
        hooks.doc_to_text({"id": "x"})


def test_overwrite_replaces_only_the_exports_own_files(tmp_path: Path) -> None:
    out = tmp_path / "tasks"
    assert main(["lm-eval", "export", str(out), "--configs", "misgendered,default"]) == 0
    (out / "notes.md").write_text("how I ran it")
    (out / "misgendered" / "mine.txt").write_text("kept")
    pycache = out / "misgendered" / "__pycache__"  # what lm_eval leaves after importing utils.py
    pycache.mkdir()
    (pycache / "utils.cpython-311.pyc").write_bytes(b"stale")
    (out / "misgendered" / "items.parquet").write_bytes(b"stale")
    assert main(["lm-eval", "export", str(out), "--configs", "misgendered", "--overwrite"]) == 0
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        ".queerbench-lm-eval",
        "misgendered/items.parquet",
        "misgendered/mine.txt",
        "misgendered/misgendered.yaml",
        "misgendered/utils.py",
        "notes.md",
    ]
    assert (out / "notes.md").read_text() == "how I ran it" and (out / "misgendered" / "mine.txt").read_text() == "kept"
    assert len(pd.read_parquet(out / "misgendered" / "items.parquet")) == len(get_task("misgendered").items())
    assert main(["lm-eval", "export", str(out), "--configs", "default", "--overwrite"]) == 0  # misgendered's go
    assert sorted(p.name for p in (out / "misgendered").iterdir()) == ["mine.txt"]


def test_a_request_task_without_a_generate_method_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    task = get_task("misgendered")
    spec = replace(task.spec, methods=("mlm", "scored"), requests={"mlm": "fill_mask", "scored": "loglikelihood"})
    monkeypatch.setattr(task, "spec", spec)
    out = tmp_path / "tasks"
    code = main(["lm-eval", "export", str(out), "--configs", "misgendered"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "misgendered has no method of request type generate" in err and "mlm: fill_mask" in err
    assert not out.exists()
    with pytest.raises(ValueError, match="no method of request type generate"):
        export_tasks(out, ["misgendered"])


def test_lm_eval_import_refuses_a_request_tasks_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = tmp_path / "lm-out" / "model"
    samples.mkdir(parents=True)
    (samples / "samples_misgendered_2025-01-01T00-00-00.000001.jsonl").write_text("{}\n")
    code = main(["lm-eval", "import", str(tmp_path / "lm-out"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "whose scores lm_eval computed itself" in err, err


# ------------------------------------------------------------------------------------- with lm-evaluation-harness
def test_lm_eval_task_manager_loads_the_export(exported: Path) -> None:
    need_engine("lm_eval", "lm-evaluation-harness (lm-eval==0.4.13)")
    import importlib

    manager = importlib.import_module("lm_eval.tasks").TaskManager(include_path=str(exported), include_defaults=False)
    assert "misgendered" in manager.all_tasks
    loaded = manager.load(["misgendered"])["tasks"]["misgendered"]
    assert loaded.config.output_type == "generate_until"
    assert loaded.config.generation_kwargs["until"] == [] and loaded.config.generation_kwargs["do_sample"] is False
    assert list(loaded.aggregation()) == METRICS and loaded.higher_is_better() == dict.fromkeys(METRICS, True)
    docs = list(loaded.test_docs())
    item = get_task("misgendered").items().iloc[0].to_dict()
    assert len(docs) == len(get_task("misgendered").items()) and loaded.doc_to_text(docs[0]) == _prompt(item)
    assert loaded.process_results(docs[0], [item["label"]])["accuracy_binary"] == 1


def test_lm_eval_runs_the_export_on_a_tiny_causal_lm(exported: Path, tmp_path: Path) -> None:
    need_engine("lm_eval", "lm-evaluation-harness (lm-eval==0.4.13)")
    from tests.tiny_models import tiny_llama

    model, output = tiny_llama(tmp_path, chat_template=False), tmp_path / "lm-eval-out"
    n = 33  # the first template: 11 declared sets x 3 names, every group
    cmd = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={model},dtype=float32",
           "--device", "cpu", "--batch_size", "4", "--include_path", str(exported), "--tasks", "misgendered",
           "--log_samples", "--output_path", str(output), "--limit", str(n)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(next(output.rglob("results_*.json")).read_text())["results"]["misgendered"]
    samples = [json.loads(line) for line in next(output.rglob("samples_misgendered_*.jsonl")).read_text().splitlines()]
    assert len(samples) == n
    task = get_task("misgendered")
    for group in ("binary", "neutral", "neo"):
        mine = [
            task.score_item(s["doc"], [GenerateResult(s["filtered_resps"][0])], "instructed")
            for s in samples
            if s["doc"]["group"] == group
        ]
        assert mine
        assert results[f"accuracy_{group},none"] == pytest.approx(sum(m["correct"] for m in mine) / len(mine))
