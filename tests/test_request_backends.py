"""The request backends (queerbench.models.backends): each request type on each backend, checked against the model
computed directly; the one-line refusal of a type a model cannot answer, before any weight loads; batching
invariance; a causal LM's loglikelihood equal to its own loss; an endpoint's loglikelihood equal to the local model's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from queerbench.models.backends import (
    backend_request_types,
    check_request_type,
    open_backend,
)
from queerbench.models.backends.masked import candidate_pieces
from queerbench.models.registry import model_ref
from queerbench.models.requests import (
    FillMask,
    Generate,
    Loglikelihood,
    UnsupportedRequestError,
)
from queerbench.models.spec import ModelSpec
from tests.completions_server import CompletionsServer
from tests.openai_server import FakeOpenAI
from tests.tiny_models import tiny_bert, tiny_gpt2, tiny_llama, tiny_roberta

TEXTS = (
    "The gay person is a teacher.",
    "He is.",
    "The nonbinary person tends to paint (and sing).",
    "xe is known as a writer; ze is an artist!",
    "The person is very kind, smart and funny.",
)
"""Texts of different lengths, so that batches are padded."""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("backends")
    return {
        "bert": tiny_bert(root),
        "roberta": tiny_roberta(root),
        "gpt2": tiny_gpt2(root),
        "llama": tiny_llama(root),
    }


def quiet(_: str) -> None:
    return None


@pytest.fixture(scope="module")
def backends(models: dict[str, Path]) -> dict[str, object]:
    """One opened backend per tiny model (batch size 3: batches of several padded rows)."""
    opened = {}
    for name, path in models.items():
        kind = "fill_mask" if name in ("bert", "roberta") else "loglikelihood"
        opened[name] = open_backend(model_ref(str(path)), kind, ModelSpec(device="cpu", batch_size=3), log=quiet)
    return opened


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# ------------------------------------------------------------------------------------------------ request types --
def test_request_types_come_from_the_config_alone(models: dict[str, Path], tmp_path: Path) -> None:
    for name in models:
        folder = shutil.copytree(models[name], tmp_path / name)
        for weights in folder.glob("*.safetensors"):
            weights.unlink()  # nothing below may read weights
        types = backend_request_types(model_ref(str(folder)))
        masked = name in ("bert", "roberta")
        assert types == ({"fill_mask", "loglikelihood"} if masked else {"fill_mask", "loglikelihood", "generate"})
    embedded = backend_request_types(model_ref("embedded:smollm2-135m-instruct"))
    assert embedded == {"fill_mask", "loglikelihood", "generate"}
    # a served model: chat replies, and on its completions route the loglikelihood and the top-k words of a blank
    served = backend_request_types(model_ref("served", "http://127.0.0.1:9/v1"))
    assert served == {"fill_mask", "generate", "loglikelihood"}


def test_unsupported_type_is_refused_in_one_line_before_any_weight_loads(
    models: dict[str, Path], tmp_path: Path
) -> None:
    bert = shutil.copytree(models["bert"], tmp_path / "bert")
    for weights in bert.glob("*.safetensors"):
        weights.unlink()  # a load would fail with another error: the refusal must come first
    ref = model_ref(str(bert))
    for call in (lambda: check_request_type(ref, "generate"), lambda: open_backend(ref, "generate", log=quiet)):
        with pytest.raises(UnsupportedRequestError) as caught:
            call()
        message = one_line(caught)
        assert str(bert) in message and "generate" in message and "fill_mask, loglikelihood" in message
        assert "a causal LM" in message  # the fix: which model answers it
    gpt2 = model_ref(str(models["gpt2"]))
    check_request_type(gpt2, "fill_mask")  # a causal LM answers the top-k words of a blank (proposed and ranked)
    from queerbench.models.device import ModelLoadError

    served = model_ref("served", "http://user:hunter2@127.0.0.1:9/v1")
    check_request_type(served, "fill_mask")  # so does a served one, on its completions route
    # a served model where a method needs another kind: refused before any request, its URL without credentials
    with pytest.raises(ModelLoadError) as caught:
        open_backend(served, "fill_mask", log=quiet, model_kind="masked", model_kind_for="mlm")
    message = one_line(caught)
    assert "served at http://127.0.0.1:9/v1" in message and "hunter2" not in message
    assert "is an OpenAI-compatible endpoint; mlm runs on a masked LM" in message
    with pytest.raises(ValueError, match="unknown request type 'rank'"):
        check_request_type(gpt2, "rank")


def test_each_backend_refuses_in_one_line_what_it_does_not_answer(backends: dict[str, object]) -> None:
    with pytest.raises(UnsupportedRequestError) as caught:
        backends["bert"].generate([Generate("Hello")])
    assert "cannot answer generate" in one_line(caught)
    # a causal LM answers the top-k words of a blank, not a candidate list nor a masked LM's raw vocabulary entries
    many = tuple(f"w{i}" for i in range(9))
    for request, asked, fix in (
        (FillMask("The [MASK] is.", ("person",)), "the candidate words ['person']", "ask loglikelihood of each"),
        (FillMask("The [MASK] is.", many), "['w0', 'w1', 'w2', 'w3', 'w4', …]", "filled sentence instead"),
        (FillMask("The [MASK] is.", top_k=2, mode="raw"), "not raw top-k tokens", "ask mode 'whole_word'"),
    ):
        with pytest.raises(UnsupportedRequestError) as caught:
            backends["gpt2"].fill_mask([FillMask("A [MASK] is.", top_k=1), request])
        assert "is a causal LM" in one_line(caught) and asked in str(caught.value) and fix in str(caught.value)
    with pytest.raises(ValueError, match="needs one \\[MASK\\] in its text"):
        FillMask(float("nan"), top_k=1)  # type: ignore[arg-type]  # a missing sentence (NaN) is one line


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_causal_lm_answers_top_k_fill_mask_as_the_ranking_engine_does(backends: dict[str, object], name: str) -> None:
    """Top-k fill_mask requests on a causal LM are the ranking engine's results for those sentences, number for
    number, whatever their order and mix of k (each k's sentences run together); every sentence is ticked once."""
    from queerbench.models.causal_blanks.local import ScoredLM, score_blanks

    backend = backends[name]
    sentences = ["The gay person is a [MASK].", "[MASK] is a nurse.", "They work as a [MASK] in the city."]
    ks = [3, 2, 3]
    ticks: list[int] = []
    got = backend.fill_mask([FillMask(s, top_k=k) for s, k in zip(sentences, ks, strict=True)], ticks.append)
    assert sum(ticks) == len(sentences)
    lm = ScoredLM(backend.model, backend.tokenizer)
    for k in (2, 3):
        idx = [i for i, kk in enumerate(ks) if kk == k]
        want = score_blanks(lm, [sentences[i] for i in idx], k, batch_size=3)
        for j, i in enumerate(idx):
            assert list(got[i].words) == want.tokens[j] and len(got[i].words) <= k
            assert list(got[i].probs) == want.probs[j] and list(got[i].logprobs) == want.logprobs[j]
            assert list(got[i].n_tokens) == want.n_word_tokens[j] and got[i].token_ids == ()
    assert backend.blank_filler() is backend.blank_filler()  # the engine's tables are built once


def test_a_chat_loglikelihood_is_refused_in_one_line_where_there_is_no_prompt_to_reply_to(
    backends: dict[str, object], models: dict[str, Path]
) -> None:
    chat = [Loglikelihood("Rate xe.", " 3", chat=True, reply_prefix="Rating:")]
    with pytest.raises(UnsupportedRequestError) as caught:
        backends["bert"].loglikelihood(chat)
    assert "cannot score a reply to a chat prompt (a masked LM" in one_line(caught)
    with CompletionsServer(models["gpt2"]) as server:
        backend = open_backend(model_ref("tiny", server.url), "loglikelihood", log=quiet)
        with pytest.raises(UnsupportedRequestError) as caught:
            backend.loglikelihood(chat)
    assert "cannot score a reply to a chat prompt (a completions endpoint" in one_line(caught) and not server.bodies
    with pytest.raises(ValueError, match="reply_prefix opens a chat reply"):
        Loglikelihood("Rate xe.", " 3", reply_prefix="Rating:")
    with pytest.raises(ValueError, match="needs a continuation"):
        Loglikelihood("Rate xe.", "", chat=True)


def test_a_chat_loglikelihood_scores_the_reply_after_the_formatted_prompt(backends: dict[str, object]) -> None:
    """The context as the model reads a prompt (its chat template, the assistant's turn open), the reply prefix, the
    continuation encoded on its own: equal to one forward pass over those ids."""
    backend = backends["llama"]
    runner, tok = backend.runner, backend.tokenizer
    got = backend.loglikelihood([Loglikelihood("Rate xe.", " warm", chat=True, reply_prefix="Answer:")])[0]
    context = tok(runner.format_prompt("Rate xe.") + "Answer:", add_special_tokens=False)["input_ids"]
    reply = tok(" warm", add_special_tokens=False)["input_ids"]
    assert runner.format_prompt("Rate xe.").startswith("<|user|>") and got.n_tokens == len(reply)
    with torch.inference_mode():
        logp = torch.log_softmax(backend.model(input_ids=torch.tensor([context + reply])).logits[0].float(), -1)
    want = sum(float(logp[len(context) - 1 + j, t]) for j, t in enumerate(reply))
    assert got.logprob == pytest.approx(want, abs=1e-4)


# ------------------------------------------------------------------------------------------------- masked LM --
def masked_reference(path: Path, text: str, candidate: str, pieces: list[int]) -> float:
    """A candidate's log-probability computed directly: as many mask tokens as pieces, one full forward pass."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForMaskedLM.from_pretrained(path).eval()
    ids = tok(text.replace("[MASK]", tok.mask_token * len(pieces)))["input_ids"]
    where = [i for i, t in enumerate(ids) if t == tok.mask_token_id]
    assert len(where) == len(pieces)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    return float(sum(logp[p, t] for p, t in zip(where, pieces, strict=True)))


def test_candidate_pieces_are_the_word_as_written_in_the_sentence(backends: dict[str, object]) -> None:
    roberta = backends["roberta"].lm.tokenizer
    after_space = roberta.convert_ids_to_tokens(candidate_pieces(roberta, "The person is a ", "doctor"))
    at_start = roberta.convert_ids_to_tokens(candidate_pieces(roberta, "", "doctor"))
    assert after_space[0].startswith("Ġ") and not at_start[0].startswith("Ġ")
    assert after_space == roberta.convert_ids_to_tokens(roberta(" doctor", add_special_tokens=False)["input_ids"])
    bert = backends["bert"].lm.tokenizer
    assert bert.convert_ids_to_tokens(candidate_pieces(bert, "The person is a ", "Doctors")) == ["doctor", "##s"]


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_fill_mask_sums_each_piece_with_all_pieces_masked(
    name: str, models: dict[str, Path], backends: dict[str, object]
) -> None:
    backend = backends[name]
    tok = backend.lm.tokenizer
    requests = [
        FillMask("The person is a [MASK].", ("doctor", "teacher", "doctors", "gay")),
        FillMask("[MASK] is a great doctor.", ("The", "xe", "They")),
    ]
    results = backend.fill_mask(requests)
    multi = 0
    for request, result in zip(requests, results, strict=True):
        before = request.text.split("[MASK]")[0]
        assert len(result.logprobs) == len(request.candidates)
        for candidate, value in zip(request.candidates, result.logprobs, strict=True):
            pieces = candidate_pieces(tok, before, candidate)
            multi += len(pieces) > 1
            assert value == pytest.approx(masked_reference(models[name], request.text, candidate, pieces), abs=1e-5)
    assert multi  # some candidate is several pieces


@pytest.mark.parametrize("name", ["bert", "roberta"])
@pytest.mark.parametrize("mode", ["whole_word", "raw"])
def test_a_top_k_fill_mask_is_the_engines_top_k_and_keeps_its_place_among_candidates(
    name: str, mode: str, backends: dict[str, object]
) -> None:
    """The ``mlm`` method's open prediction through the request seam: the masked-LM engine's top-k, whatever the
    batch's mix of top-k and candidate requests (each result stays at its request's place)."""
    from queerbench.models.masked.predict import predict

    backend = backends[name]
    texts = [t.replace("person", "[MASK]", 1) for t in TEXTS if "person" in t]
    engine = predict(backend.lm, texts, 4, mode=mode, batch_size=3)
    scored = FillMask("The person is a [MASK].", ("doctor", "teacher"))
    requests = [FillMask(t, top_k=4, mode=mode) for t in texts]
    mixed = [requests[0], scored, *requests[1:]]
    ticks: list[int] = []
    results = backend.fill_mask(mixed, ticks.append)
    assert results[1] == backend.fill_mask([scored])[0] and not results[1].words
    for at, result in enumerate([results[0], *results[2:]]):
        assert list(result.words) == engine.tokens[at] and list(result.token_ids) == engine.ids[at]
        assert list(result.probs) == engine.probs[at] and not result.logprobs
    assert sum(ticks) == len(mixed)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"candidates": ("a",), "top_k": 3}, "a top-k fill_mask request needs top_k >= 1 and no candidates"),
        ({"top_k": -1}, "a top-k fill_mask request needs top_k >= 1"),
        ({"top_k": 2, "mode": "pieces"}, "a fill_mask request's mode is one of whole_word, raw, got 'pieces'"),
        ({}, "a fill_mask request needs non-empty candidate words (or a top_k)"),
    ],
)
def test_a_fill_mask_request_asks_for_candidates_or_a_top_k(fields: dict, says: str) -> None:
    with pytest.raises(ValueError) as info:
        FillMask("The person is [MASK].", **fields)
    assert says in one_line(info)


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_masked_results_do_not_depend_on_the_batch_size(name: str, models: dict[str, Path]) -> None:
    fills = [FillMask(t.replace("person", "[MASK]", 1), ("person", "doctors", "xe")) for t in TEXTS if "person" in t]
    scores = [Loglikelihood("", t) for t in TEXTS] + [Loglikelihood("The person is ", "kind.")]
    got = []
    for size in (1, 4):
        backend = open_backend(
            model_ref(str(models[name])), "fill_mask", ModelSpec(device="cpu", batch_size=size), log=quiet
        )
        got.append((backend.fill_mask(fills), backend.loglikelihood(scores)))
    (fill_1, ll_1), (fill_4, ll_4) = got
    for a, b in zip(fill_1, fill_4, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    for a, b in zip(ll_1, ll_4, strict=True):
        assert a.n_tokens == b.n_tokens and a.logprob == pytest.approx(b.logprob, abs=1e-5)


def test_masked_loglikelihood_is_the_pseudo_log_likelihood(
    models: dict[str, Path], backends: dict[str, object]
) -> None:
    from transformers import AutoModelForMaskedLM

    backend = backends["roberta"]
    tok = backend.lm.tokenizer
    model = AutoModelForMaskedLM.from_pretrained(models["roberta"]).eval()
    context, continuation = "The person is", " very kind."
    ids = tok(context + continuation)["input_ids"]
    n_context = len(tok(context, add_special_tokens=False)["input_ids"])
    scored = list(range(1 + n_context, len(ids) - 1))  # after <s> and the context, before </s>
    expected = 0.0
    for p in scored:  # Salazar et al.: each continuation token masked in turn
        masked = [*ids[:p], tok.mask_token_id, *ids[p + 1 :]]
        with torch.no_grad():
            expected += float(torch.log_softmax(model(torch.tensor([masked])).logits[0, p], dim=-1)[ids[p]])
    with_context, whole = backend.loglikelihood(
        [Loglikelihood(context + " ", continuation.lstrip()), Loglikelihood("", context + continuation)]
    )
    assert with_context.n_tokens == len(scored) and with_context.logprob == pytest.approx(expected, abs=1e-5)
    assert whole.n_tokens == len(ids) - 2  # every token but <s> and </s>
    assert whole.logprob < with_context.logprob  # the context's tokens are scored only when they are the text


# ------------------------------------------------------------------------------------------------- causal LM --
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_loglikelihood_is_minus_the_models_loss(name: str, backends: dict[str, object], models) -> None:
    backend = backends[name]  # batch size 3: rows of different lengths padded together
    results = backend.loglikelihood([Loglikelihood("", t) for t in TEXTS])
    one_by_one = open_backend(
        model_ref(str(models[name])), "loglikelihood", ModelSpec(device="cpu", batch_size=1), log=quiet
    )
    for text, result, alone in zip(
        TEXTS, results, one_by_one.loglikelihood([Loglikelihood("", t) for t in TEXTS]), strict=True
    ):
        ids = torch.tensor([backend.tokenizer(text)["input_ids"]])
        with torch.no_grad():
            loss = float(backend.model(ids, labels=ids).loss)
        assert result.n_tokens == ids.shape[1] - 1
        assert -result.mean == pytest.approx(loss, abs=1e-5)
        assert result.logprob == pytest.approx(alone.logprob, abs=1e-5) and result.n_tokens == alone.n_tokens


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_loglikelihood_with_a_context_scores_the_continuation(name: str, backends: dict[str, object]) -> None:
    backend = backends[name]
    context, continuation = "The gay person is ", "a teacher."
    tok = backend.tokenizer
    assert (
        tok(context.rstrip() + " " + continuation)["input_ids"][: len(tok(context.rstrip())["input_ids"])]
        == tok(context.rstrip())["input_ids"]
    )  # a clean split, so the property below holds
    with_context, whole, head = backend.loglikelihood(
        [
            Loglikelihood(context, continuation),
            Loglikelihood("", context + continuation),
            Loglikelihood("", context.rstrip()),
        ]
    )
    # log P(continuation | context) = log P(whole text) - log P(context): the continuation's tokens only
    assert with_context.logprob == pytest.approx(whole.logprob - head.logprob, abs=1e-4)
    assert with_context.n_tokens == whole.n_tokens - head.n_tokens


def test_causal_generate_is_greedy_with_the_chat_template(backends: dict[str, object]) -> None:
    backend = backends["llama"]
    requests = [Generate("The person is", 6), Generate("Hello there, who are you?", 3), Generate("xe", 6)]
    ticks: list[int] = []
    results = backend.generate(requests, tick=ticks.append)
    assert sum(ticks) == len(requests)
    tok, model = backend.tokenizer, backend.model
    for request, result in zip(requests, results, strict=True):
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": request.prompt}], tokenize=False, add_generation_prompt=True
        )
        ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=request.max_new_tokens, do_sample=False, pad_token_id=0)
        new = out[0, ids.shape[1] :].tolist()
        new = new[: new.index(0)] if 0 in new else new  # the stop token ends the reply
        assert result.text == tok.decode(new, skip_special_tokens=True).strip()
        assert result.truncated == (len(new) == request.max_new_tokens)


def test_a_system_prompt_comes_before_every_generate_request_of_a_local_model(models: dict[str, Path]) -> None:
    spec = ModelSpec(device="cpu")
    backend = open_backend(model_ref(str(models["llama"])), "generate", spec, log=quiet, system_prompt="Be brief.")
    runner = backend.generator()  # type: ignore[attr-defined]
    assert runner.fingerprint()["system"] == "Be brief."  # so in every reply's cache key
    assert runner.format_prompt("Hi") == backend.tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    with pytest.raises(ValueError) as info:
        open_backend(model_ref(str(models["bert"])), "fill_mask", spec, log=quiet, system_prompt="Be brief.")
    assert one_line(info) == (
        f"--model {models['bert']} is a masked LM: a system prompt is for a model that generates text"
    )


def test_a_probes_run_opens_its_model_as_the_backend_that_answers_generate(models: dict[str, Path]) -> None:
    from queerbench.models.backends import GenerateBackend
    from queerbench.run.probes import open_probe_model

    class Plan:
        def generator_options(self) -> dict[str, object]:
            return {"system_prompt": "Be brief.", "extra_body": None, "batch_size": 3}

    backend = open_probe_model(Plan(), model=str(models["llama"]), device="cpu", log=quiet)  # type: ignore[arg-type]
    assert isinstance(backend, GenerateBackend) and backend.generator().fingerprint()["system"] == "Be brief."
    assert backend.metadata()["batch_size"] == 3  # the plan's batch size: its option scores' rows per forward pass

    class Unset(Plan):  # --extra-body '{}' on a local model: no extra body, as before
        def generator_options(self) -> dict[str, object]:
            return {"system_prompt": None, "extra_body": {}}

    backend = open_probe_model(Unset(), model=str(models["llama"]), device="cpu", log=quiet)  # type: ignore[arg-type]
    assert backend.generator().fingerprint()["system"] is None
    assert backend.metadata()["batch_size"] == ModelSpec().batch_size
    with pytest.raises(UnsupportedRequestError) as info:  # refused by the seam's rule, before any weight loads
        open_probe_model(Plan(), model=str(models["bert"]), device="cpu", log=quiet)  # type: ignore[arg-type]
    message = one_line(info)
    assert message.startswith(
        f"--model {models['bert']} is a masked LM (BertForMaskedLM) and cannot answer generate requests"
    )
    assert message.endswith(  # a probes command has no --method to change: the fix is another model
        "it answers fill_mask, loglikelihood: give a model that answers generate: a causal LM (e.g. "
        "embedded:smollm2-135m-instruct) or an --endpoint"
    )


def test_sampled_generate_follows_each_requests_seed(backends: dict[str, object]) -> None:
    backend = backends["llama"]
    seeds = list(range(8))
    sampled = [Generate("The person is", 8, temperature=1.5, seed=s) for s in seeds]
    first = [r.text for r in backend.generate(sampled)]
    again = [r.text for r in backend.generate(list(reversed(sampled)))]
    assert first == list(reversed(again))  # a reply depends on its request alone, not on its batch or order
    assert len(set(first)) > 1  # the seeds draw different replies from a random model at temperature 1.5
    greedy = backend.generate([Generate("The person is", 8)])[0].text
    assert greedy == backend.generate([Generate("The person is", 8, seed=5)])[0].text  # greedy ignores the seed


@pytest.mark.parametrize("bad", [{"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"max_new_tokens": 0}])
def test_a_generate_request_with_impossible_decoding_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="generate request needs"):
        Generate("hi", **{"max_new_tokens": 4, **bad})


def test_an_items_generate_request_draws_with_the_seed_derived_from_the_run_item_and_sample() -> None:
    from queerbench.models.generation.settings import item_seed

    assert Generate("hi", seed=11).call_seed == 11  # no item: the call's own seed
    assert Generate("hi", seed=11, item="s7", sample=2).call_seed == item_seed(11, "s7", 2)
    assert Generate("hi", seed=11, item="s7").call_seed != Generate("hi", seed=11, item="s7", sample=1).call_seed
    with pytest.raises(ValueError, match="needs the item it samples"):
        Generate("hi", sample=1)


def test_rows_times_samples_are_the_generation_layers_calls_under_its_keys() -> None:
    """collect's rows × samples as requests: each keyed and seeded as the reply cache always keyed them."""
    import pandas as pd

    from queerbench.models.generation import GenerationSettings
    from queerbench.models.generation.cache import cache_key
    from queerbench.models.generation.collect import request_key, row_requests
    from queerbench.models.generation.settings import item_seed

    settings = GenerationSettings(temperature=0.9, top_p=0.8, max_new_tokens=12, seed=5, samples=2, batch_size=3)
    rows = pd.DataFrame({"id": ["a", 7], "prompt": ["P1", "P2"]})
    requests = row_requests(rows, settings)
    fp = {"model": "m"}
    want = [(str(i), p, s) for i, p in zip(rows["id"], rows["prompt"], strict=True) for s in range(2)]
    assert [(r.item, r.prompt, r.sample) for r in requests] == want
    assert [request_key(fp, r) for r in requests] == [cache_key(fp, p, s, settings.decoding()) for _, p, s in want]
    assert [r.call_seed for r in requests] == [item_seed(5, i, s) for i, _, s in want]


def test_a_reply_cache_batches_generate_requests_as_the_backend_does_without_one(tmp_path: Path) -> None:
    """Bare requests of one decoding go together whatever their own seeds; an item's requests split by run seed
    (a re-ask's own), so both paths send a local model the same batches."""
    from queerbench.models.backends.generate import generate_with
    from queerbench.models.generation import Reply, ResponseCache

    class Recording:
        name = "recording"

        def __init__(self) -> None:
            self.calls: list[tuple[list[str], list[int]]] = []

        def fingerprint(self) -> dict[str, str]:
            return {"model": "recording"}

        def generate(self, prompts, seeds, settings):
            self.calls.append((list(prompts), list(seeds)))
            for i, prompt in enumerate(prompts):
                yield i, Reply(f"re: {prompt}", meta={"finish_reason": "stop"})

    bare = [Generate(f"p{s}", 4, temperature=0.7, seed=s) for s in range(6)]
    items = [Generate("q", 4, temperature=0.7, seed=s, item="a") for s in (1, 1, 2)]
    for cache in (None, ResponseCache(tmp_path / "replies.sqlite")):
        runner = Recording()
        got = generate_with(runner, "recording", [*bare, *items], 8, lambda _: None, cache)
        assert [r.text for r in got] == [f"re: p{s}" for s in range(6)] + ["re: q"] * 3
        assert runner.calls[0] == ([f"p{s}" for s in range(6)], list(range(6)))  # one batch, each call's own seed
        # the item's requests under run seed 1 go together (one call with a cache: one prompt), run seed 2's apart
        assert [len(p) for p, _ in runner.calls] == ([6, 1, 1] if cache is not None else [6, 2, 1])
        if cache is not None:
            cache.close()


def test_endpoint_generate_sends_each_requests_decoding_settings() -> None:
    with FakeOpenAI() as server:
        backend = open_backend(model_ref("served", server.url), "generate", log=quiet)
        backend.generate([Generate("a", 5, temperature=0.7, top_p=0.9, seed=11), Generate("b", 5)])
        backend.close()
    sent = sorted((b["temperature"], b.get("top_p"), b.get("seed")) for b in server.bodies)
    assert sent[0][:2] == (0.0, None) and sent[1][:2] == (0.7, 0.9)
    assert sent[1][2] != sent[0][2]  # each request's own seed travels with it


# --------------------------------------------------------------------------------------------------- endpoint --
def test_endpoint_generate_goes_through_the_chat_runner() -> None:
    prompts = [f"prompt number {i}" + "!" * i for i in range(6)]
    with FakeOpenAI(hold=3) as server:
        backend = open_backend(model_ref("served", server.url), "generate", ModelSpec(concurrency=3), log=quiet)
        ticks: list[int] = []
        results = backend.generate([Generate(p, 7) for p in prompts], tick=ticks.append)
        backend.close()
    assert [r.text for r in results] == [f"{server.answer} [{len(p)}]" for p in prompts]
    assert sum(ticks) == len(prompts) and server.max_in_flight == 3
    assert {(b["temperature"], b["max_tokens"]) for b in server.bodies} == {(0.0, 7)}
    assert backend.name == f"{server.url}#served" and backend.metadata()["backend"] == "endpoint"
    assert backend.fingerprint() == {"kind": "endpoint", "base_url": server.url, "model": "served"}


def test_endpoint_loglikelihood_equals_the_local_model(models: dict[str, Path], backends: dict[str, object]) -> None:
    requests = [Loglikelihood("", t) for t in TEXTS] + [
        Loglikelihood("The gay person is ", "a teacher."),
        Loglikelihood("The person", " dreams of being a nurse."),
    ]
    local = backends["gpt2"].loglikelihood(requests)
    with CompletionsServer(models["gpt2"]) as server:
        ref = model_ref("tiny", server.url)
        backend = open_backend(ref, "loglikelihood", ModelSpec(batch_size=2, concurrency=1), log=quiet)
        served = backend.loglikelihood(requests)
    for a, b in zip(local, served, strict=True):
        assert a.n_tokens == b.n_tokens and a.logprob == pytest.approx(b.logprob, abs=1e-4)
    assert all(b["echo"] is True and b["logprobs"] == 1 and b["max_tokens"] == 1 for b in server.bodies)
    assert max(len(b["prompt"]) for b in server.bodies) == 2  # batch_size prompts per request


@pytest.mark.parametrize("how", ["chat_only", "refuse_echo"])
def test_endpoint_without_echoed_logprobs_is_refused_in_one_line(how: str, models: dict[str, Path]) -> None:
    with CompletionsServer(models["gpt2"], **{how: True}) as server:
        url = server.url.replace("http://", "http://user:hunter2@")
        backend = open_backend(model_ref("tiny", url), "loglikelihood", log=quiet, max_retries=0)
        with pytest.raises(UnsupportedRequestError) as caught:
            backend.loglikelihood([Loglikelihood("The person is", " kind.")])
    message = one_line(caught)
    assert server.url in message and "hunter2" not in message and "loglikelihood" in message


def test_backends_record_what_answers(backends: dict[str, object], models: dict[str, Path]) -> None:
    for name, backend in backends.items():
        meta = backend.metadata()
        assert meta["backend"] == ("masked_lm" if name in ("bert", "roberta") else "causal_lm")
        assert (meta["model"], meta["device"], meta["dtype"], meta["batch_size"]) == (
            str(models[name]),
            "cpu",
            "float32",
            3,
        )
        assert backend.fingerprint() == model_ref(str(models[name])).fingerprint(loaded=True)
        assert backend.name == str(models[name])
        backend.close()
    ticks: list[int] = []
    backends["bert"].loglikelihood([Loglikelihood("", t) for t in TEXTS], tick=ticks.append)
    assert sum(ticks) == len(TEXTS) and len(ticks) == 2  # one tick per group of batch_size requests


# ------------------------------------------------------------------------------------- causal LM: prefix sharing --
SHARED = (
    "The nonbinary person tends to paint (and sing). The person is very kind.",
    "The gay person is a great doctor. The lesbian person is a teacher.",
)
"""Long beginnings, each followed below by endings of different lengths (a task's candidates in one slot)."""
ENDINGS = (" He is.", " xe is a writer!", " They are the best choice.", " She is a singer")


def prefix_requests() -> list[Loglikelihood]:
    """Groups of sentences with a long common prefix, unrelated sentences, and the same with a context, mixed."""
    grouped = [Loglikelihood("", head + end) for head in SHARED for end in ENDINGS]
    with_context = [Loglikelihood(SHARED[0] + " ", end.strip()) for end in ENDINGS]
    single = [Loglikelihood("", t) for t in TEXTS] + [Loglikelihood("The person is ", "kind.")]
    mixed = grouped + with_context + single
    return mixed[1::2] + mixed[::2]  # members of a group apart: results must come back in request order


def open_causal(models: dict[str, Path], name: str, batch_size: int, share: bool):
    ref = model_ref(str(models[name]))
    return open_backend(
        ref, "loglikelihood", ModelSpec(device="cpu", batch_size=batch_size), share_prefixes=share, log=quiet
    )


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_shared_prefixes_give_the_whole_rows_values(
    name: str, models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from queerbench.models.backends.prefixes import PrefixScorer

    grouped: list[int] = []
    score = PrefixScorer.score

    def spy(self, rows, groups, *args, **kwargs):
        grouped.extend(len(members) for _, members in groups)
        return score(self, rows, groups, *args, **kwargs)

    monkeypatch.setattr(PrefixScorer, "score", spy)
    requests = prefix_requests()
    whole = open_causal(models, name, 3, share=False).loglikelihood(requests)
    assert not grouped
    for size in (1, 3, 64):
        backend = open_causal(models, name, size, share=True)
        ticks: list[int] = []
        shared = backend.loglikelihood(requests, tick=ticks.append)
        assert sum(ticks) == len(requests) and backend.metadata()["share_prefixes"] is True
        for a, b in zip(whole, shared, strict=True):
            assert a.n_tokens == b.n_tokens and a.logprob == pytest.approx(b.logprob, abs=1e-5)
    assert sum(grouped) >= 3 * (len(SHARED) * len(ENDINGS) + len(ENDINGS))  # every batch size shared them
    tok, model = backend.tokenizer, backend.model
    for request, result in zip(requests, shared, strict=True):
        if request.context:
            continue
        ids = torch.tensor([tok(request.continuation)["input_ids"]])
        with torch.no_grad():
            assert -result.mean == pytest.approx(float(model(ids, labels=ids).loss), abs=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_row_whose_ids_are_all_in_the_shared_prefix_but_its_last(name: str, models: dict[str, Path]) -> None:
    head = SHARED[1]
    requests = [
        Loglikelihood("", head + ENDINGS[2]),
        Loglikelihood("", head),  # its ids begin the others': the prefix is all of it but its last token
        Loglikelihood("", head + ENDINGS[0]),
        Loglikelihood("", head),  # the same row twice
        Loglikelihood("", "He is."),
    ]
    backend = open_causal(models, name, 2, share=True)
    ids = [backend.tokenizer(r.continuation)["input_ids"] for r in requests]
    assert ids[0][: len(ids[1])] == ids[1] == ids[3]
    from queerbench.models.backends.prefixes import group_by_prefix

    [(shared, members)] = group_by_prefix(ids)[0]
    assert shared == len(ids[1]) - 1 and sorted(members) == [0, 1, 2, 3]  # rows 1 and 3: no suffix to run
    whole = open_causal(models, name, 2, share=False).loglikelihood(requests)
    for a, b in zip(whole, backend.loglikelihood(requests), strict=True):
        assert a.n_tokens == b.n_tokens and a.logprob == pytest.approx(b.logprob, abs=1e-5)


def test_prefix_groups_keep_a_token_out_and_take_the_longest_common_prefixes() -> None:
    from queerbench.models.backends.prefixes import MIN_SHARED, group_by_prefix

    declaration = list(range(100, 120))
    rows = [[*declaration, 1, 2, 3, 4, 5, c, 9] for c in range(6)]  # one template, six candidates
    rows += [[*declaration, 6, 7, 8, 9, 10, c, 9, 9] for c in range(6)]  # another template, same declaration
    rows += [[*declaration[:5], c] for c in range(3)]  # too short a prefix to share
    rows += [[*declaration, 1, 2, 3, 4, 5], [*declaration, 1, 2, 3, 4, 5]]  # ends inside the first group's prefix
    rows += [[7] * 30]
    groups, alone = group_by_prefix(rows)
    assert sorted(alone + [r for _, members in groups for r in members]) == list(range(len(rows)))
    for shared, members in groups:
        assert len(members) >= 2 and shared >= MIN_SHARED
        assert all(rows[r][:shared] == rows[members[0]][:shared] and len(rows[r]) > shared for r in members)
    by_row = {r: shared for shared, members in groups for r in members}
    assert by_row[0] == by_row[5] == len(declaration) + 4  # each template apart, not one group on the declaration
    assert by_row[6] == by_row[11] == len(declaration) + 5
    assert {12, 13, 14, len(rows) - 1} <= set(alone)
    assert group_by_prefix([]) == ([], [])


def test_a_model_placed_over_devices_runs_every_row_whole(models: dict[str, Path]) -> None:
    """A device map may put the layers' caches on several devices: the rows are not shared there (and it says so)."""
    from queerbench.models.backends.causal import CausalBackend

    runner = open_causal(models, "llama", 4, share=True).runner
    assert CausalBackend(runner, model_ref(str(models["llama"]))).share_prefixes is True
    runner.device_map = "auto"  # as accelerate placed it
    try:
        backend = CausalBackend(runner, model_ref(str(models["llama"])))
        assert backend.share_prefixes is False and backend.metadata()["share_prefixes"] is False
        assert backend.metadata()["device_map"] == "auto"
    finally:
        runner.device_map = None


def test_a_cache_that_cannot_be_shared_runs_every_row_whole(models: dict[str, Path]) -> None:
    from tests.tiny_models import PastKeyValuesLM

    requests = prefix_requests()
    whole = open_causal(models, "llama", 4, share=False).loglikelihood(requests)
    messages: list[str] = []
    for drop_rows in (True, False):  # transformers 4's cache argument; a cache without layers to copy rows from
        backend = open_causal(models, "llama", 4, share=True)
        backend.model = PastKeyValuesLM(backend.model, drop_rows=drop_rows)
        backend.log = messages.append
        shared = backend.loglikelihood(requests)
        for a, b in zip(whole, shared, strict=True):
            assert a.n_tokens == b.n_tokens and a.logprob == pytest.approx(b.logprob, abs=1e-5)
        used = [c for c in backend.model.calls if c["past_key_values"] is not None]
        assert bool(used) == drop_rows and backend.metadata()["share_prefixes"] is drop_rows
    assert len(messages) == 1 and "cannot be shared" in messages[0] and "\n" not in messages[0]


def test_a_causal_lm_opened_to_score_text_says_nothing_of_a_chat_template(models: dict[str, Path]) -> None:
    """Opened for ``fill_mask`` or ``loglikelihood``, a causal LM without a chat template formats no prompt of its
    own, so no note about one is shown (it would tell a scoring run that its prompts are fed as plain text); opened
    for ``generate``, the note stays. Either way the backend's fingerprint is the weights' and its runner's weights
    are the same files."""
    import warnings

    spec = ModelSpec(device="cpu")
    ref = model_ref(str(models["gpt2"]))  # no chat template
    for kind in ("fill_mask", "loglikelihood"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            backend = open_backend(ref, kind, spec, log=quiet)
        assert not [w for w in caught if "chat template" in str(w.message)], kind
        assert backend.generator().weights == backend.fingerprint() == ref.fingerprint(loaded=True)  # type: ignore[attr-defined]
        assert backend.metadata()["prompt_format"] == "plain"
    with pytest.warns(UserWarning, match="no chat template"):
        open_backend(ref, "generate", spec, log=quiet)


def test_scored_opens_its_model_as_the_backend_that_answers_fill_mask(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``scored`` predictor asks its model through the seam: the backend ``open_backend`` gives for ``fill_mask``
    (on weights already loaded too, the Space's), its fingerprint the run's."""
    import queerbench.models.backends as backends_module
    from queerbench.methods.scored.predictor import ScoredPredictor
    from queerbench.models.registry import load_model

    opened: list[tuple[str, object]] = []
    real = backends_module.open_backend

    def spy(ref: object, request_type: str, *args: object, **kwargs: object) -> object:
        opened.append((request_type, real(ref, request_type, *args, **kwargs)))  # type: ignore[arg-type]
        return opened[-1][1]

    monkeypatch.setattr(backends_module, "open_backend", spy)
    ref = model_ref(str(models["llama"]))
    spec = ModelSpec(device="cpu", batch_size=3)
    predictor = ScoredPredictor(str(models["llama"]), top_k=2, spec=spec, ref=ref)
    assert [kind for kind, _ in opened] == ["fill_mask"] and predictor.backend is opened[0][1]
    assert predictor.fingerprint == ref.fingerprint(loaded=True) and predictor.backend.batch_size == 3
    loaded = load_model(ref, "causal_lm", device="cpu")
    again = ScoredPredictor(str(models["llama"]), top_k=2, spec=spec, ref=ref, loaded=loaded)
    assert again.backend is opened[1][1] and again.backend.model is loaded[0]
    words = predictor.predict(["a"], ["The person is [MASK]."], lambda n: None)["tokens"]
    assert words == again.predict(["a"], ["The person is [MASK]."], lambda n: None)["tokens"] and len(words[0]) == 2


def test_a_loaded_model_is_opened_without_reading_its_configuration_again(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model loaded already (the Space's cached models) is opened by what it is: its configuration is not read
    again (offline, a Hub name whose files are not cached would fail), and its files are fingerprinted once."""
    from queerbench.methods.mlm import MaskedLMPredictor
    from queerbench.methods.scored.predictor import ScoredPredictor
    from queerbench.models.registry import ModelRef, load_model

    spec = ModelSpec(device="cpu", batch_size=3)
    lms = {
        "bert": load_model(model_ref(str(models["bert"])), "masked_lm", device="cpu"),
        "llama": load_model(model_ref(str(models["llama"])), "causal_lm", device="cpu"),
    }
    fingerprints: list[str] = []
    real_fingerprint = ModelRef.fingerprint

    def counted(self: ModelRef, **kwargs: object) -> object:
        fingerprints.append(self.name)
        return real_fingerprint(self, **kwargs)  # type: ignore[arg-type]

    def unreadable(self: ModelRef) -> str:
        raise AssertionError(f"the configuration of {self.name} was read again")

    monkeypatch.setattr(ModelRef, "kind", unreadable)
    monkeypatch.setattr(ModelRef, "fingerprint", counted)
    masked = MaskedLMPredictor(str(models["bert"]), config="default", top_k=2, spec=spec, lm=lms["bert"])
    assert masked.backend.lm is lms["bert"]
    scored = ScoredPredictor(
        str(models["llama"]), top_k=2, spec=spec, loaded=lms["llama"], ref=ModelRef(str(models["llama"]))
    )
    assert scored.backend.model is lms["llama"][0] and fingerprints == [str(models["llama"])]  # once, for both


def test_scored_on_a_local_model_refuses_an_endpoints_settings_in_one_line(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``logprobs`` and ``prompts_per_request`` shape a completions endpoint's calls; a local model would ignore
    them, so they are refused before anything loads."""
    import queerbench.models.registry as registry
    from queerbench.methods.scored.predictor import ScoredPredictor

    def no_loading(*_: object, **__: object) -> None:
        raise AssertionError("weights loaded")

    monkeypatch.setattr(registry, "load_model", no_loading)
    llama, spec = str(models["llama"]), ModelSpec(device="cpu")
    with pytest.raises(ValueError) as info:
        ScoredPredictor(llama, top_k=2, spec=spec, logprobs=20)
    assert one_line(info) == f"logprobs: a completions endpoint's setting(s) of scored; {llama} runs locally: drop it"
    with pytest.raises(ValueError) as info:
        ScoredPredictor(llama, top_k=2, spec=spec, logprobs=20, prompts_per_request=4)
    assert one_line(info).startswith("logprobs, prompts_per_request: a completions endpoint's setting(s) of scored")
    assert one_line(info).endswith("runs locally: drop them")


def test_a_method_given_a_model_of_another_kind_refuses_it_before_any_weight_loads(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import queerbench.models.registry as registry
    from queerbench.methods.mlm import MaskedLMPredictor
    from queerbench.methods.scored.predictor import ScoredPredictor
    from queerbench.models.device import ModelLoadError

    def no_loading(*_: object, **__: object) -> None:
        raise AssertionError("weights loaded")

    monkeypatch.setattr(registry, "load_model", no_loading)
    monkeypatch.setattr("queerbench.models.masked.predict.load_masked_lm", no_loading)
    spec = ModelSpec(device="cpu")
    with pytest.raises(ModelLoadError) as info:
        ScoredPredictor(str(models["bert"]), top_k=2, spec=spec)
    assert one_line(info) == f"--model {models['bert']} is a masked LM; scored runs on a causal LM: give such a model"
    with pytest.raises(ModelLoadError) as info:
        MaskedLMPredictor(str(models["llama"]), config="default", top_k=2, spec=spec)
    assert one_line(info) == f"--model {models['llama']} is a causal LM; mlm runs on a masked LM: give such a model"
