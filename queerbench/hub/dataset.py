"""Build the Hub-ready dataset folder: Parquet per config and split, a README card with ``configs:`` and the
benchmark's ``eval.yaml``.

Layout (docs/hub.md, "The dataset"): ``<config>/<split>-00000-of-00001.parquet``, ``README.md`` and ``eval.yaml``. The
folder loads offline with ``datasets.load_dataset(folder, "<config>", split="nouns")``. Building twice gives
byte-identical Parquet.

``eval.yaml`` makes the dataset a Hub benchmark: its name, description and evaluation framework
(``hub_configs/cards.yaml``, ``benchmark``) and one task (leaderboard) per metric and group of each config built, with
the config and split that hold the group (:func:`queerbench.results.eval_results.benchmark_tasks`): every task id an
eval's ``.eval_results`` entries use for the released configs.

The folder is built aside and moved into place (:func:`queerbench.base.files.replace_own_files`). ``--overwrite``
replaces the files an earlier build wrote — its ``README.md``, its ``eval.yaml`` and the Parquet files that card
lists — and nothing else: a researcher's notes, a ``.gitattributes`` or the ``.git`` folder of a Hub clone stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from queerbench import __version__
from queerbench.base.files import replace_own_files
from queerbench.base.release_config import load_release_config
from queerbench.base.sources import describe_sources
from queerbench.results.eval_results import BENCHMARK_FILE, benchmark_problem, benchmark_tasks
from queerbench.tasks import Task, all_tasks

__all__ = [
    "benchmark_yaml",
    "build_dataset",
    "card_front_matter",
    "config_splits",
    "dataset_configs",
    "default_configs",
    "load_local_split",
]


def dataset_configs() -> tuple[str, ...]:
    """Every config the dataset can hold: one per task (its ``dataset_config``), in the registry's order."""
    return tuple(task.spec.dataset_config for task in all_tasks().values())


def _task_of(config: str) -> Task:
    for task in all_tasks().values():
        if task.spec.dataset_config == config:
            return task
    raise ValueError(f"unknown dataset config {config!r}; choose from: {', '.join(dataset_configs())}")


def default_configs() -> tuple[str, ...]:
    """The configs built when none are named: every task's that is built by default (QueerGen's only on request)."""
    return tuple(t.spec.dataset_config for t in all_tasks().values() if t.spec.build_by_default)


def config_splits(config: str) -> dict[str, pd.DataFrame]:
    """The splits of one dataset config as DataFrames (no files written): its task's."""
    return _task_of(config).dataset_splits()


def _write_parquet(frame: pd.DataFrame, path: Path) -> pa.Table:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata(None)  # no pandas/version metadata: byte-identical rebuilds
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", use_dictionary=True, write_statistics=True)
    return table


def _features(table: pa.Table) -> list[dict[str, str]]:
    names = {pa.string(): "string", pa.large_string(): "string", pa.int64(): "int64", pa.int32(): "int32"}
    out = []
    for field in table.schema:
        dtype = names.get(field.type)
        if dtype is None:
            if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
                out.append({"name": field.name, "list": {"dtype": names.get(field.type.value_type, "string")}})
                continue
            dtype = str(field.type)
        out.append({"name": field.name, "dtype": dtype})
    return out


def _card(configs: Sequence[str], tables: dict[str, dict[str, pa.Table]]) -> str:
    wanted = _benchmark_meta()["default_config"]  # hub_configs/cards.yaml; else the registry's first task built
    default = wanted if wanted in configs else next(c for c in dataset_configs() if c in configs)
    front = card_front_matter()
    marks = front.pop("default_config_fields")
    meta = {
        **front,
        "configs": [
            {
                "config_name": c,
                **(marks if c == default else {}),
                "data_files": [{"split": s, "path": f"{c}/{s}-00000-of-00001.parquet"} for s in tables[c]],
            }
            for c in configs
        ],
        "dataset_info": [
            {
                "config_name": c,
                "features": _features(next(iter(tables[c].values()))),
                "splits": [
                    {"name": s, "num_bytes": int(t.nbytes), "num_examples": int(t.num_rows)}
                    for s, t in tables[c].items()
                ],
            }
            for c in configs
        ],
    }
    body = resources.files("queerbench.data").joinpath("dataset_card.md").read_text(encoding="utf-8")
    config_lines = "\n".join(
        f"- **`{c}`** ({', '.join(f'{s}: {t.num_rows:,}' for s, t in tables[c].items())}): "
        f"{_task_of(c).spec.dataset_description}"
        for c in configs
    )
    source_lines = "\n".join(
        f"- `{s['name']}` — {s['version']}; license: {s['license']}; cite: {s['citation']}"
        for s in describe_sources(_card_sources(configs))
    )
    body = body.format(version=__version__, configs=config_lines, sources=source_lines)
    body += "".join(_task_of(c).dataset_card_extra() for c in configs)
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n" + body


_FRONT_MATTER_LISTS = ("language", "tags", "task_categories", "size_categories")


def card_front_matter() -> dict[str, Any]:
    """The dataset card's front matter as ``hub_configs/cards.yaml`` (``dataset``) gives it, checked: a
    ``pretty_name``, a ``license``, lists of ``language``, ``tags``, ``task_categories`` and ``size_categories``,
    and ``default_config_fields``, the fields the Hub's card gives (in ``configs``) the config loaded when none is
    named; the card adds ``configs`` and ``dataset_info`` for the configs built. A one-line ``ValueError`` names
    what is missing or malformed."""
    front = dict(load_release_config().cards.get("dataset", {}))
    problems = [
        f"dataset.{k} must be a non-empty string"
        for k in ("pretty_name", "license")
        if not isinstance(front.get(k), str) or not front[k].strip()
    ]
    problems += [
        f"dataset.{k} must be a list of strings"
        for k in _FRONT_MATTER_LISTS
        if not isinstance(front.get(k), list) or not all(isinstance(v, str) for v in front[k])
    ]
    if not isinstance(front.get("default_config_fields"), dict) or not front["default_config_fields"]:
        problems.append("dataset.default_config_fields must be a mapping (the Hub's mark of the default config)")
    problems += [
        f"dataset.{k} is derived from the configs built: remove it" for k in ("configs", "dataset_info") if k in front
    ]
    if problems:
        raise ValueError(f"hub_configs/cards.yaml: {'; '.join(problems)}")
    return front


_DESCRIPTION = "Harm toward LGBTQIA+ people in language models' completions (lower QueerBench scores are less harmful)."


def _benchmark_meta() -> dict[str, str]:
    """The benchmark's name, description and evaluation framework (``hub_configs/cards.yaml``, ``benchmark``)."""
    meta = load_release_config().cards.get("benchmark", {})
    return {
        "name": str(meta.get("name") or "QueerBench"),
        "description": " ".join(str(meta.get("description") or _DESCRIPTION).split()),
        "evaluation_framework": str(meta.get("evaluation_framework") or "queerbench"),
        "default_config": str(meta.get("default_config") or ""),
    }


def benchmark_yaml(frames: dict[str, dict[str, pd.DataFrame]]) -> str:
    """The benchmark's ``eval.yaml`` for the configs in ``frames`` (``{config: {split: frame}}``): the Hub's fields
    (name, description, evaluation framework) and one task per metric and group of each config."""
    meta = _benchmark_meta()
    built = "; ".join(f"`{c}`: {_task_of(c).spec.title}" for c in frames)
    data = {
        "name": meta["name"],
        "description": f"{meta['description']} Configs: {built}.".strip(),
        "evaluation_framework": meta["evaluation_framework"],
        "tasks": benchmark_tasks(frames),
    }
    problem = benchmark_problem(data)
    if problem:
        raise ValueError(f"the benchmark's {BENCHMARK_FILE} would be invalid: {problem}; fix hub_configs/cards.yaml")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def _card_sources(configs: Sequence[str]) -> list[str]:
    """The sources a card lists: every project source that is no benchmark's own sentence or reference file, plus
    the sources of the configs built (a benchmark's stored evaluations and tables are reproduction references, not
    dataset sources)."""
    own = {s for task in all_tasks().values() for s in task.owned_sources()}
    names = [s["name"] for s in describe_sources() if s["name"] not in own]
    for c in configs:
        names += [s for s in _task_of(c).dataset_sources() if s not in names]
    return names


def _own_files(folder: Path) -> list[str] | None:
    """The files an earlier ``dataset build`` wrote in ``folder``: its card (``README.md``, front matter naming
    QueerBench), its ``eval.yaml`` (a valid benchmark file of the same name) and the Parquet files the card's
    ``configs`` list; None when the folder holds no such card."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    text = readme.read_text(encoding="utf-8", errors="replace")
    try:
        meta = yaml.safe_load(text.split("---", 2)[1]) if text.startswith("---") else None
    except (yaml.YAMLError, IndexError):
        return None
    if (
        not isinstance(meta, dict)
        or meta.get("pretty_name") != card_front_matter()["pretty_name"]
        or not isinstance(meta.get("configs"), list)
    ):
        return None
    files = ["README.md"]
    try:
        benchmark = yaml.safe_load((folder / BENCHMARK_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        benchmark = None
    if benchmark_problem(benchmark) is None and benchmark.get("name") == _benchmark_meta()["name"]:
        files.append(BENCHMARK_FILE)  # ours; an eval.yaml of anyone else's stops an --overwrite
    for config in meta["configs"]:
        for entry in (config.get("data_files") or []) if isinstance(config, dict) else []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                files.append(entry["path"])
    return files


def build_dataset(out: str | Path, configs: Sequence[str] | None = None, *, overwrite: bool = False) -> Path:
    """Write the Hub-ready dataset folder for ``configs`` into ``out`` (atomically: Parquet, the card and the
    benchmark's ``eval.yaml``) and return its path.

    ``out`` must be empty or absent, or, with ``overwrite=True``, hold an earlier dataset build: its files (the card
    and the Parquet files it lists) are replaced and every other file there is left alone. ``configs`` None:
    :func:`default_configs`.
    """
    configs = list(dict.fromkeys(default_configs() if configs is None else configs))
    if not configs:
        raise ValueError("no dataset configs given; choose from: " + ", ".join(dataset_configs()))
    for c in configs:
        _task_of(c)  # an unknown config fails before anything is built
    frames = {c: config_splits(c) for c in configs}  # build everything before touching the output folder
    with replace_own_files(out, overwrite=overwrite, own_files=_own_files, command="queerbench dataset build") as tmp:
        tables = {
            c: {s: _write_parquet(f, tmp / c / f"{s}-00000-of-00001.parquet") for s, f in splits.items()}
            for c, splits in frames.items()
        }
        (tmp / "README.md").write_text(_card(configs, tables), encoding="utf-8")
        (tmp / BENCHMARK_FILE).write_text(benchmark_yaml(frames), encoding="utf-8")
    return Path(out)


def load_local_split(folder: str | Path, config: str, split: str) -> pd.DataFrame:
    """Read one split of a built dataset folder with ``datasets.load_dataset`` (offline) as a DataFrame."""
    from datasets import load_dataset

    return load_dataset(str(folder), config, split=split).to_pandas()
