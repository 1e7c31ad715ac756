"""The local causal-LM runner on tiny random GPT-2 and Llama models (with and without a chat template).

A sampled reply depends only on (prompt, seed), not on its batch; greedy decoding is deterministic and equals
transformers' own ``generate``; finish reasons are right; a masked LM or a missing folder is refused before any
weights load, in one line.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from queerbench.cli import main
from queerbench.models.device import ModelLoadError, resolve_device
from queerbench.models.generation import (
    GenerationSettings,
    TransformersRunner,
    check_causal_lm,
    load_causal_lm,
    load_runner,
    model_kind,
)
from tests.tiny_models import tiny_bert, tiny_gpt2, tiny_llama

PROMPTS = [
    "The gay person is",
    "He is a hero, and she is a singer, and they are the best choice for the job because",
    "xe",
    "The person is very kind, smart and funny. The man and the woman were",
    "The nonbinary person tends to",
]


@pytest.fixture(scope="module", params=["gpt2", "llama-chat", "llama-plain"])
def runner(request, tmp_path_factory) -> TransformersRunner:
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "gpt2":
        path = tiny_gpt2(folder)
    else:
        path = tiny_llama(folder, chat_template=request.param == "llama-chat")
    with pytest.warns(UserWarning, match="no chat template") if request.param != "llama-chat" else nullcontext():
        r = TransformersRunner(str(path))
    assert r.prompt_format == ("chat" if request.param == "llama-chat" else "plain")
    return r


def _texts(runner: TransformersRunner, prompts: list[str], seeds: list[int], **kw) -> list[str]:
    replies = dict(runner.generate(prompts, seeds, GenerationSettings(**kw)))
    assert sorted(replies) == list(range(len(prompts)))
    assert all(r.error is None for r in replies.values())
    return [replies[i].text for i in range(len(prompts))]


@pytest.mark.parametrize("top_p", [0.9, None])
def test_a_sampled_reply_does_not_depend_on_its_batch(runner, top_p) -> None:
    seeds = [11, 22, 33, 44, 55]
    kw = {"temperature": 1.0, "top_p": top_p, "max_new_tokens": 12}
    together = _texts(runner, PROMPTS, seeds, batch_size=5, **kw)
    pairs = _texts(runner, PROMPTS[::-1], seeds[::-1], batch_size=2, **kw)[::-1]  # other neighbours, other padding
    alone = [_texts(runner, [p], [s], batch_size=1, **kw)[0] for p, s in zip(PROMPTS, seeds, strict=True)]
    assert together == alone == pairs
    assert _texts(runner, PROMPTS, seeds, batch_size=5, **kw) == together  # and reproducible
    other_seeds = _texts(runner, PROMPTS, [s + 1 for s in seeds], batch_size=5, **kw)
    assert other_seeds != together  # the seed matters: sampling is really sampling
    same_prompt = _texts(runner, [PROMPTS[0]] * 4, [1, 2, 3, 4], batch_size=4, **kw)
    assert len(set(same_prompt)) > 1  # one generator per row, not one per batch


def test_samples_of_one_prompt_share_one_prefill_and_equal_their_replies_alone(runner) -> None:
    """The k samples of a prompt are prefilled once (the batch's first forward pass has one row per distinct prompt)
    and each sample's reply is the one it gets decoded alone with its seed."""
    kw = {"temperature": 1.0, "top_p": None, "max_new_tokens": 10}
    prompts = [PROMPTS[0]] * 3 + [PROMPTS[1]] * 2 + [PROMPTS[0]]
    seeds = [5, 6, 7, 8, 9, 10]
    prefill_rows: list[int] = []

    def record(module, args):  # the first call of each batch is the prefill, then one per decoding step
        prefill_rows.append(args[0].shape[0])

    # the token embedding sees every forward pass: the prefill and each decoding step
    handle = runner.model.get_input_embeddings().register_forward_pre_hook(record)
    try:
        together = _texts(runner, prompts, seeds, batch_size=6, **kw)
    finally:
        handle.remove()
    assert prefill_rows[0] == 2  # two distinct prompts, six rows
    assert set(prefill_rows[1:]) <= set(range(1, 7)) and max(prefill_rows[1:]) == 6  # then all six rows decode
    alone = [_texts(runner, [p], [s], batch_size=1, **kw)[0] for p, s in zip(prompts, seeds, strict=True)]
    assert together == alone
    assert len(set(together[:3])) > 1  # same prompt, own seeds: the copies of the cache do not share a generator


def test_greedy_is_deterministic_batch_independent_and_equals_transformers_generate(runner) -> None:
    kw = {"temperature": 0.0, "top_p": None, "max_new_tokens": 10}
    batched = _texts(runner, PROMPTS, [1, 2, 3, 4, 5], batch_size=5, **kw)
    assert _texts(runner, PROMPTS, [9, 8, 7, 6, 5], batch_size=2, **kw) == batched  # seeds do not matter
    tok = runner.tokenizer
    for prompt, text in zip(PROMPTS, batched, strict=True):
        enc = tok(runner.format_prompt(prompt), add_special_tokens=not runner.has_chat_template, return_tensors="pt")
        with torch.no_grad():
            out = runner.model.generate(**enc, max_new_tokens=10, do_sample=False, pad_token_id=tok.pad_token_id)
        assert tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True).strip() == text


def test_finish_reason_stop_and_length(runner) -> None:
    settings = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=3)
    (_, capped), *_ = runner.generate([PROMPTS[0]], [0], settings)
    assert capped.meta["finish_reason"] in ("stop", "length")
    assert capped.truncated == (capped.meta["finish_reason"] == "length")
    assert capped.meta["new_tokens"] == 3 if capped.truncated else capped.meta["new_tokens"] < 3
    # make the model's greedy first token a stop token: the reply is then empty and finished by itself
    config = runner.model.generation_config
    old = config.eos_token_id
    try:
        config.eos_token_id = sorted(runner.stop_token_ids() | {_greedy_first(runner, PROMPTS[0])})
        (_, stopped), *_ = runner.generate([PROMPTS[0]], [0], settings)
    finally:
        config.eos_token_id = old
    assert stopped.text == "" and stopped.meta["finish_reason"] == "stop" and not stopped.truncated
    assert stopped.meta["new_tokens"] == 0


def test_rows_that_stop_leave_the_batch_without_changing_the_others(runner) -> None:
    tok = runner.tokenizer
    seqs = [tok(runner.format_prompt(p), add_special_tokens=not runner.has_chat_template)["input_ids"] for p in PROMPTS]
    settings = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=8)
    free = runner.decode(seqs, [0] * len(seqs), settings)
    # a token some rows produce (and so stop at, mid-reply) and others never do
    stop = next(t for toks, _ in free for t in toks[1:] if 0 < sum(t in other for other, _ in free) < len(free))
    config = runner.model.generation_config
    old = config.eos_token_id
    try:
        config.eos_token_id = sorted(runner.stop_token_ids() | {stop})
        batch = runner.decode(seqs, [0] * len(seqs), settings)
        alone = [runner.decode([s], [0], settings)[0] for s in seqs]
    finally:
        config.eos_token_id = old
    assert batch == alone
    assert {f for _, f in batch} == {"stop", "length"}  # some rows stopped early, others ran to the cap
    for (toks, f), (full, _) in zip(batch, free, strict=True):
        assert toks == (full[: full.index(stop)] if f == "stop" else full)


def _greedy_first(runner: TransformersRunner, prompt: str) -> int:
    enc = runner.tokenizer(
        runner.format_prompt(prompt), add_special_tokens=not runner.has_chat_template, return_tensors="pt"
    )
    with torch.no_grad():
        return int(runner.model(**enc).logits[0, -1].argmax())


def test_system_prompt_changes_the_prompt_and_the_fingerprint(tmp_path) -> None:
    path = str(tiny_llama(tmp_path))
    plain, system = TransformersRunner(path), TransformersRunner(path, system_prompt="Be brief.")
    assert plain.fingerprint() != system.fingerprint() and system.fingerprint()["system"] == "Be brief."
    assert "Be brief." in system.format_prompt("hi") and "Be brief." not in plain.format_prompt("hi")


def test_masked_lm_and_missing_folders_are_refused_before_loading_weights(tmp_path, capsys) -> None:
    bert = tiny_bert(tmp_path)
    (bert / "model.safetensors").unlink()  # the check reads the config only: no weights needed to refuse
    assert model_kind(str(bert)) == "masked"
    with pytest.raises(ModelLoadError, match=r"BertForMaskedLM.*masked LM.*--method mlm"):
        check_causal_lm(str(bert))
    with pytest.raises(ModelLoadError, match="masked LM"):
        load_causal_lm(str(bert))
    assert model_kind(str(tiny_gpt2(tmp_path))) == "causal" and model_kind(str(tiny_llama(tmp_path))) == "causal"
    assert model_kind(None) == "causal"  # the embedded SmolLM2
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_runner("/no/such/dir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        check_causal_lm(str(tmp_path / "empty"))
    for model, needle in (("/no/such/dir", "no such file or folder"), (str(bert), "masked LM")):
        code = main(["scm", "run", "--model", model, "--limit", "1", "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err
        errors = [line for line in err.splitlines() if line.startswith("queerbench: error:")]
        assert len(errors) == 1 and needle in errors[0], err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_load_causal_lm_pads_left_and_auto_device_order(tmp_path, monkeypatch) -> None:
    model, tok = load_causal_lm(str(tiny_gpt2(tmp_path)))
    assert tok.padding_side == "left" and tok.pad_token_id is not None and not model.training
    assert resolve_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):  # checked before any model loads
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match="dtype"):
        load_causal_lm(str(tiny_gpt2(tmp_path)), dtype="int8")


def test_changed_weights_in_the_same_folder_never_reuse_cached_replies(tmp_path) -> None:
    import pandas as pd
    from transformers import AutoModelForCausalLM

    from queerbench.models.generation import ResponseCache, collect

    folder = tiny_llama(tmp_path)
    rows = pd.DataFrame({"id": ["a", "b"], "prompt": PROMPTS[:2]})
    settings = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=4)
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        first = collect(TransformersRunner(str(folder)), rows, settings, cache)
        assert collect(TransformersRunner(str(folder)), rows, settings, cache)["cached"].all()  # same weights: hit
        model = AutoModelForCausalLM.from_pretrained(folder)
        with torch.no_grad():
            model.lm_head.weight.mul_(-1.0)  # same folder, same config, other weights ("retrained")
        model.save_pretrained(folder)
        again = collect(TransformersRunner(str(folder)), rows, settings, cache)
    assert not again["cached"].any() and len(first) == len(again) == 2
