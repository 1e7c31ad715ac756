"""Calibrate the embedding threshold on the words actually seen in stories, with SADCAT membership as the label.

Why: calibrated on SADCAT's own stemmed keys only, all-MiniLM-L6-v2's threshold came out at 0.37 — low enough that
everyday story words ("eyes", "hair", "window", "said") pass for an axis, most of them for both. The words the
embedding step really sees are story content words, so the population here is those words (spaCy NOUN / ADJ /
VERB tokens, lower-cased surface forms, exactly what the analysis maps), each labelled with the axes SADCAT gives
it (lemma first, as :class:`~queerbench.tasks.scm.axes.AxisMapper` looks it up) or none. Ordinary words then count as
negatives and the chosen threshold is the one that best reproduces SADCAT on story text.

The shipped population ``data/story_words.json`` holds the distinct content words of the story replies of
``tests/data/scm_replies.jsonl`` that are not refusals (among them real replies of the embedded SmolLM2);
``queerbench scm calibrate --stories tests/data/scm_replies.jsonl --save-words …`` rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from queerbench.tasks.scm.analysis import content_words, parse_frame
from queerbench.tasks.scm.axes import AxisMapper, Embedder, axis_coverage, calibrate_threshold
from queerbench.tasks.scm.parse import parse_reply

__all__ = [
    "calibrate_on_story_words",
    "coverage_report",
    "load_story_words",
    "save_story_words",
    "story_texts",
]

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
            for n, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    rec = json.loads(line) if line.strip() else {}
                except ValueError as exc:
                    raise ValueError(
                        f"{src}:{n}: not JSON ({' '.join(str(exc).split())[:100]}); fix that line"
                    ) from None
                if not isinstance(rec, dict) or not isinstance(rec.get("expected", {}), dict):
                    raise ValueError(f"{src}:{n}: each line must hold a JSON object (a labelled reply); fix that line")
                if rec.get("task") == "generation" and rec.get("expected", {}).get("refusal") is False:
                    text = parse_reply(rec["response"], "generation").text
                    out += [text] if text else []
        else:
            raise ValueError(f"{src}: expected a run folder or a labelled .jsonl file")
    return out


def save_story_words(path: str | Path, words: Sequence[str], source: str) -> Path:
    """Write the distinct ``words`` (sorted) as a ``story_words.json`` file saying where they came from."""
    from queerbench.base.files import write_json

    return write_json(path, {"schema_version": 1, "source": source, "words": sorted(set(words))})


def load_story_words(path: str | Path | None = None) -> list[str]:
    """The calibration population: ``path`` or the shipped ``data/story_words.json``, schema-checked."""
    import json

    if path is None:
        raw = json.loads(
            resources.files("queerbench.tasks.scm").joinpath("data").joinpath(WORDS_FILE).read_text(encoding="utf-8")
        )
    else:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except ValueError:  # not JSON: the check below names the file and the fix
            raw = None
    words = raw.get("words") if isinstance(raw, dict) and raw.get("schema_version") == 1 else None
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w == w.lower() for w in words):
        raise ValueError(
            f"{path or 'queerbench/tasks/scm/data/' + WORDS_FILE}: expected schema_version 1 and a non-empty list of "
            "lower-case 'words'; rebuild it with `queerbench scm calibrate --stories ... --save-words ...`"
        )
    return words


def _sadcat_labels(words: Sequence[str]) -> dict[str, set[str]]:
    mapper = AxisMapper(embedder=None)
    return {w: set(mapper.sadcat_axes(w) or ()) for w in dict.fromkeys(words)}


def calibrate_on_story_words(
    embedder: Embedder, words: Sequence[str], *, embedder_name: str = "", compare_at: Sequence[float] = (0.37,)
) -> dict[str, Any]:
    """:func:`~queerbench.tasks.scm.axes.calibrate_threshold` over story content words labelled by SADCAT membership."""
    res = calibrate_threshold(
        embedder, labelled=_sadcat_labels(words), embedder_name=embedder_name, compare_at=compare_at
    )
    res["metric"] = "macro F1 (Warmth, Competence) against SADCAT membership of story content words"
    return res


def coverage_report(
    texts: Sequence[str], embed: Embedder, name: str, threshold: float
) -> tuple[dict[str, Any], list[str]]:
    """The share of story word tokens mapped per axis (by SADCAT / by the embedding) at ``threshold``, at the
    shipped default for ``name``, at 0.37 and at 0.55, and the most frequent words the embedding maps at 0.37 but
    not at ``threshold``; returned as data and as printable lines."""
    from collections import Counter

    from queerbench.tasks.scm.axes import default_threshold
    from queerbench.tasks.scm.data import load_embedder_thresholds

    tokens = [w for ws in content_words(list(texts)) for w in ws]
    out: dict[str, Any] = {"n_tokens": len(tokens), "n_texts": len(texts), "at": {}}
    lines, labels = [], {}
    shipped = default_threshold(name)[0] if name.rsplit("#", 1)[-1] in load_embedder_thresholds() else threshold
    for t in dict.fromkeys([threshold, shipped, 0.37, 0.55]):
        labels[t] = AxisMapper(embedder=embed, threshold=t, embedder_name=name).map_words(tokens)
        cov = out["at"][str(t)] = axis_coverage(tokens, labels[t])
        shares = "; ".join(
            f"{a} {cov[a]['total']:.1f}% (SADCAT {cov[a]['sadcat']:.1f}, embedding {cov[a]['embedding']:.1f})"
            for a in ("Warmth", "Competence")
        )
        both, neither = cov["both"]["total"], cov["neither"]["total"]
        lines.append(f"  at {t}: {shares}; both {both:.1f}%, neither {neither:.1f}% of {len(tokens)} word tokens")
    lost = Counter(
        w for w in tokens if labels[0.37][w].source == "embedding" and labels[threshold][w].source != "embedding"
    )
    out["embedding_only_at_0.37"] = lost.most_common(25)
    lines.append(
        f"  mapped by the embedding at 0.37 but not at {threshold}: " + ", ".join(w for w, _ in lost.most_common(25))
    )
    return out, lines
