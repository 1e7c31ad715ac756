"""The request runner keeps every ``generate`` reply as it arrives (the reply cache in ``OUT/.chunks``): a run that
stopped within a part, its endpoint rejecting a prompt, asks again only what got no reply, and ends as a run that
never stopped; the cache's keys are those of the generation layer, so one request asked twice is asked once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.cli import main
from tests.openai_server import FakeOpenAI


def _run(*argv: str) -> int:
    return main(["run", "--config", "misgendered", "--limit", "1", "--bootstrap", "50", "--model", "chat-model", *argv])


def test_a_rejected_prompt_fails_the_run_in_one_line_and_the_rerun_asks_only_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut, whole = tmp_path / "cut", tmp_path / "whole"
    with FakeOpenAI(script=["400"], answer="They") as server:  # the first request is rejected, the rest answered
        assert _run("--endpoint", server.url, "--out", str(cut)) != 0
        asked = server.calls
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "gave no reply to 1 of 11 prompts" in err[0] and "rerun the same command" in err[0]
        assert asked == 11  # the other 10 were asked (and kept) though one failed
        assert (cut / ".chunks" / "replies.sqlite").is_file() and not (cut / "predictions.parquet").exists()
        assert _run("--endpoint", server.url, "--out", str(cut)) == 0
        assert server.calls == asked + 1  # only the rejected prompt
        assert _run("--endpoint", server.url, "--out", str(whole)) == 0
    assert not (cut / ".chunks").exists()  # the cache goes with the parts once the predictions are written
    pd.testing.assert_frame_equal(
        pd.read_parquet(cut / "predictions.parquet"), pd.read_parquet(whole / "predictions.parquet")
    )
    got, want = (json.loads((d / "scores.json").read_text())["results"] for d in (cut, whole))
    assert got == want


def test_a_server_that_rejects_every_prompt_stops_the_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with FakeOpenAI(script=["400"] * 11) as server:
        assert _run("--endpoint", server.url, "--concurrency", "1", "--out", str(out)) == 2
        assert server.calls == 10  # stopped after 10 failures in a row
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "10 calls in a row failed" in err[0] and "rerun the same command" in err[0]
    assert "no reply was saved" in err[0]  # and the folder, which kept nothing, is gone
    assert not out.exists()  # nothing was kept: no folder left behind


def test_the_backend_answers_a_request_it_holds_from_the_cache_and_a_repeated_one_once(tmp_path: Path) -> None:
    from queerbench.models.backends import open_backend
    from queerbench.models.generation.cache import ResponseCache, cache_key
    from queerbench.models.registry import model_ref
    from queerbench.models.requests import Generate

    with FakeOpenAI(answer="ok") as server, ResponseCache(tmp_path / "replies.sqlite") as cache:
        backend = open_backend(model_ref("chat-model", server.url), "generate", reply_cache=cache, log=lambda _: None)
        requests = [Generate("one"), Generate("two"), Generate("one")]
        first = backend.generate(requests)
        assert [r.text for r in first] == ["ok [3]", "ok [3]", "ok [3]"] and server.calls == 2
        again = backend.generate([*requests, Generate("three", temperature=0.5, seed=7, item="x", sample=1)])
        assert again[:3] == first and server.calls == 3  # only the new request
        # the layer's key: the runner's fingerprint, prompt, sample and decoding with the run's seed
        runner = backend.chat_runner()  # type: ignore[attr-defined]
        decoding = {"temperature": 0.5, "top_p": None, "max_new_tokens": 32, "seed": 7}
        assert cache.get(cache_key(runner.fingerprint(), "three", 1, decoding)) is not None
        assert cache.count() == 3


def test_ctrl_c_counts_the_replies_kept_of_items_not_yet_saved(tmp_path: Path) -> None:
    from queerbench.models.generation.cache import ResponseCache
    from queerbench.run.parts import RunInterrupted
    from queerbench.run.requests import _kept
    from queerbench.run.runner import predictions_in

    with ResponseCache(tmp_path / "run" / ".chunks" / "replies.sqlite") as cache:
        for i in range(3):
            cache.put(f"k{i}", f"item{i}", 0, "They", {})

    def stopped() -> Any:
        raise KeyboardInterrupt

    ids = [f"item{i}" for i in range(11)]
    with pytest.raises(RunInterrupted) as caught:  # the replies are kept: the folder is not given up
        predictions_in(
            tmp_path / "run",
            created=False,
            predict=stopped,
            assemble=lambda rows, meta: (rows, meta),
            noun="item",
            kept=lambda: _kept(tmp_path / "run", ids),
        )
    message = str(caught.value)
    assert message.startswith("interrupted: the results of 0 of 11 items are saved in ")
    assert ", and 3 replies in " in message
    assert message.endswith("(it asks the other 11, only the requests whose replies are not saved)")


def test_an_endpoints_generate_backend_and_the_instructed_predictor_import_no_torch() -> None:
    """An endpoint run loads no local model: opening its backend must not pay torch's import (seconds per command)."""
    import subprocess
    import sys

    code = (
        "import sys; import queerbench.models.backends.endpoint, queerbench.methods.instructed.predictor, "
        "queerbench.run.requests; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_an_endpoints_replies_stream_across_parts_and_give_the_parts_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an endpoint every item's ``generate`` requests go through one stream: with parts of 2 items, a first prompt
    that takes 2 s holds up none of the others (asked part by part, the third item's prompt would wait for it), items
    are saved as they finish, and the predictions and scores equal those of the same run asked part by part."""
    import threading
    import time

    import queerbench.run.requests as requests_module

    monkeypatch.setattr(requests_module, "PART_ITEMS", 2)
    lock = threading.Lock()
    arrivals: list[float] = []
    slow_done: list[float] = []

    def latency(body: dict) -> float:
        with lock:
            arrivals.append(time.monotonic())
            first = len(arrivals) == 1
        if first:  # the very first prompt takes 2 s
            time.sleep(2.0)
            slow_done.append(time.monotonic())
        return 0.0

    streamed, in_parts = tmp_path / "streamed", tmp_path / "parts"
    with FakeOpenAI(answer="They", latency=latency) as server:
        assert _run("--endpoint", server.url, "--concurrency", "2", "--out", str(streamed)) == 0
        assert server.calls == 11
    assert slow_done and len(arrivals) == 11
    assert max(arrivals[1:]) < slow_done[0]  # every other prompt was asked while the slow one was still out

    class NoStream:  # no backend streams: the items are asked part by part, as a local model's are
        pass

    monkeypatch.setattr(requests_module, "StreamingBackend", NoStream)
    with FakeOpenAI(answer="They") as server:
        assert _run("--endpoint", server.url, "--concurrency", "2", "--out", str(in_parts)) == 0
    pd.testing.assert_frame_equal(
        pd.read_parquet(streamed / "predictions.parquet"), pd.read_parquet(in_parts / "predictions.parquet")
    )
    got, want = (json.loads((d / "scores.json").read_text())["results"] for d in (streamed, in_parts))
    assert got == want


def test_ctrl_c_in_a_stream_saves_the_items_whose_replies_are_all_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while an endpoint's replies stream in: the items answered so far are saved (not only their replies),
    and the rerun asks only the requests whose replies are not kept."""
    import queerbench.models.backends.endpoint as endpoint_module
    from queerbench.models.generation.cache import ResponseCache

    real = endpoint_module.EndpointBackend.stream_generate

    def stopped(self: object, requests: object, tick: object = None):  # Ctrl-C after the fifth reply
        for n, answer in enumerate(real(self, requests, tick), 1):  # type: ignore[arg-type]
            yield answer
            if n == 5:
                raise KeyboardInterrupt

    out, whole = tmp_path / "run", tmp_path / "whole"
    with FakeOpenAI(answer="They") as server:
        monkeypatch.setattr(endpoint_module.EndpointBackend, "stream_generate", stopped)
        assert _run("--endpoint", server.url, "--concurrency", "1", "--out", str(out)) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("queerbench: interrupted: the results of 5 of 11 items are saved")
        assert len(list((out / ".chunks").glob("chunk-*.parquet"))) == 1
        monkeypatch.undo()
        with ResponseCache(out / ".chunks" / "replies.sqlite") as cache:
            kept = cache.count()
        asked = server.calls
        assert _run("--endpoint", server.url, "--out", str(out)) == 0
        assert server.calls - asked == 11 - kept  # only the requests whose replies were not kept
        assert _run("--endpoint", server.url, "--out", str(whole)) == 0
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "predictions.parquet"), pd.read_parquet(whole / "predictions.parquet")
    )


def test_a_stream_reads_its_requests_as_it_goes(tmp_path: Path) -> None:
    """A stream asks at most a few requests per slot ahead of the replies read, so a run of millions of requests
    never holds them all (nor their stream state) at once."""
    from queerbench.models.backends import open_backend
    from queerbench.models.backends.generate import AHEAD_PER_SLOT
    from queerbench.models.generation.cache import ResponseCache
    from queerbench.models.registry import model_ref
    from queerbench.models.requests import Generate
    from queerbench.models.spec import ModelSpec

    pulled: list[int] = []

    def requests():
        for n in range(200):
            pulled.append(n)
            yield Generate(f"prompt {n}")

    with FakeOpenAI(answer="ok") as server, ResponseCache(tmp_path / "replies.sqlite") as cache:
        backend = open_backend(
            model_ref("chat-model", server.url),
            "generate",
            ModelSpec(concurrency=2),
            reply_cache=cache,
            log=lambda _: None,
        )
        seen_when: list[int] = []
        got = {}
        for i, reply in backend.stream_generate(requests()):  # type: ignore[attr-defined]
            seen_when.append(len(pulled))
            got[i] = reply.text
    assert sorted(got) == list(range(200)) and server.calls == 200
    ahead = [pulled_then - read for read, pulled_then in enumerate(seen_when, 1)]  # asked and not yet read
    assert max(ahead) <= 2 * AHEAD_PER_SLOT and seen_when[0] <= 2 * AHEAD_PER_SLOT + 1  # 2 slots


def test_the_error_that_stopped_a_stream_is_the_one_shown_when_saving_fails_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prompt the endpoint rejects stops the stream; if saving the items scored so far then fails as well (a full
    disk), the user is told of the rejected prompt, not only of the disk."""
    import queerbench.run.parts as parts_module  # where the request runner's parts are written

    def full_disk(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(parts_module, "atomic_path", full_disk)
    with FakeOpenAI(script=["400"], answer="They") as server:
        assert _run("--endpoint", server.url, "--out", str(tmp_path / "run")) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gave no reply to 1 of 11 prompts" in err[0], err
