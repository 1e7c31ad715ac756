"""A tiny ``probes`` task for the tests: three prompts in two groups, each answered once; the score is the share of
replies per group that repeat the prompt. It lives outside queerbench (``QUEERBENCH_TASK_PATH``) and runs on the
shared probe runner and the declared commands with no edit in generic code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.models.generation import GenerationSettings
from queerbench.tasks import Task, load_specs
from queerbench.tasks.probes import ProbeAnalysis

HERE = Path(__file__).parent
PROMPTS = pd.DataFrame(
    {"id": ["p1", "p2", "p3"], "prompt": ["say one", "say two", "say three"], "group": ["a", "a", "b"]}
)


@dataclass(frozen=True)
class EchoPlan:
    samples: int = 1
    limit: int | None = None
    word: str = "say"

    def generator_options(self) -> dict[str, Any]:
        return {}

    def request_groups(self) -> list[tuple[pd.DataFrame, GenerationSettings]]:
        rows = PROMPTS if self.limit is None else PROMPTS.head(self.limit)
        return [(rows, GenerationSettings(max_new_tokens=8, samples=self.samples, temperature=0.0))]

    def describe(self) -> str:
        return f"asking {len(self.request_groups()[0][0])} echo prompts"

    def merge_replies(self, replies: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(replies, ignore_index=True)

    def _result(self, replies: pd.DataFrame) -> ProbeAnalysis:
        stored = replies.assign(echoed=replies["response"].fillna("").str.contains(self.word))
        share = stored.groupby("group")["echoed"].mean().to_dict()
        return ProbeAnalysis(result={"echoed": share}, replies=stored, meta={"settings": {"word": self.word}})

    def analyze(self, replies: pd.DataFrame, runner: Any, out: Path, log: Any) -> ProbeAnalysis:
        return self._result(replies)

    def reanalyze(self, replies: pd.DataFrame, record: dict[str, Any], out: Path) -> ProbeAnalysis:
        return self._result(replies.drop(columns=["echoed"]))

    def signature_fields(self, meta: dict[str, Any], result: dict[str, Any]) -> list[tuple[str, Any]]:
        return [("word", (meta.get("settings") or {}).get("word"))]

    def write_report(self, result: dict[str, Any], meta: dict[str, Any], out: Path) -> None:
        (out / "report.md").write_text(f"# Echo\n\n{result['echoed']}\n", encoding="utf-8")


class EchoTask(Task):
    def items(self) -> pd.DataFrame:
        return PROMPTS

    def probe_plan(self, model_label: str, *, endpoint: bool = False, quick: bool = False, **settings: Any) -> Any:
        settings.pop("api_key_env", None)
        if settings.get("samples", 1) < 1:
            raise ValueError(f"--samples must be at least 1, got {settings['samples']}")
        return EchoPlan(**settings)


TASKS = [EchoTask(spec) for spec in load_specs(HERE / "echo_tasks.json").values()]
COMMANDS = HERE / "echo_commands.json"
