"""Build the Hub-ready dataset folder: Parquet per config and split plus a README card with ``configs:``.

Layout (docs/hub.md, "The dataset"): ``<config>/<split>-00000-of-00001.parquet`` and ``README.md``. The folder loads offline
with ``datasets.load_dataset(folder, "<config>", split="nouns")``. Building twice gives byte-identical Parquet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from queerbench import __version__
from queerbench.base.files import atomic_dir
from queerbench.base.sources import describe_sources
from queerbench.tasks.queerbench.templates import COLUMNS, SPLITS, build_sentences

__all__ = ["DATASET_CONFIGS", "build_dataset", "config_splits", "load_local_split"]

CONFIG_DESCRIPTIONS: dict[str, str] = {
    "default": (
        "The benchmark done right: 103 distinct templates × (62 nouns + 15 distinct pronouns) = 7,931 grammatical "
        "sentences (real verb agreement, accusative forms in object position, possessives that agree with pronoun "
        "subjects, lowercase 'the' inside a sentence, the 'has learning a living' typo fixed)."
    ),
    "paper": (
        "Exactly the 8,268 sentences the QueerBench paper's code generated (106 templates × (62 nouns + 16 pronoun "
        "rows)), bugs included: duplicate templates and pronoun 'e', a capitalised 'The' everywhere, and the 'they' "
        "plural hack ('they ha learning …'). Use it to reproduce the published tables."
    ),
    "queergen": (
        "QueerGen's 3,100 sentences (10 subjects × (unmarked + 30 markers) × 10 templates, groups unmarked / "
        "non-queer / queer), equal to its data/template_complete.csv; split top5_sample: the 300 rows of its top-5 "
        "runs. Academic research only (see below); built only on request."
    ),
    "scm": (
        "Stereotype Content Model probes for generative LLMs (Ostrow & Lopez): survey prompts (rating, selection, "
        "elicitation) and text-generation prompts for 7 sexual and gender minority groups."
    ),
}


def _queerbench_splits(config: str) -> dict[str, pd.DataFrame]:
    frame = build_sentences(config)
    return {split: frame[frame["split"] == split][list(COLUMNS)].reset_index(drop=True) for split in SPLITS}


def _scm_splits(config: str) -> dict[str, pd.DataFrame]:
    from queerbench.tasks.scm.dataset import scm_splits

    return scm_splits()


def _queergen_splits(config: str) -> dict[str, pd.DataFrame]:
    from queerbench.tasks.queergen.sentences import build_queergen_sentences, queergen_sample

    return {"test": build_queergen_sentences(), "top5_sample": queergen_sample()}


DATASET_CONFIGS: dict[str, Callable[[str], dict[str, pd.DataFrame]]] = {
    "default": _queerbench_splits,
    "paper": _queerbench_splits,
    "queergen": _queergen_splits,
    "scm": _scm_splits,
}
"""Every config the dataset can hold, mapped to the function that builds its splits."""


def config_splits(config: str) -> dict[str, pd.DataFrame]:
    """The splits of one dataset config as DataFrames (no files written)."""
    if config not in DATASET_CONFIGS:
        raise ValueError(f"unknown dataset config {config!r}; choose from: {', '.join(DATASET_CONFIGS)}")
    return DATASET_CONFIGS[config](config)


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
    default = "default" if "default" in configs else configs[0]
    meta = {
        "pretty_name": "QueerBench",
        "language": ["en"],
        "license": "other",
        "license_name": "mixed-see-card",
        "tags": ["bias", "fairness", "lgbtqia", "masked-language-modeling", "stereotypes"],
        "task_categories": ["fill-mask", "text-generation"],
        "size_categories": ["1K<n<10K"],
        "configs": [
            {
                "config_name": c,
                **({"default": True} if c == default else {}),
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
        f"- **`{c}`** ({', '.join(f'{s}: {t.num_rows:,}' for s, t in tables[c].items())}): {CONFIG_DESCRIPTIONS[c]}"
        for c in configs
    )
    source_lines = "\n".join(
        f"- `{s['name']}` — {s['version']}; license: {s['license']}; cite: {s['citation']}"
        for s in describe_sources(_card_sources(configs))
    )
    body = body.format(version=__version__, configs=config_lines, sources=source_lines)
    if "queergen" in configs:
        body += resources.files("queerbench.data").joinpath("queergen_card.md").read_text(encoding="utf-8").format()
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n" + body


def _card_sources(configs: Sequence[str]) -> list[str]:
    """The sources a card lists: every project source, and QueerGen's sentence files only when ``queergen`` is built
    (its stored evaluations and tables are reproduction references, not dataset sources)."""
    from queerbench.tasks.queergen.spec import spec

    names = [s["name"] for s in describe_sources() if not s["name"].startswith("queergen_")]
    if "queergen" in configs:
        names += list(spec()["sources"].values())
    return names


def _looks_like_dataset(folder: Path) -> bool:
    readme = folder / "README.md"
    return readme.is_file() and "configs:" in readme.read_text(encoding="utf-8", errors="replace")


def build_dataset(
    out: str | Path, configs: Sequence[str] = ("default", "paper", "scm"), *, overwrite: bool = False
) -> Path:
    """Write the Hub-ready dataset folder for ``configs`` into ``out`` (atomically) and return its path.

    ``out`` must be empty or absent; an earlier dataset build there is replaced only with ``overwrite=True``.
    """
    configs = list(dict.fromkeys(configs))
    if not configs:
        raise ValueError("no dataset configs given; choose from: " + ", ".join(DATASET_CONFIGS))
    for c in configs:
        if c not in DATASET_CONFIGS:
            raise ValueError(f"unknown dataset config {c!r}; choose from: {', '.join(DATASET_CONFIGS)}")
    frames = {c: config_splits(c) for c in configs}  # build everything before touching the output folder
    with atomic_dir(out, overwrite=overwrite, is_ours=_looks_like_dataset) as tmp:
        tables = {
            c: {s: _write_parquet(f, tmp / c / f"{s}-00000-of-00001.parquet") for s, f in splits.items()}
            for c, splits in frames.items()
        }
        (tmp / "README.md").write_text(_card(configs, tables), encoding="utf-8")
    return Path(out)


def load_local_split(folder: str | Path, config: str, split: str) -> pd.DataFrame:
    """Read one split of a built dataset folder with ``datasets.load_dataset`` (offline) as a DataFrame."""
    from datasets import load_dataset

    return load_dataset(str(folder), config, split=split).to_pandas()
