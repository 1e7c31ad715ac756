"""The shared probe runner and the declared commands: a ``probes`` task of its own package (the echo task in
tests/data/echo_probes, found through ``QUEERBENCH_TASK_PATH``) runs, resumes, is refused another model's folder
and is read again, through commands it declares as data, with no edit in generic code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.cli.declared import add_declared_commands
from tests.openai_server import FakeOpenAI


def _run(server: FakeOpenAI, out: Path, *extra: str, model: str = "served") -> int:
    return main(["echo", "run", "--endpoint", server.url, "--model", model, "--out", str(out), *extra])


def test_a_probes_task_runs_on_the_shared_runner_and_a_rerun_asks_nothing(echo: None, tmp_path: Path, capsys) -> None:
    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server:
        assert _run(server, out) == 0
        assert server.calls == 3
        assert (
            capsys.readouterr().out.strip()
            == f"wrote {out}/replies.parquet, echo.json, scores.json, report.md (3 responses, 0 failed)"
        )
        record = json.loads((out / "echo.json").read_text())
        assert record["echoed"] == {"a": 1.0, "b": 1.0}  # the fake server echoes each prompt
        assert record["signature"].startswith(f"task:echo|model:{server.url}#served|fp:{server.url}|")
        assert "|word:say|qb:" in record["signature"]
        run = record["run"]
        assert (run["model"], run["calls"], run["cached"], run["failed_prompts"]) == (f"{server.url}#served", 3, 0, [])
        assert run["settings"] == {"word": "say"} and set(run["versions"]) == {"pandas"}
        assert sorted(pd.read_parquet(out / "replies.parquet")["id"]) == ["p1", "p2", "p3"]
        assert (out / "replies.sqlite").is_file() and (out / "report.md").is_file()

        assert _run(server, out) == 0  # a rerun: every reply from the cache
        assert server.calls == 3
        assert json.loads((out / "echo.json").read_text())["run"]["cached"] == 3


def test_the_runner_refuses_another_models_run_and_a_foreign_folder(echo: None, tmp_path: Path, capsys) -> None:
    out = tmp_path / "echo"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with FakeOpenAI(echo=True) as server:
        assert _run(server, out, "--limit", "1") == 0
        capsys.readouterr()
        calls = server.calls
        assert _run(server, out, model="other") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out {out} holds the Echo run of {server.url}#served, not" in err
        assert _run(server, foreign) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"queerbench: error: --out {foreign} is not empty and holds no Echo run (it has notes.txt"
        )
        assert server.calls == calls  # refused before any request
    assert (foreign / "notes.txt").read_text() == "mine"


def test_a_record_that_is_not_the_tasks_is_never_overwritten(echo: None, tmp_path: Path, capsys) -> None:
    out = tmp_path / "echo"
    out.mkdir()
    (out / "echo.json").write_text('{"project": "mine"}')
    with FakeOpenAI(echo=True) as server:
        assert _run(server, out) == 2
        assert "holds a echo.json that is not an Echo run's (no Echo signature)" in capsys.readouterr().err
        assert server.calls == 0
    assert (out / "echo.json").read_text() == '{"project": "mine"}'


def test_report_reads_the_stored_replies_again_with_new_settings(echo: None, tmp_path: Path, capsys) -> None:
    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server:
        assert _run(server, out) == 0
    capsys.readouterr()
    assert main(["echo", "report", str(out), "--word", "three"]) == 0
    assert capsys.readouterr().out.strip() == f"rewrote {out}/echo.json, scores.json and report.md (3 responses)"
    record = json.loads((out / "echo.json").read_text())
    assert record["echoed"] == {"a": 0.0, "b": 1.0}
    assert "|word:three|" in record["signature"] and "reanalysed" in record["run"]
    assert main(["echo", "report", str(tmp_path / "nothing")]) == 2
    assert "nothing: no replies.parquet; give an output folder of `queerbench echo run`" in capsys.readouterr().err


def test_a_task_setting_is_checked_before_the_folder_or_the_model(echo: None, tmp_path: Path, capsys) -> None:
    with FakeOpenAI(echo=True) as server:
        assert _run(server, tmp_path / "echo", "--samples", "0") == 2
        assert capsys.readouterr().err == "queerbench: error: --samples must be at least 1, got 0\n"
        assert server.calls == 0 and not (tmp_path / "echo").exists()


@pytest.mark.parametrize(
    ("commands", "message"),
    [
        ({"schema_version": 2, "commands": []}, "expected an object with schema_version 1"),
        ({"schema_version": 1, "commands": [{"name": "x", "colour": 1}]}, "(command 'x'): unknown field(s) ['colour']"),
        ({"schema_version": 1, "commands": [{"name": "x", "action": "nope"}]}, "'action' is one of probes:run"),
        (
            {"schema_version": 1, "commands": [{"name": "x", "action": "probes:run"}]},
            "'action' 'probes:run' runs a task: name it under 'task'",
        ),
        (
            {"schema_version": 1, "commands": [{"name": "x", "action": "os:system"}]},
            "'action' 'os:system' must name a function inside pkg",
        ),
        (
            {
                "schema_version": 1,
                "commands": [{"name": "x", "action": "pkg.m:f", "arguments": [{"flags": ["--n"], "type": "complex"}]}],
            },
            "arguments[0]: 'type' is one of str, int, float, probability, json_object, got 'complex'",
        ),
        (
            {
                "schema_version": 1,
                "commands": [{"name": "x", "action": "pkg.m:f", "arguments": [{"flags": ["--n"], "group": "g"}]}],
            },
            "arguments[0]: 'group' 'g' is none of the command's groups []",
        ),
    ],
)
def test_a_bad_commands_file_is_one_line_naming_the_field(tmp_path: Path, commands: dict, message: str) -> None:
    path = tmp_path / "commands.json"
    path.write_text(json.dumps(commands))
    sub = argparse.ArgumentParser().add_subparsers()
    with pytest.raises(ValueError) as exc:
        add_declared_commands(sub, path, "pkg")
    assert message in str(exc.value) and "\n" not in str(exc.value) and str(path) in str(exc.value)


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ({"flags": ["--n"], "action": "store_true", "type": "int"}, "argparse refuses it"),
        ({"flags": ["--n"], "type": "probability", "keywords": ["unset"]}, "'keywords' maps each word"),
        ({"flags": ["--n"], "nargs": "many"}, "argparse refuses it"),
        ({"flags": ["--n"], "help": 3}, "'help', 'metavar' and 'example' are strings"),
    ],
)
def test_an_argument_argparse_refuses_is_one_line_naming_it(tmp_path: Path, argument: dict, message: str) -> None:
    path = tmp_path / "commands.json"
    path.write_text(
        json.dumps({"schema_version": 1, "commands": [{"name": "x", "action": "pkg.m:f", "arguments": [argument]}]})
    )
    with pytest.raises(ValueError) as exc:
        add_declared_commands(argparse.ArgumentParser().add_subparsers(), path, "pkg")
    assert message in str(exc.value) and "arguments[0]" in str(exc.value) and "\n" not in str(exc.value)


def test_a_runner_action_without_its_run_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "commands.json"
    command = {"name": "x", "action": "probes:run", "arguments": [{"flags": ["--model"]}]}
    path.write_text(json.dumps({"schema_version": 1, "task": "echo", "commands": [command]}))
    with pytest.raises(ValueError, match=r"'action' 'probes:run' needs the argument 'out' \(the run folder\)"):
        add_declared_commands(argparse.ArgumentParser().add_subparsers(), path, "pkg")


def test_a_broken_plugin_commands_file_is_one_line_for_every_command(
    fresh_registry: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    """A task module on QUEERBENCH_TASK_PATH whose commands file does not hold: the CLI says so in one line (exit
    2) instead of a traceback."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    for name in ("echo_probes.py", "echo_tasks.json"):
        (folder / name).write_text((Path(__file__).parent / "data" / "echo_probes" / name).read_text())
    (folder / "echo_commands.json").write_text(json.dumps({"schema_version": 2, "commands": []}))
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(folder))
    assert main(["run", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "echo_commands.json: expected an object with schema_version 1" in err


def test_a_flag_or_a_command_named_like_the_bookkeeping_reaches_its_function(tmp_path: Path) -> None:
    """A flag whose name ends in "command" is a flag (only the subcommands' own names are dropped), and a function
    that does not take a declared flag is one line when the command runs."""
    from queerbench.cli.declared import _flags

    path = tmp_path / "commands.json"
    command = {"name": "x", "action": "tests.data.m:f", "arguments": [{"flags": ["--post-command"]}]}
    path.write_text(json.dumps({"schema_version": 1, "commands": [command]}))
    with pytest.raises(ValueError, match="names a module that does not exist"):
        add_declared_commands(argparse.ArgumentParser().add_subparsers(), path, "tests.data")
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    command["action"] = "tests.test_probe_runner:_two"
    path.write_text(json.dumps({"schema_version": 1, "commands": [command]}))
    add_declared_commands(sub, path, "tests")
    args = parser.parse_args(["x", "--post-command", "echo"])
    assert _flags(args) == {"post_command": "echo"}
    with pytest.raises(ValueError, match=r"tests.test_probe_runner:_two does not take the command's flags"):
        args.func(args)


def _two(a: int, b: int) -> int:
    return a + b


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ("{", "echo.json is corrupt or truncated"),  # read_json_object's words
        ('{"run": ["x"], "signature": "task:echo|"}', None),  # a run block of another shape: read as empty
    ],
)
def test_report_of_a_damaged_record_is_one_line_or_reads_it(
    echo: None, tmp_path: Path, capsys, record: str, message: str | None
) -> None:
    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server:
        assert _run(server, out) == 0
    capsys.readouterr()
    (out / "echo.json").write_text(record)
    code = main(["echo", "report", str(out)])
    err = capsys.readouterr().err
    if message is None:
        assert code == 0 and err == ""
        assert json.loads((out / "echo.json").read_text())["echoed"] == {"a": 1.0, "b": 1.0}
    else:
        assert code == 2 and err.count("\n") == 1 and message in err
        assert "delete it and rerun `queerbench echo run` with the same --out" in err
