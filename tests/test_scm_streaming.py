"""An SCM run over an endpoint asks its survey and story prompts through one set of slots: a survey prompt that
is slow to answer does not hold up the stories (issue 30: requests keep flowing across boundaries)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from queerbench.tasks.scm.pipeline import resolve_settings
from tests.openai_server import FakeOpenAI
from tests.scm_runs import run_scm


class _FakeMapper:
    def map_words(self, words):
        from queerbench.tasks.scm.axes import AxisLabel

        return {w: AxisLabel(w.startswith("k"), w.startswith("s"), "test", 1, -1) for w in words}


def test_a_slow_survey_prompt_does_not_hold_up_the_stories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    arrivals: list[tuple[float, str]] = []
    lock = threading.Lock()
    slow_done: list[float] = []

    def latency(body: dict) -> float:
        prompt = body["messages"][-1]["content"]
        story = prompt.startswith(("Imagine", "Tell", "Help"))
        with lock:
            arrivals.append((time.monotonic(), "story" if story else "survey"))
            first_survey = not story and sum(kind == "survey" for _, kind in arrivals) == 1
        if first_survey:  # the very first survey prompt takes 3 s
            time.sleep(3.0)
            slow_done.append(time.monotonic())
        return 0.0

    survey, story, prov = resolve_settings("served", survey_samples=1, story_samples=1)
    with FakeOpenAI(latency=latency) as server:
        res = run_scm(
            tmp_path / "scm",
            endpoint=server.url,
            model="served",
            settings=survey,
            story_settings=story,
            provenance=prov,
            limit=7,
            concurrency=2,
            requests_per_minute=None,
            mapper_factory=_FakeMapper,
            log=lambda m: None,
        )
    assert res["n_errors"] == 0 and slow_done
    stories = [t for t, kind in arrivals if kind == "story"]
    # every other survey prompt went through the second slot meanwhile, and the stories started before the slow one
    # was answered (a split at a time would have waited for it)
    assert stories and min(stories) < slow_done[0]
