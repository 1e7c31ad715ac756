"""The local causal-LM layer's rules (``queerbench.models.generation.local``), fast: tiny random models saved once per module.

What a model is from its configuration alone (every kind, every one-line error), how it loads (dtype, padding, pad
token, refused before any weights), what fingerprints its weights, the prompt the model sees, which tokens stop a
reply, that a batch that fails loses only its own replies, option scoring against one plain forward pass per
option, and sampling: each reply a function of (prompt, seed) alone, the nucleus the smallest set of most likely
tokens reaching ``top_p``. transformers' ``AutoConfig.from_pretrained`` is watched (or, for Hub ids that cannot be
reached offline, answered) where a revision must reach it; everything else is the real code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from queerbench.base.sources import fetch, get_source
from queerbench.models.device import ModelLoadError, resolve_device
from queerbench.models.fingerprint import fingerprint_model
from queerbench.models.generation import DEFAULT_MODEL, GenerationSettings
from queerbench.models.generation import local as local_module
from queerbench.models.generation.loading import (
    check_causal_lm,
    describe_model,
    load_causal_lm,
    model_kind,
    resolve_model,
)
from queerbench.models.generation.local import TransformersRunner
from tests.scm_runs import option_logps
from tests.tiny_models import CacheOnlyLM, NoLogitsToKeepLM, PastKeyValuesLM, tiny_gpt2, tiny_llama

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    configs = {
        "bert": transformers.BertConfig(architectures=["BertForMaskedLM"]),
        "bert-bare": transformers.BertConfig(),  # in both auto mappings, not a decoder: masked
        "bert-decoder": transformers.BertConfig(is_decoder=True),  # BertLMHeadModel: causal
        "gpt2-bare": transformers.GPT2Config(),  # causal mapping only
        "t5": transformers.T5Config(architectures=["T5ForConditionalGeneration"]),
        "vit": transformers.ViTConfig(),  # no language-model head at all
        "two": transformers.GPT2Config(architectures=["GPT2LMHeadModel", "GPT2DoubleHeadsModel"]),
        "seq-classifier": transformers.BertConfig(architectures=["BertForSequenceClassification"]),
        # a BERT config (in the masked-LM mapping) whose architecture says causal: the architecture decides
        "bert-causal": transformers.BertConfig(architectures=["BertForCausalLM"]),
        "bert-lmhead": transformers.BertConfig(architectures=["BertLMHeadModel"]),
        "gpt2-masked": transformers.GPT2Config(architectures=["GPT2ForMaskedLM"]),  # and the other way round
        # in both auto mappings (XLMWithLMHeadModel) and, in transformers 5, without an `is_decoder`: masked
        "xlm-bare": transformers.XLMConfig(),
    }
    out = {}
    for name, config in configs.items():
        config.save_pretrained(root / name)
        out[name] = root / name
    out["gpt2"] = tiny_gpt2(root)
    out["chat"] = tiny_llama(root)
    out["plain"] = tiny_llama(root, name="plain", chat_template=False)
    return out


@pytest.fixture()
def config_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    """Every ``AutoConfig.from_pretrained`` call; ``org/…`` Hub ids are answered (nothing can be fetched here)."""
    seen: list[tuple[str, dict]] = []
    real = transformers.AutoConfig.from_pretrained.__func__

    def spy(cls, name, *args, **kwargs):
        seen.append((str(name), dict(kwargs)))
        if str(name) == "org/causal":
            return transformers.GPT2Config(architectures=["GPT2LMHeadModel"])
        if str(name) == "org/silent":
            raise OSError("")
        if str(name).startswith("org/"):
            raise OSError("org/x is not a local folder and is not a valid model identifier\nsecond line " + "x" * 300)
        return real(cls, name, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", classmethod(spy))
    return seen


@pytest.fixture(scope="module")
def gpt2(folders) -> TransformersRunner:
    with pytest.warns(UserWarning, match="no chat template"):
        return TransformersRunner(str(folders["gpt2"]))


@pytest.fixture(scope="module")
def chat(folders) -> TransformersRunner:
    return TransformersRunner(str(folders["chat"]))


# ------------------------------------------------------------------------------------------ what it is ---
def test_model_kinds_from_the_config_alone(folders, config_calls) -> None:
    want = {
        "bert": ("masked", "BertForMaskedLM"),
        "bert-bare": ("masked", "model type 'bert'"),
        "bert-decoder": ("causal", "model type 'bert'"),
        "gpt2-bare": ("causal", "model type 'gpt2'"),
        "t5": ("seq2seq", "T5ForConditionalGeneration"),
        "vit": ("other", "model type 'vit'"),
        "two": ("causal", "GPT2LMHeadModel, GPT2DoubleHeadsModel"),
        "seq-classifier": ("masked", "BertForSequenceClassification"),  # a BERT config: the masked-LM mapping
        "gpt2": ("causal", "GPT2LMHeadModel"),
        "chat": ("causal", "LlamaForCausalLM"),
        "bert-causal": ("causal", "BertForCausalLM"),
        "bert-lmhead": ("causal", "BertLMHeadModel"),
        "gpt2-masked": ("masked", "GPT2ForMaskedLM"),
        "xlm-bare": ("masked", "model type 'xlm'"),
    }
    for name, (kind, arch) in want.items():
        assert describe_model(str(folders[name])) == (kind, arch), name
        assert model_kind(str(folders[name])) == kind
    assert all((folders["gpt2"] / "model.safetensors").is_file() for _ in [0])  # the weights were there, unread
    assert describe_model(None) == describe_model(DEFAULT_MODEL) == ("causal", "LlamaForCausalLM")
    config_calls.clear()
    assert model_kind(None) == "causal" and config_calls == []  # the embedded model needs no config read
    assert describe_model("org/causal", "v1") == ("causal", "GPT2LMHeadModel")
    assert config_calls == [("org/causal", {"trust_remote_code": False, "revision": "v1"})]
    describe_model("org/causal")
    assert config_calls[-1] == ("org/causal", {"trust_remote_code": False})


def test_check_causal_lm_names_the_mismatch(folders) -> None:
    check_causal_lm(str(folders["gpt2"]))
    check_causal_lm(None)
    hints = {
        "bert": "BertForMaskedLM) is a masked LM: measure it with `queerbench run --method mlm`",
        "t5": "T5ForConditionalGeneration) is an encoder-decoder (seq2seq) model, which the generation layer does not run",
        "vit": "model type 'vit') is not a language model with a generation head",
    }
    for name, hint in hints.items():
        with pytest.raises(ModelLoadError) as info:
            check_causal_lm(str(folders[name]))
        assert str(info.value) == f"--model {folders[name]} ({hint}; a causal (decoder-only) LM is needed here"


def test_missing_models_are_one_line_errors(tmp_path: Path, folders, config_calls) -> None:
    for model in ("/no/such/dir", "./nowhere", "../nowhere", "~/nowhere-at-all", "gone.gguf"):
        with pytest.raises(FileNotFoundError) as info:
            model_kind(model)
        assert str(info.value) == f"--model {model}: no such file or folder"
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError) as info:
        model_kind(str(tmp_path / "empty"))
    assert str(info.value) == (
        f"--model {tmp_path / 'empty'}: the folder has no config.json (not a transformers model folder)"
    )
    with pytest.raises(ModelLoadError) as info:
        model_kind("org/missing")
    assert str(info.value) == (
        "cannot load the config of --model org/missing: not a local model folder and not available from the Hub "
        "(org/x is not a local folder and is not a valid model identifier)"
    )
    with pytest.raises(ModelLoadError, match=r"the Hub \(OSError\)$"):
        model_kind("org/silent")
    config_calls.clear()
    with pytest.raises(ModelLoadError, match=r"cannot load the config of --model nowhere: "):
        model_kind("nowhere")  # a bare name is a Hub id: asked for, not refused as a path
    assert config_calls and config_calls[0][0] == "nowhere"


def test_long_hub_errors_are_cut(config_calls, monkeypatch) -> None:
    real = transformers.AutoConfig.from_pretrained.__func__

    def long(cls, name, *args, **kwargs):
        if name == "org/long":
            raise ValueError("y" * 500)
        return real(cls, name, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", classmethod(long))
    with pytest.raises(ModelLoadError) as info:
        model_kind("org/long")
    assert str(info.value).endswith("(" + "y" * 200 + ")")


def test_resolve_model(tmp_path: Path) -> None:
    gguf = Path(fetch("smollm2_135m_instruct_gguf"))
    assert model_kind(str(gguf)) == "causal"  # a .gguf file: its config is read from the file
    assert resolve_model(None) == resolve_model(DEFAULT_MODEL) == (str(gguf.parent), gguf.name)
    single = tmp_path / "m.gguf"
    single.write_bytes(b"GGUF")
    assert resolve_model(str(single)) == (str(tmp_path), "m.gguf")
    other = tmp_path / "m.bin"
    other.write_bytes(b"x")
    assert resolve_model(str(other)) == (str(other), None)  # only a .gguf file is split
    assert resolve_model(str(tmp_path)) == (str(tmp_path), None)
    assert resolve_model("org/name") == ("org/name", None)


def test_a_model_folder_under_home_is_read_from_its_expanded_path(folders, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(folders["gpt2"].parent))
    assert describe_model(f"~/{folders['gpt2'].name}") == ("causal", "GPT2LMHeadModel")


def test_a_gguf_file_loads_its_weights_and_tokenizer_from_the_file(monkeypatch) -> None:
    """``--model path/to/x.gguf``: model and tokenizer both come from that one file (transformers' ``gguf_file``);
    its config (a parse of the whole metadata block, ~10 s) is read once for the checks and both loaders."""
    import transformers

    import queerbench.models.generation.loading as loading

    parsed: list[str] = []
    real = transformers.AutoConfig.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        if kwargs.get("gguf_file"):
            parsed.append(kwargs["gguf_file"])
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", classmethod(spy))
    loading._gguf_config.cache_clear()
    gguf = Path(fetch("smollm2_135m_instruct_gguf"))
    lm, tok = load_causal_lm(str(gguf))
    assert parsed == [gguf.name]
    assert type(lm).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in lm.parameters()) == 134_515_008  # SmolLM2-135M, tied embedding counted once
    assert len(tok) == 49_152 and tok.padding_side == "left" and tok.pad_token_id is not None
    assert tok.decode(tok("The person")["input_ids"], skip_special_tokens=True) == "The person"


def test_resolve_device(monkeypatch) -> None:
    assert resolve_device("cpu") == "cpu" and isinstance(resolve_device("cpu"), str)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device() == "mps"  # auto by default
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device() == "cpu"
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu:9")


# ------------------------------------------------------------------------------------------ loading ---
def test_load_causal_lm(folders, config_calls) -> None:
    model, tok = load_causal_lm(str(folders["gpt2"]))
    assert tok.padding_side == "left" and tok.pad_token == tok.eos_token and tok.pad_token_id is not None
    assert not model.training and next(model.parameters()).dtype == torch.float32
    assert str(model.device) == "cpu"
    for dtype in ("float16", "bfloat16"):
        model, _ = load_causal_lm(str(folders["chat"]), dtype=dtype)
        assert next(model.parameters()).dtype == getattr(torch, dtype)
    half = TransformersRunner(str(folders["chat"]), dtype="bfloat16")
    assert next(half.model.parameters()).dtype == torch.bfloat16
    _, llama_tok = load_causal_lm(str(folders["chat"]))
    assert llama_tok.pad_token == "<|endoftext|>"  # its own pad token is kept
    config_calls.clear()
    load_causal_lm(str(folders["chat"]), revision="abc")
    assert config_calls and all(kw.get("revision") == "abc" for _, kw in config_calls)


def test_load_causal_lm_refuses_before_reading_weights(folders, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as info:
        load_causal_lm("/no/such/dir", dtype="int8")  # the dtype first, before the model is looked at
    assert str(info.value) == "dtype must be float32, float16 or bfloat16, got 'int8'"
    with pytest.raises(ModelLoadError, match="is a masked LM"):
        load_causal_lm(str(folders["bert"]))  # a config only: refused before any weights are looked for
    broken = tmp_path / "broken"
    broken.mkdir()
    transformers.GPT2Config(architectures=["GPT2LMHeadModel"]).save_pretrained(broken)  # no tokenizer, no weights
    with pytest.raises(ModelLoadError) as info:
        load_causal_lm(str(broken))
    message = str(info.value)
    assert message.startswith(f"cannot load --model {broken}: ") and "\n" not in message
    assert len(message) <= len(f"cannot load --model {broken}: ") + 200
    with pytest.raises((OSError, ValueError)) as raw:  # what transformers itself says: its first line is shown
        transformers.AutoModelForCausalLM.from_pretrained(str(broken))
    assert message == f"cannot load --model {broken}: " + str(raw.value).strip().splitlines()[0][:200]


def test_a_load_error_without_text_is_named_by_its_type(folders, monkeypatch) -> None:
    def silent(cls, *args, **kwargs):
        raise OSError()

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(silent))
    with pytest.raises(ModelLoadError) as info:
        load_causal_lm(str(folders["gpt2"]))
    assert str(info.value) == f"cannot load --model {folders['gpt2']}: OSError"

    def long(cls, *args, **kwargs):
        raise OSError("y" * 500 + "\nmore")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(long))
    with pytest.raises(ModelLoadError) as info:
        load_causal_lm(str(folders["gpt2"]))
    assert str(info.value) == f"cannot load --model {folders['gpt2']}: " + "y" * 200  # its first line, cut


def test_remote_code_is_never_run(folders, tmp_path: Path) -> None:
    """A folder whose config and tokenizer config point transformers at their own code (``auto_map``), code that
    fails the moment it is imported: the model loads with transformers' own classes, and the code never runs."""
    import json
    import shutil

    folder = tmp_path / "remote-code"
    shutil.copytree(folders["gpt2"], folder)
    (folder / "evil.py").write_text('raise RuntimeError("the model folder\'s own code ran")\n', encoding="utf-8")
    auto_map = {
        "AutoConfig": "evil.EvilConfig",
        "AutoModelForCausalLM": "evil.EvilLM",
        "AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"],
    }
    for name in ("config.json", "tokenizer_config.json"):
        data = json.loads((folder / name).read_text(encoding="utf-8"))
        (folder / name).write_text(json.dumps({**data, "auto_map": auto_map}), encoding="utf-8")
    assert describe_model(str(folder)) == ("causal", "GPT2LMHeadModel")
    model, tok = load_causal_lm(str(folder))
    assert type(model) is transformers.GPT2LMHeadModel and type(tok).__module__.startswith("transformers.")
    with pytest.raises(RuntimeError, match="own code ran"):  # the same folder, trusted: its code does run
        transformers.AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True)


def test_weights_fingerprint(folders, tmp_path: Path, monkeypatch, hub_commits) -> None:
    def weights_fingerprint(model: str | None, commit: str | None = None) -> dict:
        return fingerprint_model(model, hub="commit", commit=commit)

    embedded = {"kind": "embedded", "sha256": get_source("smollm2_135m_instruct_gguf").sha256}
    assert weights_fingerprint(None) == weights_fingerprint(DEFAULT_MODEL) == embedded
    assert weights_fingerprint(str(folders["gpt2"])) == fingerprint_model(folders["gpt2"])
    assert weights_fingerprint(str(folders["gpt2"]), "ignored")["kind"] == "local"
    assert weights_fingerprint("org/name", "c0ffee") == {"kind": "hub", "commit_hash": "c0ffee"}
    assert weights_fingerprint("org/name") == {"kind": "hub", "commit_hash": None}  # the Hub knows nothing of it
    monkeypatch.setenv("HOME", str(folders["gpt2"].parent))
    assert weights_fingerprint("~/tiny-gpt2") == fingerprint_model(folders["gpt2"])


def test_a_hub_runner_is_fingerprinted_by_the_commit_it_loaded(folders, stand_in_hub) -> None:
    """A Hub id's weights are identified by the commit its files resolved to (from the loaded config), so a resume
    after the Hub moved on never reuses the old replies; the files themselves are not hashed."""
    stand_in_hub("org/tiny", folders["gpt2"])
    runner = TransformersRunner("org/tiny")
    assert runner.weights == {"kind": "hub", "commit_hash": "c0ffee"}
    assert runner.fingerprint()["weights"] == runner.weights and runner.fingerprint()["model"] == "org/tiny"


# ------------------------------------------------------------------------------------------ the runner ---
def test_runner_fingerprint_and_prompt_format(folders, gpt2: TransformersRunner, chat: TransformersRunner) -> None:
    assert gpt2.prompt_format == "plain" and chat.prompt_format == "chat"
    assert not gpt2.has_chat_template and chat.has_chat_template
    assert gpt2.fingerprint() == {
        "kind": "transformers",
        "model": str(folders["gpt2"]),
        "class": "GPT2LMHeadModel",
        "params": sum(p.numel() for p in gpt2.model.parameters()),
        "weights": fingerprint_model(folders["gpt2"]),
        "prompt_format": "plain",
        "system": None,
    }
    assert gpt2.name == gpt2.model_id == str(folders["gpt2"]) and gpt2.device == "cpu"
    assert chat.fingerprint()["prompt_format"] == "chat" and chat.fingerprint()["class"] == "LlamaForCausalLM"


def test_the_text_the_model_sees(folders, gpt2: TransformersRunner, chat: TransformersRunner) -> None:
    assert gpt2.format_prompt("Fill it.") == "Fill it.\n"
    assert chat.format_prompt("Fill it.") == "<|user|>Fill it.\n<|assistant|>"
    with pytest.warns(UserWarning) as caught:
        brief = TransformersRunner(str(folders["gpt2"]), system_prompt="Be brief.")
    assert [str(w.message) for w in caught] == [
        f"model {str(folders['gpt2'])!r} has no chat template: prompts are fed as plain text "
        "(recorded as prompt_format='plain' in the outputs)"
    ]
    # attributed to the caller's line, not the library's (== __file__ here; mutmut's trampoline adds a frame)
    assert caught[0].filename != local_module.__file__
    assert brief.format_prompt("Fill it.") == "Be brief.\n\nFill it.\n"
    assert brief.fingerprint()["system"] == "Be brief."
    chat_brief = TransformersRunner(str(folders["chat"]), system_prompt="Be brief.")
    assert chat_brief.format_prompt("Fill it.") == "<|user|>Be brief.\n<|user|>Fill it.\n<|assistant|>"
    # a template that shows the roles: a system turn, then the user's
    chat_brief.tokenizer.chat_template = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    assert chat_brief.format_prompt("Fill it.") == "[system]Be brief.[user]Fill it."


def test_stop_tokens(chat: TransformersRunner) -> None:
    config = chat.model.generation_config
    old = config.eos_token_id
    try:
        config.eos_token_id = [5, 7]
        assert chat.stop_token_ids() == {5, 7, chat.tokenizer.eos_token_id}
        config.eos_token_id = 9
        assert chat.stop_token_ids() == {9, chat.tokenizer.eos_token_id}
        config.eos_token_id = None
        assert chat.stop_token_ids() == {chat.tokenizer.eos_token_id}
    finally:
        config.eos_token_id = old


def _brute_option_logprob(runner: TransformersRunner, prompt: str, prefix: str, option: str) -> float:
    tok = runner.tokenizer
    ctx = tok(runner.format_prompt(prompt) + prefix, add_special_tokens=not runner.has_chat_template)["input_ids"]
    cont = tok(" " + option, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logp = torch.log_softmax(runner.model(input_ids=torch.tensor([ctx + cont])).logits[0].float(), -1)
    return float(sum(logp[len(ctx) - 1 + j, t] for j, t in enumerate(cont)))


@pytest.mark.parametrize("which", ["gpt2", "chat"])
def test_option_loglikelihoods_equal_one_plain_pass_per_option(which: str, request) -> None:
    """Constrained scoring's chat ``loglikelihood`` requests on the causal backend: the prompt as the model reads
    it, the reply prefix, each option encoded on its own; batched, with or without shared prefixes."""
    runner = request.getfixturevalue(which)
    prompts = ["Rate the gay person.", "How warm is the person who is very kind, smart and funny?"]
    options = [["1", "2", "very warm"], ["cold", "warm and kind"]]
    want = [
        [_brute_option_logprob(runner, p, "Rating:", o) for o in opts] for p, opts in zip(prompts, options, strict=True)
    ]
    for batch_size in (1, 2, 8):
        for share in (True, False):
            got = option_logps(runner, prompts, options, "Rating:", batch_size=batch_size, share_prefixes=share)
            assert [len(g) for g in got] == [3, 2]
            for g, w in zip(got, want, strict=True):
                assert g == pytest.approx(w, abs=1e-4)
    calls: list[int] = []
    handle = runner.model.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    try:
        default = option_logps(runner, prompts, options, "Rating:", share_prefixes=False)
        assert len(calls) == 1  # five options: one batch of up to 8
        option_logps(runner, prompts[:1], [[str(i) for i in range(9)]], "Rating:", share_prefixes=False)
    finally:
        handle.remove()
    assert len(calls) == 3  # nine options: 8 + 1
    assert default[1] == pytest.approx(want[1], abs=1e-4)


def test_a_failing_batch_loses_only_its_own_replies(gpt2: TransformersRunner) -> None:
    """A seed no generator takes fails its own batch (the middle one of three, by prompt length); the batches after
    it are still answered, each prompt exactly once."""
    prompts = ["xe", "The gay person is", "The person is very kind, smart"]
    settings = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=3, batch_size=1)
    replies = list(gpt2.generate(prompts, [1, 2**70, 3], settings))
    assert sorted(i for i, _ in replies) == [0, 1, 2]
    replies = dict(replies)
    bad = replies[1]
    assert bad.text is None and bad.meta == {"prompt_format": "plain"}
    assert bad.error.startswith("ValueError: ") and "Overflow" in bad.error
    for i in (0, 2):
        ok = replies[i]
        assert ok.error is None and isinstance(ok.text, str)
        assert ok.meta["prompt_format"] == "plain" and ok.meta["seed"] == [1, 2**70, 3][i]
        assert ok.meta["finish_reason"] in ("stop", "length") and 0 <= ok.meta["new_tokens"] <= 3
        assert set(ok.meta) == {"prompt_format", "seed", "new_tokens", "finish_reason"}


def test_the_device_reaches_the_model(folders, monkeypatch) -> None:
    """With CUDA unavailable, asking for it must fail: that shows the option reached the model's placement."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        load_causal_lm(str(folders["chat"]), device="cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        TransformersRunner(str(folders["chat"]), device="cuda")


# ------------------------------------------------------------------------------------------ decoding ---
@pytest.fixture(scope="module", params=["gpt2", "llama"])
def peaked(request, tmp_path_factory) -> TransformersRunner:
    """A tiny model with a large initialisation (peaked next-token distributions: no near-ties for greedy)."""
    root = tmp_path_factory.mktemp(f"peaked-{request.param}")
    path = tiny_gpt2(root) if request.param == "gpt2" else tiny_llama(root, chat_template=False)
    config = transformers.AutoConfig.from_pretrained(path)
    config.initializer_range = 0.5
    torch.manual_seed(3)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    with pytest.warns(UserWarning, match="no chat template"):
        return TransformersRunner(str(path))


def _greedy_reference(runner: TransformersRunner, seq: list[int], n: int, stop: set[int]) -> tuple[list[int], str]:
    """Greedy decoding by plain forward passes over the whole sequence (no cache, no padding, no batch)."""
    ids, new = list(seq), []
    for _ in range(n):
        with torch.inference_mode():
            tok = int(runner.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        if tok in stop:
            return new, "stop"
        new.append(tok)
        ids.append(tok)
    return new, "length"


PROMPTS = ["The gay person is", "xe", "He is a hero, and she is a singer, and they are", "The person is very kind"]


def test_greedy_decoding_equals_plain_forward_passes(peaked: TransformersRunner) -> None:
    tok = peaked.tokenizer
    seqs = [tok(peaked.format_prompt(p))["input_ids"] for p in PROMPTS]
    settings = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=6)
    free = [_greedy_reference(peaked, s, 6, peaked.stop_token_ids()) for s in seqs]
    assert peaked.decode(seqs, [1, 2, 3, 4], settings) == free
    # a stop token that some rows meet mid-reply: they stop there (the stop token not returned), the others go on
    stop = next(t for toks, _ in free for t in toks[1:] if 0 < sum(t in other for other, _ in free) < len(free))
    config = peaked.model.generation_config
    old = config.eos_token_id
    try:
        config.eos_token_id = stop
        want = [_greedy_reference(peaked, s, 6, peaked.stop_token_ids()) for s in seqs]
        assert peaked.decode(seqs, [1, 2, 3, 4], settings) == want
        assert {f for _, f in want} == {"stop", "length"}
        listed = list(peaked.generate(PROMPTS, [1, 2, 3, 4], GenerationSettings(temperature=0.0, max_new_tokens=6)))
        assert sorted(i for i, _ in listed) == [0, 1, 2, 3]  # each prompt answered once
        replies = dict(listed)
    finally:
        config.eos_token_id = old
    for i, (toks, finish) in enumerate(want):
        reply = replies[i]
        assert reply.text == tok.decode(toks, skip_special_tokens=True).strip()
        assert reply.meta["finish_reason"] == finish and reply.meta["new_tokens"] == len(toks)
        assert reply.truncated == (finish == "length")
    one = peaked.decode(seqs[:1], [0], GenerationSettings(temperature=0.0, max_new_tokens=1))
    assert one == [(free[0][0][:1], "length")]


def test_identical_prompts_and_lonely_rows(peaked: TransformersRunner) -> None:
    """Copies of one prompt (prefilled once) each get their own seed's reply, the one they get alone."""
    tok = peaked.tokenizer
    seqs = [tok(peaked.format_prompt(p))["input_ids"] for p in (PROMPTS[0], PROMPTS[1], PROMPTS[0], PROMPTS[0])]
    settings = GenerationSettings(temperature=1.0, top_p=None, max_new_tokens=5)
    together = peaked.decode(seqs, [5, 6, 7, 8], settings)
    alone = [peaked.decode([s], [seed], settings)[0] for s, seed in zip(seqs, [5, 6, 7, 8], strict=True)]
    assert together == alone
    assert len({tuple(t) for t, _ in (together[0], together[2], together[3])}) > 1


def _draws(logits: list[float], settings: GenerationSettings, n: int = 3000) -> torch.Tensor:
    rows = torch.tensor([logits] * n)
    gens = [torch.Generator().manual_seed(s) for s in range(n)]
    return torch.tensor(TransformersRunner._pick(rows, gens, settings))


def test_pick_greedy_temperature_and_nucleus() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2])).tolist()
    greedy = GenerationSettings(temperature=0.0, top_p=0.5)
    rows = torch.tensor([logits, [0.0, 2.0, 1.0]])
    assert TransformersRunner._pick(rows, [None, None], greedy) == [0, 1]  # argmax, no generator used

    def freq(draws: torch.Tensor) -> list[float]:
        return (torch.bincount(draws, minlength=3).float() / len(draws)).tolist()

    full = freq(_draws(logits, GenerationSettings(temperature=1.0, top_p=None)))
    assert full == pytest.approx([0.5, 0.3, 0.2], abs=0.04)
    unsorted = torch.log(torch.tensor([0.2, 0.5, 0.3])).tolist()
    assert torch.equal(  # top_p = 1 is no cut either: the very same draws
        _draws(unsorted, GenerationSettings(temperature=1.0, top_p=1.0)),
        _draws(unsorted, GenerationSettings(temperature=1.0, top_p=None)),
    )
    hot = torch.softmax(torch.tensor(logits) / 2.0, 0).tolist()  # temperature 2 flattens
    assert freq(_draws(logits, GenerationSettings(temperature=2.0, top_p=None))) == pytest.approx(hot, abs=0.04)
    # the nucleus: the smallest set of most likely tokens reaching top_p, renormalised
    assert freq(_draws(logits, GenerationSettings(temperature=1.0, top_p=0.6))) == pytest.approx(
        [0.5 / 0.8, 0.3 / 0.8, 0.0], abs=0.04
    )
    assert freq(_draws(logits, GenerationSettings(temperature=1.0, top_p=0.5))) == [1.0, 0.0, 0.0]  # 0.5 reaches it
    assert freq(_draws(logits, GenerationSettings(temperature=1.0, top_p=0.81)))[2] > 0.1
    assert freq(_draws(logits, GenerationSettings(temperature=1.0, top_p=1e-6))) == [1.0, 0.0, 0.0]


def test_pick_nucleus_beyond_the_top_64() -> None:
    """200 nearly equal tokens: the top 64 hold about a third of the mass, so the nucleus of top_p = 0.9 is looked for
    in the whole vocabulary: about 180 tokens, never the 20 least likely."""
    logits = torch.linspace(0.0, -0.2, 200).tolist()
    draws = _draws(logits, GenerationSettings(temperature=1.0, top_p=0.9), n=4000)
    probs = torch.softmax(torch.tensor(logits), 0)
    keep = int((probs.cumsum(0) - probs < 0.9).sum())
    assert 170 < keep < 190
    assert int(draws.max()) == keep - 1 and (draws >= 64).float().mean() > 0.5
    small = _draws(logits[:100], GenerationSettings(temperature=1.0, top_p=0.3), n=2000)  # inside the top 64
    p = torch.softmax(torch.tensor(logits[:100]), 0)
    assert int(small.max()) == int((p.cumsum(0) - p < 0.3).sum()) - 1


def test_special_tokens_are_added_only_without_a_chat_template(folders, tmp_path: Path) -> None:
    """A tokenizer that adds its BOS itself: a plain prompt gets it; a chat template's text is fed as it is."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    path = tiny_llama(tmp_path, name="bos")
    tok = AutoTokenizer.from_pretrained(path)
    tok._tokenizer.post_processor = TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", tok.convert_tokens_to_ids("<|endoftext|>"))]
    )
    tok.save_pretrained(path)
    first: list[int] = []

    def record(module, args, kwargs):
        first.append(int(kwargs["input_ids"][0, 0]))

    for chat_template in (True, False):
        if not chat_template:
            tok.chat_template = None
            tok.save_pretrained(path)
            (path / "chat_template.jinja").unlink(missing_ok=True)
        runner = TransformersRunner(str(path)) if chat_template else _plain(path)
        assert runner.has_chat_template == chat_template
        handle = runner.model.register_forward_pre_hook(record, with_kwargs=True)
        try:
            first.clear()
            dict(runner.generate(["xe"], [0], GenerationSettings(temperature=0.0, max_new_tokens=1)))
        finally:
            handle.remove()
        assert (first[0] == tok.bos_token_id) == (not chat_template), chat_template
        # and option scoring: the context as the model sees it, each option without added tokens
        got = option_logps(runner, ["Rate xe."], [["1", "warm"]], "Rating:")
        want = [_brute_option_logprob(runner, "Rate xe.", "Rating:", o) for o in ("1", "warm")]
        assert got[0] == pytest.approx(want, abs=1e-4)


def _plain(path: Path) -> TransformersRunner:
    with pytest.warns(UserWarning, match="no chat template"):
        return TransformersRunner(str(path))


def test_decoding_passes(peaked: TransformersRunner) -> None:
    """Through transformers' forward: the prefill computes the last position's logits only; a reply of n tokens
    takes the prefill and n - 1 steps; rows that stop leave the batch (later steps run fewer rows)."""
    tok = peaked.tokenizer
    seqs = [tok(peaked.format_prompt(p))["input_ids"] for p in PROMPTS]
    calls: list[tuple[int, int]] = []

    def record(module, args, kwargs, output):
        calls.append((kwargs["input_ids"].shape[0], output.logits.shape[1]))

    settings = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=6)
    free = [_greedy_reference(peaked, s, 6, peaked.stop_token_ids()) for s in seqs]
    stop = next(t for toks, _ in free for t in toks[1:] if 0 < sum(t in other for other, _ in free) < len(free))
    handle = peaked.model.register_forward_hook(record, with_kwargs=True)
    config = peaked.model.generation_config
    old = config.eos_token_id
    try:
        assert [f for _, f in peaked.decode(seqs, [0] * 4, settings)] == [f for _, f in free]
        assert calls[0] == (4, 1) and len(calls) == 6 and all(rows == 4 for rows, _ in calls)
        calls.clear()
        config.eos_token_id = stop
        peaked.decode(seqs, [0] * 4, settings)
    finally:
        config.eos_token_id = old
        handle.remove()
    assert calls[0] == (4, 1) and min(rows for rows, _ in calls) < 4


@pytest.mark.parametrize("convention", [PastKeyValuesLM, CacheOnlyLM, NoLogitsToKeepLM])
def test_other_transformers_conventions_decode_the_same(peaked: TransformersRunner, convention, monkeypatch) -> None:
    """The KV cache under transformers 4.48's names (``past_key_values``, ``num_logits_to_keep``) and under
    transformers 5's without its aliases (``cache`` only), from a model that caches only when asked: the same greedy
    and sampled replies (identical prompts included), every call asks for the cache, each step reuses it, and the
    prefill asks for the last position's logits only."""
    tok = peaked.tokenizer
    seqs = [tok(peaked.format_prompt(p))["input_ids"] for p in (*PROMPTS, PROMPTS[0])]
    greedy = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=5)
    sampled = GenerationSettings(temperature=1.0, top_p=0.9, max_new_tokens=5)
    want = [peaked.decode(seqs, [1, 2, 3, 4, 5], s) for s in (greedy, sampled)]
    wrapped = convention(peaked.model)
    monkeypatch.setattr(peaked, "model", wrapped)
    assert [peaked.decode(seqs, [1, 2, 3, 4, 5], s) for s in (greedy, sampled)] == want
    name = "cache" if convention is CacheOnlyLM else "past_key_values"
    assert len(wrapped.calls) == 2 * 5 and all(c["use_cache"] is True for c in wrapped.calls)
    prefills = [c for c in wrapped.calls if c[name] is None]
    keep = 0 if convention is NoLogitsToKeepLM else 1  # the last position only, where the model can be asked
    assert len(prefills) == 2 and all(c["keep"] == keep for c in prefills)


def test_model_kind_asks_for_the_revision_it_is_given(folders, config_calls) -> None:
    config_calls.clear()
    assert model_kind(str(folders["gpt2"]), revision="v9") == "causal"
    assert [kw.get("revision") for _, kw in config_calls] == ["v9"]
    config_calls.clear()
    model_kind(str(folders["gpt2"]))
    assert [kw.get("revision") for _, kw in config_calls] == [None]


def test_the_runner_loads_the_revision_it_is_given(folders, config_calls) -> None:
    config_calls.clear()
    TransformersRunner(str(folders["chat"]), revision="abc")
    assert config_calls and all(kw.get("revision") == "abc" for _, kw in config_calls)


def test_replies_leave_special_tokens_out(peaked: TransformersRunner, monkeypatch) -> None:
    """With no stop token, very hot sampling (temperature 50) meets the end-of-text token mid-reply: the reply's text is its tokens
    decoded without special tokens, so no marker like ``<|endoftext|>`` reaches the parser."""
    monkeypatch.setattr(peaked, "stop_token_ids", lambda: set())
    special = set(peaked.tokenizer.all_special_ids)
    settings = GenerationSettings(temperature=50.0, top_p=None, max_new_tokens=16, batch_size=128)
    seeds = list(range(128))
    replies = dict(peaked.generate([PROMPTS[0]] * 128, seeds, settings))
    prompt = peaked.tokenizer(peaked.format_prompt(PROMPTS[0]), add_special_tokens=not peaked.has_chat_template)
    tokens = [t for t, _ in peaked.decode([prompt["input_ids"]] * 128, seeds, settings)]
    assert any(special & set(t) for t in tokens)  # the case this test is about does occur
    for i, toks in enumerate(tokens):
        assert replies[i].text == peaked.tokenizer.decode(toks, skip_special_tokens=True).strip()
        assert not any(peaked.tokenizer.convert_ids_to_tokens(t) in replies[i].text for t in special)


@pytest.mark.parametrize("drop_rows", [True, False])
def test_rows_that_stop_early_with_either_kind_of_cache(peaked: TransformersRunner, drop_rows, monkeypatch) -> None:
    """A cache that drops finished rows and one that cannot (the rows that stopped stay in the batch, fed padding):
    every reply is still its plain-forward greedy one, stopping where it meets the stop token; and when every row
    has stopped before the last step, decoding ends there."""
    tok = peaked.tokenizer
    seqs = [tok(peaked.format_prompt(p))["input_ids"] for p in PROMPTS]
    settings = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=6)
    free = [_greedy_reference(peaked, s, 6, peaked.stop_token_ids()) for s in seqs]
    stop = next(t for toks, _ in free for t in toks[1:] if 0 < sum(t in other for other, _ in free) < len(free))
    config = peaked.model.generation_config
    monkeypatch.setattr(config, "eos_token_id", stop)
    want = [_greedy_reference(peaked, s, 6, peaked.stop_token_ids()) for s in seqs]
    assert {f for _, f in want} == {"stop", "length"}
    monkeypatch.setattr(peaked, "model", CacheOnlyLM(peaked.model, use_cache_default=True, drop_rows=drop_rows))
    assert peaked.decode(seqs, [1, 2, 3, 4], settings) == want
    first = free[0][0]
    monkeypatch.setattr(config, "eos_token_id", first[1])  # row 0's second greedy token: it stops there at the latest
    assert peaked.decode(seqs[:1], [0], settings) == [(first[: first.index(first[1])], "stop")]
