"""The SCM task's own commands besides ``scm run`` and ``scm report`` (the shared probe runner's): ``scm calibrate``,
``scm parser-check`` and ``scm compare``. Their flags are declared in ``commands.json`` next to this module, which the
CLI builds (:mod:`queerbench.cli.declared`); each function takes the parsed flags as keywords and returns the exit
status.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["calibrate", "compare", "parser_check"]


def calibrate(
    *,
    embedder: str = "minilm",
    api_key_env: str = "OPENAI_API_KEY",
    population: str = "story-words",
    stories: list[str] | None = None,
    save_words: str | None = None,
    coverage: bool = False,
    max_words: int | None = None,
    out: str | None = None,
) -> int:
    """Pick the embedder's cosine threshold by agreement with SADCAT, print it (and write it to ``out``)."""
    from queerbench.base.files import write_json
    from queerbench.tasks.scm.axes import calibrate_threshold, make_embedder

    embed, name = make_embedder(embedder, api_key_env=api_key_env)
    if population == "sadcat":
        res = calibrate_threshold(embed, max_words=max_words, embedder_name=name, compare_at=(0.37,))
    else:
        from queerbench.tasks.scm.analysis import content_words
        from queerbench.tasks.scm.calibration import (
            calibrate_on_story_words,
            coverage_report,
            load_story_words,
            save_story_words,
            story_texts,
        )

        words = sorted({w for ws in content_words(story_texts(stories)) for w in ws}) if stories else load_story_words()
        if save_words:
            note = "Content words (spaCy NOUN/ADJ/VERB, lower-cased) of the non-refusal story replies in: " + ", ".join(
                Path(p).name for p in stories or ["data/story_words.json"]
            )
            save_story_words(save_words, words, note)
        res = calibrate_on_story_words(embed, words, embedder_name=name)
        if coverage and stories:
            res["coverage"], lines = coverage_report(story_texts(stories), embed, name, res["threshold"])
            for line in lines:
                print(line)
    at = res["at_paper_threshold"]
    print(
        f"{name}: threshold {res['threshold']:.2f} ({res['metric']} = {res['macro_f1']:.3f}; "
        + ", ".join(f"{a} F1 {v['f1']:.3f} (share passing {v['share_passing']:.3f})" for a, v in res["axes"].items())
        + f"); at 0.55: {at['macro_f1']:.3f}; "
        + "".join(f"at {t}: {v['macro_f1']:.3f}; " for t, v in res.get("at", {}).items())
        + f"{res['n_words']} words ({res['population']}), positives {res['n_positive']}"
    )
    if out:
        write_json(out, res)
    return 0


def parser_check(
    *,
    file: str | None = None,
    rule: str = "appendix_b",
    held_out: bool = False,
    json: str | None = None,
    min_agreement: float | None = None,
) -> int:
    """Print the reply parser's agreement with hand-labelled replies; exit 1 below ``min_agreement``."""
    from queerbench.base.files import write_json
    from queerbench.tasks.scm.parser_check import (
        DEFAULT_FILE,
        format_agreement,
        load_labelled,
        parser_agreement,
        subset_lines,
    )

    path = Path(file) if file else DEFAULT_FILE
    if not path.is_file():
        raise ValueError(
            f"labelled replies not found at {path}; pass --file PATH (a JSONL like tests/data/scm_replies.jsonl)"
        )
    records = [r for r in load_labelled(path) if r.get("held_out") or not held_out]
    print(f"{len(records)} labelled replies from {path}")
    results = {}
    for one in ("appendix_b", "patterns") if rule == "both" else (rule,):
        results[one] = parser_agreement(records, one)
        print(format_agreement(results[one], "agreement"))
        for line in subset_lines(records, one):
            print(line)
    if json:
        write_json(json, {"file": str(path), "n": len(records), "results": results})
    first = next(iter(results.values()))["overall"]["rate"]
    return 1 if min_agreement is not None and first < min_agreement else 0


def compare(*, runs: list[str], out: str, human: str | None = None, names: str | None = None) -> int:
    """Compare SCM runs of several models into ``out``."""
    from queerbench.tasks.scm.compare import compare_runs

    display = names.split(",") if names else None
    res = compare_runs(runs, out, human=human, names=display)
    print(f"wrote {out}/compare.json, compare.md and {len(res['figures'])} figure(s) for {len(res['models'])} runs")
    return 0
