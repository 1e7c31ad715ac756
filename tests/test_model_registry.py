"""The one registry of model references (queerbench.models.registry): what a --model / --endpoint names, checked in
one line before anything loads, which backends it runs on, its one fingerprint, and the commit a Hub id resolves to
from huggingface_hub's public API."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest

from queerbench.models import fingerprint
from queerbench.models.registry import EMBEDDED_MODELS, ModelRef, load_model, model_ref
from tests.tiny_models import tiny_bert, tiny_gpt2, tiny_llama


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    return {
        "bert": str(tiny_bert(root)),
        "gpt2": str(tiny_gpt2(root)),
        "chat": str(tiny_llama(root)),
        "plain": str(tiny_llama(root, name="plain-llama", chat_template=False)),
    }


@pytest.mark.parametrize(
    ("name", "endpoint", "revision", "says"),
    [
        ("", None, None, "--model is empty; give a Hub id"),
        ("embedded:nope", None, None, "no such embedded model; the embedded models are embedded:smollm2-135m-instruct"),
        ("m", "", None, "--endpoint is empty"),
        (None, "http://127.0.0.1:8000/v1", None, "--endpoint needs --model NAME"),
        ("m", "http://127.0.0.1:8000/v1", "v1", "an --endpoint serves its own weights"),
        ("m", "http://127.0.0.1:99999/v1", None, "is not a valid URL"),
        ("embedded:smollm2-135m-instruct", None, "v1", "has pinned weights: drop --revision"),
        ("/no/such/folder", None, None, "--model /no/such/folder: no such folder"),
    ],
)
def test_a_bad_reference_is_one_line_before_anything_loads(name, endpoint, revision, says) -> None:
    with pytest.raises(ValueError) as info:
        model_ref(name, endpoint, revision)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_what_a_reference_is_and_runs_on(folders: dict[str, str]) -> None:
    assert model_ref(None) == ModelRef("embedded:smollm2-135m-instruct") and (model_ref(None).name,) == EMBEDDED_MODELS
    embedded = model_ref(None)
    assert embedded.is_embedded and not embedded.is_local and embedded.kind() == "causal"
    assert embedded.backends() == ("causal_lm",) and embedded.fingerprint()["kind"] == "embedded"
    served = model_ref("gpt-4o", "http://127.0.0.1:8000/v1")
    assert served.kind() == "endpoint" and served.backends() == ("chat_endpoint", "completions_endpoint")
    assert served.fingerprint() == {"kind": "endpoint", "base_url": "http://127.0.0.1:8000/v1", "model": "gpt-4o"}
    assert served.has_chat_template()
    bert, gpt2 = model_ref(folders["bert"]), model_ref(folders["gpt2"])
    assert bert.description == ("masked", "BertForMaskedLM") and bert.backends() == ("masked_lm",)
    assert gpt2.kind() == "causal" and gpt2.backends() == ("causal_lm",) and gpt2.is_local
    assert gpt2.fingerprint() == fingerprint.fingerprint_model(folders["gpt2"])
    assert model_ref("org/name").fingerprint() == {"kind": "id", "model": "org/name", "sha256": None}


def test_a_chat_template_is_read_from_the_tokenizers_files(folders: dict[str, str]) -> None:
    assert model_ref(folders["chat"]).has_chat_template() is True
    assert model_ref(folders["plain"]).has_chat_template() is False
    assert model_ref(None).has_chat_template() is True  # SmolLM2-Instruct's GGUF carries one


def test_the_registry_loads_each_backend(folders: dict[str, str]) -> None:
    masked = load_model(model_ref(folders["bert"]), "masked_lm", device="cpu")
    assert type(masked).__name__ == "MaskedLM" and masked.weights_format == "safetensors"
    model, tokenizer = load_model(model_ref(folders["gpt2"]), "causal_lm", device="cpu")
    assert model.config.model_type == "gpt2" and tokenizer.padding_side == "left"
    with pytest.raises(ValueError, match=r"is served by http://127\.0\.0\.1:8000/v1: there is nothing to load"):
        load_model(model_ref("m", "http://127.0.0.1:8000/v1"), "chat_endpoint")
    with pytest.raises(ValueError, match="no local backend 'chat_endpoint'"):
        load_model(model_ref(folders["gpt2"]), "chat_endpoint")


def test_a_hub_commit_comes_from_the_snapshot_the_public_api_resolves(monkeypatch, tmp_path: Path) -> None:
    commit = "c0ffee" + "0" * 34
    asked: list[tuple] = []

    def download(repo_id, filename, revision=None, **_):
        asked.append((repo_id, filename, revision))
        if repo_id == "org/gguf-only":
            raise huggingface_hub.errors.EntryNotFoundError("no config.json")
        if repo_id == "org/offline":
            raise OSError("offline and not cached")
        path = tmp_path / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return str(path)

    class Info:
        sha = "beef" + "0" * 36

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, revision=None: Info())
    assert fingerprint.hub_commit("org/model", "v2") == commit and asked == [("org/model", "config.json", "v2")]
    assert fingerprint.hub_commit("org/gguf-only") == Info.sha
    assert fingerprint.hub_commit("org/offline") is None
    asked.clear()
    assert fingerprint.hub_commit(str(tmp_path)) is None and asked == []  # a local folder has no commit
    assert fingerprint.fingerprint_model("org/model", hub="commit") == {"kind": "hub", "commit_hash": commit}
