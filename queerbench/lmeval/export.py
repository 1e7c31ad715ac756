"""``queerbench lm-eval export DIR``: task folders lm-evaluation-harness 0.4 loads with ``--include_path DIR``.

A ``requests`` task (its ``runs_requests``) is exported by :mod:`queerbench.lmeval.request_task`: one folder
``DIR/<task>/`` (YAML, ``utils.py``, ``items.parquet``), no ``_chat`` twin (a chat model: ``--apply_chat_template``).
A fill-in-the-blank task: per task and prompt format, one folder ``DIR/<task>/`` with the task YAML (from the
template ``queerbench/data/lmeval_task.yaml``), a ``utils.py`` that binds :class:`queerbench.lmeval.task.TaskHooks`, and
``sentences.parquet``: the task's sentences in ``queerbench run``'s order, so ``lm_eval --limit N`` evaluates the
same sentences as a run over the templates they cover. Which tasks can be exported, and under which name, each task
says (its ``lmeval`` entry: ``queerbench_default``, ``queerbench_paper``, ``queergen``), for the raw prompt (models
without a chat template) and with ``_chat`` (the prompt as the user turn of ``--apply_chat_template``). The folder is
written in a temporary sibling and moved into place (:func:`queerbench.base.files.replace_own_files`); ``--overwrite``
replaces the files an earlier export wrote (the marker file ``.queerbench-lm-eval`` and, in each task folder, the
task YAML, ``utils.py``, its data file and the ``__pycache__`` lm_eval left of ``utils.py``) and leaves every
other file there alone.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from queerbench import __version__
from queerbench.base.files import replace_own_files
from queerbench.lmeval import request_task
from queerbench.lmeval.task import METRIC_KINDS, PROMPT_FORMATS, metric_name
from queerbench.scoring.toxicity_base import KEY as TOXICITY

__all__ = ["export_configs", "export_tasks", "lmeval_tasks", "task_name"]

MARKER = ".queerbench-lm-eval"
_REQUIRED = ("task", "dataset_path", "dataset_kwargs", "output_type", "doc_to_text", "process_results", "metric_list")
_UTILS = '''"""lm-evaluation-harness hooks of the task {task} (written by `queerbench lm-eval export`; re-export, do not edit)."""

from queerbench.lmeval.task import TaskHooks

_hooks = TaskHooks(config={config!r}, prompt_id={prompt_id!r}, prompt_format={prompt_format!r}, toxicity={toxicity!r},
                   groups={groups!r})
doc_to_text = _hooks.doc_to_text
process_results = _hooks.process_results
'''


def export_configs(*, runs_requests: bool | None = None) -> tuple[str, ...]:
    """The tasks that have an lm-evaluation-harness export (their ``lmeval`` entry), in the registry's order; only
    the ``requests`` tasks (``runs_requests=True``) or only the others (``False``)."""
    from queerbench.tasks import all_tasks

    return tuple(
        name
        for name, task in all_tasks().items()
        if task.spec.lmeval_task and runs_requests in (None, task.runs_requests)
    )


def task_name(config: str, prompt_format: str) -> str:
    """The task's lm-evaluation-harness name (``queerbench_default``, ``queergen``, …), ``_chat`` for the chat format
    (a ``requests`` task has one name for both: lm_eval's ``--apply_chat_template`` makes its prompt a user turn)."""
    from queerbench.tasks import get_task

    task = get_task(config)
    base = task.spec.lmeval_task
    if not base:
        raise ValueError(
            f"--config {config} has no lm-evaluation-harness export; choose one of {', '.join(export_configs())}"
        )
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    return base if prompt_format == "raw" or task.runs_requests else f"{base}_chat"


def lmeval_tasks(config: str) -> tuple[str, ...]:
    """The lm-evaluation-harness tasks an export of ``config`` writes: a fill-in-the-blank task's raw and ``_chat``
    tasks, a ``requests`` task's one task."""
    return tuple(dict.fromkeys(task_name(config, f) for f in PROMPT_FORMATS))


def _data_file(config: str) -> str:
    """The data file in each of ``config``'s task folders."""
    from queerbench.tasks import get_task

    return request_task.DATA_FILE if get_task(config).runs_requests else "sentences.parquet"


def _own_files(folder: Path) -> list[str] | None:
    """The files an earlier export wrote in ``folder`` (None when it holds no export's marker): the marker and, for
    every task queerbench exports, its YAML, ``utils.py``, its data file (``sentences.parquet``, ``items.parquet``
    for a ``requests`` task) and the compiled ``utils.py`` that lm_eval's import of it left in ``__pycache__``."""
    if not (folder / MARKER).is_file():
        return None
    files = [MARKER]
    for config in export_configs():
        for task in lmeval_tasks(config):
            files += [f"{task}/{task}.yaml", f"{task}/utils.py", f"{task}/{_data_file(config)}"]
            files += [p.relative_to(folder).as_posix() for p in (folder / task / "__pycache__").glob("utils.*.pyc")]
    return files


class _TaskLoader(yaml.SafeLoader):
    """Reads a task YAML, its ``!function`` tags included (as ``("!function", name)``), to check what was written."""


def _function_tag(loader: yaml.SafeLoader, node: yaml.Node) -> tuple[str, Any]:
    """A ``!function`` tag as ``("!function", name)``."""
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, f"expected a scalar node, but found {getattr(node, 'id', 'node')}", node.start_mark
        )
    return ("!function", loader.construct_scalar(node))


_TaskLoader.add_constructor("!function", _function_tag)


def _task_yaml(task: str, config: str, data_file: Path, groups: Sequence[str], options: dict[str, Any]) -> str:
    template = resources.files("queerbench.data").joinpath("lmeval_task.yaml").read_text(encoding="utf-8")
    metrics = "\n".join(
        f"  - metric: {metric_name(kind, g)}\n"
        f"    aggregation: !function utils.{metric_name(kind, g)}\n"
        f"    higher_is_better: {'true' if kind == 'parse_rate' else 'false'}"
        for g in groups
        for kind in METRIC_KINDS
    )
    text = string.Template(template).substitute(
        task=task,
        data_file=yaml.safe_dump(str(data_file), default_style='"').strip(),
        max_gen_toks=int(options["max_new_tokens"]),
        metrics=metrics,
        version=__version__,
        config=config,
        prompt_id=options["prompt_id"],
        prompt_format=options["prompt_format"],
        toxicity=options[TOXICITY],
    )
    parsed = yaml.load(text, Loader=_TaskLoader)
    missing = [k for k in _REQUIRED if k not in parsed]
    names = [m["metric"] for m in parsed["metric_list"]]
    if missing or parsed["task"] != task or len(names) != len(set(names)):
        raise ValueError(
            f"queerbench/data/lmeval_task.yaml: the task written for {task} lacks {missing or 'unique metrics'}"
        )
    return text


def export_tasks(
    out: str | Path,
    configs: Sequence[str],
    *,
    prompt_id: str | None = None,
    max_new_tokens: int | None = None,
    toxicity: str = "embedded",
    overwrite: bool = False,
) -> list[str]:
    """Write the task folders of ``configs`` (both prompt formats of a fill-in-the-blank task; one task of a
    ``requests`` task, which ignores ``prompt_id``, ``max_new_tokens`` and ``toxicity``) into ``out``; return the task
    names. ``configs`` has no default here: the CLI's ``--configs`` has one.

    ``out`` must be new or empty, or, with ``overwrite=True``, hold an earlier export: its files are replaced (those
    of tasks not exported now are removed) and every other file there is left alone."""
    from queerbench.methods.instructed.replies import load_prompts
    from queerbench.scoring.aggregate import ScoringOptions, group_order
    from queerbench.tasks import get_task

    unknown = [c for c in configs if c not in export_configs()]
    if unknown or not configs:
        raise ValueError(
            f"--configs must name some of {', '.join(export_configs())}, got {', '.join(configs) or 'none'}"
        )
    for config in configs:  # a requests task without a generate method is refused before anything is written
        if get_task(config).runs_requests:
            request_task.generate_method(get_task(config))
    prompts = load_prompts()
    prompt_id = prompt_id or prompts["default_prompt"]
    if prompt_id not in prompts["prompts"]:
        raise ValueError(f"unknown prompt id {prompt_id!r} (--prompt); choose one of {', '.join(prompts['prompts'])}")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
    ScoringOptions(toxicity=toxicity)  # an unknown scorer fails here, before anything is written
    options = {
        "prompt_id": prompt_id,
        "max_new_tokens": max_new_tokens or prompts["decoding"]["max_new_tokens"],
        "toxicity": toxicity,
    }
    out = Path(out).expanduser().resolve()
    written: list[str] = []
    with replace_own_files(out, overwrite=overwrite, own_files=_own_files, command="queerbench lm-eval export") as tmp:
        (tmp / MARKER).write_text(f"queerbench {__version__}\n", encoding="utf-8")
        for config in configs:
            if get_task(config).runs_requests:
                task = task_name(config, "raw")
                (tmp / task).mkdir()
                request_task.write_task(get_task(config), task, tmp / task, out / task)
                written.append(task)
                continue
            frame = get_task(config).items().drop(columns=["split"])
            groups = group_order(frame["group"].astype(str).tolist())
            for prompt_format in PROMPT_FORMATS:
                task = task_name(config, prompt_format)
                folder = tmp / task
                folder.mkdir()
                frame.to_parquet(folder / "sentences.parquet", index=False)
                fmt = {**options, "prompt_format": prompt_format}
                (folder / f"{task}.yaml").write_text(
                    _task_yaml(task, config, out / task / "sentences.parquet", groups, fmt), encoding="utf-8"
                )
                utils = _UTILS.format(task=task, config=config, groups=groups, **fmt)
                utils += "".join(
                    f"{metric_name(kind, g)} = _hooks.aggregation({kind!r}, {g!r})\n"
                    for g in groups
                    for kind in METRIC_KINDS
                )
                (folder / "utils.py").write_text(utils, encoding="utf-8")
                written.append(task)
    return written
