"""Benchmarks as declared tasks: the registry, the task data files, and a fourth benchmark that plugs in with one task
module and its data files (``tests/data/tiny_task``) and runs through the whole harness with no edit elsewhere."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.scoring.aggregate import ScoringOptions
from queerbench.scoring.rules import ScoringRules
from queerbench.tasks import all_tasks, get_task, load_specs, task_names
from tests.tiny_models import tiny_bert

TINY = Path(__file__).parent / "data" / "tiny_task"


@pytest.fixture()
def tiny(fresh_registry: pytest.MonkeyPatch) -> None:
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(TINY))


# ------------------------------------------------------------------------------------------------ the four tasks
def test_the_built_in_tasks_and_what_they_declare() -> None:
    assert task_names() == ("misgendered", "misgendered-full", "default", "paper", "queergen", "scm")
    assert task_names(runs_blanks=True) == ("default", "paper", "queergen")
    default, paper, queergen, scm = (get_task(n) for n in ("default", "paper", "queergen", "scm"))
    assert (default.benchmark, paper.benchmark, queergen.benchmark, scm.benchmark) == (
        "QueerBench",
        "QueerBench",
        "QueerGen",
        "SCM",
    )
    assert (default.spec.mlm_mode, paper.spec.mlm_mode, queergen.spec.mlm_mode) == ("whole_word", "raw", "raw")
    assert (default.spec.toxicity_input, paper.spec.toxicity_input, queergen.spec.toxicity_input) == (
        "neutral",
        "full",
        "neutral",
    )
    assert default.spec.rules == ScoringRules.named("default") and paper.spec.rules == ScoringRules.named("paper")
    assert queergen.spec.rules.uncertainty is False and queergen.spec.rules.truncate is False
    assert paper.spec.methods == ("mlm", "instructed") and scm.spec.methods == ("instructed",)
    assert [t.spec.lmeval_task for t in (default, paper, queergen, scm)] == [
        "queerbench_default",
        "queerbench_paper",
        "queergen",
        None,
    ]
    assert (len(default.items()), len(paper.items()), len(queergen.items())) == (7931, 8268, 3100)
    assert set(scm.dataset_splits()) == {"survey", "generation"}


def test_a_task_is_asked_not_named() -> None:
    with pytest.raises(ValueError) as info:
        get_task("queer-gen")
    assert (
        str(info.value)
        == "unknown config 'queer-gen'; choose one of: misgendered, misgendered-full, default, paper, queergen, scm"
    )
    with pytest.raises(
        ValueError, match=r"--method scored does not apply to --config paper .*runs with mlm, instructed"
    ):
        get_task("paper").check_method("scored")
    options = get_task("paper").scoring_options(toxicity="none")
    assert options.config == "paper" and options.rules.truncate and options.hurtlex_lexicon_level == "conservative"


def test_scoring_rules_by_name_or_declared() -> None:
    assert ScoringOptions(config="paper").rules == ScoringRules.named("paper")
    with pytest.raises(ValueError, match="unknown config 'nope' for the scoring rules; choose one of: default, paper"):
        ScoringOptions(config="nope")
    with pytest.raises(ValueError, match=r"task file t.json \(task 'x'\): scoring rule 'flag' must be one of"):
        ScoringRules.from_dict({"flag": "=="}, "task file t.json (task 'x')")
    with pytest.raises(ValueError, match="unknown scoring rule"):
        ScoringRules.from_dict({"rounding": True}, "t")
    assert ScoringRules(flag=">").exceeds(0.5, 0.5) is False and ScoringRules().exceeds(0.5, 0.5) is True


def test_the_composite_block_and_the_default_rule_set_are_the_rules_files(tmp_path: Path, monkeypatch) -> None:
    import types

    from queerbench.scoring import aggregate, rules

    assert aggregate.COMPOSITE_BLOCK == rules.composite_block() == aggregate.SCORE_BLOCKS[0] == aggregate.GAP_BLOCK
    assert ScoringOptions().config == rules.default_rules_name() and ScoringOptions().rules == ScoringRules()
    good = json.loads((Path(rules.__file__).parent.parent / "data" / "scoring_rules.json").read_text(encoding="utf-8"))
    monkeypatch.setattr(rules, "resources", types.SimpleNamespace(files=lambda _: tmp_path))
    for change, says in (
        ({"composite": ""}, "'composite' must name the composite score's block"),
        ({"default_rules": "nope"}, "'default_rules' must name one of its rule sets (default, paper)"),
        ({"schema_version": 2}, "expected schema_version 1 and an object 'rules'"),
    ):
        (tmp_path / "scoring_rules.json").write_text(json.dumps(good | change), encoding="utf-8")
        rules._raw.cache_clear()
        with pytest.raises(ValueError) as caught:
            rules.default_rules_name()
        assert str(caught.value) == f"queerbench/data/scoring_rules.json: {says}"
    monkeypatch.undo()
    rules._raw.cache_clear()
    rules._named.cache_clear()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "essay"}, "'kind' must be one of blanks, probes"),
        ({"methods": []}, "'methods' must be a non-empty list of method names"),  # unknown names: test_method_names
        ({"mlm_mode": None}, "a blanks task needs 'mlm_mode'"),
        ({"toxicity_input": "words"}, "a blanks task needs 'toxicity_input'"),
        ({"dataset": {"config": "x"}}, "'dataset' needs a 'config' name and a 'description'"),
        ({"colour": "red"}, "unknown field(s) ['colour']"),
        ({"title": 3}, "'title' is required and must be a str"),
    ],
)
def test_a_malformed_task_file_is_one_line_naming_it(tmp_path: Path, change: dict, message: str) -> None:
    spec = json.loads((TINY / "tiny_tasks.json").read_text())
    spec["tasks"][0].update(change)
    path = tmp_path / "bad_tasks.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(ValueError) as info:
        load_specs(path)
    assert str(info.value).startswith("task file bad_tasks.json (task 'tiny'): ") and message in str(info.value)


def test_two_tasks_of_one_name_are_refused(fresh_registry: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    spec = json.loads((TINY / "tiny_tasks.json").read_text())
    spec["tasks"][0]["name"] = "paper"
    (folder / "dup_tasks.json").write_text(json.dumps(spec))
    (folder / "dup.py").write_text(
        "from pathlib import Path\nfrom queerbench.tasks import TemplateTask, load_specs\n"
        "TASKS = [TemplateTask(s, folder=Path(__file__).parent) for s in "
        "load_specs(Path(__file__).with_name('dup_tasks.json')).values()]\n"
    )
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(folder))
    with pytest.raises(ValueError, match=r"two tasks are named 'paper' \(the second in .*dup\.py\); rename one"):
        all_tasks()


# ------------------------------------------------------------------------------------------------ a fourth benchmark
def test_a_new_benchmark_plugs_in_with_one_module_and_its_data_files(
    tiny: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny benchmark runs, scores, reports, builds into the dataset and exports to lm-evaluation-harness through
    the same commands as the built-in ones, from its folder alone."""
    assert "tiny" in task_names(runs_blanks=True) and get_task("tiny").benchmark == "TinyBench"
    items = get_task("tiny").items()
    assert len(items) == 8 and items["masked_sentence"].iloc[0] == "The gay person works as a [MASK]."
    assert set(items["neutral_sentence"]) == {"The person works as a [MASK].", "The person is known to be [MASK]."}

    bert = tiny_bert(tmp_path / "models")
    run = tmp_path / "run"
    code = main(
        ["run", "--model", str(bert), "--config", "tiny", "--toxicity", "none", "--top-k", "2", "--out", str(run)]
    )
    out = capsys.readouterr().out
    assert code == 0 and "signature: task:tiny|method:mlm|" in out
    scores = json.loads((run / "scores.json").read_text())
    assert scores["config"] == "tiny" and scores["n"] == {"queer": 4, "non-queer": 4}
    assert scores["signature"].startswith("task:tiny|method:mlm|") and "|k:2|limit:all|" in scores["signature"]
    assert json.loads((run / "run.json").read_text())["signature"].startswith("task:tiny|")
    report = (run / "report.md").read_text()
    assert "`tiny` (a two-template benchmark of the tests)" in report and "- signature: `task:tiny|" in report

    code = main(["score", str(run / "predictions.parquet"), "--config", "tiny", "--toxicity", "none"])
    assert code == 0 and '"config": "tiny"' in capsys.readouterr().out

    assert main(["dataset", "build", "--configs", "tiny", "--out", str(tmp_path / "ds")]) == 0
    split = pd.read_parquet(tmp_path / "ds" / "tiny" / "test-00000-of-00001.parquet")
    assert len(split) == 8 and "Two templates × four subjects" in (tmp_path / "ds" / "README.md").read_text()

    assert main(["lm-eval", "export", str(tmp_path / "lm"), "--configs", "tiny"]) == 0
    assert (tmp_path / "lm" / "tinybench" / "tinybench.yaml").is_file()
    assert (tmp_path / "lm" / "tinybench_chat" / "sentences.parquet").is_file()


def test_a_limit_covering_every_template_is_recorded_as_no_limit(
    tiny: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--limit 99999`` on a two-template task is the whole task: recorded as no limit everywhere (run.json,
    scores.json, the report), and the same command without it reuses the run (issue 30)."""
    bert = tiny_bert(tmp_path / "models")
    run = tmp_path / "run"
    args = ["run", "--model", str(bert), "--config", "tiny", "--toxicity", "none", "--out", str(run)]
    assert main([*args, "--limit", "99999"]) == 0
    scores = json.loads((run / "scores.json").read_text())
    assert scores["run"]["limit"] is None and scores["run"]["options"]["limit"] is None
    assert "|limit:all|" in scores["signature"] and "99999" not in (run / "report.md").read_text()
    assert "99999" not in (run / "run.json").read_text()
    capsys.readouterr()
    assert main(args) == 0 and "reusing the finished predictions" in capsys.readouterr().out


def test_a_task_without_its_data_file_says_so(fresh_registry: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    for name in ("tiny_benchmark.py", "tiny_tasks.json", "tiny_subjects.csv"):
        (folder / name).write_text((TINY / name).read_text())
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(folder))
    with pytest.raises(ValueError, match=r"task tiny: cannot read its templates file .*tiny_templates\.csv"):
        get_task("tiny").items()


def test_the_default_task_is_declared_as_data_and_every_default_reads_it(tmp_path, monkeypatch) -> None:
    from queerbench.cli import build_parser
    from queerbench.run.options import RunOptions
    from queerbench.tasks import all_tasks, default_task_name

    declared = [name for name, task in all_tasks().items() if task.spec.run_by_default]
    assert declared == ["default"] == [default_task_name()]
    assert RunOptions().config == "default"
    assert build_parser().parse_args(["run"]).config == "default"
    entry = {
        "name": "x",
        "benchmark": "X",
        "title": "x",
        "kind": "probes",
        "methods": ["instructed"],
        "dataset": {"config": "x", "description": "x"},
        "outputs": {"record": "x.json", "replies": "x.parquet", "cache": "x.sqlite"},
        "run_by_default": "yes",
    }
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"schema_version": 1, "tasks": [entry]}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"'run_by_default' must be true \(the task run when none is named\) or false"):
        load_specs(path)


def test_a_task_that_declares_no_scoring_rules_gets_the_default_rule_set() -> None:
    assert ScoringRules() == ScoringRules.named("default") != ScoringRules.named("paper")


def test_a_default_task_that_is_not_fill_in_the_blank_is_one_line(monkeypatch) -> None:
    import queerbench.tasks as registry
    from queerbench.tasks import Task

    scm = get_task("scm")
    declared = Task(dataclasses.replace(scm.spec, run_by_default=True))
    monkeypatch.setattr(registry, "all_tasks", lambda: {"scm": declared})
    with pytest.raises(ValueError, match=r'^task scm declares "run_by_default": true but is not a fill-in-the-blank'):
        registry.default_task_name()
    monkeypatch.setattr(registry, "all_tasks", lambda: {"scm": scm})
    with pytest.raises(ValueError, match=r'^no task declares "run_by_default": true'):
        registry.default_task_name()
