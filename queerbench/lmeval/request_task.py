"""The lm-evaluation-harness export of a ``requests`` task (:mod:`queerbench.tasks.spec`), generic over tasks.

A ``requests`` task with an ``lmeval`` entry is exported through its one method whose request type is ``generate``
(its spec's ``requests``) as one ``generate_until`` task in ``DIR/<lmeval task>/``: the task YAML, a ``utils.py``
that binds a :class:`RequestHooks` and :data:`DATA_FILE`, the task's items in run order (list columns kept). The
hooks rebuild each item dict from lm_eval's doc and ask the task itself:

- :meth:`RequestHooks.doc_to_text`: the prompt of the item's single :class:`~queerbench.models.requests.Generate`
  request (``task.requests(item, method)[0].prompt``), as it is: a chat model gets it as its user turn from lm_eval's
  ``--apply_chat_template``, so no ``_chat`` twin is written;
- :meth:`RequestHooks.process_results`: ``task.score_item(item, [GenerateResult(reply)], method)``, and of it one
  value per declared metric (its ``column``) under the name ``<metric>_<group>`` of the item's group, ``None`` under
  the names of the other groups;
- :meth:`RequestHooks.aggregation`: the mean over the values that are not ``None`` or NaN: over the group's items.

Generation is greedy, ``until: []``, at most the request's ``max_new_tokens`` (the same for every item, else the
export is refused). A task's other methods (``fill_mask``, ``loglikelihood``) are not exported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from queerbench import __version__
from queerbench.models.requests import GENERATE, Generate, GenerateResult

if TYPE_CHECKING:
    from queerbench.tasks.base import Task

__all__ = ["DATA_FILE", "RequestHooks", "generate_method", "metric_names", "write_task"]

DATA_FILE = "items.parquet"
_UTILS = '''"""lm-evaluation-harness hooks of the task {lm_task} (written by `queerbench lm-eval export`; re-export, do not edit)."""

from queerbench.lmeval.request_task import RequestHooks

_hooks = RequestHooks(config={config!r}, method={method!r}, columns={columns!r})
doc_to_text = _hooks.doc_to_text
process_results = _hooks.process_results
'''


def generate_method(task: Task) -> str:
    """The task's method whose request type is ``generate`` (a one-line ``ValueError`` when it has none)."""
    found = [m for m in task.spec.methods if task.spec.requests.get(m) == GENERATE]
    if not found:
        declared = ", ".join(f"{m}: {t}" for m, t in task.spec.requests.items()) or "none"
        raise ValueError(
            f"--configs {task.name}: an lm-evaluation-harness export is a generate_until task, and {task.name} has no "
            f"method of request type {GENERATE} (its methods' request types: {declared}); drop it from --configs"
        )
    return found[0]


def metric_names(task: Task) -> list[tuple[str, str, str]]:
    """``(lm-eval metric name, declared metric, group)`` for each declared metric × group in report order; the name
    is ``<metric>_<group>`` with every character that cannot be in a Python name made ``_``."""
    groups = task.spec.groups
    if groups is None or not task.spec.metrics:
        raise ValueError(f"task {task.name} declares no metrics and groups; it has no lm-evaluation-harness export")
    out = []
    for metric in task.spec.metrics:
        for group in groups.order:
            name = re.sub(r"\W", "_", f"{metric.name}_{group}", flags=re.ASCII)
            out.append((name if name.isidentifier() else f"m_{name}", metric.name, group))
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"task {task.name}: two metric × group pairs give one lm-eval metric name ({names})")
    return out


class _Function(str):
    """A ``!function`` reference in a task YAML."""


class _Dumper(yaml.SafeDumper):
    """Writes :class:`_Function` values as ``!function NAME``."""


_Dumper.add_representer(_Function, lambda dumper, value: dumper.represent_scalar("!function", str(value)))


def _max_gen_toks(task: Task, method: str, records: Sequence[dict[str, Any]]) -> int:
    """The ``max_new_tokens`` every item's single ``Generate`` request shares (one line when they differ)."""
    lengths = set()
    for item in records:
        requests = task.requests(item, method)
        if len(requests) != 1 or not isinstance(requests[0], Generate):
            raise ValueError(f"task {task.name}: a {method} item must make one generate request, got {requests!r}")
        lengths.add(requests[0].max_new_tokens)
    if len(lengths) != 1:
        raise ValueError(
            f"task {task.name}: its {method} requests ask for {sorted(lengths) or 'no'} new tokens; one "
            "lm-evaluation-harness task has one max_gen_toks"
        )
    return lengths.pop()


def task_yaml(task: Task, lm_task: str, data_file: Path, method: str, max_gen_toks: int) -> str:
    """The task YAML of ``task`` exported as ``lm_task`` reading ``data_file`` (an absolute path)."""
    spec = {m.name: m for m in task.spec.metrics}
    doc = {
        "task": lm_task,
        "dataset_path": "parquet",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": _Function("utils.doc_to_text"),
        "doc_to_target": "",
        "process_results": _Function("utils.process_results"),
        "num_fewshot": 0,
        "generation_kwargs": {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": max_gen_toks},
        "metric_list": [
            {"metric": name, "aggregation": _Function(f"utils.{name}"), "higher_is_better": spec[m].higher_is_better}
            for name, m, _ in metric_names(task)
        ],
        "metadata": {"version": 1.0, "queerbench_version": __version__, "config": task.name, "method": method},
    }
    head = (
        f"# lm-evaluation-harness task written by `queerbench lm-eval export` (queerbench {__version__}). Re-export "
        "rather than edit:\n# the hooks in utils.py call the task's own prompt and scoring. A chat model: lm_eval "
        "--apply_chat_template.\n"
    )
    return head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def write_task(task: Task, lm_task: str, folder: Path, final: Path) -> None:
    """Write the export of ``task`` as ``lm_task`` into ``folder`` (empty), whose YAML names its data file at
    ``final`` (the folder's path once the export is moved into place)."""
    method = generate_method(task)
    frame = task.items()
    records = frame.to_dict("records")
    max_gen_toks = _max_gen_toks(task, method, records)  # type: ignore[arg-type]
    frame.to_parquet(folder / DATA_FILE, index=False)
    (folder / f"{lm_task}.yaml").write_text(
        task_yaml(task, lm_task, final / DATA_FILE, method, max_gen_toks), encoding="utf-8"
    )
    utils = _UTILS.format(lm_task=lm_task, config=task.name, method=method, columns=[str(c) for c in frame.columns])
    utils += "".join(f"{name} = _hooks.aggregation({m!r}, {g!r})\n" for name, m, g in metric_names(task))
    (folder / "utils.py").write_text(utils, encoding="utf-8")


def _plain(value: Any) -> Any:
    """A doc value as the item held it: a list for a list column (lm_eval's datasets gives lists, pandas arrays)."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        return value.tolist()
    return value


def _number(value: Any) -> float | None:
    """A metric column's per-item value as a float (None stays None)."""
    return None if value is None else float(value)


class RequestHooks:
    """The hooks of one exported ``requests`` task: its config (queerbench task name), its ``generate`` method and
    the item columns its data file holds."""

    def __init__(self, *, config: str, method: str, columns: Sequence[str]) -> None:
        self.config, self.method, self.columns = config, method, list(columns)
        self._task: Task | None = None

    @property
    def task(self) -> Task:
        """The queerbench task (looked up on first use)."""
        if self._task is None:
            from queerbench.tasks import get_task

            task = get_task(self.config)
            if task.spec.requests.get(self.method) != GENERATE:
                raise ValueError(f"task {self.config} has no generate method {self.method!r}; re-export the task")
            self._task = task
        return self._task

    def item(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The item dict of one doc (the data file's columns)."""
        return {c: _plain(doc[c]) for c in self.columns}

    def doc_to_text(self, doc: dict[str, Any]) -> str:
        """The prompt of the item's single generate request."""
        requests = self.task.requests(self.item(doc), self.method)
        if len(requests) != 1 or not isinstance(requests[0], Generate):
            raise ValueError(f"task {self.config}: a {self.method} item must make one generate request")
        return requests[0].prompt

    def process_results(self, doc: dict[str, Any], results: Sequence[Any]) -> dict[str, float | None]:
        """The reply scored by the task: each declared metric's value under its name for the item's group, None
        under the other groups' names."""
        reply = results[0] if results else ""
        item = self.item(doc)
        scored = self.task.score_item(item, [GenerateResult(reply if isinstance(reply, str) else "")], self.method)
        groups = self.task.spec.groups
        assert groups is not None  # metric_names() refuses a task without groups
        mine = str(item[groups.column])
        columns = {m.name: m.column for m in self.task.spec.metrics}
        return {
            name: _number(scored[columns[metric]]) if group == mine else None
            for name, metric, group in metric_names(self.task)
        }

    def aggregation(self, metric: str, group: str) -> Callable[[Sequence[float | None]], float]:
        """The aggregation of ``metric`` for ``group``: the mean of the per-item values that are not None or NaN
        (those of the group's items), NaN when there are none."""
        name = next((n for n, m, g in metric_names(self.task) if (m, g) == (metric, group)), None)
        if name is None:
            raise ValueError(f"task {self.config} declares no metric {metric!r} for a group {group!r}")

        def aggregate_group(values: Sequence[float | None]) -> float:
            mine = [float(v) for v in values if v is not None and not math.isnan(float(v))]
            return sum(mine) / len(mine) if mine else math.nan

        aggregate_group.__name__ = name
        return aggregate_group
