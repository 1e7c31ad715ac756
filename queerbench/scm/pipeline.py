"""One SCM run end to end: pick prompts, collect replies (cached), score options, analyse, write the outputs."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.io_utils import atomic_path, write_json
from queerbench.llm import GenerationSettings, OpenAIChatRunner, ResponseCache, Runner, TransformersRunner, collect
from queerbench.scm.analysis import analyze, parse_frame
from queerbench.scm.data import load_terms
from queerbench.scm.dataset import RATING_OPTIONS, scm_splits, select_rows
from queerbench.scm.report import write_figures, write_report

__all__ = ["RATING_PREFIX", "SELECTION_PREFIX", "constrained_scores", "run_scm"]

RATING_PREFIX = "Rating:"
"""Answer prefix after which the digits 1–5 are scored (each as ``" " + digit``)."""
SELECTION_PREFIX = "Answer:"
"""Answer prefix after which each listed term is scored."""


def _softmax(logps: list[float]) -> list[float]:
    top = max(logps)
    exps = [math.exp(x - top) for x in logps]
    total = sum(exps)
    return [e / total for e in exps]


def constrained_scores(runner: TransformersRunner, rows: pd.DataFrame, batch_size: int = 8) -> pd.DataFrame:
    """Per rating prompt: P(digit) for 1–5 (renormalised) and its expectation; per selection prompt: P(term)."""
    out: list[dict[str, Any]] = []
    axis_of = {t.term: t.axis for t in load_terms()}
    for task, prefix in (("rating", RATING_PREFIX), ("selection", SELECTION_PREFIX)):
        sub = rows[rows["task"] == task]
        if sub.empty:
            continue
        logps = runner.score_options(sub["prompt"].tolist(), [list(o) for o in sub["options"]], prefix, batch_size)
        for rec, lp in zip(sub.to_dict("records"), logps, strict=True):
            probs = _softmax(lp)
            item = {
                "id": rec["id"],
                "task": task,
                "prompt_type": rec["prompt_type"],
                "group": rec["group"],
                "axis": rec["axis"],
                "options": list(rec["options"]),
                "probs": probs,
            }
            if task == "rating":
                item["expected_rating"] = sum(int(o) * p for o, p in zip(RATING_OPTIONS, probs, strict=True))
                item["p_warmth"] = item["p_competence"] = None
            else:
                item["expected_rating"] = None
                item["top_term"] = rec["options"][max(range(len(probs)), key=probs.__getitem__)]
                item["p_warmth"] = sum(p for o, p in zip(rec["options"], probs, strict=True) if axis_of[o] == "Warmth")
                item["p_competence"] = 1.0 - item["p_warmth"]
            out.append(item)
    return pd.DataFrame(out)


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def run_scm(
    out: str | Path,
    *,
    model: str | None = None,
    endpoint: str | None = None,
    settings: GenerationSettings | None = None,
    limit: int | None = None,
    device: str = "cpu",
    api_key_env: str = "OPENAI_API_KEY",
    requests_per_minute: float = 60.0,
    constrained: bool = True,
    runner: Runner | None = None,
    mapper_factory: Callable[[], Any] | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
) -> dict[str, Any]:
    """Run the SCM probes and write ``responses.parquet``, ``scores.parquet``, ``scm.json``, ``report.md``, PNGs.

    With neither ``model`` nor ``endpoint`` the embedded SmolLM2-135M-Instruct is used. Replies live in
    ``out/cache.sqlite`` as they arrive, so a killed or failed run resumes on rerun with no repeated calls.
    """
    settings = settings or GenerationSettings()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file; give a folder")
    splits = scm_splits()
    rows = pd.concat(
        [select_rows(splits["survey"], limit), select_rows(splits["generation"], limit)], ignore_index=True
    )
    if runner is None:
        if endpoint:
            runner = OpenAIChatRunner(
                endpoint, model or "", api_key_env=api_key_env, requests_per_minute=requests_per_minute
            )
        else:
            log(f"loading {model or 'the embedded SmolLM2-135M-Instruct'} …")
            runner = TransformersRunner(model, device=device)
    cache = ResponseCache(out / "cache.sqlite")
    try:
        log(f"collecting {len(rows) * settings.samples} replies ({len(rows)} prompts × {settings.samples}) …")
        frame = collect(runner, rows, settings, cache)
    finally:
        cache.close()
    parsed = parse_frame(frame)
    scores = None
    if constrained and isinstance(runner, TransformersRunner):
        fp = json.dumps(runner.fingerprint(), sort_keys=True)
        spath = out / "scores.parquet"
        old = pd.read_parquet(spath) if spath.exists() else None
        if (
            old is not None
            and set(old["id"]) == set(rows[rows["task"].isin(["rating", "selection"])]["id"])
            and (old["fingerprint"] == fp).all()
        ):
            scores = old  # a rerun makes no new model calls
        else:
            log("constrained scoring of rating and selection prompts …")
            scores = constrained_scores(runner, rows, settings.batch_size).assign(fingerprint=fp)
            _write_parquet(scores, spath)
    res = analyze(parsed, scores=scores, mapper_factory=mapper_factory or _default_mapper)
    fmt = sorted(set(parsed["prompt_format"]) - {""})
    meta = {
        "model": runner.name,
        "fingerprint": runner.fingerprint(),
        "settings": settings.decoding()
        | {"samples": settings.samples, "batch_size": settings.batch_size, "limit": limit},
        "prompt_format": ",".join(fmt) or "unknown",
        "cached": int(parsed["cached"].sum()),
        "calls": int((~parsed["cached"]).sum()),
        "constrained": scores is not None,
    }
    res["run"] = meta
    store = parsed.assign(keywords=parsed["keywords"].map(list), options=parsed["options"].map(list))
    _write_parquet(store, out / "responses.parquet")
    write_json(out / "scm.json", res)
    figures = write_figures(res, out)
    write_report(res, meta, figures, out)
    return res


def _default_mapper() -> Any:
    from queerbench.scm.axes import AxisMapper

    return AxisMapper()
