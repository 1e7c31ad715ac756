"""``--toxicity surrogate``: fitted on the papers' pinned files on first use, deterministic, cached under a fingerprint,
one fit per protocol, leave-one-model-out fits that beat the embedded stand-in on a held-out model, a signature that
names the fit, and one-line errors.

The fits here are of the subject-blind protocol (QueerGen's 14 files, about 25 s for its features on two cores);
the QueerBench protocol's fit reads 8 larger files (a few minutes) and runs the same code, so it is left to
``benchmarks/surrogate_lomo.py`` and ``leaderboard build``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from queerbench.base.sources import fetch
from queerbench.cli import main
from queerbench.scoring import surrogate
from queerbench.scoring.agreement import agreement_stats, distinct_texts
from queerbench.scoring.published_files import published_files
from queerbench.scoring.toxicity import get_toxicity_scorer


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of this module's own, so that the first fit computes its features here."""
    root = tmp_path_factory.mktemp("surrogate-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUEERBENCH_CACHE", str(root))
        first = surrogate.fit_surrogate("blind", progress=False)
        assert first.n_pairs > 7000 and first.held_out == ()
    return root


@pytest.fixture
def in_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QUEERBENCH_CACHE", str(cache))
    return cache


def test_the_settings_are_checked_data():
    good = json.loads(json.dumps(surrogate.surrogate_spec().raw))
    assert good["head"]["C"] == surrogate._check(good).C
    for key, value, words in (
        ("head", {**good["head"], "kind": "mlp"}, "head.kind"),
        ("features", {**good["features"], "frame": "The person is."}, "frame"),
        ("attributes", ["TOXICITY", "RUDENESS"], "attributes"),
        ("labels", {}, "missing or malformed"),
        ("features", {**good["features"], "embed": ["text", "word"]}, "features.embed must be"),
        ("features", {**good["features"], "context_mask": " "}, "context_mask"),
    ):
        with pytest.raises(ValueError, match=words) as info:
            surrogate._check({**good, key: value})
        assert str(info.value).startswith("queerbench/data/surrogate.json") and "\n" not in str(info.value)


def test_the_context_is_the_text_with_its_last_occurrence_of_the_word_masked():
    assert surrogate.context_of("The gay person is gay.", "gay", "[MASK]") == "The gay person is [MASK]."
    assert surrogate.context_of("Gay is what they are", "gay", "<w>") == "<w> is what they are"  # any case
    assert surrogate.context_of("The person is kind.", "cruel", "[MASK]") == "The person is kind."
    assert surrogate.context_of("The person is kind.", "", "[MASK]") == "The person is kind."


def test_features_reuse_the_fits_embeddings_and_equal_fresh_ones(in_cache: Path, monkeypatch: pytest.MonkeyPatch):
    """A maker seeded with a fit's tables embeds no context or word the fit embedded, and gives the features a fresh
    maker computes (up to float rounding)."""
    import queerbench.models.embeddings as embeddings

    fit = surrogate.fit_surrogate("blind", progress=False)
    tables = fit.feature_tables()
    assert tables is not None and len(tables["contexts"]) >= 50 and len(tables["words"]) > 1000
    pairs, _ = surrogate.training_pairs(published_files().protocols["blind"])
    texts, words = pairs["text"].tolist()[::97], pairs["word"].tolist()[::97]
    fresh = surrogate.surrogate_features(texts, words)
    seeded = surrogate.FeatureMaker()
    seeded.add_tables(tables)
    calls: list[int] = []
    real = embeddings.minilm_embed
    monkeypatch.setattr(embeddings, "minilm_embed", lambda chunk, **kw: calls.append(len(chunk)) or real(chunk, **kw))
    reused = seeded.features(texts, words)
    assert calls == [] and reused.shape == fresh.shape == (len(texts), fit.coef.shape[1])
    np.testing.assert_allclose(reused, fresh, atol=1e-5)
    seeded.features(["The person is a brand-new word."], ["a brand-new word"])
    assert calls == [1, 1]  # a new context and a new word: each embedded once


def test_a_fit_is_cached_deterministic_and_named_by_its_weights(in_cache: Path):
    fit = surrogate.fit_surrogate("blind", progress=False)
    folder = next((in_cache / "surrogate").glob("blind-*"))
    assert folder.name == f"blind-{fit.fingerprint[:16]}"
    assert {p.name for p in folder.glob("*.npz")} >= {"features.npz", "weights-all.npz"}
    (folder / "weights-all.npz").unlink()  # refit from the cached features: the same weights
    again = surrogate.fit_surrogate("blind", progress=False)
    assert again.weights_sha256 == fit.weights_sha256 and np.array_equal(again.coef, fit.coef)
    # a corrupted or truncated cache entry is computed again, never a traceback
    (folder / "weights-all.npz").write_bytes(b"PK\x03\x04 not a whole file")
    assert surrogate.fit_surrogate("blind", progress=False).weights_sha256 == fit.weights_sha256
    np.savez(folder / "weights-all.npz", coef=fit.coef)  # an entry that lacks what a fit holds
    assert surrogate.fit_surrogate("blind", progress=False).weights_sha256 == fit.weights_sha256
    # MiniLM of context and word, the classifier's pooled states (2 x 50), hidden layer (50) and logits (text, frame)
    assert fit.coef.shape == (5, 384 * 2 + 100 + 50 + 6 * 2)


def test_a_held_out_model_is_left_out_by_either_of_its_names(in_cache: Path):
    full = surrogate.fit_surrogate("blind", progress=False)
    by_label = surrogate.fit_surrogate("blind", held_out="BERT Large", progress=False)
    by_file = surrogate.fit_surrogate("blind", held_out="BERT_large", progress=False)
    assert by_label.held_out == by_file.held_out == ("BERT_large",)
    assert by_label.weights_sha256 == by_file.weights_sha256 != full.weights_sha256
    assert by_label.n_pairs < full.n_pairs
    # a model no published file holds (a user's) is scored by the fit on every file
    assert surrogate.fit_surrogate("blind", held_out="my/new-model", progress=False).weights_sha256 == (
        full.weights_sha256
    )


def test_a_held_out_fit_agrees_with_perspective_better_than_the_embedded_scorer(in_cache: Path):
    protocol = published_files().protocols["blind"]
    source = dict((m, s) for s, m in protocol.files)["BERT_large"]
    frame, _ = distinct_texts(fetch(source))
    ours = get_toxicity_scorer("surrogate", text_form="neutral", held_out_model="BERT Large", progress=False)
    probs = ours.score(frame["text"].tolist(), words=frame["word"].tolist())
    embedded = get_toxicity_scorer("embedded").score(frame["text"].tolist())
    for attr in ("TOXICITY", "IDENTITY_ATTACK", "INSULT"):
        truth = frame[f"perspective_{attr}"].to_numpy(float) > 0.5
        mine = agreement_stats(truth, probs[attr].to_numpy(float))["kappa"]
        theirs = agreement_stats(truth, embedded[attr].to_numpy(float))["kappa"]
        assert mine > 0.6 and mine > theirs + 0.05, (attr, mine, theirs)


def test_the_scorer_reads_each_text_with_its_word(in_cache: Path):
    scorer = get_toxicity_scorer("surrogate", text_form="frame", progress=False)
    assert scorer.describe()["protocol"] == "blind"
    with pytest.raises(ValueError, match=r"^the surrogate toxicity scorer reads each text with the word"):
        scorer.score(["The person is kind."])
    probs = scorer.score(["The person is kind.", "The person is a whore."], words=["kind", "a whore"])
    assert probs["INSULT"].iloc[1] > 0.5 > probs["INSULT"].iloc[0]
    # the same text with another word is another input (the cache key holds both)
    other = scorer.score(["The person is kind."], words=["a whore"])
    assert other["INSULT"].iloc[0] != pytest.approx(probs["INSULT"].iloc[0])


def test_score_of_a_published_file_uses_the_fit_that_never_saw_it_and_names_it(
    in_cache: Path, capsys: pytest.CaptureFixture
):
    source = dict((m, s) for s, m in published_files().protocols["blind"].files)["gemma3"]
    assert main(["score", str(fetch(source)), "--config", "queergen", "--toxicity", "surrogate"]) == 0
    out = capsys.readouterr().out
    # a published model's own file is scored by the fit that left that model out, as its reference rows are
    fit = surrogate.fit_surrogate("blind", held_out="Gemma 3 4B", progress=False)
    assert fit.held_out == ("gemma3",)
    assert re.search(rf"surrogate@{fit.fingerprint[:8]}/seed0/{fit.weights_sha256[:8]}", out), out[-2000:]
    # a copy that is not the pinned file (one byte more) is a new model's file: the fit on every file scores it
    copy = in_cache / "my-model.csv"
    copy.write_bytes(fetch(source).read_bytes() + b"\n")
    assert main(["score", str(copy), "--config", "queergen", "--toxicity", "surrogate"]) == 0
    full = surrogate.fit_surrogate("blind", progress=False)
    assert f"surrogate@{full.fingerprint[:8]}/seed0/{full.weights_sha256[:8]}" in capsys.readouterr().out


def test_missing_libraries_are_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sklearn" else real(name, *a))
    with pytest.raises(ValueError, match=r"needs sklearn: pip install 'queerbench\[surrogate\]'") as info:
        get_toxicity_scorer("surrogate", text_form="full")
    assert "\n" not in str(info.value)


def test_the_cli_accepts_surrogate_wherever_a_scorer_is_named(capsys: pytest.CaptureFixture):
    for command in (["run", "--help"], ["score", "--help"], ["eval", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
        assert "surrogate" in capsys.readouterr().out, command
