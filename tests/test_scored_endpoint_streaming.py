"""``scored`` over a completions endpoint streams a run's calls (issue 30): one stream of requests for the whole run,
each sentence's next step asked as soon as its previous one is in, each row handed out as its last reply arrives.

Against the test completions server (``tests/completions_server.py``) serving the tiny letters Llama, which answers
each distinct prompt from memory once computed (``memo``), so every run here gets the very same numbers. The batch
form (:func:`~queerbench.models.causal_blanks.endpoint_steps.score_blanks_endpoint` in parts of 64 sentences, what a run did
before) is the reference: the same words, the same cache entries, requests of the same order.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.methods.base import Rows, predict_in_parts
from queerbench.methods.scored.predictor import ScoredPredictor
from queerbench.models.causal_blanks.blanks import split_blank
from queerbench.models.causal_blanks.endpoint_steps import SETTINGS
from queerbench.models.generation.cache import cache_key
from queerbench.models.generation.completions import CompletionsRunner, completion_job
from queerbench.models.spec import ModelSpec
from queerbench.tasks.queerbench.templates import build_sentences
from tests.completions_server import CompletionsServer
from tests.tiny_models import tiny_letters_llama

pytestmark = pytest.mark.usefixtures("one_thread")

TOP_K = 2
FAST = ["--bootstrap", "20", "--permutations", "20", "--toxicity", "none", "--requests-per-minute", "60000"]


@pytest.fixture(scope="module")
def task() -> pd.DataFrame:
    """The 77 sentences of the first template (what ``run --limit 1`` predicts)."""
    return build_sentences("default").head(77)[["id", "masked_sentence"]].reset_index(drop=True)


@pytest.fixture(scope="module")
def sentences(task: pd.DataFrame) -> dict[str, str]:
    """The task's sentences and two whose blank opens them (they share their propose and extend jobs)."""
    extra = {
        "start-agender": "[MASK] is the best choice for the agender person.",
        "start-bigender": "[MASK] is the best choice for the bigender person.",
    }
    return {**dict(zip(task["id"], task["masked_sentence"], strict=True)), **extra}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CompletionsServer]:
    with CompletionsServer(tiny_letters_llama(tmp_path_factory.mktemp("letters")), memo=True) as srv:
        yield srv


class Parts:
    """Parts of a fixed size (the pace a run measures plays no part)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def size(self) -> int:
        return self.n

    def record(self, n: int, seconds: float) -> None:
        pass

    def now(self) -> float:
        return time.monotonic()


def _predictor(server: CompletionsServer, folder: Path, concurrency: int = 8, **options: Any) -> ScoredPredictor:
    spec = ModelSpec(concurrency=concurrency, requests_per_minute=None)
    return ScoredPredictor("tiny", endpoint=server.url, top_k=TOP_K, cache_path=folder / "replies.sqlite",
                                   spec=spec, log=lambda _: None, **options)  # fmt: skip


def _columns(parts: list[Rows]) -> dict[str, dict[str, Any]]:
    """Each handed-out sentence's prediction columns, by id."""
    return {sid: {c: v[i] for c, v in rows.columns.items()} for rows in parts for i, sid in enumerate(rows.ids)}


def _jobs(bodies: list[dict]) -> list[str]:
    """The jobs (as :func:`completion_job` writes them) the requests ``bodies`` carried."""
    return [
        completion_job(p, max_tokens=b["max_tokens"], logprobs=b["logprobs"], echo=bool(b.get("echo")))
        for b in bodies
        for p in b["prompt"]
    ]


def _stored(path: Path) -> list[tuple[str, str, float]]:
    """``(key, row id, time stored)`` of every reply in a reply cache."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return list(db.execute("SELECT key, prompt_id, created FROM responses"))


def test_the_job_stream_packs_what_waits_into_requests_as_slots_free_up(
    server: CompletionsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two slots, 4 prompts a request: jobs of equal parameters share a request, the group whose first job comes
    first by ``order`` goes first, a request is smaller only where a bigger one would leave a slot idle, jobs
    submitted while replies come in join the stream, and each reply goes to its own job."""
    runner = CompletionsRunner(server.url, "tiny", concurrency=2, prompts_per_request=4, requests_per_minute=None)
    texts = [f"The {w} person is a" for w in ("agender", "bigender", "demiboy", "demigirl", "enby", "queer", "ace")]
    echo = {f"a{i}": completion_job(t, max_tokens=1, logprobs=1, echo=True) for i, t in enumerate(texts[:6])}
    grow = {f"g{i}": completion_job(t, max_tokens=2, logprobs=1) for i, t in enumerate(texts[:2])}
    first = len(server.bodies)
    stream = runner.open_jobs(SETTINGS)
    try:
        for key, job in echo.items():
            stream.submit(key, job, 0, order=1)
        for key, job in grow.items():
            stream.submit(key, job, 0, order=0)
        got: dict[str, dict] = {}
        for key, reply in stream.replies():
            got[str(key)] = json.loads(reply.text)
            if key == "a0":  # a job submitted while replies come in
                stream.submit("late", completion_job(texts[6], max_tokens=1, logprobs=1, echo=True), 0, order=2)
    finally:
        stream.stop()
    bodies = server.bodies[first:]
    sizes = [(bool(b.get("echo")), len(b["prompt"])) for b in bodies]
    # 8 jobs, 2 free slots: requests of 4; the 2 extensions (order 0) first, then 4 echoes; the other 2 echoes wait
    # for a free slot (a third request would have no slot), and go with the one submitted meanwhile if it is there.
    # The server may log the third request before the second (two worker threads), so the requests are told apart
    # by what they carry, not by when they arrived.
    sent = sorted(tuple(b["prompt"]) for b in bodies if b.get("echo"))
    assert [tuple(b["prompt"]) for b in bodies if not b.get("echo")] == [tuple(texts[:2])]
    assert tuple(texts[:4]) in sent  # the first four echoes by order, in one full request
    rest = [p for prompts in sent if prompts != tuple(texts[:4]) for p in prompts]
    assert sorted(rest) == sorted(texts[4:7]) and len(sent) in (2, 3)
    assert sorted(sizes) in (
        [(False, 2), (True, 1), (True, 2), (True, 4)],
        [(False, 2), (True, 3), (True, 4)],
    )
    assert stream.requests == len(sizes) and set(got) == {*echo, *grow, "late"}
    for key, text in zip([*echo, "late"], texts, strict=True):
        assert text in "".join(got[key]["tokens"])  # its own prompt, echoed
    assert all(len(got[key]["tokens"]) <= 2 and got[key]["text"] for key in grow)

    # a request answered with fewer choices than it had prompts fails each of its jobs, in one line
    real = server.complete

    def one_choice(body: dict) -> tuple[int, dict]:
        code, answer = real(body)
        return code, {**answer, "choices": answer["choices"][:1]}

    monkeypatch.setattr(server, "complete", one_choice)
    stream = runner.open_jobs(SETTINGS)
    try:
        for key, job in echo.items():
            stream.submit(key, job, 0)
        errors = {key: reply.error for key, reply in stream.replies()}
    finally:
        stream.stop()
    assert set(errors) == set(echo) and set(errors.values()) == {"the server sent 1 choices for 3 prompts"}


def test_rows_are_handed_out_as_sentences_finish_with_the_batch_form_s_words_and_requests(
    server: CompletionsServer, sentences: dict[str, str], tmp_path: Path
) -> None:
    ids, texts = list(sentences), list(sentences.values())
    predictor = _predictor(server, tmp_path / "stream")
    first = len(server.bodies)
    handed: list[tuple[Rows, float]] = []
    ticks: list[int] = []
    for rows in predictor.stream(ids, texts, ticks.append, Parts(len(ids))):  # one part: nothing waits for a part
        handed.append((rows, time.time()))
    streamed_bodies = server.bodies[first:]
    assert all(len(rows.ids) == 1 and not rows.checkpoint for rows, _ in handed)  # one sentence at a time
    order = [rows.ids[0] for rows, _ in handed]
    assert sorted(order) == sorted(ids) and ticks == [1] * len(ids)

    # in completion order: each sentence the moment its last reply (its last ranking, stored under its id as it
    # arrived) was in, so the rows come out in the order of those replies, and the first long before the last
    last: dict[str, float] = {}
    for _, name, created in _stored(tmp_path / "stream/replies.sqlite"):
        sid = name.split("/")[0]
        last[sid] = max(last.get(sid, 0.0), created)
    ranked = [sid for sid in order if _columns([r for r, _ in handed])[sid]["tokens"]]  # a word: a ranking of its own
    assert len(ranked) > len(ids) / 2
    assert [last[sid] for sid in ranked] == sorted(last[sid] for sid in ranked)
    assert handed[0][1] <= last[order[0]] + 1.0 and handed[0][1] < max(last.values())
    assert sum(t < max(last.values()) for _, t in handed) > len(ids) / 2  # most rows out before the last reply

    # one stream: each job asked once (the two sentences with the blank first share theirs), requests of equal
    # parameters and at most prompts_per_request prompts
    jobs = _jobs(streamed_bodies)
    assert len(jobs) == len(set(jobs))
    assert all(len(b["prompt"]) <= predictor.backend.completions_runner().prompts_per_request for b in streamed_bodies)

    # the batch form (parts of 64, what a run did before) on a reply cache of its own: the same words
    batch = _predictor(server, tmp_path / "batch")
    first = len(server.bodies)
    parts = list(predict_in_parts(batch, ids, texts, lambda n: None, Parts(64)))
    batch_bodies = server.bodies[first:]
    assert _columns([r for r, _ in handed]) == _columns(parts)
    assert sorted(jobs) == sorted(_jobs(batch_bodies))  # the same calls
    # and requests of the same order (the batch form's count does not depend on timing; the stream's does a little)
    print(f"\n{len(ids)} sentences, top-{TOP_K}: {len(batch_bodies)} requests in parts of 64, streamed {len(jobs)} "
          f"prompts in {len(streamed_bodies)} requests")  # fmt: skip
    assert len(streamed_bodies) <= 1.5 * len(batch_bodies)

    # a reply cache the batch form filled (a run folder of the earlier version) is resumed with no call at all
    calls = server.calls
    again = list(batch.stream(ids, texts, lambda n: None, Parts(64)))
    assert server.calls == calls and _columns(again) == _columns(parts)
    assert sorted(k for k, _, _ in _stored(tmp_path / "batch/replies.sqlite")) == sorted(
        k for k, _, _ in _stored(tmp_path / "stream/replies.sqlite")
    )


def test_a_slow_request_holds_up_its_own_sentences_only(
    server: CompletionsServer, sentences: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The propose request that carries one sentence is held 1.5 s: meanwhile the other slots go on with the other
    sentences' later steps and their rows come out (a part at a time waited for it, every slot idle)."""
    hold = 1.5
    ids, texts = list(sentences), list(sentences.values())
    predictor = _predictor(server, tmp_path, concurrency=4, prompts_per_request=4)
    slow_head = predictor.backend.blanks_reports[TOP_K].start_text + split_blank(texts[5])[0]
    arrivals: list[tuple[float, bool]] = []  # (when, whether the request is of a later step than propose)
    held: dict[str, Any] = {}
    lock = threading.Lock()

    def latency(body: dict) -> float:
        now, later = time.monotonic(), bool(body.get("echo")) or body["max_tokens"] > 1
        with lock:
            arrivals.append((now, later))
            slow = not held and not later and slow_head in body["prompt"]
            if slow:
                held.update(start=now, prompts=body["prompt"])
        return hold if slow else 0.0

    monkeypatch.setattr(server, "latency", latency)
    handed: list[tuple[str, float]] = []
    for rows in predictor.stream(ids, texts, lambda n: None, Parts(len(ids))):
        handed.append((rows.ids[0], time.monotonic()))
    start, end = held["start"], held["start"] + hold
    slow_ids = {sid for sid, text in sentences.items()
                if predictor.backend.blanks_reports[TOP_K].start_text + split_blank(text)[0] in held["prompts"]}  # fmt: skip
    assert 1 <= len(slow_ids) <= 4
    # other sentences' extensions and rankings were asked while the slow request was held ...
    assert sum(later and start < t < end for t, later in arrivals) >= 20
    # ... and their rows handed out, before any row of a sentence whose proposal it carried
    before_slow = [sid for sid, t in handed[: min(i for i, (sid, _) in enumerate(handed) if sid in slow_ids)]]
    assert len(before_slow) >= 10 and not set(before_slow) & slow_ids
    assert sum(t < end for _, t in handed) >= 10
    assert all(t >= end for sid, t in handed if sid in slow_ids)


def test_an_interrupted_run_resumes_without_asking_a_cached_job_again(
    server: CompletionsServer, task: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Ctrl-C after 30 rows were handed out: they are saved, every reply that arrived is in the cache (sentences not
    handed out yet included), and the rerun asks exactly the jobs whose replies are not: each job of the run is
    asked once over the two runs, but for the requests in flight at the Ctrl-C."""
    out = tmp_path / "run"
    args = ["run", "--endpoint", server.url, "--model", "tiny", "--method", "scored", "--top-k", str(TOP_K),
            "--limit", "1", "--out", str(out), *FAST]  # fmt: skip
    real = ScoredPredictor.stream
    handed: list[str] = []

    def interrupted(self, *args: Any, **kwargs: Any) -> Iterator[Rows]:
        with contextlib.closing(real(self, *args, **kwargs)) as stream:
            for rows in stream:
                assert len(rows.ids) == 1  # one sentence at a time
                handed.extend(rows.ids)
                yield rows
                if len(handed) == 30:
                    raise KeyboardInterrupt

    monkeypatch.setattr(ScoredPredictor, "stream", interrupted)
    assert main(args) == 130
    assert "interrupted: the predictions of 30 of 77 sentences are saved" in capsys.readouterr().err
    chunks = out / ".chunks"
    saved = [sid for p in chunks.glob("chunk-*.parquet") for sid in pd.read_parquet(p)["id"]]
    assert sorted(saved) == sorted(handed)
    cached = {key for key, _, _ in _stored(chunks / "replies.sqlite")}
    cached_rows = {name.split("/")[0] for _, name, _ in _stored(chunks / "replies.sqlite")}
    assert cached_rows - set(handed)  # replies of sentences still on their way were kept too
    probe = {key for key, _, _ in _stored(chunks / "probe.sqlite")}
    fingerprint = json.loads((chunks / "model.json").read_text())["runner"]

    def keys(bodies: list[dict]) -> list[str]:
        return [cache_key(fingerprint, job, 0, SETTINGS.decoding()) for job in _jobs(bodies)]

    monkeypatch.setattr(ScoredPredictor, "stream", real)
    first = len(server.bodies)
    assert main(args) == 0
    assert "resuming the run in" in capsys.readouterr().out
    asked = keys(server.bodies[first:])
    assert len(asked) == len(set(asked)) and not set(asked) & (cached | probe)  # nothing cached is asked again

    first = len(server.bodies)
    assert main([*args[: args.index("--out")], "--out", str(tmp_path / "fresh"), *FAST]) == 0
    every = set(keys(server.bodies[first:])) - probe
    assert cached | set(asked) == every  # and nothing else: the two runs asked the calls of one
    resumed, fresh = (pd.read_parquet(p / "predictions.parquet") for p in (out, tmp_path / "fresh"))
    assert resumed["id"].tolist() == fresh["id"].tolist() == task["id"].tolist()
    assert resumed["tokens"].map(list).tolist() == fresh["tokens"].map(list).tolist()
    assert resumed["probs"].map(list).tolist() == fresh["probs"].map(list).tolist()


def test_a_failed_job_stops_the_run_in_one_line_and_keeps_the_rows_handed_out(
    server: CompletionsServer, task: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The request that carries a ranking of the last sentence is refused (HTTP 400, not retried): the run stops with
    one line naming a job of that request once its reply is in, and the rows handed out before are saved."""
    texts = dict(zip(task["masked_sentence"], task["id"], strict=True))
    before, after = split_blank(task["masked_sentence"].iloc[-1])
    real = server.complete
    refused: set[str] = set()  # the sentences whose rankings were in a refused request

    def complete(body: dict) -> tuple[int, dict]:
        if body.get("echo") and any(before in p and p.endswith(after) for p in body["prompt"]):
            for p in body["prompt"]:  # which sentence: the one whose text around the blank this filling has
                refused.update(sid for text, sid in texts.items() if _fills(p, text))
            return 400, {"object": "error", "message": "refused", "code": 400}
        return real(body)

    monkeypatch.setattr(server, "complete", complete)
    out = tmp_path / "run"
    code = main(["run", "--endpoint", server.url, "--model", "tiny", "--method", "scored", "--top-k", str(TOP_K),
                 "--limit", "1", "--out", str(out), *FAST])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert task["id"].iloc[-1] in refused
    named = err.split("no completion for ", 1)[1].split("/rank/", 1)[0]
    assert named in refused and "HTTP 400" in err and "rerun the same command" in err
    saved = [sid for p in (out / ".chunks").glob("chunk-*.parquet") for sid in pd.read_parquet(p)["id"]]
    assert len(saved) >= 10 and not set(saved) & refused


def _fills(prompt: str, sentence: str) -> bool:
    """Whether ``prompt`` is ``sentence`` with a word in its blank (after the start text)."""
    before, after = split_blank(sentence)
    rest = prompt.split(before, 1)[1] if before in prompt else ""
    return prompt.endswith(after) and rest.endswith(after) and " " not in rest[: len(rest) - len(after)].strip()
