"""QueerBench on generative LMs, the wiring (``queerbench.methods.scored.predictor``, ``queerbench.models.generation.load_runner``), fast.

Which method a set of options means (every branch and its one-line error), what fingerprints a model, what the two
predictors record and return, and that every option reaches the runner or scorer it is meant for. The models are
tiny (a few thousand random weights, saved once per module), the endpoint is the project's fake server on
127.0.0.1, and transformers' ``AutoConfig.from_pretrained`` is watched (or, for a Hub id that cannot be reached
offline, answered) where a revision must reach it: everything between is the real code.
"""

from __future__ import annotations

import types
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from queerbench.base.sources import get_source
from queerbench.methods.instructed.predictor import InstructedPredictor
from queerbench.methods.instructed.replies import build_prompt, instructed_settings, load_prompts
from queerbench.methods.registry import (
    GENERATIVE_METHODS,
    METHODS,
    get_method,
    load_predictor,
    resolve_method,
    same_weights,
)
from queerbench.methods.scored.predictor import ScoredPredictor
from queerbench.models.causal_blanks.local import ScoredLM, score_blanks
from queerbench.models.fingerprint import fingerprint_model
from queerbench.models.generation import (
    DEFAULT_MODEL,
    OpenAIChatRunner,
    TransformersRunner,
    describe_model,
    load_runner,
)
from queerbench.models.registry import model_ref
from queerbench.models.spec import ModelSpec
from tests.openai_server import FakeOpenAI
from tests.tiny_models import tiny_gpt2, tiny_llama

_SPEC_FIELDS = ("device", "dtype", "device_map", "batch_size", "concurrency", "requests_per_minute", "request_timeout")


def _options(**fields: Any) -> types.SimpleNamespace:
    """Run options as the methods read them: the model's settings in one ModelSpec (``model_spec``), the model
    reference and the method resolved (``ref``, ``method_impl``)."""
    spec = ModelSpec(**{k: fields.pop(k) for k in _SPEC_FIELDS if k in fields})
    ref = model_ref(fields.get("model"), fields.get("endpoint"), fields.get("revision"))
    own = {name: fields.pop(name) for name in ("prompt_id", "max_new_tokens") if name in fields}  # a method's own
    return types.SimpleNamespace(
        **fields, model_spec=spec, ref=ref, method_impl=get_method(fields["method"]), setting=own.get
    )


SENTENCES = ["The gay person is a [MASK].", "[MASK] is kind.", "The person was a [MASK] in town."]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    bert = root / "bert"
    transformers.BertConfig(
        vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, architectures=["BertForMaskedLM"]
    ).save_pretrained(bert)  # a config is all the method check reads
    return {
        "gpt2": str(tiny_gpt2(root)),
        "chat": str(tiny_llama(root)),
        "plain": str(tiny_llama(root, name="plain", chat_template=False)),
        "bert": str(bert),
    }


@pytest.fixture()
def config_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    """Every ``AutoConfig.from_pretrained`` call (name, keyword arguments); Hub ids (``org/name``) are answered with
    a config whose commit is ``c0ffee`` for ``org/known`` and an ``OSError`` otherwise (nothing can be fetched)."""
    seen: list[tuple[str, dict]] = []
    real = transformers.AutoConfig.from_pretrained.__func__

    def spy(cls, name, *args, **kwargs):
        seen.append((str(name), dict(kwargs)))
        if str(name) == "org/known":
            config = transformers.GPT2Config()
            config._commit_hash = "c0ffee"
            return config
        if str(name) == "org/broken":
            raise ValueError("unrecognised configuration")
        if str(name).startswith("org/"):
            raise OSError("offline")
        return real(cls, name, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", classmethod(spy))
    return seen


# ------------------------------------------------------------------------------------------- the method ---
def test_method_names() -> None:
    assert METHODS == ("auto", "mlm", "scored", "instructed") and GENERATIVE_METHODS == ("scored", "instructed")


def test_resolve_method_table(folders: dict[str, str]) -> None:
    gpt2, bert, url = folders["gpt2"], folders["bert"], "http://127.0.0.1:9/v1"
    cases = [
        ("auto", None, None, "scored"),  # no model: the embedded causal LM
        ("scored", None, None, "scored"),
        ("instructed", None, None, "instructed"),
        ("mlm", None, None, "mlm"),
        ("auto", DEFAULT_MODEL, None, "scored"),
        ("auto", gpt2, None, "scored"),
        ("scored", gpt2, None, "scored"),
        ("instructed", gpt2, None, "instructed"),
        ("auto", bert, None, "mlm"),
        ("mlm", bert, None, "mlm"),
        ("auto", "served", url, "instructed"),
        ("instructed", "served", url, "instructed"),
        ("scored", "served", url, "scored"),  # a completions endpoint's log-probabilities
    ]
    for method, model, endpoint, want in cases:
        assert resolve_method(method, model, endpoint) == want, (method, model, endpoint)
    assert describe_model(gpt2) == ("causal", "GPT2LMHeadModel") and describe_model(bert) == (
        "masked",
        "BertForMaskedLM",
    )


def test_resolve_method_errors(folders: dict[str, str]) -> None:
    gpt2, bert, url = folders["gpt2"], folders["bert"], "http://127.0.0.1:9/v1"
    with pytest.raises(ValueError, match=r"^--method must be one of auto, mlm, scored, instructed, got 'greedy'$"):
        resolve_method("greedy", gpt2, None)
    with pytest.raises(ValueError, match=r"^--method must be one of .*, got 'greedy'$"):
        resolve_method("greedy", "served", url)  # checked before the endpoint
    with pytest.raises(
        ValueError, match=r"^--endpoint needs --model NAME \(the model name the endpoint serves, e\.g\."
    ):
        resolve_method("auto", None, url)
    with pytest.raises(
        ValueError,
        match=r"^--endpoint runs --method instructed \(replies\) or scored \(a completions endpoint's log-probabilities\), "
        r"not a masked LM; drop --method mlm or use --method instructed$",
    ):
        resolve_method("mlm", "served", url)
    with pytest.raises(
        ValueError,
        match=rf"^'{gpt2}' is a causal LM \(GPT2LMHeadModel\), not a masked LM: --method mlm needs a masked LM; "
        r"use --method scored \(or instructed, or auto\)$",
    ):
        resolve_method("mlm", gpt2, None)
    for method in ("scored", "instructed"):
        with pytest.raises(
            ValueError,
            match=rf"^'{bert}' is a masked LM \(BertForMaskedLM\): --method {method} needs a causal LM; "
            r"use --method mlm \(or auto\)$",
        ):
            resolve_method(method, bert, None)


def test_resolve_method_reads_the_config_at_the_revision(folders: dict[str, str], config_calls) -> None:
    assert resolve_method("auto", folders["gpt2"], None, "abc123") == "scored"
    assert config_calls and all(kw.get("revision") == "abc123" for _, kw in config_calls)
    config_calls.clear()
    assert resolve_method("auto", folders["gpt2"], None) == "scored"
    assert config_calls and all("revision" not in kw for _, kw in config_calls)
    config_calls.clear()
    resolve_method("auto", "served", "http://127.0.0.1:9/v1", "abc123")  # an endpoint: no config is read
    assert config_calls == []


# ------------------------------------------------------------------------------------------ fingerprints ---
def model_fingerprint(model: str, endpoint: str | None = None, revision: str | None = None) -> dict:
    """The fingerprint a predictor records for what it loaded (the library's one fingerprint, commit resolved)."""
    return fingerprint_model(model, endpoint=endpoint, hub="commit", revision=revision)


def test_model_fingerprint_per_kind(folders: dict[str, str], hub_commits) -> None:
    assert model_fingerprint("gpt-4o", "http://127.0.0.1:9/v1/") == {
        "kind": "endpoint",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "gpt-4o",
    }
    assert model_fingerprint("m", "http://127.0.0.1:9/vX//")["base_url"] == "http://127.0.0.1:9/vX"  # "/" only
    embedded = {"kind": "embedded", "sha256": get_source("smollm2_135m_instruct_gguf").sha256}
    assert model_fingerprint(DEFAULT_MODEL) == embedded
    assert model_fingerprint(folders["gpt2"]) == fingerprint_model(folders["gpt2"])
    assert model_fingerprint(folders["gpt2"])["kind"] == "local"
    assert hub_commits == []  # neither the embedded model nor a folder asks the Hub
    assert model_fingerprint("org/known") == {"kind": "hub", "commit_hash": "c0ffee"}
    assert hub_commits == [("org/known", None)]
    assert model_fingerprint("org/known", revision="v2") == {"kind": "hub", "commit_hash": "c0ffee"}
    assert hub_commits[-1] == ("org/known", "v2")
    assert model_fingerprint("org/unreachable") == {"kind": "hub", "commit_hash": None}
    assert model_fingerprint("org/broken") == {"kind": "hub", "commit_hash": None}


def test_model_fingerprint_of_a_home_relative_folder(folders: dict[str, str], monkeypatch) -> None:
    home = Path(folders["gpt2"]).parent
    monkeypatch.setenv("HOME", str(home))
    assert model_fingerprint("~/tiny-gpt2")["sha256"] == fingerprint_model(folders["gpt2"])["sha256"]


def test_same_weights() -> None:
    a = {"fingerprint": {"kind": "local", "sha256": "1", "files": {"x": "2"}}, "other": 1}
    assert same_weights(a, {"fingerprint": {"files": {"x": "2"}, "sha256": "1", "kind": "local"}, "other": 2})
    assert not same_weights(a, {"fingerprint": {"kind": "local", "sha256": "9", "files": {"x": "2"}}})
    assert not same_weights(a, {})
    assert same_weights({}, {"model": "m"})  # neither records weights: nothing tells them apart


# ------------------------------------------------------------------------------------------ the predictors ---
def test_scored_predictor(folders: dict[str, str]) -> None:
    path = folders["gpt2"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predictor = ScoredPredictor(path, top_k=3, spec=ModelSpec(device="cpu", dtype="float32", batch_size=2))
    assert not [w for w in caught if "chat template" in str(w.message)]  # scored sends no prompt: no such note
    meta = predictor.metadata()
    lm = predictor.backend.blank_filler()
    assert meta == {
        "method": "scored",
        "model": path,
        "fingerprint": fingerprint_model(path),
        "tokenizer_family": "bpe",
        "start_token": "<|endoftext|>",
        "device": "cpu",
        "device_map": None,
        "dtype": "float32",
        "architecture": "GPT2LMHeadModel",
        "params": sum(p.numel() for p in lm.model.parameters()),
        "decoding": {
            "candidates": 12,
            "candidates_per_k": 4,
            "max_word_tokens": 4,
            "ranking": "log P(word + text after the blank | start token + text before the blank), summed",
            "prompt_format": "raw",
        },
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    ticks: list[int] = []
    out = predictor.predict(["a", "b", "c"], SENTENCES, ticks.append)
    want = score_blanks(ScoredLM(lm.model, lm.tokenizer), SENTENCES, 3, batch_size=2)  # the predictor's batches
    # the same words; the same numbers up to float32 rounding (a second load may take another kernel path)
    assert (out["tokens"], out["n_word_tokens"]) == (want.tokens, want.n_word_tokens)
    for name in ("probs", "logprobs"):
        assert [v for row in out[name] for v in row] == pytest.approx(
            [v for row in getattr(want, name) for v in row], rel=1e-5, abs=1e-6
        )
    assert all(len(t) == 3 for t in out["tokens"])
    assert ticks == [2, 1]  # batch_size sentences at a time
    half = ScoredPredictor(path, top_k=1, spec=ModelSpec(device="cpu", dtype="bfloat16", batch_size=1))
    assert half.metadata()["dtype"] == "bfloat16" and half.metadata()["decoding"]["candidates"] == 4


def _instructed(model: str, **kw) -> InstructedPredictor:
    """An instructed predictor: ``kw`` overrides its arguments and, for ModelSpec's fields, its spec's."""
    spec = {"device": "cpu", "dtype": "float32", "batch_size": 2, "concurrency": 1}
    spec.update({k: kw.pop(k) for k in list(kw) if k in {f.name for f in fields(ModelSpec)}})
    args = {"endpoint": None, "top_k": 1, "seed": 0, "prompt_id": None, "max_new_tokens": 4}
    return InstructedPredictor(model, spec=ModelSpec(**spec), **{**args, **kw})


def test_instructed_predictor_on_a_local_model(folders: dict[str, str], tmp_path: Path) -> None:
    notes: list[str] = []
    plain = _instructed(folders["plain"], cache_path=tmp_path / "p.sqlite", log=notes.append, seed=7)
    assert len(notes) == 1 and notes[0].startswith("note: model ") and "has no chat template" in notes[0]
    meta = plain.metadata()
    settings = instructed_settings(1, 7, 2, 4)
    assert meta == {
        "method": "instructed",
        "model": folders["plain"],
        "endpoint": None,
        "fingerprint": plain.runner.weights,
        "runner": plain.runner.fingerprint(),
        "prompt_format": "plain",
        "prompt_id": load_prompts()["default_prompt"],
        "prompt": load_prompts()["prompts"][load_prompts()["default_prompt"]]["text"],
        "system_prompt": None,
        "decoding": {**settings.decoding(), "samples": 1, "empty_reasks": 0, "kind": "greedy"},
        "device": "cpu",
        "device_map": None,
    }
    assert meta["fingerprint"] == fingerprint_model(folders["plain"]) and meta["decoding"]["seed"] == 7
    ticks: list[int] = []
    out = plain.predict(["a", "b"], SENTENCES[:2], ticks.append)
    assert set(out) == {"tokens", "reply", "label", "n_distinct", "reasks", "prompt_format"}
    assert all(len(v) == 2 for v in out.values()) and out["prompt_format"] == ["plain", "plain"]
    assert sum(ticks) == 2 and plain.cache.count() == 2
    plain.close()
    with pytest.raises(Exception, match="closed"):
        plain.cache.count()

    notes.clear()
    chat = _instructed(
        folders["chat"], cache_path=tmp_path / "c.sqlite", log=notes.append, top_k=3, prompt_id="queergen-1"
    )
    assert notes == []  # a chat template: nothing to say
    meta = chat.metadata()
    assert meta["prompt_format"] == "chat" and meta["prompt_id"] == "queergen-1"
    assert meta["prompt"] == load_prompts()["prompts"]["queergen-1"]["text"]
    assert meta["decoding"]["kind"] == "3 samples, duplicates allowed" and meta["decoding"]["samples"] == 3
    assert meta["decoding"]["empty_reasks"] == int(load_prompts()["decoding"]["empty_reasks"]) > 0  # sampled
    assert meta["decoding"]["max_new_tokens"] == 4 and meta["decoding"]["temperature"] == 1.0
    assert chat.reask_empty and not plain.reask_empty
    chat.close()
    half = _instructed(folders["chat"], cache_path=tmp_path / "h.sqlite", dtype="bfloat16")
    assert next(half.runner.model.parameters()).dtype == torch.bfloat16
    half.close()


def test_instructed_predictor_on_an_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI(answer="Doctor.") as server:
        predictor = _instructed(
            "served",
            endpoint=server.url,
            cache_path=tmp_path / "e.sqlite",
            concurrency=3,
            requests_per_minute=6000.0,
            prompt_id="queergen-3",
            max_new_tokens=None,
        )
        meta = predictor.metadata()
        assert meta["fingerprint"] == {"kind": "endpoint", "base_url": server.url.rstrip("/"), "model": "served"}
        assert meta["runner"]["kind"] == "openai-chat" and meta["device"] is None and meta["endpoint"] == server.url
        assert meta["prompt_format"] == "chat" and meta["system_prompt"] is None and meta["model"] == "served"
        assert meta["prompt_id"] == "queergen-3" and meta["decoding"]["kind"] == "greedy"
        assert meta["decoding"]["empty_reasks"] == int(load_prompts()["decoding"]["empty_reasks"])  # greedy, remote
        assert meta["decoding"]["max_new_tokens"] == int(load_prompts()["decoding"]["max_new_tokens"])
        assert predictor.runner.concurrency == 3 and predictor.runner._limiter.interval == pytest.approx(0.01)
        default_rate = _instructed("served", endpoint=server.url, cache_path=tmp_path / "d.sqlite")
        assert default_rate.runner._limiter.interval == pytest.approx(0.1)  # 600 requests a minute
        default_rate.close()
        out = predictor.predict(["a"], SENTENCES[:1], lambda n: None)
        assert out["reply"][0][0].startswith("Doctor.") and len(out["label"][0]) == 1 and server.calls == 1
        assert server.bodies[0]["messages"][-1]["content"] == build_prompt(SENTENCES[0], "queergen-3")
        predictor.close()


def test_load_predictor_passes_every_option(folders: dict[str, str], tmp_path: Path, monkeypatch) -> None:
    base = {
        "device": "cpu",
        "dtype": "float32",
        "device_map": None,
        "revision": None,
        "endpoint": None,
        "concurrency": 2,
        "requests_per_minute": 1200.0,
        "request_timeout": 7.5,
        "seed": 5,
        "prompt_id": "queergen-1",
        "max_new_tokens": 3,
    }
    scored = load_predictor(
        _options(**{**base, "model": folders["gpt2"], "method": "scored", "top_k": 2, "batch_size": 3}),
        tmp_path / "unused.sqlite",
    )
    assert isinstance(scored, ScoredPredictor) and (scored.top_k, scored.batch_size) == (2, 3)
    assert scored.model_id == folders["gpt2"] and not (tmp_path / "unused.sqlite").exists()
    half = load_predictor(
        _options(
            **{**base, "dtype": "bfloat16", "model": folders["gpt2"], "method": "scored", "top_k": 1, "batch_size": 1}
        ),
        tmp_path / "unused.sqlite",
    )
    assert half.metadata()["dtype"] == "bfloat16"
    notes: list[str] = []
    options = {**base, "model": folders["plain"], "method": "instructed", "top_k": 2, "batch_size": 4}
    local = load_predictor(_options(**options), tmp_path / "r.sqlite", log=notes.append)
    assert isinstance(local, InstructedPredictor) and len(notes) == 1
    assert local.settings == instructed_settings(2, 5, 4, 3) and local.prompt_id == "queergen-1"
    assert (tmp_path / "r.sqlite").exists() and local.metadata()["decoding"]["seed"] == 5
    local.close()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    remote = load_predictor(
        _options(**{**options, "model": "served", "endpoint": "http://127.0.0.1:9/v1"}),
        tmp_path / "s.sqlite",
    )
    assert remote.runner.concurrency == 2 and remote.runner._limiter.interval == pytest.approx(0.05)
    assert remote.runner.timeout == (10.0, 7.5)  # --request-timeout reaches the endpoint's client
    assert remote.metadata()["endpoint"] == "http://127.0.0.1:9/v1"
    remote.close()


# ---------------------------------------------------------------------------------------- load_runner ---
def test_load_runner_refuses_bad_arguments_before_anything_runs() -> None:
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match=rf"^--concurrency must be a whole number >= 1, got {bad!r}$"):
            load_runner("served", "http://127.0.0.1:9/v1", concurrency=bad)
        with pytest.raises(ValueError, match=r"^--concurrency must be a whole number >= 1"):
            load_runner("/no/such/dir", concurrency=bad)  # checked for local models too, before the folder
    with pytest.raises(
        ValueError,
        match=r"^--revision pins a Hub model's commit; an --endpoint serves its own weights: drop it$",
    ):
        load_runner("served", "http://127.0.0.1:9/v1", revision="abc")
    for kwargs in ({"extra_body": {"x": 1}}, {"max_retries": 2}):
        with pytest.raises(ValueError, match=r"^extra_body and endpoint options need --endpoint$"):
            load_runner("/no/such/dir", **kwargs)
    with pytest.raises(ValueError, match="needs --model NAME"):
        load_runner(None, "http://127.0.0.1:9/v1")


def test_load_runner_for_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-mine")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    runner = load_runner(
        "served",
        "http://127.0.0.1:9/v1/",
        concurrency=3,
        system_prompt="Be brief.",
        api_key_env="MY_KEY",
        requests_per_minute=120.0,
        extra_body={"safety": "off"},
        max_retries=2,
        backoff_base=0.5,
        backoff_max=4.0,
        timeout=7.0,
        connect_timeout=2.0,
    )
    assert isinstance(runner, OpenAIChatRunner)
    assert (runner.base_url, runner.model_name, runner.api_key_env) == ("http://127.0.0.1:9/v1", "served", "MY_KEY")
    assert runner.concurrency == 3 and runner._limiter.interval == pytest.approx(0.5)
    assert runner.fingerprint() == {
        "kind": "openai-chat",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "served",
        "system": "Be brief.",
        "extra_body": {"safety": "off"},
    }
    assert (runner.max_retries, runner.backoff_base, runner.backoff_max, runner.timeout) == (2, 0.5, 4.0, (2.0, 7.0))
    default = load_runner("served", "http://127.0.0.1:9/v1")
    assert default.api_key_env == "OPENAI_API_KEY" and default.concurrency == 8
    assert (
        default._limiter.interval == pytest.approx(0.1) and default.fingerprint()["kind"] == "openai-chat"
    )  # 600 a minute
    assert "system" not in default.fingerprint() and "extra_body" not in default.fingerprint()
    unlimited = load_runner("served", "http://127.0.0.1:9/v1", requests_per_minute=None)
    assert unlimited._limiter.interval == 0.0


def test_load_runner_for_a_local_model(folders: dict[str, str], config_calls) -> None:
    runner = load_runner(folders["chat"], system_prompt="Be brief.", dtype="bfloat16", device="cpu", concurrency=1)
    assert isinstance(runner, TransformersRunner) and runner.system_prompt == "Be brief."
    assert next(runner.model.parameters()).dtype == torch.bfloat16 and runner.device == "cpu"
    assert runner.model_id == folders["chat"]
    assert config_calls and all(kw.get("revision") is None for _, kw in config_calls)
    config_calls.clear()
    pinned = load_runner(folders["chat"], revision="abc123")
    assert next(pinned.model.parameters()).dtype == torch.float32 and pinned.system_prompt is None
    assert config_calls and all(kw.get("revision") == "abc123" for _, kw in config_calls)


def test_the_device_reaches_the_loader(folders: dict[str, str], tmp_path: Path, monkeypatch) -> None:
    """With CUDA unavailable, asking for it must fail: that shows the option reached the loader."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        load_runner(folders["chat"], device="cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        ScoredPredictor(folders["gpt2"], top_k=1, spec=ModelSpec(device="cuda", dtype="float32", batch_size=1))
    for model, method in ((folders["gpt2"], "scored"), (folders["chat"], "instructed")):
        options = _options(
            model=model,
            method=method,
            top_k=1,
            device="cuda",
            dtype="float32",
            device_map=None,
            batch_size=1,
            revision=None,
            endpoint=None,
            concurrency=1,
            requests_per_minute=60.0,
            request_timeout=60.0,
            seed=0,
            prompt_id=None,
            max_new_tokens=2,
        )
        with pytest.raises(ValueError, match="CUDA is not available"):
            load_predictor(options, tmp_path / f"{method}.sqlite")


def test_empty_replies_are_asked_again_only_where_that_can_help(folders, tmp_path: Path, monkeypatch) -> None:
    """An endpoint's empty reply is asked again; a local model's at temperature 0 is not (it would repeat itself)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI(script=["null", "ok"]) as server:
        remote = _instructed("served", endpoint=server.url, cache_path=tmp_path / "e.sqlite")
        out = remote.predict(["a"], SENTENCES[:1], lambda n: None)
        remote.close()
    assert out["reasks"] == [1] and server.calls == 2
    local = _instructed(folders["plain"], cache_path=tmp_path / "l.sqlite")
    runner = local.runner
    enc = runner.tokenizer(runner.format_prompt(build_prompt(SENTENCES[0])), return_tensors="pt")
    with torch.inference_mode():
        first = int(runner.model(**enc).logits[0, -1].argmax())
    config = runner.model.generation_config
    old = config.eos_token_id
    config.eos_token_id = sorted(runner.stop_token_ids() | {first})  # the greedy reply is empty
    try:
        out = local.predict(["a"], SENTENCES[:1], lambda n: None)
    finally:
        config.eos_token_id = old
        local.close()
    assert out["reply"] == [[""]] and out["reasks"] == [0]


def test_a_hub_model_is_fingerprinted_by_the_commit_it_loaded(folders, stand_in_hub) -> None:
    """The id ``org/tiny`` loads the tiny GPT-2's files from a stand-in Hub (tests/conftest.py), resolved at commit
    ``c0ffee``; the run records that commit, not the files."""
    stand_in_hub("org/tiny", folders["gpt2"])
    predictor = ScoredPredictor("org/tiny", top_k=1, spec=ModelSpec(device="cpu", dtype="float32", batch_size=1))
    assert predictor.metadata()["fingerprint"] == {"kind": "hub", "commit_hash": "c0ffee"}
    assert model_fingerprint("org/tiny") == {"kind": "hub", "commit_hash": "c0ffee"}
