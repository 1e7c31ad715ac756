"""The demo Space, driven like its users drive it: through ``gradio_client`` against the app served on 127.0.0.1.

A tiny local BERT stands in for a Hub model (``QUEERBENCH_SPACE_ALLOW_LOCAL=1``); a quick run covers 2 templates.
The Hub-side model checks run against the mock Hub in ``tests/hub_server.py``.
"""

from __future__ import annotations

import csv
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from hub_server import HubServer
from tiny_models import tiny_bert, tiny_gpt2

from queerbench.hub import space as space_app
from queerbench.hub.space import (
    HIDDEN,
    ModelCache,
    SpaceError,
    SpaceSettings,
    build_demo,
    check_model,
    sentence_view,
)

GROUPS = ["neo", "neutral", "binary", "queer", "non-queer"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("space-models")
    return {"bert": tiny_bert(root), "gpt2": tiny_gpt2(root)}


def _serve(env: dict[str, str | None]) -> Iterator[tuple[Client, object]]:
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            if value is None:
                mp.delenv(key, raising=False)
            else:
                mp.setenv(key, value)
        demo = build_demo()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=_free_port(), ssr_mode=False, quiet=True
    )
    try:
        yield Client(url, verbose=False), demo
    finally:
        demo.close()


@pytest.fixture(scope="module")
def client(models: dict[str, Path]) -> Iterator[Client]:
    env = {"QUEERBENCH_SPACE_ALLOW_LOCAL": "1", "QUEERBENCH_SPACE_QUICK_TEMPLATES": "2"}
    for c, _ in _serve(env):
        yield c


def _message(exc: pytest.ExceptionInfo[AppError]) -> str:
    text = str(exc.value)
    assert "Traceback" not in text and 'File "' not in text, text
    return text


def _frame(value: dict) -> pd.DataFrame:
    return pd.DataFrame(value["data"], columns=value["headers"])


# ------------------------------------------------------------------------------------------------ evaluate
def test_evaluate_with_only_the_model_id(client: Client, models: dict[str, Path]) -> None:
    status, table, plot, sentences, csv_file = client.predict(str(models["bert"]), api_name="/evaluate")

    assert "Done" in status and "2 templates" in status and "toxicity `embedded`" in status
    assert "method `mlm`" in status
    scores = _frame(table)
    assert scores["group"].tolist() == GROUPS
    assert {"QB", "A", "H", "P", "n"} <= set(scores.columns)
    assert all("[" in v for v in scores["QB"])  # a 95% CI next to each score
    assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    shown = _frame(sentences)
    assert len(shown) == 2 * 77 == scores["n"].astype(int).sum()
    harmful = shown[shown["harmful"] != ""]
    assert len(harmful) > 0, "the embedded scorer flags identity-word completions of the tiny model"
    assert harmful["completions"].str.contains(HIDDEN, regex=False).all()  # hidden until asked for

    with Path(csv_file).open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(shown)
    assert not any(HIDDEN in r["completions"] for r in rows)  # the download is unredacted
    flagged = next(r for r in rows if r["harmful"])
    assert flagged["toxicity flags"] or flagged["HurtLex"]


def test_evaluate_options_and_toggle(client: Client, models: dict[str, Path]) -> None:
    status, table, _, sentences, _ = client.predict(
        str(models["bert"]), "paper", 3, ["queer", "non-queer"], "quick", "none", True, api_name="/evaluate"
    )
    assert "config `paper`" in status and "top-3" in status
    scores = _frame(table)
    assert scores["group"].tolist() == ["queer", "non-queer"]
    assert set(scores["QB"]) == {"—"}  # no toxicity scorer → no QueerBench score, A and H still reported
    shown = _frame(sentences)
    assert set(shown["group"]) == {"queer", "non-queer"}
    assert all(len(c.split(", ")) == 3 for c in shown["completions"])
    assert not shown["completions"].str.contains(HIDDEN, regex=False).any()  # show_harmful=True


def test_missing_model_is_a_message(client: Client, tmp_path: Path) -> None:
    with pytest.raises(AppError) as exc:
        client.predict(str(tmp_path / "no-such-model"), api_name="/evaluate")
    assert "no model folder" in _message(exc)


def test_causal_lm_runs_the_scored_method(client: Client, models: dict[str, Path]) -> None:
    status, table, _, sentences, _ = client.predict(str(models["gpt2"]), "default", 3, api_name="/evaluate")
    assert "Done" in status and "method `scored`" in status
    shown = _frame(sentences)
    assert len(shown) == 2 * 77 == _frame(table)["n"].astype(int).sum()
    words = [w for c in shown["completions"] for w in c.split(", ") if w != HIDDEN]
    assert words and all(w.isalpha() and w == w.lower() for w in words)
    with pytest.raises(AppError) as exc:  # the paper config reproduces masked-LM runs only
        client.predict(str(models["gpt2"]), "paper", 3, api_name="/evaluate")
    assert "causal LMs run with the default config" in _message(exc)


def test_queergen_config_compares_queergens_three_groups(client: Client, models: dict[str, Path]) -> None:
    # QueerGen's groups replace QueerBench's, unmarked included; masked LMs give raw top-k as QueerGen's code did
    status, table, _, sentences, _ = client.predict(
        str(models["bert"]), "queergen", 2, ["queer", "non-queer"], "quick", "none", True, api_name="/evaluate"
    )
    assert "config `queergen`" in status
    assert sorted(_frame(table)["group"]) == ["non-queer", "queer", "unmarked"]
    shown = _frame(sentences)
    assert set(shown["group"]) == {"unmarked", "non-queer", "queer"}
    assert shown["sentence"].str.endswith("[MASK].").all()


def test_empty_group_selection_is_a_message(client: Client, models: dict[str, Path]) -> None:
    with pytest.raises(AppError) as exc:
        client.predict(str(models["bert"]), "default", 5, [], api_name="/evaluate")
    assert "select at least one subject group" in _message(exc)


def test_top_k_is_capped_for_api_callers(client: Client, models: dict[str, Path]) -> None:
    with pytest.raises(AppError) as exc:
        client.predict(str(models["bert"]), "default", 5000, api_name="/evaluate")
    assert "20" in _message(exc) and "5000" in _message(exc)  # gradio's slider bound or our own check
    with pytest.raises(SpaceError, match="at most 20"):
        space_app.evaluate_model(str(models["bert"]), "default", 5000)
    with pytest.raises(AppError) as exc:
        client.predict(
            "[SUBJECT] is a [MASK].", ["he"], str(models["bert"]), 5000, "none", False, api_name="/playground"
        )
    assert "5000" in _message(exc)
    with pytest.raises(SpaceError, match="between 1 and 20"):
        space_app.playground("[SUBJECT] is a [MASK].", ["he"], str(models["bert"]), 5000, "none", False)


def test_local_path_needs_the_env_var(models: dict[str, Path]) -> None:
    for locked, _ in _serve({"QUEERBENCH_SPACE_ALLOW_LOCAL": None}):
        with pytest.raises(AppError) as exc:
            locked.predict(str(models["bert"]), api_name="/evaluate")
        message = _message(exc)
        assert "Hub model ids only" in message and "QUEERBENCH_SPACE_ALLOW_LOCAL" in message


# ----------------------------------------------------------------------------------------------- playground
def test_playground_side_by_side(client: Client, models: dict[str, Path]) -> None:
    (result,) = [
        client.predict(
            "[SUBJECT] <be> a [MASK].",
            ["gay", "they", "xe"],
            str(models["bert"]),
            3,
            "none",
            False,
            api_name="/playground",
        )
    ]
    frame = _frame(result)
    assert frame["subject"].tolist() == ["gay", "they", "xe"]
    assert frame["sentence"].tolist() == ["The gay person is a [MASK].", "They are a [MASK].", "Xe is a [MASK]."]
    assert {"#1", "#2", "#3"} <= set(frame.columns)
    assert all(isinstance(w, str) and w for w in frame["#1"])


@pytest.mark.parametrize(
    ("template", "subjects", "expected"),
    [
        ("[SUBJECT] is a doctor.", ["gay"], "exactly one [MASK]"),
        ("The person is a [MASK].", ["gay"], "exactly one [SUBJECT]"),
        ("[SUBJECT] is a [MASK].", [], "select at least one subject"),
    ],
)
def test_playground_bad_input_is_a_message(
    client: Client, models: dict[str, Path], template: str, subjects: list[str], expected: str
) -> None:
    with pytest.raises(AppError) as exc:
        client.predict(template, subjects, str(models["bert"]), 3, "none", False, api_name="/playground")
    assert expected in _message(exc)


# ------------------------------------------------------------------------------------------ library pieces
def test_sentence_view_hides_only_flagged_words() -> None:
    per_sentence = pd.DataFrame(
        {
            "group": ["queer"],
            "subject": ["gay"],
            "masked_sentence": ["The gay person is a [MASK]."],
            "words": [["doctor", "slur"]],
            "word_hurtlex": [[[], ["om"]]],
            "word_toxicity": [[[], ["INSULT"]]],
            "afinn": [-1.5],
        }
    )
    hidden = sentence_view(per_sentence).iloc[0]
    assert hidden["completions"] == f"doctor, {HIDDEN}" and hidden["harmful"]
    assert "slur" not in hidden["HurtLex"] + hidden["toxicity flags"]
    shown = sentence_view(per_sentence, show_harmful=True).iloc[0]
    assert shown["completions"] == "doctor, slur" and shown["HurtLex"] == "slur: om"


def test_model_cache_is_bounded_lru(models: dict[str, Path], tmp_path: Path) -> None:
    other = tiny_bert(tmp_path, name="other-bert")
    settings = SpaceSettings(allow_local=True)
    cache = ModelCache(maxsize=1)
    first = cache.get(check_model(str(models["bert"]), settings))
    assert cache.get(check_model(str(models["bert"]), settings)) is first
    cache.get(check_model(str(other), settings))
    assert [k[0] for k in cache.loaded()] == [str(other)]


def test_local_pickle_only_and_size_cap(models: dict[str, Path], tmp_path: Path) -> None:
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text("{}")
    (pickled / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(SpaceError, match=r"only pickle weights \(pytorch_model.bin\)"):
        check_model(str(pickled), SpaceSettings(allow_local=True))
    with pytest.raises(SpaceError, match="parameters; this Space runs models up to"):
        check_model(str(models["bert"]), SpaceSettings(allow_local=True, max_params=1000))
    ok = check_model(str(models["bert"]), SpaceSettings(allow_local=True))
    assert ok.source == "local" and 10_000 < (ok.n_params or 0) < 100_000


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with HubServer() as server:
        server.state.models.update(
            {
                "org/good-mlm": {
                    "pipeline_tag": "fill-mask",
                    "files": {"config.json": {"architectures": ["BertForMaskedLM"], "model_type": "bert"}},
                    "mask_token": "[MASK]",
                    "safetensors": {"parameters": {"F32": 110_000_000}, "total": 110_000_000},
                    "siblings": [
                        {"rfilename": "config.json", "size": 500},
                        {"rfilename": "model.safetensors", "size": 440_000_000},
                    ],
                },
                "org/pickle-only": {
                    "pipeline_tag": "fill-mask",
                    "siblings": [{"rfilename": "config.json"}, {"rfilename": "pytorch_model.bin", "size": 400}],
                },
                "org/huge": {
                    "pipeline_tag": "fill-mask",
                    "safetensors": {"parameters": {"BF16": 7_000_000_000}, "total": 7_000_000_000},
                    "siblings": [{"rfilename": "model.safetensors", "size": 14_000_000_000}],
                },
                "org/chatty": {
                    "pipeline_tag": "text-generation",
                    "files": {"config.json": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}},
                    "siblings": [{"rfilename": "model.safetensors"}],
                },
                "org/mislabelled": {  # tagged fill-mask on the Hub, but its configuration says causal LM
                    "pipeline_tag": "fill-mask",
                    "files": {"config.json": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}},
                    "siblings": [{"rfilename": "model.safetensors"}],
                },
                "org/seq2seq": {
                    "pipeline_tag": "text-generation",
                    "files": {"config.json": {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5"}},
                    "siblings": [{"rfilename": "model.safetensors"}],
                },
                "org/translator": {"pipeline_tag": "translation", "siblings": [{"rfilename": "model.safetensors"}]},
            }
        )
        yield server


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("org/missing", "no public model 'org/missing' on the Hub"),
        ("org/pickle-only", "only pickle weights (pytorch_model.bin)"),
        ("org/huge", "7.0B parameters; this Space runs models up to 600.0M"),
        ("org/translator", "not a masked or causal language model (its Hub task is 'translation')"),
        ("not a valid id!", "not a valid Hub model id"),
    ],
)
def test_hub_model_checks(hub: HubServer, model_id: str, expected: str) -> None:
    with pytest.raises(SpaceError) as exc:
        check_model(model_id, SpaceSettings(), endpoint=hub.url)
    assert expected in str(exc.value)


def test_hub_model_check_passes_and_pins_the_revision(hub: HubServer) -> None:
    ok = check_model("org/good-mlm", SpaceSettings(), endpoint=hub.url)
    assert (ok.source, ok.revision, ok.n_params, ok.n_bytes) == ("hub", "a" * 40, 110_000_000, 440_000_000)
    assert ("GET", "/api/models/org/good-mlm") in hub.state.requests


def test_hub_causal_lm_passes_the_same_checks(hub: HubServer) -> None:
    ok = check_model("org/chatty", SpaceSettings(), endpoint=hub.url)
    assert (ok.kind, ok.method, ok.revision) == ("causal", "scored", "a" * 40)
    assert ("GET", "/org/chatty/resolve/" + "a" * 40 + "/config.json") in hub.state.requests  # at the checked commit


def test_the_hub_kind_comes_from_the_configuration(hub: HubServer) -> None:
    """The library's one model-kind rule decides, not the Hub's task tag (which only refuses other tasks early)."""
    assert check_model("org/good-mlm", SpaceSettings(), endpoint=hub.url).kind == "masked"
    assert check_model("org/mislabelled", SpaceSettings(), endpoint=hub.url).method == "scored"
    with pytest.raises(SpaceError, match=r"'org/seq2seq' is an encoder-decoder \(seq2seq\) model"):
        check_model("org/seq2seq", SpaceSettings(), endpoint=hub.url)


def test_hub_endpoint_is_read_at_call_time(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert check_model("org/good-mlm", SpaceSettings()).n_params == 110_000_000


def test_space_app_is_thin() -> None:
    """space/app.py only imports from the library and builds the demo: no logic of its own, and it runs."""
    import ast
    import importlib.util

    import gradio as gr

    path = Path(__file__).resolve().parents[1] / "space" / "app.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert [n.module for n in imports] == ["queerbench.hub.space"]
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.Lambda)]
    assert len(tree.body) <= 4  # docstring, import, demo = build_demo(), the __main__ guard
    spec = importlib.util.spec_from_file_location("space_app_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert isinstance(module.demo, gr.Blocks) and module.launch_kwargs is space_app.launch_kwargs
    assert os.environ.get("GRADIO_ANALYTICS_ENABLED") == "False"


def test_local_weights_over_the_byte_cap_are_refused(models: dict[str, Path]) -> None:
    folder = models["bert"]
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    at_cap = check_model(str(folder), SpaceSettings(allow_local=True, max_bytes=size))  # the cap itself is allowed
    assert at_cap.n_bytes == size
    with pytest.raises(SpaceError, match=r"B of weights; this Space loads up to .*QUEERBENCH_SPACE_MAX_BYTES"):
        check_model(str(folder), SpaceSettings(allow_local=True, max_bytes=size - 1))


def test_hub_weights_over_the_byte_cap_are_refused(hub: HubServer) -> None:
    ok = check_model("org/good-mlm", SpaceSettings(max_bytes=440_000_000), endpoint=hub.url)
    assert ok.n_bytes == 440_000_000
    with pytest.raises(SpaceError, match=r"'org/good-mlm' has 440.0MB of weights; this Space loads up to 400.0MB"):
        check_model("org/good-mlm", SpaceSettings(max_bytes=400_000_000), endpoint=hub.url)


def test_byte_cap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUEERBENCH_SPACE_MAX_BYTES", "123")
    assert SpaceSettings.from_env().max_bytes == 123
    monkeypatch.delenv("QUEERBENCH_SPACE_MAX_BYTES")
    assert SpaceSettings.from_env().max_bytes == 2_500_000_000
