"""The papers' published evaluation files and the Perspective values stored in them: the data file
``queerbench/data/published_toxicity.json``, schema-checked, and the readers it declares.

Perspective scored different texts in the two papers (docs/metric-and-toxicity.md): QueerBench the template completed
by the word, with the subject named (protocol ``full``); QueerGen the unmarked sentence and the word,
``f"{Unmarked} {prediction}"``, subject-blind (protocol ``blind``, which ``default``'s neutral sentences also are). A
reader turns one file into rows of ``text``, ``word`` and the stored ``perspective_<ATTR>`` values; it is chosen by the
columns a file has, so a file of another shape gets one line naming the columns it lacks.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "FileReader",
    "Protocol",
    "PublishedFiles",
    "choose_reader",
    "protocol_for",
    "protocol_of_reader",
    "published_files",
    "read_evaluation_file",
]

_WHERE = "queerbench/data/published_toxicity.json"


@dataclass(frozen=True)
class FileReader:
    """How one kind of published evaluation file is read (an entry of ``readers``)."""

    name: str
    sep: str
    text: dict[str, Any]
    labels: dict[str, Any]

    def required_columns(self, attributes: tuple[str, ...]) -> list[str]:
        """The columns a file must have to be read this way."""
        if self.text["rule"] == "fill":
            cols = [self.text["template"], self.text["word"]]
        else:
            cols = [*self.text["parts"], self.text["word"]]
        if self.labels["form"] == "flags":
            cols.append(self.labels["column"])
        else:
            cols.extend(self.labels["columns"][a] for a in attributes)
        return list(dict.fromkeys(cols))


@dataclass(frozen=True)
class Protocol:
    """One form of scored text: its published files (pinned source names and the model each holds) and reader."""

    name: str
    description: str
    text_forms: tuple[str, ...]
    reader: str
    files: tuple[tuple[str, str], ...]  # (source name, model name)
    labels: tuple[str, ...] = ()  # per file: the name its reference rows carry (the model name unless the file says)

    def names_of(self, index: int) -> set[str]:
        """Every name file ``index``'s model goes by (its ``model`` and its reference rows' ``label``)."""
        return {self.files[index][1], *(self.labels[index : index + 1] or ())}


@dataclass(frozen=True)
class PublishedFiles:
    """The whole data file: attributes, readers and protocols."""

    attributes: tuple[str, ...]
    readers: dict[str, FileReader]
    protocols: dict[str, Protocol]
    raw: dict[str, Any]


def _fail(msg: str) -> ValueError:
    return ValueError(f"{_WHERE}: {msg}")


def _check(raw: Any) -> PublishedFiles:
    """Check the file's schema; a ``ValueError`` naming the fault otherwise."""
    if not isinstance(raw, dict) or raw.get("schema_version") != 1:
        raise _fail("expected an object with 'schema_version': 1")
    missing = {"attributes", "readers", "protocols"} - set(raw)
    if missing:
        raise _fail(f"missing key(s) {sorted(missing)}")
    attributes = tuple(raw["attributes"])
    if not attributes or not all(isinstance(a, str) for a in attributes):
        raise _fail("'attributes' must be a list of attribute names")
    readers: dict[str, FileReader] = {}
    for name, entry in raw["readers"].items():
        text, labels = entry.get("text"), entry.get("labels")
        if not isinstance(text, dict) or text.get("rule") not in ("fill", "join") or "word" not in text:
            raise _fail(f"reader {name!r}: 'text' needs a 'rule' ('fill' or 'join') and a 'word' column")
        if text["rule"] == "fill" and "template" not in text:
            raise _fail(f"reader {name!r}: a 'fill' text rule needs a 'template' column")
        if text["rule"] == "join" and not isinstance(text.get("parts"), list):
            raise _fail(f"reader {name!r}: a 'join' text rule needs a list of 'parts' columns")
        if not isinstance(labels, dict) or labels.get("form") not in ("flags", "probabilities"):
            raise _fail(f"reader {name!r}: 'labels' needs a 'form' ('flags' or 'probabilities')")
        if labels["form"] == "flags" and "column" not in labels:
            raise _fail(f"reader {name!r}: 'flags' labels need a 'column'")
        if labels["form"] == "probabilities" and set(labels.get("columns", {})) != set(attributes):
            raise _fail(f"reader {name!r}: 'probabilities' labels need one column per attribute {list(attributes)}")
        readers[name] = FileReader(name=name, sep=str(entry.get("sep", ",")), text=text, labels=labels)
    protocols: dict[str, Protocol] = {}
    for name, entry in raw["protocols"].items():
        if entry.get("reader") not in readers:
            raise _fail(f"protocol {name!r}: 'reader' must be one of {sorted(readers)}")
        files = entry.get("files")
        if not isinstance(files, list) or len(files) < 2:
            raise _fail(f"protocol {name!r}: 'files' must list at least two {{'source', 'model'}} entries")
        pairs = tuple((str(f["source"]), str(f["model"])) for f in files)
        if len({m for _, m in pairs}) != len(pairs):
            raise _fail(f"protocol {name!r}: each file must hold another model")
        protocols[name] = Protocol(
            name=name,
            description=str(entry.get("description", "")),
            text_forms=tuple(entry.get("text_forms", ())),
            reader=entry["reader"],
            files=pairs,
            labels=tuple(str(f.get("label", f["model"])) for f in files),
        )
    forms = [f for p in protocols.values() for f in p.text_forms]
    if len(forms) != len(set(forms)):
        raise _fail("a text form belongs to one protocol only")
    return PublishedFiles(attributes=attributes, readers=readers, protocols=protocols, raw=raw)


@cache
def published_files() -> PublishedFiles:
    """The checked contents of ``queerbench/data/published_toxicity.json``."""
    text = resources.files("queerbench.data").joinpath("published_toxicity.json").read_text(encoding="utf-8")
    return _check(json.loads(text))


def protocol_for(text_form: str | None) -> str:
    """The protocol whose texts have the form a task's scorer reads (``full``, ``neutral`` or ``frame``; ``neutral``
    when unknown)."""
    spec = published_files()
    form = text_form or "neutral"
    for protocol in spec.protocols.values():
        if form in protocol.text_forms:
            return protocol.name
    raise ValueError(
        f"no published files hold texts of the form {form!r}; "
        f"known forms: {', '.join(f for p in spec.protocols.values() for f in p.text_forms)}"
    )


def protocol_of_reader(reader: FileReader) -> str:
    """The protocol whose files a reader reads (the form of text Perspective scored in them)."""
    for protocol in published_files().protocols.values():
        if protocol.reader == reader.name:
            return protocol.name
    raise ValueError(f"{_WHERE}: no protocol reads its files with {reader.name!r}")


def _words(value: Any, as_list: bool) -> str:
    """The word a row's prediction cell holds (the first of a stored list, as the paper's top-1 files store it)."""
    if not as_list:
        return "" if pd.isna(value) else str(value)
    text = str(value)
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    if isinstance(parsed, (list, tuple)):
        return str(parsed[0]) if parsed else ""
    return str(parsed)


def _many_words(value: Any) -> bool:
    """Whether a prediction cell holds a list of more than one word (a top-k file)."""
    text = str(value).strip()
    if not text.startswith("["):
        return False
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return isinstance(parsed, (list, tuple)) and len(parsed) > 1


def _clip(value: Any, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _flags(value: Any, n: int, where: str) -> list[float]:
    try:
        parsed = ast.literal_eval(str(value))
    except (ValueError, SyntaxError):
        parsed = None
    if not isinstance(parsed, (list, tuple)) or len(parsed) != n:
        raise ValueError(f"{where}: a stored flag vector must hold {n} numbers, got {value!r}")
    return [float(x > 0) for x in parsed]


def choose_reader(columns: list[str], path: Path) -> FileReader:
    """The reader whose columns ``columns`` has; otherwise one line naming what the closest reader lacks."""
    spec = published_files()
    best: tuple[int, FileReader] | None = None
    for reader in spec.readers.values():
        lacking = [c for c in reader.required_columns(spec.attributes) if c not in columns]
        if not lacking:
            return reader
        if best is None or len(lacking) < best[0]:
            best = (len(lacking), reader)
    assert best is not None
    lacking = [c for c in best[1].required_columns(spec.attributes) if c not in columns]
    raise ValueError(
        f"{path}: not a QueerBench or QueerGen evaluation file: it lacks the column(s) {', '.join(lacking)} "
        f"(read as {best[1].name}); pass the papers' per-sentence evaluation CSVs"
    )


def read_evaluation_file(path: str | Path) -> tuple[pd.DataFrame, FileReader]:
    """One published evaluation file as rows of ``text``, ``word`` and ``perspective_<ATTR>`` (in file order), and
    the reader that read it. Raises a one-line ``ValueError`` for a file of another shape."""
    path = Path(path)
    spec = published_files()
    header = ""
    with open(path, encoding="utf-8") as fh:
        header = fh.readline()
    sep = ";" if header.count(";") > header.count(",") else ","
    try:
        frame = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{path}: cannot be read as a CSV file ({type(exc).__name__}); pass an evaluation CSV"
        ) from None
    reader = choose_reader(list(frame.columns), path)
    if frame.empty:
        raise ValueError(f"{path}: the file has no rows")
    text_rule = reader.text
    as_list = bool(text_rule.get("word_is_list", False))
    for i, value in enumerate(frame[text_rule["word"]]):
        if _many_words(value):
            raise ValueError(
                f"{path} row {i + 2}: holds several predicted words ({_clip(value)}), and its stored Perspective "
                "values are per sentence, not per scored text; pass the top-1 files (QueerBench's *_template_1.csv, "
                "QueerGen's evaluations/prompt_1/*.csv)"
            )
    words = [_words(v, as_list) for v in frame[text_rule["word"]]]
    if text_rule["rule"] == "fill":
        texts = [str(t).replace("[MASK]", w) for t, w in zip(frame[text_rule["template"]], words, strict=True)]
    else:
        parts = text_rule["parts"]
        texts = [" ".join(str(row[p]) for p in parts) for _, row in frame[parts].iterrows()]
    out = pd.DataFrame({"text": texts, "word": words})
    if reader.labels["form"] == "flags":
        column = reader.labels["column"]
        flags = [_flags(v, len(spec.attributes), f"{path} row {i + 2}") for i, v in enumerate(frame[column])]
        for j, attr in enumerate(spec.attributes):
            out[f"perspective_{attr}"] = [row[j] for row in flags]
    else:
        for attr in spec.attributes:
            values = pd.to_numeric(frame[reader.labels["columns"][attr]], errors="coerce")
            if values.isna().any():
                bad = int(values.isna().to_numpy().nonzero()[0][0])
                raise ValueError(
                    f"{path} row {bad + 2}: column {reader.labels['columns'][attr]!r} is not a number "
                    f"({frame[reader.labels['columns'][attr]].iloc[bad]!r})"
                )
            out[f"perspective_{attr}"] = values.to_numpy(dtype=float)
    return out, reader
