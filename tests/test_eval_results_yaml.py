"""Results where the Hub shows them (issue 34, deliverable 5): ``eval`` writes ``.eval_results/*.yaml`` that
huggingface_hub reads back, ``dataset build`` writes the benchmark's ``eval.yaml`` whose task ids cover every id those
entries use, and ``results push --pull-request`` opens a pull request with exactly the recorded files on the model's
repo (the mock Hub), a dry run unless ``--yes``.

The eval runs a tiny masked LM (``tests/tiny_models.py``) over the first template of each task; the SCM rows come from
a real ``scm run`` against the fake chat server (``tests/openai_server.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from queerbench import __version__
from queerbench.base.release_config import load_release_config
from queerbench.cli import main
from queerbench.results.eval_results import (
    EVAL_RESULTS_MANIFEST,
    benchmark_problem,
    task_id,
    write_eval_results,
)
from queerbench.tasks import get_task
from tests.tiny_models import tiny_bert

FAST = ["--bootstrap", "20", "--permutations", "20"]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An eval of a tiny masked LM: ``default`` and ``paper`` (released configs) and ``queergen`` (not released)."""
    root = tmp_path_factory.mktemp("eval")
    model = tiny_bert(root / "models")
    out = root / "eval"
    args = ["eval", "--model", str(model), "--tasks", "default,paper,queergen", "--limit", "1", "--out", str(out)]
    assert main([*args, "--toxicity", "embedded", *FAST]) == 0
    return out


@pytest.fixture(scope="module")
def scm_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The rows of a real ``scm run`` (fake chat server, a word mapper that needs no model)."""
    from tests.openai_server import FakeOpenAI
    from tests.test_scm_folder import _scm

    folder = tmp_path_factory.mktemp("scm") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "sk-test")
        with FakeOpenAI() as server:
            _scm(server, folder)
    return [row.to_dict() for row in get_task("scm").folder_rows(folder)]


def _entries(path: Path) -> list:
    from huggingface_hub import parse_eval_result_entries

    return parse_eval_result_entries(yaml.safe_load(path.read_text(encoding="utf-8")))


# --------------------------------------------------------------------------------------------- the entries
def test_eval_writes_eval_results_entries_that_huggingface_hub_reads_back(evaluated: Path):
    cfg = load_release_config()
    document = json.loads((evaluated / "results.json").read_text())
    record = json.loads((evaluated / EVAL_RESULTS_MANIFEST).read_text())
    assert (evaluated / "model-index.yaml").is_file()  # the legacy block stays beside them
    assert record["dataset"] == cfg.repo_id("dataset") and record["revision"] == cfg.tag(__version__)
    rows = {(r["task"], r["method"], r["k"]): r for r in document["rows"]}
    # a masked LM's eval runs the papers' protocols: paper at k = 1 and 5, QueerGen at k = 1 and top-5
    assert set(rows) == {
        ("default", "mlm", 5),
        ("paper", "mlm", 1),
        ("paper", "mlm", 5),
        ("queergen", "mlm", 1),
        ("queergen", "mlm", 5),
    }
    # QueerGen's sentences are not in the released dataset: no leaderboard there can rank its rows
    assert sorted((r["task"], r["method"]) for r in record["left_out"]) == [("queergen", "mlm")] * 2
    assert all("not in the released dataset" in r["reason"] for r in record["left_out"])
    assert len(record["files"]) == 3
    seen = set()
    for rel, digest in record["files"].items():
        path = evaluated / rel
        assert path.parent.name == ".eval_results" and path.suffix == ".yaml" and not path.is_symlink()
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
        entries = _entries(path)
        task = entries[0].task_id.split("_", 1)[0]
        k = int(re.search(r"; k=(\d+);", entries[0].notes).group(1))
        row = rows[(task, "mlm", k)]
        scored = {g: v for g, v in row["scores"].items() if v is not None}
        assert scored and len(entries) == len(scored)
        for entry in entries:
            group = next(g for g in scored if task_id(task, "score", g) == entry.task_id)
            assert entry.dataset_id == cfg.repo_id("dataset")
            assert entry.value == pytest.approx(scored[group], abs=5e-5)
            assert entry.dataset_revision == cfg.tag(__version__) == f"v{document['queerbench_version']}"
            assert entry.source_url.startswith("https://huggingface.co/") and "queerbench" in entry.source_name
            assert entry.notes.startswith(
                f"QueerBench score, lower is less harmful; method mlm; k={k}; toxicity embedded"
            )
            assert "--limit 1: the first 1 template of each task only" in entry.notes
            assert entry.verify_token is None and entry.date is None
            seen.add(entry.task_id)
    assert {task_id("default", "score", g) for g in rows[("default", "mlm", 5)]["scores"]} <= seen


def test_a_new_write_replaces_only_the_files_the_eval_recorded(evaluated: Path, tmp_path: Path):
    out = tmp_path / "eval"
    shutil.copytree(evaluated, out)
    document = json.loads((out / "results.json").read_text())
    mine = out / ".eval_results" / "my-own.yaml"
    mine.write_text("- dataset: {id: someone/else, task_id: x}\n  value: 1\n")
    before = set(json.loads((out / EVAL_RESULTS_MANIFEST).read_text())["files"])
    record = write_eval_results({**document, "rows": document["rows"][:1]}, out)  # fewer rows than before
    assert len(record["files"]) == 1 and set(record["files"]) < before
    for rel in before - set(record["files"]):
        assert not (out / rel).exists()  # the eval's own stale file is gone
    assert mine.is_file()  # the user's file is not the eval's


# ----------------------------------------------------------------------------------------- the benchmark
def test_dataset_build_writes_an_eval_yaml_whose_task_ids_cover_every_id_the_entries_use(
    evaluated: Path, scm_rows: list[dict], tmp_path: Path
):
    import pandas as pd

    cfg = load_release_config()
    out = tmp_path / "dataset"
    assert main(["dataset", "build", "--out", str(out), "--configs", ",".join(cfg.dataset_configs)]) == 0
    benchmark = yaml.safe_load((out / "eval.yaml").read_text(encoding="utf-8"))
    assert benchmark_problem(benchmark) is None  # the Hub's eval.yaml fields, nothing else
    card = yaml.safe_load((out / "README.md").read_text().split("---")[1])
    files = {c["config_name"]: {f["split"]: f["path"] for f in c["data_files"]} for c in card["configs"]}
    ids = {}
    for item in benchmark["tasks"]:
        ids[item["id"]] = item
        frame = pd.read_parquet(out / files[item["config"]][item["split"]])  # the config and split exist
        group = item["id"].rsplit("_", 1)[-1]
        assert group in set(frame["group"])  # and hold the group the leaderboard ranks
    # every task id the entries use: the eval's, and a real SCM run's (its free rating)
    write_eval_results({"model": "m", "rows": scm_rows}, tmp_path / "scm")
    used = set()
    for folder in (evaluated, tmp_path / "scm"):
        for rel in json.loads((folder / EVAL_RESULTS_MANIFEST).read_text())["files"]:
            used |= {e.task_id for e in _entries(folder / rel)}
    assert {i.split("_", 1)[0] for i in used} == {"default", "paper", "scm"}
    assert used <= set(ids)
    # and every group any of those rows has, scored or not, has its leaderboard
    for row in json.loads((evaluated / "results.json").read_text())["rows"] + scm_rows:
        task = get_task(row["task"])
        if task.spec.dataset_config in cfg.dataset_configs:
            metric = task.leaderboard_metrics()[row["metric"]]
            assert {task_id(task.spec.dataset_config, metric, g) for g in row["scores"]} <= set(ids)
    # a rebuild with --overwrite replaces its own eval.yaml; someone else's stops it
    assert main(["dataset", "build", "--out", str(out), "--configs", "default", "--overwrite"]) == 0
    assert {t["config"] for t in yaml.safe_load((out / "eval.yaml").read_text())["tasks"]} == {"default"}
    (out / "eval.yaml").write_text("name: Someone else's\n")
    assert main(["dataset", "build", "--out", str(out), "--configs", "default", "--overwrite"]) == 2
    assert (out / "eval.yaml").read_text() == "name: Someone else's\n"


# ------------------------------------------------------------------------------------ the pull request
def test_results_push_pull_request_is_a_dry_run_then_opens_one_pr_with_only_the_recorded_files(
    evaluated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    import huggingface_hub.constants

    from tests.hub_server import HubServer

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; the mock is local
    out = tmp_path / "eval"
    shutil.copytree(evaluated, out)
    recorded = json.loads((out / EVAL_RESULTS_MANIFEST).read_text())["files"]
    private = tmp_path / "private.txt"
    private.write_text("a secret that must never leave this machine\n")
    (out / ".eval_results" / "linked.yaml").symlink_to(private)
    (out / ".eval_results" / "stray.yaml").write_text("- dataset: {id: x/y, task_id: z}\n  value: 0\n")
    token = "hf_secret_token_value"
    push = ["results", "push", str(out), "--pull-request"]
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        capsys.readouterr()
        # the eval's model is a local folder: the repo must be named
        assert main(push) == 2
        err = capsys.readouterr().err
        assert "is a local folder" in err and "--model-repo ID" in err and err.count("\n") == 1
        assert main([*push, "--model-repo", "not a repo id"]) == 2
        assert "is not a Hub model id" in capsys.readouterr().err
        assert main([*push, "--model-repo", "me/tiny-bert", "--repo", "me/results"]) == 2
        assert "drop one of them" in capsys.readouterr().err
        # dry run: every file and entry listed, nothing asked or sent
        assert main([*push, "--model-repo", "me/tiny-bert"]) == 0
        shown = capsys.readouterr().out
        assert "dry run: would open a pull request on the model me/tiny-bert with 3 files" in shown
        assert all(rel in shown for rel in recorded) and "default_score_queer = " in shown
        assert "left out: .eval_results/linked.yaml" in shown and "left out: .eval_results/stray.yaml" in shown
        assert hub.state.requests == []
        assert main([*push, "--model-repo", "me/tiny-bert", "--yes"]) == 2
        assert "HF_TOKEN is not set" in capsys.readouterr().err and hub.state.requests == []
        monkeypatch.setenv("HF_TOKEN", token)
        assert main([*push, "--model-repo", "me/tiny-bert", "--yes"]) == 2  # no such model on the Hub
        assert "the model me/tiny-bert is not on the Hub" in capsys.readouterr().err
        repo = hub.state.add_repo("model", "me/tiny-bert")
        assert main([*push, "--model-repo", "me/tiny-bert", "--yes"]) == 0
        said = capsys.readouterr()
        assert len(repo.pulls) == 1 and repo.files == {}  # a pull request; main is the owners' to change
        pull = repo.pulls[0]
        assert pull["files"] == {rel: (out / rel).read_bytes() for rel in recorded}  # exactly the recorded files
        assert "opened a pull request on the model me/tiny-bert: " in said.out and "/discussions/1" in said.out
        assert token not in said.out + said.err and token not in json.dumps(pull, default=str)
        # a recorded file changed since the eval wrote it, or swapped for a link: refused before anything is sent
        first = out / next(iter(recorded))
        original = first.read_bytes()
        first.write_bytes(original.replace(b"value: ", b"value: 1"))
        assert main([*push, "--model-repo", "me/tiny-bert", "--yes"]) == 2
        assert "changed since the eval wrote it" in capsys.readouterr().err
        copy = tmp_path / "copy.yaml"
        copy.write_bytes(original)
        first.unlink()
        first.symlink_to(copy)
        assert main([*push, "--model-repo", "me/tiny-bert", "--yes"]) == 2
        assert "a link or changed" in capsys.readouterr().err and len(repo.pulls) == 1


def test_the_pull_request_goes_to_the_evals_model_when_it_is_a_hub_id():
    from queerbench.hub.results_pr import model_repo_of

    assert model_repo_of({"model": "someone/some-model", "endpoint": None}, None) == "someone/some-model"
    assert model_repo_of({"model": "served", "endpoint": "http://x"}, "someone/served") == "someone/served"
    for record, why in (
        ({"model": "served", "endpoint": "http://127.0.0.1:1/v1"}, "served by the endpoint"),
        ({"model": None, "endpoint": None}, "an embedded model"),
        ({"model": "embedded:smollm2-135m-instruct", "endpoint": None}, "an embedded model"),
    ):
        with pytest.raises(ValueError, match=why):
            model_repo_of(record, None)


def test_pull_request_from_a_folder_without_recorded_entries_is_one_line(tmp_path: Path, capsys):
    assert main(["results", "push", str(tmp_path), "--pull-request"]) == 2
    err = capsys.readouterr().err
    assert f"holds no {EVAL_RESULTS_MANIFEST}" in err and "rerun `queerbench eval`" in err and err.count("\n") == 1
