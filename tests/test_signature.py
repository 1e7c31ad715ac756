"""A run's signature: one short, stable string of what produced a score, the one source of the cache key, the default
folder name and the differences ``compare`` warns about; settings compared by what they mean."""

from __future__ import annotations

from dataclasses import replace

import pytest

from queerbench import __version__
from queerbench.results.compare import compare_warnings
from queerbench.run.options import RunOptions
from queerbench.run.signature import Signature, cache_key, default_out_dir, fingerprint_label, parse, signature_of

SCORES = {
    "scorers": {
        "toxicity": {"name": "embedded", "weights_sha256": "03ed4c3f52be90", "input": "sentence"},
        "hurtlex": {"version": "HurtLex EN 1.2", "level": "conservative"},
        "afinn": "afinn 0.1 (AFINN-en-165)",
    },
    "function_words": {"excluded": False},
    "uncertainty": {"n_bootstrap": 1000, "n_permutations": 1000, "seed": 0},
}


def test_the_string_names_every_setting_in_a_stable_order() -> None:
    options = RunOptions(model="org/m", config="paper", top_k=3, limit=4, dtype="float16")
    sig = signature_of(options, n_templates=106, fingerprint={"kind": "hub", "commit_hash": "c0ffee1234567890"})
    full = sig.with_scores(SCORES, {"options": {"toxicity_input": "full"}})
    assert str(full) == (
        "task:paper|method:mlm|model:org/m|fp:c0ffee123456|k:3|limit:4|dtype:float16|tox:embedded@03ed4c3f|"
        f"input:full|hurtlex:1.2/conservative|afinn:0.1|fw:included|ci:1000/1000/0|qb:{__version__}"
    )
    assert str(full) == str(signature_of(options, n_templates=106, fingerprint={"kind": "hub", "commit_hash": "c0ffee1234567890"}).with_scores(SCORES, {"options": {"toxicity_input": "full"}}))  # fmt: skip
    fields = parse(str(full))
    assert fields["task"] == "paper" and fields["limit"] == "4" and fields["tox"] == "embedded@03ed4c3f"


def test_a_generative_signature_carries_the_methods_settings_and_escapes_its_separator() -> None:
    served = RunOptions(model="my|model", method="instructed", endpoint="http://h/v1", seed=4)
    text = str(signature_of(served, n_templates=103))
    assert "|endpoint:http://h/v1|max_new_tokens:32|prompt_id:queergen-2|seed:4|" in text  # defaults written out
    assert "model:my%7Cmodel" in text and parse(text)["model"] == "my|model"


@pytest.mark.parametrize(
    ("fingerprint", "label"),
    [
        ({"kind": "local", "sha256": "ab" * 32}, "ab" * 6),
        ({"kind": "embedded", "sha256": "cd" * 32}, "cd" * 6),
        ({"kind": "hub", "commit_hash": "c0ffee"}, "c0ffee"),
        ({"kind": "endpoint", "base_url": "http://h/v1", "model": "m"}, "http://h/v1#m"),
        ({"kind": "id", "model": "org/m", "sha256": None}, None),
        (None, None),
    ],
)
def test_the_fingerprint_label(fingerprint, label) -> None:
    assert fingerprint_label(fingerprint) == label


def test_settings_are_compared_by_what_they_mean() -> None:
    """A default written out is the default; a --limit covering every template is no limit (folder, key, signature)."""
    plain = RunOptions(model="org/m", method="instructed")
    typed = RunOptions(
        model="org/m", method="instructed", method_settings={"prompt_id": "queergen-2", "max_new_tokens": 32}
    )
    assert cache_key(plain, n_templates=103) == cache_key(typed, n_templates=103)
    assert cache_key(replace(plain, limit=103), n_templates=103) == cache_key(plain, n_templates=103)
    assert cache_key(replace(plain, limit=99999), n_templates=103)["limit"] is None
    assert cache_key(replace(plain, limit=102), n_templates=103)["limit"] == 102
    assert default_out_dir(replace(plain, limit=500), n_templates=103) == default_out_dir(plain, n_templates=103)


def test_the_key_and_the_folder_come_from_the_signature() -> None:
    options = RunOptions(model="org/m", method="scored", limit=2, revision="v1", dtype="bfloat16")
    sig = signature_of(options, n_templates=103)
    assert cache_key(options, n_templates=103) == sig.key()
    assert str(default_out_dir(options, n_templates=103)) == f"runs/{sig.folder_name()}"
    assert sig.folder_name() == "org_m-default-k5-scored-limit2-revv1-bfloat16"
    assert Signature.from_key(sig.key(), n_templates=103).key() == sig.key()


def test_differences_name_the_fields() -> None:
    a = signature_of(RunOptions(model="org/m"), n_templates=103)
    b = signature_of(RunOptions(model="org/m", top_k=1, limit=5), n_templates=103)
    assert a.differences(b) == ["k", "limit"]
    assert a.differences(a) == []


def test_compare_reads_the_runs_signatures() -> None:
    """``compare`` takes what identifies a run from its signature; runs of earlier versions fall back to their run
    record."""

    def run(options: RunOptions, n: int) -> dict:
        sig = signature_of(options, n_templates=103).with_scores(SCORES)
        scores = {**SCORES, "config": options.config, "k": options.top_k, "n": {"queer": n}, "signature": str(sig)}
        return {"scores": scores, "meta": {"model": options.model, "n_sentences": n}, "dir": "x"}

    runs = [run(RunOptions(model="org/m", limit=2), 154), run(RunOptions(model="org/m", limit=3), 231)]
    warnings = compare_warnings(runs)
    assert any("cover different templates" in w and "--limit 2" in w and "--limit 3" in w for w in warnings)
    same = [run(RunOptions(model="org/m", limit=103), 7931), run(RunOptions(model="org/m"), 7931)]
    assert not any("different templates" in w for w in compare_warnings(same))  # --limit 103 is every template


def test_each_scorer_signs_its_own_part_of_the_signature_in_order() -> None:
    """sacrebleu's way: every scorer (toxicity, HurtLex, AFINN), the function-word rule and the uncertainty each say
    what of theirs a signature records; a run's scoring part is theirs, in that order."""
    from queerbench.run.signature import _scorer_part
    from queerbench.scoring import afinn, function_words, hurtlex, toxicity_base, uncertainty

    scorers = {
        "toxicity": {"name": "surrogate", "weights_sha256": "ab" * 32, "input": "full"},
        "hurtlex": {"version": "HurtLex EN 1.2", "level": "inclusive"},
        "afinn": "afinn 0.1 (AFINN-en-165)",
    }
    assert toxicity_base.signature_fields(scorers, None) == (("tox", "surrogate@abababab"), ("input", "full"))
    assert toxicity_base.signature_fields(scorers, "neutral")[1] == ("input", "neutral")  # the run's own setting
    stored = {"perspective": {"name": "precomputed", "version": "v1", "input": "as stored"}}  # QueerGen's name
    assert toxicity_base.signature_fields(stored, None) == (("tox", "precomputed@v1"), ("input", "none"))
    assert toxicity_base.signature_fields({}, None) == (("tox", "none"), ("input", "none"))
    assert hurtlex.signature_field(scorers) == ("hurtlex", "1.2/inclusive")
    assert afinn.signature_field(scorers) == ("afinn", "0.1") and afinn.signature_field({}) == ("afinn", "none")
    assert function_words.signature_field({"function_words": {"excluded": True}}) == ("fw", "excluded")
    assert function_words.signature_field({}) == ("fw", "included")
    unc = {"uncertainty": {"n_bootstrap": 200, "n_permutations": 100, "seed": 3}}
    assert uncertainty.signature_field(unc) == ("ci", "200/100/3") and uncertainty.signature_field({}) == ("ci", "none")
    document = {"scorers": scorers, "function_words": {"excluded": True}, **unc}
    assert _scorer_part(document, {"options": {"toxicity_input": "frame"}}) == (
        ("tox", "surrogate@abababab"),
        ("input", "frame"),
        ("hurtlex", "1.2/inclusive"),
        ("afinn", "0.1"),
        ("fw", "excluded"),
        ("ci", "200/100/3"),
    )
