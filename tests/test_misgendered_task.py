"""MISGENDERED as a ``requests`` task: its pinned files, the instances as upstream's evaluation code builds them (counts,
quirks, the capitalisation rule against a copy of upstream's function), the requests per method, per-item scoring
and how a chat reply is read. No model runs here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from queerbench.base.sources import fetch, load_manifest, sha256_file
from queerbench.models.requests import (
    FillMask,
    FillMaskResult,
    Generate,
    GenerateResult,
    Loglikelihood,
    LoglikelihoodResult,
)
from queerbench.tasks import get_task, load_specs
from queerbench.tasks.misgendered import instances
from queerbench.tasks.misgendered.replies import load_prompts, parse_reply
from queerbench.tasks.misgendered.task import MisgenderedTask, choose

PACKAGE = Path(instances.__file__).parent
SETS = ("he", "she", "they", "thon", "e", "ae", "co", "vi", "xe", "ey", "ze")


@pytest.fixture(scope="module")
def data() -> instances.Data:
    return instances.load_data()


@pytest.fixture(scope="module")
def task() -> MisgenderedTask:
    found = get_task("misgendered")
    assert isinstance(found, MisgenderedTask)
    return found


@pytest.fixture(scope="module")
def items(task: MisgenderedTask) -> pd.DataFrame:
    return task.items()


# ------------------------------------------------------------------------------------------- upstream's code, copied
# zero-shot/gpt2.py at 383bb8c (tamannahossainkay/misgendered-backend), verbatim but for the codebook argument.
def upstream_declare_pronouns(codebook: pd.DataFrame, gender: str, sentence: str) -> str:
    row = codebook[codebook["gender"] == gender]
    row = row.reset_index()
    sentence = re.sub("{nom}", row["nom"][0], sentence)
    sentence = re.sub("{acc}", row["acc"][0], sentence)
    sentence = re.sub("{pos_dep}", row["pos_dep"][0], sentence)
    sentence = re.sub("{pos_ind}", row["pos_ind"][0], sentence)
    sentence = re.sub("{ref}", row["ref"][0], sentence)
    return sentence


def upstream_label_to_cap(sentence):  # verbatim, untyped
    mask_start = sentence.find("{")
    if sentence[mask_start - 2] == ".":
        return True
    else:
        False  # noqa: B018 (upstream's missing return, kept)


def upstream_get_eval_instance(codebook: pd.DataFrame, sent_piece: str, gender: str, form: str):
    sentence = upstream_declare_pronouns(codebook, gender, sent_piece)
    row = codebook[codebook["gender"] == gender].reset_index()
    label = row[form][0]
    constraints = codebook[form].tolist()
    if upstream_label_to_cap(sentence):
        label = label.capitalize()
        constraints = [c.capitalize() for c in constraints]
    return sentence, label, constraints


# ------------------------------------------------------------------------------------------------------- the spec
def test_the_task_data_loads_and_declares_a_request_task() -> None:
    specs = load_specs(PACKAGE / "tasks.json")
    assert list(specs) == ["misgendered", "misgendered-full"]
    for spec in specs.values():
        assert spec.kind == "requests" and spec.benchmark == "MISGENDERED"
        assert spec.requests == {"mlm": "fill_mask", "scored": "loglikelihood", "instructed": "generate"}
        assert [(m.name, m.column, m.higher_is_better) for m in spec.metrics] == [("accuracy", "correct", True)]
        assert spec.groups is not None and spec.groups.order == ("binary", "neutral", "neo")
        assert (spec.groups.column, spec.groups.cluster, spec.groups.breakdowns) == (
            "group",
            "template_id",
            ("declared", "form"),
        )
    assert specs["misgendered"].build_by_default and not specs["misgendered-full"].build_by_default
    assert (specs["misgendered"].lmeval_task, specs["misgendered-full"].lmeval_task) == ("misgendered", None)


def test_the_registry_finds_both_tasks() -> None:
    assert get_task("misgendered").benchmark == get_task("misgendered-full").benchmark == "MISGENDERED"
    assert get_task("misgendered").runs_requests and not get_task("misgendered").runs_blanks
    assert get_task("misgendered").in_suite and not get_task("misgendered-full").in_suite  # eval runs the quick set
    assert get_task("misgendered").leaderboard_metrics() == {"Accuracy": "accuracy"}
    card = get_task("misgendered").dataset_card_extra()
    assert "CC BY 4.0" in card and "Hossain" in card and "Unsuitable" in card


def test_the_manifest_pins_every_file_used_at_one_commit() -> None:
    sources = load_manifest(PACKAGE / "sources.json")
    assert len(sources) == 17  # pronouns.csv, 13 template files, 3 name lists
    for s in sources.values():
        assert s.relpath is not None and s.relpath.startswith("upstream/misgendered/")
        assert s.url == (
            "https://raw.githubusercontent.com/tamannahossainkay/misgendered-backend/"
            "383bb8c301371b21a4ec73d5310d3d2e9826636b/" + s.relpath.removeprefix("upstream/misgendered/")
        )
        assert s.license.startswith("CC BY 4.0") and "Hossain" in s.citation
    for s in sources.values():
        assert sha256_file(fetch(s)) == s.sha256


# ------------------------------------------------------------------------------------------------------ counts
def test_the_published_counts_and_the_full_arithmetic(data: instances.Data) -> None:
    assert tuple(data.pronouns["gender"]) == SETS
    assert {g: len(n) for g, n in data.names.items()} == {"unisex": 300, "female": 100, "male": 100}
    assert len(instances.DECLARATIONS) == 13 and all(len(t) == 50 for t in data.templates.values())
    every = instances.pick_names(data, None)
    assert instances.count(data, list(instances.DECLARATIONS), every) == 13 * 50 * 11 * 500 == 3_575_000
    declaring = [d for d in instances.DECLARATIONS if d != "none"]
    assert instances.count(data, declaring, every) == 3_300_000  # the data card's "3.3 million"
    assert get_task("misgendered-full").n_items() == 3_575_000


def test_a_full_declaration_for_some_names_builds_as_counted(data: instances.Data) -> None:
    names = {"unisex": data.names["unisex"][:2], "male": data.names["male"][-1:]}
    frame = instances.build(data, ["parenth_41", "none"], names)
    assert len(frame) == instances.count(data, ["parenth_41", "none"], names) == 2 * 50 * 11 * 3
    assert frame["id"].is_unique


def test_the_default_selection(task: MisgenderedTask, items: pd.DataFrame) -> None:
    assert len(items) == task.n_items() == 50 * 11 * 1 == 550
    assert set(items["declaration"]) == {"explicit_5"}
    assert items.drop_duplicates("name_group")[["name_group", "name"]].values.tolist() == [["unisex", "Kamoni"]]
    assert items.groupby("group")["declared"].nunique().to_dict() == {"binary": 2, "neo": 8, "neutral": 1}
    assert items.groupby("form")["template_id"].nunique().to_dict() == dict.fromkeys(instances.FORMS, 10)
    assert items["id"].is_unique and set(items["split"]) == {"test"}
    assert sorted(items["template_id"].unique()) == list(range(50)) and task.n_templates() == 50
    needed = {"id", "template_id", "form", "declaration", "declared", "group", "name", "name_group"}
    assert needed | {"masked_sentence", "label", "candidates", "split"} <= set(items.columns)
    assert all(s.count("[MASK]") == 1 and "{" not in s for s in items["masked_sentence"])


def test_limit_keeps_the_first_templates(task: MisgenderedTask, items: pd.DataFrame) -> None:
    first = task.first_templates(items, 3)
    assert sorted(first["template_id"].unique()) == [0, 1, 2] and len(first) == 3 * 11
    assert set(first["form"]) == {"nom"}
    assert len(task.first_templates(items, None)) == len(items)


# ------------------------------------------------------------------------------------------------------ quirks
def test_the_explicit_slash_is_published_and_kept(data: instances.Data, items: pd.DataFrame) -> None:
    for declaration in instances.DECLARATIONS:
        templates = data.templates[declaration]["template"]
        explicit = declaration.startswith("explicit")
        assert all(t.startswith("{name}/'s pronouns are ") for t in templates) == explicit
    assert items.iloc[0]["masked_sentence"].startswith("Kamoni/'s pronouns are he/him/his/his/himself. Kamoni was")
    fixed = instances.build(data, ["explicit_2"], {"male": ("James",)}, fix_slash=True)
    assert fixed.iloc[0]["masked_sentence"].startswith("James's pronouns are he/him. James was very emotional.")


def test_template_ids_are_row_positions_even_where_a_file_lost_them() -> None:
    folder = Path(fetch(instances.manifest()["misgendered_templates_explicit_template_42"])).parent
    raw = pd.read_csv(folder / "explicit_template_42.csv")
    assert raw["template_id"].dtype == float and raw["template_id"].isna().sum() == 3
    assert str(raw["template_id"].iloc[0]) == "0.0" and list(raw.index[raw["template_id"].isna()]) == [8, 32, 35]
    for name in ("explicit_template_2.csv", "parenth_template_5.csv", "templates.csv"):
        assert list(pd.read_csv(folder / name)["template_id"]) == list(range(50))


def test_the_no_declaration_file_declares_three_templates(data: instances.Data) -> None:
    none = data.templates["none"]["template"]
    assert [i for i, t in enumerate(none) if "{nom}" in t] == [8, 32, 35]


def test_duplicate_candidates_are_kept_and_either_is_right(task: MisgenderedTask, items: pd.DataFrame) -> None:
    acc = items[(items["form"] == "acc") & (items["declared"] == "ey")].iloc[0].to_dict()
    assert list(acc["candidates"]).count("em") == 2 and acc["label"] == "em"
    scores = [0.0] * 11
    scores[4] = 1.0  # e's "em" wins: the same word as ey's label
    out = task.score_item(acc, [FillMaskResult(tuple(scores))], "mlm")
    assert out["choice"] == "em" and out["correct"] == 1


def test_upstream_label_to_cap_returns_none_not_false() -> None:
    assert upstream_label_to_cap("Kamoni and I had an argument. I differ from {mask_token}.") is None
    assert instances.follows_full_stop("Kamoni and I had an argument. I differ from {mask_token}.") is False


def _check_against_upstream(data: instances.Data, frame: pd.DataFrame) -> set[int]:
    """Assert each row equals upstream's ``get_eval_instance``; the templates whose slot is capitalised."""
    capitalised = set()
    for row in frame.itertuples(index=False):
        template = data.templates[row.declaration]["template"].iloc[row.template_id]
        sentence, label, constraints = upstream_get_eval_instance(
            data.pronouns, template.replace("{name}", row.name), row.declared, row.form
        )
        assert row.masked_sentence == sentence.replace("{mask_token}", "[MASK]")
        assert (row.label, list(row.candidates)) == (label, constraints)
        assert instances.follows_full_stop(sentence) == bool(upstream_label_to_cap(sentence))
        if label[0].isupper():
            capitalised.add(row.template_id)
    return capitalised


def test_every_template_equals_upstreams_construction(data: instances.Data) -> None:
    """Every template of every declaration file, every set, with a name filled in as upstream's eval files have it:
    the sentence, label and candidates (capitalisation included) equal upstream's ``get_eval_instance``."""
    frame = instances.build(data, list(instances.DECLARATIONS), {"unisex": data.names["unisex"][:1]})
    assert len(frame) == 13 * 50 * 11
    assert _check_against_upstream(data, frame) == {0, 1, 2, 3, 4, 5, 6, 7, 8, 22, 23, 36}


def test_the_default_items_equal_upstreams_construction(data: instances.Data, items: pd.DataFrame) -> None:
    assert len(_check_against_upstream(data, items)) == 12


# ---------------------------------------------------------------------------------------------------- requests
def test_requests_per_method(task: MisgenderedTask, items: pd.DataFrame) -> None:
    item = items.iloc[40].to_dict()
    candidates = tuple(item["candidates"])
    assert task.requests(item, "mlm") == [FillMask(item["masked_sentence"], candidates)]
    scored = task.requests(item, "scored")
    assert len(scored) == 11 and all(isinstance(r, Loglikelihood) and r.context == "" for r in scored)
    assert [r.continuation for r in scored] == [item["masked_sentence"].replace("[MASK]", c) for c in candidates]
    (gen,) = task.requests(item, "instructed")
    assert isinstance(gen, Generate) and "[MASK]" not in gen.prompt and "___" in gen.prompt
    assert "Options: " + ", ".join(dict.fromkeys(candidates)) in gen.prompt
    with pytest.raises(ValueError, match="does not apply"):
        task.requests(item, "probe")


def test_scored_picks_the_lowest_mean_loss_not_the_lowest_sum(task: MisgenderedTask, items: pd.DataFrame) -> None:
    item = items.iloc[0].to_dict()
    losses = [2.0, 1.5, 3.0, 1.2, 4.0, 1.2, 5.0, 5.0, 5.0, 5.0, 5.0]  # mean token losses, a tie at index 3 and 5
    lengths = [10, 4, 10, 12, 8, 12, 9, 9, 9, 9, 9]  # the short "She" has the highest sum
    results = [LoglikelihoodResult(logprob=-loss * n, n_tokens=n) for loss, n in zip(losses, lengths, strict=True)]
    out = task.score_item(item, results, "scored")
    assert out["choice"] == item["candidates"][losses.index(min(losses))] == "Thon"  # first of the tie
    assert out["scores"] == pytest.approx([-x for x in losses]) and out["parsed"] is True and out["reply"] == ""
    assert out["correct"] == 0
    sums = [r.logprob for r in results]
    assert item["candidates"][sums.index(max(sums))] != out["choice"]  # the sum would pick another


def test_mlm_and_correctness(task: MisgenderedTask, items: pd.DataFrame) -> None:
    item = items[items["declared"] == "xe"].iloc[0].to_dict()
    scores = [-5.0] * 11
    scores[8] = -0.5
    out = task.score_item(item, [FillMaskResult(tuple(scores))], "mlm")
    assert (out["choice"], out["correct"], out["parsed"]) == ("Xe", 1, True) and out["scores"] == scores
    with pytest.raises(ValueError, match="one fill-mask result"):
        task.score_item(item, [], "mlm")
    with pytest.raises(ValueError, match="11 log-likelihood results"):
        task.score_item(item, [LoglikelihoodResult(-1.0, 3)], "scored")
    assert choose(["a", "b", "c"], [1.0, 3.0, 3.0]) == "b"


def test_instructed_scoring(task: MisgenderedTask, items: pd.DataFrame) -> None:
    item = items[(items["declared"] == "ze") & (items["form"] == "pos_dep")].iloc[0].to_dict()
    assert item["label"] == "zir"
    right = task.score_item(item, [GenerateResult("zir")], "instructed")
    assert right == {"choice": "zir", "correct": 1, "parsed": True, "scores": [], "reply": "zir"}
    wrong = task.score_item(item, [GenerateResult("Their.")], "instructed")
    assert (wrong["choice"], wrong["correct"], wrong["parsed"]) == ("their", 0, True)
    none = task.score_item(item, [GenerateResult("I cannot tell.")], "instructed")
    assert (none["choice"], none["correct"], none["parsed"], none["reply"]) == ("", 0, False, "I cannot tell.")


# ------------------------------------------------------------------------------------------------ reply parsing
NOM = ("He", "She", "They", "Thon", "E", "Ae", "Co", "Vi", "Xe", "Ey", "Ze")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("xe", "Xe"),
        ("  'Xe'.\n", "Xe"),
        ("**They**", "They"),
        ("The answer is: ze", "Ze"),
        ("Xe's the one", "Xe"),
        ("e", "E"),
        ("Kamoni/'s pronouns are xe/xem. Xe cried.", "Xe"),  # one distinct option, twice
        ("he or she", None),  # two different options
        ("hello there", None),  # options only inside longer words
        ("", None),
        ("the co-worker", "Co"),  # a hyphen ends a word
    ],
)
def test_parse_reply(reply: str, expected: str | None) -> None:
    assert parse_reply(reply, NOM) == expected


def test_parse_reply_spells_as_the_item_and_dedupes() -> None:
    acc = ("him", "her", "them", "thon", "em", "aer", "co", "vir", "xem", "em", "zir")
    assert parse_reply("EM", acc) == "em"


def test_the_prompt_file_is_checked(tmp_path: Path) -> None:
    prompts, default = load_prompts(PACKAGE / "prompts.json")
    assert default in prompts and prompts[default].max_new_tokens >= 1
    bad = {"schema_version": 1, "default_prompt": "p", "prompts": {"p": {"text": "no slots"}}}
    (tmp_path / "p.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match=r"p.json: prompt 'p': 'text' must hold one \{sentence\} and one \{options\}"):
        load_prompts(tmp_path / "p.json")
    bad["prompts"]["p"] = {"text": "{sentence} {options}", "extra": 1}
    (tmp_path / "p.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match="unknown field"):
        load_prompts(tmp_path / "p.json")


def test_a_bad_selection_is_one_line() -> None:
    spec = load_specs(PACKAGE / "tasks.json")["misgendered"]
    from dataclasses import replace

    with pytest.raises(ValueError, match=r"'extra\.declarations' must be"):
        MisgenderedTask(replace(spec, extra={**spec.extra, "declarations": ["explicit_7"]}))
    with pytest.raises(ValueError, match="names_per_group"):
        MisgenderedTask(replace(spec, extra={**spec.extra, "names_per_group": 0}))
