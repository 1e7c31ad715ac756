"""A ``probes`` run claims its folder as every run does (``run.json``: the task, the model and its fingerprint), so the
folder rules are one: a rerun is recognised by its claim, a resume against a local model folder whose files changed
is refused in one line, a start that saved nothing leaves no claim behind, and a folder written before probes runs
had a ``run.json`` (its record and reply cache only) is still recognised and claimed on its next run. The echo task
(tests/data/echo_probes) stands for any ``probes`` task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queerbench.cli import main
from tests.openai_server import FakeOpenAI
from tests.tiny_models import tiny_gpt2


def _served(server: FakeOpenAI, out: Path, *extra: str, model: str = "served") -> int:
    return main(["echo", "run", "--endpoint", server.url, "--model", model, "--out", str(out), *extra])


def _local(model: Path, out: Path) -> int:
    return main(["echo", "run", "--model", str(model), "--device", "cpu", "--limit", "1", "--out", str(out)])


def test_a_probes_run_claims_its_folder_and_a_rerun_keeps_the_claim(echo: None, tmp_path: Path) -> None:
    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server:
        assert _served(server, out) == 0
        claim = json.loads((out / "run.json").read_text())
        assert claim == {
            "config": "echo",
            "model": f"{server.url}#served",
            "endpoint": server.url,
            "model_fingerprint": {"kind": "endpoint", "base_url": server.url, "model": "served"},
        }
        assert _served(server, out, "--word", "three") == 0  # other settings of the same model: the same run
        assert server.calls == 3  # every reply from the cache
    assert json.loads((out / "run.json").read_text()) == claim


def test_a_folder_without_a_claim_is_recognised_by_its_record_and_claimed(echo: None, tmp_path: Path, capsys) -> None:
    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server:
        assert _served(server, out) == 0
        (out / "run.json").unlink()  # what a run of an earlier version left: its record and its reply cache
        capsys.readouterr()
        assert _served(server, out, model="other") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out {out} holds the Echo run of {server.url}#served, not" in err
        assert not (out / "run.json").exists()  # a refused run claims nothing
        assert _served(server, out) == 0
        assert server.calls == 3  # the earlier run's replies, reused
    assert json.loads((out / "run.json").read_text())["model"] == f"{server.url}#served"


def test_another_tasks_claim_is_a_foreign_folder(echo: None, tmp_path: Path, capsys) -> None:
    out = tmp_path / "echo"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"config": "scm", "model": "x"}))
    (out / "replies.sqlite").write_bytes(b"")  # a file named like the echo task's cache does not make it ours
    with FakeOpenAI(echo=True) as server:
        assert _served(server, out) == 2
        assert server.calls == 0
    err = capsys.readouterr().err
    assert (
        err
        == f"queerbench: error: --out {out} is not empty and holds no Echo run (it has replies.sqlite, run.json); choose another --out\n"
    )
    assert json.loads((out / "run.json").read_text()) == {"config": "scm", "model": "x"}


def test_a_start_that_saved_no_reply_leaves_no_claim(echo: None, tmp_path: Path) -> None:
    out = tmp_path / "echo"
    with FakeOpenAI(script=["401"] * 20) as server:  # the key is refused: no reply is saved
        assert _served(server, out) != 0
        assert server.calls >= 1
    assert not out.exists()  # neither its claim, nor an empty reply cache, nor the folder


def test_a_changed_local_model_folder_is_refused_with_or_without_a_claim(echo: None, tmp_path: Path, capsys) -> None:
    model = tiny_gpt2(tmp_path)
    out = tmp_path / "echo"
    assert _local(model, out) == 0
    claim = json.loads((out / "run.json").read_text())
    assert claim["model"] == str(model) and claim["model_fingerprint"]["kind"] == "local"
    record = (out / "echo.json").read_text()
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "n_layer": 1}))  # another model in the same folder
    for legacy in (False, True):
        if legacy:
            (out / "run.json").unlink()  # an earlier version's folder: its record names the weights it came from
        capsys.readouterr()
        assert _local(model, out) == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("queerbench: error:")]
        assert len(errors) == 1  # one line (the model's loading messages aside)
        assert f"the files of model folder {model} changed since the run in {out} started (config.json)" in errors[0]
        assert (out / "echo.json").read_text() == record  # nothing rewritten


@pytest.mark.parametrize("config", ["default", "misgendered"])
def test_queerbench_run_refuses_a_probes_folder_by_its_claim(echo: None, tmp_path: Path, capsys, config: str) -> None:
    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server:
        assert _served(server, out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    args = ["run", "--config", config, "--model", "embedded:smollm2-135m-instruct", "--limit", "1", "--out", str(out)]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"queerbench: error: output folder {out} holds another run (config: 'echo' there, '{config}' now); "
        "choose another --out (or delete that folder)\n"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("kept", [0, 2])
def test_ctrl_c_in_a_probes_run_says_what_was_kept(
    echo: None, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, kept: int
) -> None:
    import queerbench.run.probes as probes

    def interrupted(runner: object, groups: object, cache: object, **_: object) -> None:
        for i in range(kept):  # replies saved before Ctrl-C
            cache.put(f"k{i}", f"p{i}", 0, "echo", {})  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr(probes, "collect_groups", interrupted)
    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server:
        assert _served(server, out) == 130
    err = capsys.readouterr().err
    if kept:
        assert err.endswith(
            f"queerbench: interrupted: 2 replies are saved in {out}/replies.sqlite; rerun the same command to resume "
            "(it asks only the prompts whose replies are not saved)\n"
        )
        assert json.loads((out / "run.json").read_text())["config"] == "echo"  # the claim stays: a rerun resumes
    else:
        assert err.endswith(
            f"queerbench: interrupted before any reply was saved: nothing is kept in {out}; rerun the same command "
            "to start\n"
        )
        assert not out.exists()


def _quiet(_: str) -> None:
    return None


def test_an_eval_part_that_saved_no_reply_leaves_nothing_though_the_shared_cache_has_others(
    echo: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import queerbench.run.probes as probes
    from queerbench.models.generation import ResponseCache
    from queerbench.tasks import get_task

    shared = tmp_path / "eval" / "replies.sqlite"  # an eval's one reply cache, with another part's replies
    shared.parent.mkdir()
    with ResponseCache(shared) as cache:
        for i in range(5):
            cache.put(f"other{i}", f"o{i}", 0, "reply", {})

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(probes, "collect_groups", interrupted)
    task = get_task("echo")
    out = tmp_path / "eval" / "echo"
    with FakeOpenAI(echo=True) as server, pytest.raises(KeyboardInterrupt) as info:
        probes.run_probes(
            task, out, task.probe_plan("x"), model="served", endpoint=server.url, cache_path=shared, log=_quiet
        )
    assert str(info.value) == (
        f"interrupted before any reply was saved: nothing is kept in {out}; rerun the same command to start"
    )
    assert not out.exists()
    with ResponseCache(shared) as cache:
        assert cache.count() == 5  # the other part's replies are untouched


def test_ctrl_c_while_the_replies_are_read_says_they_are_all_kept(echo: None, tmp_path: Path) -> None:
    from queerbench.run.probes import run_probes
    from queerbench.tasks import get_task

    task = get_task("echo")
    plan = task.probe_plan("x")

    class Interrupted:  # the echo plan, stopped while it reads the replies (an SCM run's option scoring, say)
        def __getattr__(self, name: str) -> object:
            return getattr(plan, name)

        def analyze(self, *_: object) -> None:
            raise KeyboardInterrupt

    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server, pytest.raises(KeyboardInterrupt) as info:
        run_probes(task, out, Interrupted(), model="served", endpoint=server.url, log=_quiet)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"interrupted: 3 replies are saved in {out}/replies.sqlite; rerun the same command to resume (it asks only "
        "the prompts whose replies are not saved)"
    )
    assert (out / "run.json").is_file()


def test_ctrl_c_while_the_model_is_opened_leaves_the_folder_as_it_was(
    echo: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import queerbench.models.backends as backends
    import queerbench.run.probes as probes
    from queerbench.tasks import get_task

    def interrupted(*_: object, **__: object) -> None:  # Ctrl-C while a local model's weights load
        raise KeyboardInterrupt

    monkeypatch.setattr(backends, "open_backend", interrupted)
    task = get_task("echo")
    out = tmp_path / "eval" / "echo"
    with pytest.raises(KeyboardInterrupt) as info:  # a library caller (queerbench eval)
        probes.run_probes(task, out, task.probe_plan("x"), model="m", log=_quiet)
    assert (
        str(info.value) == "interrupted while the model was opened: nothing was asked; rerun the same command to start"
    )
    assert not out.exists()
    assert main(["echo", "run", "--model", "m", "--out", str(out)]) == 130  # the command
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "loading m …" and err[-1] == (  # the model's announcement, then one line
        "queerbench: interrupted while the model was opened: nothing was asked; rerun the same command to start"
    )
    assert not out.exists()


@pytest.mark.parametrize("where", ["record", "claim"])
def test_a_recorded_fingerprint_that_is_not_an_object_is_not_compared(echo: None, tmp_path: Path, where: str) -> None:
    out = tmp_path / "echo"
    with FakeOpenAI(echo=True) as server:
        assert _served(server, out) == 0
        if where == "record":  # an earlier version's folder whose record holds no fingerprint object
            (out / "run.json").unlink()
            record = json.loads((out / "echo.json").read_text())
            record["run"]["fingerprint"] = "abc"
            (out / "echo.json").write_text(json.dumps(record))
        else:
            claim = json.loads((out / "run.json").read_text())
            (out / "run.json").write_text(json.dumps({**claim, "model_fingerprint": ["x"]}))
        assert _served(server, out) == 0  # a rerun, from the cache
        assert server.calls == 3
