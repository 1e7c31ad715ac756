"""Calibrate the embedding threshold on the words actually seen in stories, with SADCAT membership as the label.

Why: calibrated on SADCAT's own stemmed keys only, all-MiniLM-L6-v2's threshold came out at 0.37 — low enough that
everyday story words ("eyes", "hair", "window", "said") pass for an axis, most of them for both. The words the
embedding step really sees are story content words, so the population here is those words (spaCy NOUN / ADJ /
VERB tokens, lower-cased surface forms, exactly what the analysis maps), each labelled with the axes SADCAT gives
it (lemma first, as :class:`~queerbench.scm.axes.AxisMapper` looks it up) or none. Ordinary words then count as
negatives and the chosen threshold is the one that best reproduces SADCAT on story text.

The shipped population ``data/story_words.json`` holds the distinct content words of the story replies of
``tests/data/scm_replies.jsonl`` and of a SmolLM2-135M-Instruct run; ``queerbench scm calibrate --stories …
--save-words …`` rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from queerbench.scm.analysis import content_words, parse_frame
from queerbench.scm.axes import AxisMapper, Embedder, axis_coverage, calibrate_threshold
from queerbench.scm.parse import parse_reply

__all__ = ["calibrate_on_story_words", "load_story_words", "save_story_words", "story_coverage", "story_texts"]

WORDS_FILE = "story_words.json"


def story_texts(sources: Iterable[str | Path]) -> list[str]:
    """The analysed text of every story reply that is not a refusal, from run folders (``responses.parquet``) and
    labelled JSONL files (records of task ``generation`` whose expected label is not a refusal)."""
    import json

    import pandas as pd

    out: list[str] = []
    for src in map(Path, sources):
        if src.is_dir():
            path = src / "responses.parquet"
            if not path.is_file():
                raise ValueError(f"{src}: no responses.parquet; pass the output folder of `queerbench scm run`")
            frame = pd.read_parquet(path)
            frame = parse_frame(frame[frame["task"] == "generation"].reset_index(drop=True))
            out += [
                t for t, r in zip(frame["analysed"], frame["refusal"], strict=True) if t and r is not None and not r
            ]
        elif src.suffix == ".jsonl" and src.is_file():
            for line in src.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line) if line.strip() else {}
                if rec.get("task") == "generation" and rec.get("expected", {}).get("refusal") is False:
                    text = parse_reply(rec["response"], "generation").text
                    out += [text] if text else []
        else:
            raise ValueError(f"{src}: expected a run folder or a labelled .jsonl file")
    return out


def save_story_words(path: str | Path, words: Sequence[str], source: str) -> Path:
    """Write the distinct ``words`` (sorted) as a ``story_words.json`` file saying where they came from."""
    from queerbench.io_utils import write_json

    return write_json(path, {"schema_version": 1, "source": source, "words": sorted(set(words))})


def load_story_words(path: str | Path | None = None) -> list[str]:
    """The calibration population: ``path`` or the shipped ``data/story_words.json``, schema-checked."""
    import json

    if path is None:
        raw = json.loads(resources.files("queerbench.scm").joinpath("data", WORDS_FILE).read_text(encoding="utf-8"))
    else:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    words = raw.get("words") if isinstance(raw, dict) and raw.get("schema_version") == 1 else None
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w == w.lower() for w in words):
        raise ValueError(
            f"{path or 'queerbench/scm/data/' + WORDS_FILE}: expected schema_version 1 and a non-empty list of "
            "lower-case 'words'; rebuild it with `queerbench scm calibrate --stories ... --save-words ...`"
        )
    return words


def _sadcat_labels(words: Sequence[str]) -> dict[str, set[str]]:
    mapper = AxisMapper(embedder=None)
    return {w: set(mapper.sadcat_axes(w) or ()) for w in dict.fromkeys(words)}


def calibrate_on_story_words(
    embedder: Embedder, words: Sequence[str], *, embedder_name: str = "", compare_at: Sequence[float] = (0.37,)
) -> dict[str, Any]:
    """:func:`~queerbench.scm.axes.calibrate_threshold` over story content words labelled by SADCAT membership."""
    res = calibrate_threshold(
        embedder, labelled=_sadcat_labels(words), embedder_name=embedder_name, compare_at=compare_at
    )
    res["metric"] = "macro F1 (Warmth, Competence) against SADCAT membership of story content words"
    return res


def story_coverage(texts: Sequence[str], mappers: dict[str, AxisMapper]) -> dict[str, dict[str, dict[str, float]]]:
    """Share of story content-word tokens mapped per axis (and by SADCAT vs embedding) under each mapper."""
    tokens = [w for ws in content_words(list(texts)) for w in ws]
    return {name: axis_coverage(tokens, m.map_words(tokens)) for name, m in mappers.items()}
