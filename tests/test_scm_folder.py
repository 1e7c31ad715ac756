"""``scm run --out``: one writer per folder, no other run's files written over, and its mapper's flags checked before
any reply is collected (issue 30's fault probe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queerbench.base.lock import folder_lock
from queerbench.cli import main
from tests.openai_server import FakeOpenAI
from tests.scm_runs import endpoint_scm


class _FakeMapper:
    def map_words(self, words):
        from queerbench.tasks.scm.axes import AxisLabel

        return {w: AxisLabel(w.startswith("k"), w.startswith("s"), "test", 1, -1) for w in words}


def _scm(server: FakeOpenAI, out: Path, model: str = "served") -> dict:
    return endpoint_scm(server.url, out, model, _FakeMapper)


def test_scm_run_refuses_a_queerbench_run_folder_and_foreign_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    finished = tmp_path / "qb-run"  # what a finished `queerbench run` leaves
    finished.mkdir()
    for name in ("run.json", "scores.json", "report.md"):
        (finished / name).write_text("{}" if name.endswith("json") else "# QueerBench report\n")
    with FakeOpenAI() as server:
        args = ["scm", "run", "--endpoint", server.url, "--model", "served", "--limit", "7", "--out", str(finished)]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"queerbench: error: --out {finished} is not empty and holds no SCM run (it has ")
        assert err.count("\n") == 1 and server.calls == 0  # refused before any request
    assert (finished / "report.md").read_text() == "# QueerBench report\n"  # untouched
    assert sorted(p.name for p in finished.iterdir()) == ["report.md", "run.json", "scores.json"]


def test_scm_run_refuses_another_models_run_and_resumes_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "scm"
    with FakeOpenAI() as server:
        first = _scm(server, out)
        report = (out / "report.md").read_text()
        calls = server.calls
        with pytest.raises(
            FileExistsError,
            match=r"holds the SCM run of http://\S+#served, not http://\S+#other-model; choose another --out",
        ):
            _scm(server, out, model="other-model")
        assert (out / "report.md").read_text() == report and server.calls == calls  # nothing asked, nothing written
        again = _scm(server, out)  # the same model: a rerun, every reply from the cache
        assert server.calls == calls and again["n_responses"] == first["n_responses"]
    assert json.loads((out / "scm.json").read_text())["run"]["model"].endswith("#served")


def test_scm_run_on_a_busy_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "scm"
    with FakeOpenAI() as server:
        from concurrent.futures import ThreadPoolExecutor

        with folder_lock(out, "scm run"):  # held by another thread (as by another process)
            busy = ThreadPoolExecutor(1).submit(
                main, ["scm", "run", "--endpoint", server.url, "--model", "served", "--out", str(out)]
            )
            assert busy.result(timeout=60) == 2
        assert server.calls == 0
    err = capsys.readouterr().err
    assert f"output folder {out} is in use by another queerbench scm run (process " in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--embedder", "notaurl"], "--embedder 'notaurl': use 'minilm' or URL#MODEL"),
        (["--embedder", "http://[::1/v1#emb"], "--embedder 'http://[::1/v1' is not a valid URL"),
        (["--embedder", "http://127.0.0.1:99999/v1#emb"], "--embedder 'http://127.0.0.1:99999/v1' is not a valid URL"),
        (["--threshold", "5"], "--threshold 5: a cosine similarity threshold lies between 0 and 1"),
        (["--threshold", "-0.2"], "--threshold -0.2: a cosine similarity threshold lies between 0 and 1"),
    ],
)
def test_scm_run_checks_the_mapper_flags_before_any_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, flags: list[str], message: str
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI() as server:
        args = ["scm", "run", "--endpoint", server.url, "--model", "served", "--out", str(tmp_path / "scm"), *flags]
        assert main(args) == 2
        assert server.calls == 0  # refused before the first request, not after every reply was collected
    err = capsys.readouterr().err
    assert err.startswith(f"queerbench: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "scm").exists()


@pytest.mark.parametrize("where", ["the file", "below the file"])
def test_scm_run_refuses_an_out_it_cannot_write_as_every_run_does(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A file, or a path below one, is one line naming --out (the rule `queerbench run` follows), before any
    request and with the file untouched."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    blocker = tmp_path / "a-file"
    blocker.write_text("mine")
    out = blocker if where == "the file" else blocker / "scm"
    with FakeOpenAI() as server:
        args = ["scm", "run", "--endpoint", server.url, "--model", "served", "--limit", "7", "--out", str(out)]
        assert main(args) == 2
        assert server.calls == 0
    err = capsys.readouterr().err
    what = (
        "it is a file, not a folder"
        if where == "the file"
        else f"it lies below {blocker}, which is a file, not a folder"
    )
    assert (
        err
        == f"queerbench: error: cannot write the output folder {out} (--out): {what}; choose an --out in a folder you can write to\n"
    )
    assert blocker.read_text() == "mine"
