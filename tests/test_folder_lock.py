"""One writer per run folder (:mod:`queerbench.base.lock`): a second run on a folder in use stops at once in one line
naming the other process, the first loses nothing, and a lock left by a killed process never blocks a rerun.

The first run is a real ``queerbench run`` in a child process against the fake endpoint (slowed down so that it is
still running when the second one starts); the second is the same command in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from queerbench.base.lock import OWNER_FILE, FolderBusyError, folder_lock
from queerbench.cli import main
from tests.test_instructed_method import BlankServer

FAST = ["--bootstrap", "20", "--permutations", "20", "--toxicity", "none", "--requests-per-minute", "100000"]
N_231 = 3 * 77


def _run_args(url: str, out: Path) -> list[str]:
    return ["run", "--endpoint", url, "--model", "served", "--limit", "3", "--top-k", "1", "--out", str(out), *FAST]


def _start(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    return subprocess.Popen(
        [sys.executable, "-m", "queerbench", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(predicate, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_second_run_on_a_busy_folder_is_refused_in_one_line_and_the_first_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "run"
    with BlankServer({"[MASK]": ["doctor"]}, latency=0.05) as server:
        args = _run_args(server.url, out)
        first = _start([*args, "--concurrency", "2"])
        _wait_for(lambda: server.calls >= 10, "the first run's requests")
        assert main(args) == 2  # the same command started twice
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith(f"queerbench: error: output folder {out} is in use by another queerbench run (process ")
        assert f"process {first.pid} on " in err and " run --endpoint " in err
        assert err.rstrip().endswith(
            "wait for it to finish (rerun the same command then: it resumes) or choose another --out"
        )
        _, first_err = first.communicate(timeout=120)
        assert first.returncode == 0, first_err
    preds = pd.read_parquet(out / "predictions.parquet")
    assert len(preds) == N_231 and preds["tokens"].map(list).tolist() == [["doctor"]] * N_231
    assert server.calls == N_231  # every prompt asked once: the refused run neither asked nor wrote anything
    assert not (out / OWNER_FILE).exists()  # the owner note goes with the lock
    assert main(args[: -len(FAST)] + FAST) == 0  # a finished folder is free again: its predictions are reused
    assert "reusing the finished predictions" in capsys.readouterr().out


def test_a_lock_left_by_a_killed_run_does_not_block_the_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "run"
    with BlankServer({"[MASK]": ["doctor"]}, latency=0.05) as server:
        args = _run_args(server.url, out)
        first = _start([*args, "--concurrency", "2"])
        _wait_for(lambda: any((out / ".chunks").glob("chunk-*.parquet")), "a saved part")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        assert (out / OWNER_FILE).is_file()  # a killed process leaves its note (and the lock file) behind
        assert main(args) == 0  # the lock went with the process: the rerun resumes
        assert "resuming the run in" in capsys.readouterr().out
    assert len(pd.read_parquet(out / "predictions.parquet")) == N_231
    assert not (out / OWNER_FILE).exists()


def test_a_refused_run_creates_nothing_and_the_lock_names_who_holds_it(tmp_path: Path):
    out = tmp_path / "a" / "busy"
    with folder_lock(out):
        note = json.loads((out / OWNER_FILE).read_text())
        assert note["pid"] == os.getpid() and note["command"].startswith("queerbench")
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "from pathlib import Path; from queerbench.base.lock import folder_lock\n"
                f"with folder_lock(Path({str(out)!r}), 'scm run'): pass",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.returncode != 0 and "FolderBusyError" in child.stderr
        assert f"in use by another queerbench scm run (process {os.getpid()} on " in child.stderr
    assert not out.exists()  # the folder held nothing but the lock: it is gone again
    kept = tmp_path / "kept"
    with folder_lock(kept):
        (kept / "report.md").write_text("x")
    assert sorted(p.name for p in kept.iterdir()) == [".queerbench.lock", "report.md"]
    with folder_lock(kept), folder_lock(kept):  # the thread that holds it may enter again (command, then library)
        assert (kept / OWNER_FILE).is_file()
        other = ThreadPoolExecutor(1).submit(lambda: folder_lock(kept).__enter__())
        with pytest.raises(FolderBusyError):  # another thread of the same process may not
            other.result(timeout=30)
    assert not (kept / OWNER_FILE).exists()
