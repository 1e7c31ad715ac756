"""``queerbench eval`` runs the papers' protocols (issue 34, deliverable 4): each task's passes are data of its task
file (``eval_passes``: method, k, prompt), a masked LM gets ``paper`` and QueerGen at the published k, a chat model
QueerGen's greedy k = 1 with QueerGen's own prompt; each pass is its own part folder, an eval folder of the earlier
plan resumes, and the card says where each row ranks among the published models (or why it ranks beside none, a
``--limit`` pass included).

The evals run tiny models (``tests/tiny_models.py``), the fake chat server (``tests/openai_server.py``) and the tests'
two-template benchmark (``tests/data/tiny_task``) copied with passes of its own, against small reference documents
written here (``--reference``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from queerbench.cli import main
from queerbench.methods.instructed.replies import load_prompts
from queerbench.methods.registry import check_task_spec
from queerbench.reporting.rows import ResultRow
from queerbench.results import eval as eval_module
from queerbench.results.eval import EvalSettings, plan_eval
from queerbench.results.reference import bundled_reference_path, load_reference_rows
from queerbench.tasks import get_task, load_specs
from tests.openai_server import FakeOpenAI
from tests.tiny_models import tiny_bert, tiny_llama

TINY = Path(__file__).parent / "data" / "tiny_task"
FAST = ["--bootstrap", "20", "--permutations", "20"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "bert": tiny_bert(root),
        "llama": tiny_llama(root),
        "plain": tiny_llama(root, name="tiny-llama-plain", chat_template=False),
    }


def _tiny_with_passes(folder: Path, passes: list[dict] | None) -> Path:
    """A copy of the tests' tiny benchmark whose task declares ``passes`` (its ``eval_passes``)."""
    shutil.copytree(TINY, folder)
    spec = json.loads((folder / "tiny_tasks.json").read_text())
    if passes is not None:
        spec["tasks"][0]["eval_passes"] = passes
    (folder / "tiny_tasks.json").write_text(json.dumps(spec))
    return folder


def _plan(settings: EvalSettings) -> list[tuple[str, str | None, int | None, str | None, bool]]:
    parts, _ = plan_eval(settings)
    return [(p.folder, p.method, p.k, p.prompt, p.skipped is not None) for p in parts]


# ------------------------------------------------------------------------------------------- the pass lists
def test_each_model_kind_gets_the_passes_of_the_published_rows(models: dict[str, Path]) -> None:
    qg_prompt = "queergen-2"  # QueerGen's own default prompt (its src/lib.py index 1, the paper's Prompt 2)
    assert "QueerGen src/lib.py:158-163 index 1" in load_prompts()["prompts"][qg_prompt]["source"]
    masked = _plan(EvalSettings(model=str(models["bert"])))
    assert masked == [
        ("misgendered-mlm", "mlm", None, None, False),  # a request task: no k
        ("default-mlm", "mlm", 5, None, False),
        ("paper-mlm-k1", "mlm", 1, None, False),
        ("paper-mlm", "mlm", 5, None, False),  # k = 5 is --top-k: the folder every earlier eval gave it
        ("queergen-mlm-k1", "mlm", 1, None, False),
        ("queergen-mlm", "mlm", 5, None, False),
        ("scm", None, None, None, True),
    ]
    chat = _plan(EvalSettings(model=str(models["llama"])))
    assert chat == [
        ("misgendered-scored", "scored", None, None, False),
        ("misgendered-instructed", "instructed", None, None, False),
        ("default-scored", "scored", 5, None, False),
        ("default-instructed", "instructed", 5, None, False),
        ("paper", None, None, None, True),  # no published row of a causal model: not run
        ("queergen-scored", "scored", 5, None, False),
        ("queergen-instructed-k1", "instructed", 1, qg_prompt, False),
        ("scm", None, None, None, False),
    ]
    endpoint = _plan(EvalSettings(model="m", endpoint="http://127.0.0.1:9/v1"))
    assert ("queergen-instructed-k1", "instructed", 1, qg_prompt, False) in endpoint
    assert ("paper", None, None, None, True) in endpoint and ("scm", None, None, None, False) in endpoint
    plain = _plan(EvalSettings(model=str(models["plain"])))  # no chat template: no instructed pass
    assert [f for f, *_ in plain if not _[-1]] == ["misgendered-scored", "default-scored", "queergen-scored"]
    # a pass at --top-k keeps the plain folder name; the others name their k
    assert ("queergen-mlm", "mlm", 1, None, False) in _plan(EvalSettings(model=str(models["bert"]), top_k=1))
    assert ("queergen-mlm-k5", "mlm", 5, None, False) in _plan(EvalSettings(model=str(models["bert"]), top_k=1))
    parts, what = plan_eval(EvalSettings(model=str(models["llama"])))
    paper = next(p for p in parts if p.task == "paper")
    assert paper.skipped.startswith("paper needs a model for mlm (its passes: the paper's Table 4")
    assert what in paper.skipped

    # every published row's setting of a masked LM, and the k = 1 rows of the LLMs, is a pass of that model kind
    published = {(r.task, r.method, r.k) for r in load_reference_rows(bundled_reference_path())}
    ran = {(get_task(f.split("-")[0]).name, m, k) for f, m, k, _, skipped in masked + chat if not skipped}
    assert {p for p in published if p[1] == "mlm"} <= ran
    assert {p for p in published if p[1] == "instructed" and p[2] == 1} <= ran


def test_the_passes_are_data_of_the_task_file_checked_in_one_line(
    fresh_registry: pytest.MonkeyPatch, tmp_path: Path, models: dict[str, Path]
) -> None:
    folder = _tiny_with_passes(tmp_path / "tiny", [{"method": "mlm", "k": 2}, {"method": "mlm", "k": 3}])
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(folder))
    assert _plan(EvalSettings(model=str(models["bert"]), tasks=("tiny",))) == [
        ("tiny-mlm-k2", "mlm", 2, None, False),
        ("tiny-mlm-k3", "mlm", 3, None, False),
    ]
    spec = json.loads((folder / "tiny_tasks.json").read_text())
    for passes, said in [
        ([{"method": "mlm", "k": 0}], "eval_passes[0]: 'k' must be a positive integer"),
        ([{"method": "banana"}], "eval_passes[0]: 'method' must be one of the task's methods"),
        ([{"method": "mlm", "prompt": "queergen-2"}], "'prompt' names the prompt id of an instructed pass"),
        ([{"method": "mlm", "temperature": 1}], "eval_passes[0]: unknown field(s) ['temperature']"),
        ([{"method": "mlm", "k": 1}, {"method": "mlm", "k": 1}], "'eval_passes' names one pass twice"),
        ([], "'eval_passes' must be a non-empty list"),
    ]:
        spec["tasks"][0]["eval_passes"] = passes
        (tmp_path / "bad.json").write_text(json.dumps(spec))
        with pytest.raises(ValueError) as caught:  # the method registry checks what the task says of the methods
            for checked in load_specs(tmp_path / "bad.json").values():
                check_task_spec(checked)
        assert said in str(caught.value) and "\n" not in str(caught.value)


# ------------------------------------------------------------------------------- resume and the chat pass
def test_an_eval_folder_of_the_earlier_plan_resumes_and_only_the_new_passes_run(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An eval folder as the earlier plan wrote it (``--tasks default,queergen`` of a masked LM: ``default-mlm`` and
    ``queergen-mlm`` at --top-k 5; a causal model's ``queergen-instructed`` at top-5 beside them), written with the
    flags of that eval: every part still in the plan is reused, the new pass runs, the old top-5 instructed part is
    kept."""
    bert, out = str(models["bert"]), tmp_path / "eval"
    common = ["--limit", "1", "--toxicity", "none", "--top-k", "5", *FAST]
    for task in ("default", "queergen"):
        args = ["run", "--model", bert, "--config", task, "--method", "mlm", "--out", str(out / f"{task}-mlm")]
        assert main([*args, *common]) == 0
    (out / "queergen-instructed").mkdir()
    (out / "queergen-instructed" / "scores.json").write_text("{}")
    settings = EvalSettings(
        model=bert, tasks=("default", "queergen"), limit=1, toxicity="none", n_bootstrap=20, n_permutations=20
    )
    record = {
        "key": settings.key(),
        "queerbench_version": "0.1.0",
        "parts": {
            "default-mlm": {"status": "done", "note": ""},
            "queergen-mlm": {"status": "done", "note": ""},
            "queergen-instructed": {"status": "done", "note": ""},
        },
        "model": "a masked LM (BertForMaskedLM)",
    }
    (out / "eval.json").write_text(json.dumps(record))
    capsys.readouterr()
    ran: list[str] = []
    real = eval_module.run_benchmark

    def spy(options, folder, **kwargs):
        ran.append(Path(folder).name)
        return real(options, folder, **kwargs)

    monkeypatch.setattr(eval_module, "run_benchmark", spy)
    args = ["eval", "--model", bert, "--tasks", "default,queergen", "--out", str(out), "--limit", "1"]
    assert main([*args, "--toxicity", "none", *FAST]) == 0
    said = capsys.readouterr().out
    assert "default-mlm: finished earlier, reused" in said and "queergen-mlm: finished earlier, reused" in said
    assert "queergen-instructed: a part of an earlier version's plan, no longer a pass of this eval" in said
    assert ran == ["queergen-mlm-k1"]
    document = json.loads((out / "results.json").read_text())
    rows = {(r["task"], r["method"], r["k"]) for r in document["rows"]}
    assert rows == {("default", "mlm", 5), ("queergen", "mlm", 1), ("queergen", "mlm", 5)}
    assert (out / "queergen-instructed" / "scores.json").read_text() == "{}"  # kept, never shown
    card = (out / "card.md").read_text()
    assert "| QueerGen `queergen` | mlm | 1 |" in card and "| QueerGen `queergen` | mlm | 5 |" in card
    assert "- `queergen`/mlm k=1: `task:queergen|method:mlm|" in card and "- `queergen`/mlm: `task:queergen|" in card


def test_a_chat_endpoint_runs_queergens_protocol_one_greedy_reply_to_its_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("queerbench.models.causal_blanks.endpoint_probe.identify", lambda runner: {})
    out = tmp_path / "eval"
    prompt = load_prompts()["prompts"]["queergen-2"]["text"].split("{sentence}")[0]
    with FakeOpenAI(answer="kind") as server:
        args = ["eval", "--model", "m", "--endpoint", server.url, "--tasks", "queergen", "--out", str(out)]
        assert main([*args, "--limit", "1", "--toxicity", "none", "--requests-per-minute", "100000", *FAST]) == 0
        bodies = list(server.bodies)
    parts = {p["folder"]: p for p in json.loads((out / "results.json").read_text())["parts"]}
    assert parts["queergen-instructed-k1"]["status"] == "done" and parts["queergen-instructed-k1"]["k"] == 1
    assert parts["queergen-scored"]["status"] == "skipped"  # the chat-only server has no /completions
    chats = [b for b in bodies if "messages" in b]
    assert len(chats) == 310  # the first template's 310 sentences, one reply each
    assert all(b["messages"][-1]["content"].startswith(prompt) and b.get("temperature") == 0.0 for b in chats)
    row = json.loads((out / "results.json").read_text())["rows"][0]
    assert (row["task"], row["method"], row["k"]) == ("queergen", "instructed", 1)
    assert "queergen-2" in row["signature"]


# -------------------------------------------------------------------- the card's place among the published
def _reference(task: str, model: str, k: int, toxicity: str, queer: float) -> dict:
    return ResultRow(
        task=task, benchmark="TinyBench", model=model, method="mlm", k=k, toxicity=toxicity,
        scores={"queer": queer, "non-queer": queer}, n={"queer": 4, "non-queer": 4}, reference=True,
        signature=f"task:{task}|method:published|model:{model}|k:{k}", source="published",
    ).to_dict()  # fmt: skip


@pytest.fixture()
def tiny_protocol(fresh_registry: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The tiny benchmark with two passes (mlm at k = 1 and 2) and a reference document: three published models under
    ``embedded`` at k = 1 (one scoring 0, one far above any score, one equal to nothing), one under ``perspective``
    at k = 2."""
    folder = _tiny_with_passes(tmp_path / "tiny", [{"method": "mlm", "k": 1}, {"method": "mlm", "k": 2}])
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(folder))
    rows = [
        _reference("tiny", "low", 1, "embedded", 0.0),
        _reference("tiny", "high", 1, "embedded", 1e6),
        _reference("tiny", "higher", 1, "embedded", 2e6),
        _reference("tiny", "other-scorer", 2, "perspective", 1.0),
        _reference("default", "elsewhere", 1, "embedded", 1.0),
    ]
    path = tmp_path / "reference_rows.json"
    path.write_text(json.dumps({"schema_version": 1, "rows": rows}))
    return path


def test_the_card_says_where_a_full_eval_ranks_and_among_whom_and_leaderboard_show_agrees(
    tiny_protocol: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "eval"
    args = ["eval", "--model", str(models["bert"]), "--tasks", "tiny", "--out", str(out), "--toxicity", "embedded"]
    assert main([*args, "--reference", str(tiny_protocol), *FAST]) == 0
    document = json.loads((out / "results.json").read_text())
    k1 = next(r for r in document["rows"] if r["k"] == 1)
    assert k1["limit"] is None and k1["toxicity"] == "embedded" and k1["scores"]["queer"] is not None
    rank = 1 + sum(v < k1["scores"]["queer"] for v in (0.0, 1e6, 2e6))
    ordinal = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th"}[rank]
    card = (out / "card.md").read_text()
    assert "## Among the published models" in card
    model = k1["model"]
    assert (
        f"- `tiny`/mlm k=1: ranks {ordinal} of 4 on TinyBench tiny, k=1, toxicity: embedded, all templates "
        "(by the queer score) among: low (mlm), high (mlm), higher (mlm)." in card
    )
    assert (
        "- `tiny`/mlm k=2: not ranked: no comparable published row: toxicity scorer embedded (not perspective)" in card
    )
    standing = {s["k"]: s for s in document["standing"]}
    assert standing[1]["rank"] == rank and [a["model"] for a in standing[1]["among"]] == ["low", "high", "higher"]
    assert standing[2]["rank"] is None and "perspective" in standing[2]["reason"]
    assert f"the reference rows of `{tiny_protocol.name}` (`--reference`)" in card and str(tmp_path) not in card
    index = yaml.safe_load((out / "model-index.yaml").read_text())["model-index"]
    types = [m["type"] for entry in index for result in entry["results"] for m in result["metrics"]]
    assert {"tiny_mlm_k1_queer", "tiny_mlm_k2_queer"} <= set(types) and len(types) == len(set(types))

    # `leaderboard show` of the same eval ranks it in the same table, beside every comparable published model
    board = tmp_path / "board"
    assert main(["leaderboard", "show", str(out), "--reference", str(tiny_protocol), "--out", str(board)]) == 0
    frame = pd.read_csv(board / "leaderboard.csv")
    mine = frame[(frame["model"] == model) & (frame["k"] == 1) & (frame["group"] == "queer")].iloc[0]
    table = frame[frame["comparison"] == mine["comparison"]]
    assert set(table[table["reference"]]["model"]) == {"low", "high", "higher"} and mine["rank"] == rank
    assert model in str(frame[(frame["k"] == 2)]["model"].tolist())
    assert f"**{model}** (yours)" in (board / "leaderboard.md").read_text()


def test_a_limit_pass_is_labelled_in_rows_and_card_and_never_ranked(
    tiny_protocol: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "quick"
    args = ["eval", "--model", str(models["bert"]), "--tasks", "tiny", "--out", str(out), "--toxicity", "embedded"]
    assert main([*args, "--limit", "1", "--reference", str(tiny_protocol), *FAST]) == 0
    document = json.loads((out / "results.json").read_text())
    for row in document["rows"]:
        assert row["limit"] == 1
        assert any(
            c.startswith("a `--limit` pass (first 1 templates): ranked with no whole run") for c in row["caveats"]
        )
    assert all(s["rank"] is None for s in document["standing"])
    card = (out / "card.md").read_text()
    assert (
        "- `tiny`/mlm k=1: not ranked: a `--limit` pass (the first 1 templates) is never ranked with the published "
        "rows, which cover every one." in card
    )
    assert (
        "- `tiny`/mlm k=2: not ranked: a `--limit` pass (the first 1 templates) is never ranked with the published "
        "rows, which cover every one; and toxicity scorer embedded (not perspective)." in card
    )
    assert "| first 1 (`--limit`) |" in card
    board = tmp_path / "board"
    assert main(["leaderboard", "show", str(out), "--reference", str(tiny_protocol), "--out", str(board)]) == 0
    assert "## Listed apart" in (board / "leaderboard.md").read_text()


def test_a_reference_file_that_cannot_be_read_is_one_line_before_anything_runs(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    args = ["eval", "--model", str(models["bert"]), "--tasks", "default", "--out", str(out), "--limit", "1"]
    assert main([*args, "--reference", str(tmp_path / "missing.json"), *FAST]) == 2
    err = capsys.readouterr().err
    assert "no reference rows at" in err and err.count("\n") == 1 and not out.exists()
