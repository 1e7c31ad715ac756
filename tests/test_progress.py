"""Progress that moves: the generation layer's bar advances per finished reply (per row of a finished batch), counts
only the calls still to make, keeps redrawing while nothing finishes, and SCM constrained scoring advances per prompt
with exactly the scores of one call."""

from __future__ import annotations

import importlib
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from queerbench.base import progress as progress_module
from queerbench.models.generation import GenerationSettings, Reply, ResponseCache, TransformersRunner, collect
from queerbench.tasks.scm import constrained, pipeline
from queerbench.tasks.scm.dataset import scm_splits
from tests.scm_runs import local_backend, option_logps
from tests.tiny_models import tiny_llama

collect_module = importlib.import_module(
    "queerbench.models.generation.collect"
)  # the module (the package exports the function)
GREEDY = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=4)


@pytest.fixture()
def bars(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every bar the library opens, drawn into a string at each update (mininterval 0) instead of the terminal."""
    opened: list[Any] = []
    real = progress_module.progress_bar

    def recording(total: int, desc: str, unit: str, **kw: Any) -> Any:
        drawn = io.StringIO()
        kw.update(file=drawn, mininterval=0, miniters=1)
        manager = real(total, desc, unit, **kw)

        class Recorder:
            def __enter__(self) -> Any:
                bar = manager.__enter__()
                bar.drawn = drawn  # what it wrote (a disabled bar keeps no file of its own)
                opened.append(bar)
                return bar

            def __exit__(self, *exc: object) -> Any:
                return manager.__exit__(*exc)

        return Recorder()

    monkeypatch.setattr(collect_module, "progress_bar", recording)
    monkeypatch.setattr(constrained, "progress_bar", recording)
    return opened


class Batched:
    """Yields replies ``batch`` at a time and, before each batch, records how far the open bar has got."""

    name = "batched"

    def __init__(self, bars: list[Any], batch: int) -> None:
        self.bars, self.batch, self.seen = bars, batch, []

    def fingerprint(self) -> dict:
        return {"kind": "batched"}

    def generate(self, prompts, seeds, settings) -> Iterator[tuple[int, Reply]]:
        for start in range(0, len(prompts), self.batch):
            self.seen.append(self.bars[-1].n)  # the rows of every earlier batch, already counted
            for i in range(start, min(start + self.batch, len(prompts))):
                yield i, Reply(f"reply {i}", None, {})
                self.seen.append(self.bars[-1].n)


def _rows(n: int) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"p{i}" for i in range(n)], "prompt": [f"prompt {i}" for i in range(n)]})


def test_the_bar_advances_per_reply_and_per_row_of_a_batch(tmp_path: Path, bars: list[Any]):
    runner = Batched(bars, batch=3)
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        collect(runner, _rows(7), GREEDY, cache, desc="story replies")
    # before batch 1: 0; after each of its rows 1, 2, 3; before batch 2: 3; … — never one step per batch
    assert runner.seen == [0, 1, 2, 3, 3, 4, 5, 6, 6, 7]
    bar = bars[0]
    assert bar.total == 7 and bar.n == 7 and bar.desc == "story replies" and bar.unit == "reply"
    drawn = bar.drawn.getvalue()
    assert "7/7" in drawn and ("reply/s" in drawn or "s/reply" in drawn)


def test_cached_replies_are_not_counted_as_work(tmp_path: Path, bars: list[Any]):
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        collect(Batched(bars, batch=8), _rows(5), GREEDY, cache)
        collect(Batched(bars, batch=8), _rows(8), GREEDY, cache)  # 5 cached, 3 to ask
        collect(Batched(bars, batch=8), _rows(8), GREEDY, cache)  # nothing to ask: no bar drawn
    assert [b.total for b in bars] == [5, 3, 0]
    assert bars[1].desc == "replies (5 cached)" and bars[2].disable


def test_no_bar_when_told(tmp_path: Path, bars: list[Any]):
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        collect(Batched(bars, batch=2), _rows(3), GREEDY, cache, show_progress=False)
    assert bars[0].disable and bars[0].drawn.getvalue() == ""


def test_an_open_bar_keeps_redrawing_while_nothing_finishes():
    out = io.StringIO()
    drawn = threading.Event()

    class Watch(io.StringIO):
        def write(self, text: str) -> int:
            out.write(text)
            if out.getvalue().count("0/4") >= 3:  # the first draw and two redraws by the clock thread
                drawn.set()
            return len(text)

    with progress_module.progress_bar(4, "stories", "reply", file=Watch(), refresh_s=0.01) as bar:
        assert drawn.wait(30), out.getvalue()
        assert bar.n == 0
    threads = [t.name for t in threading.enumerate()]
    assert "qb-progress" not in threads  # the clock thread ends with the block


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> str:
    return str(tiny_llama(tmp_path_factory.mktemp("chat"), chat_template=True))


def test_constrained_scoring_advances_per_prompt_with_the_scores_of_direct_requests(chat_model, bars: list[Any]):
    runner = TransformersRunner(chat_model)
    backend = local_backend(runner, batch_size=2)
    rows = scm_splits()["survey"]
    rows = pd.concat([rows[rows["task"] == "rating"].head(5), rows[rows["task"] == "selection"].head(3)])
    calls: list[int] = []
    ticks: list[int] = []
    inner = backend.loglikelihood

    def recorded(requests, tick=None):
        calls.append(len(requests))
        return inner(requests, lambda n: (ticks.append(n), tick(n)))

    backend.loglikelihood = recorded
    scores = pipeline.constrained_scores(backend, rows)
    # one call each: the 5 rating prompts, their content-free versions, the 3 selection prompts, theirs
    content_free = {(constrained._content_free_prompt(r), tuple(r["options"])) for r in rows.to_dict("records")}
    assert len(scores) == 8 and bars[0].total == 8 + len(content_free) and bars[0].unit == "prompt"
    assert bars[0].n == bars[0].total and len(calls) == 4 and len(ticks) > 4  # the bar moves as batches finish
    for task in ("rating", "selection"):
        sub = rows[rows["task"] == task]
        prefix = pipeline.RATING_PREFIX if task == "rating" else pipeline.SELECTION_PREFIX
        one = option_logps(runner, sub["prompt"].tolist(), [list(o) for o in sub["options"]], prefix, batch_size=2)
        assert scores[scores["task"] == task]["logp"].map(list).tolist() == one  # bit for bit
