"""Before a completions endpoint answers top-k ``fill_mask`` requests (the steps:
:mod:`queerbench.models.causal_blanks.endpoint_steps`): what it serves (:func:`identify`) and whether it can
(:func:`probe`).

:func:`probe` checks, in two rounds of calls (three where ``logprobs`` is capped), that the server echoes prompt
log-probabilities, that a token's echoed log-probability equals the next-token log-probability it gives for the
same prefix (to :data:`CONSISTENCY_TOLERANCE`; llama.cpp's server fails this), and that it echoes the very token it
proposed; it also finds the start token (the one the server's tokenizer adds itself, else ``<|endoftext|>`` when
the server reads it as one token, else none) and how many next tokens the propose step may ask for. Each failure is
one line. Its calls go through a reply cache, so a probe asked again makes no call.
"""

from __future__ import annotations

from typing import Any

from queerbench.models.causal_blanks.endpoint_steps import (
    START_TEXT,
    ServerReport,
    ask_jobs,
    echoed_span,
    is_word_start,
    mismatch_error,
)
from queerbench.models.generation.cache import ResponseCache
from queerbench.models.generation.completions import CompletionsRunner, completion_job
from queerbench.models.generation.settings import EndpointError, MethodUnsupportedError

__all__ = ["CONSISTENCY_TOLERANCE", "PROBE_PREFIX", "PROPOSE_FACTOR", "identify", "probe"]

PROBE_PREFIX = "The person is a"
"""The text the server is probed with (its next token, then that token echoed)."""
CONSISTENCY_TOLERANCE = 1e-3
"""Largest accepted gap between a token's echoed and next-token log-probabilities."""
PROPOSE_FACTOR = 5
"""The propose call asks for ``PROPOSE_FACTOR · N`` next tokens, so that ``N`` word starts are among them."""


def _no_echo(url: str, problem: str) -> EndpointError:
    return MethodUnsupportedError(
        f"{url} {problem}; --method scored ranks words by the log-probabilities of the prompt's own tokens (echo), "
        "which this server does not give: use --method instructed"
    )


def probe(
    runner: CompletionsRunner, cache: ResponseCache, n_first: int, *, logprobs: int | None = None
) -> ServerReport:
    """Check the server before any scoring (see the module doc); one-line :class:`EndpointError` for each failure
    (a :class:`MethodUnsupportedError` where the server answered and cannot serve ``scored``)."""
    url = runner.url
    wanted = logprobs or PROPOSE_FACTOR * n_first
    heads = (PROBE_PREFIX, START_TEXT + PROBE_PREFIX)
    # one round trip for what the next steps choose from: each head echoed, and each head's next tokens
    jobs = [completion_job(h, max_tokens=1, logprobs=1, echo=True) for h in heads]
    jobs += [completion_job(h, max_tokens=1, logprobs=wanted) for h in heads]
    plain, marked, *proposals = ask_jobs(
        runner, cache, ["probe/echo", "probe/start", "probe/plain", "probe/marked"], jobs
    )
    if isinstance(plain, str):
        raise _no_echo(url, f"refused a prompt with echo and logprobs ({plain})")
    if plain["tokens"] is None:
        raise _no_echo(url, "sent no log-probabilities for an echoed prompt")
    span = echoed_span(plain, PROBE_PREFIX)
    if span is None:
        raise (
            _no_echo(url, "did not echo the prompt's tokens")
            if len(plain["tokens"]) <= 1
            else mismatch_error(url, PROBE_PREFIX, plain)
        )
    found = None if isinstance(marked, str) or marked["tokens"] is None else echoed_span(marked, PROBE_PREFIX)
    if plain["token_logprobs"][span[0]] is not None:
        start_text, start = "", "server"  # its tokenizer put a start token before the text
    elif found is not None and found[0] == 1 and marked["token_logprobs"][1] is not None:
        start_text, start = START_TEXT, START_TEXT  # read as one token
    else:
        start_text, start = "", "none"
    propose_prompt = start_text + PROBE_PREFIX
    nxt = proposals[0] if start_text == "" else proposals[1]
    if isinstance(nxt, str) and wanted > n_first:
        wanted = n_first  # a server that caps logprobs: propose from the top N (recorded)
        (nxt,) = ask_jobs(
            runner, cache, ["probe/propose"], [completion_job(propose_prompt, max_tokens=1, logprobs=wanted)]
        )
    top = None if isinstance(nxt, str) or not nxt["top_logprobs"] else nxt["top_logprobs"][0]
    if not isinstance(top, dict) or len(top) < n_first:
        said = nxt if isinstance(nxt, str) else f"it returned {0 if not isinstance(top, dict) else len(top)}"
        raise MethodUnsupportedError(
            f"{url} does not give the top {n_first} next-token log-probabilities that --method scored needs for "
            f"--top-k {n_first // 4} (4 candidates per word; {said}): raise the server's cap (vLLM: vllm serve MODEL "
            f"--max-logprobs {PROPOSE_FACTOR * n_first}) or lower --top-k"
        )
    # the most likely word start is checked (the kind of token scoring reads), else the greedy token
    starts = sorted((t for t in top if is_word_start(t, False)), key=lambda t: -float(top[t]))
    token, next_lp = (starts[0], float(top[starts[0]])) if starts else (nxt["tokens"][0], nxt["token_logprobs"][0])
    sent = propose_prompt + token
    (back,) = ask_jobs(
        runner, cache, ["probe/consistency"], [completion_job(sent, max_tokens=1, logprobs=1, echo=True)]
    )
    if isinstance(back, str) or back["tokens"] is None:
        raise _no_echo(url, f"refused an echoed prompt ({back if isinstance(back, str) else 'no log-probabilities'})")
    where = echoed_span(back, token)
    if where is None or where[1] - where[0] != 1 or back["token_logprobs"][where[0]] is None:
        raise mismatch_error(url, sent, back)
    echoed = back["token_logprobs"][where[0]]
    gap = abs(echoed - next_lp)
    check = {
        "prefix": PROBE_PREFIX,
        "token": token,
        "next_token_logprob": next_lp,
        "echoed_logprob": echoed,
        "tolerance": CONSISTENCY_TOLERANCE,
    }
    if gap > CONSISTENCY_TOLERANCE:
        raise MethodUnsupportedError(
            f"{url} failed the log-probability consistency check: {token!r} after {PROBE_PREFIX!r} has log-probability "
            f"{next_lp:.4f} as the next token but {echoed:.4f} echoed in the prompt (gap {gap:.4f} > "
            f"{CONSISTENCY_TOLERANCE:g}), so its prompt log-probabilities cannot rank words; use --method instructed, "
            "or serve the model with an engine that passes (vLLM)"
        )
    return ServerReport(start_text, start, min(wanted, len(top)), check)


def identify(runner: CompletionsRunner) -> dict[str, Any]:
    """What the server says about the served model (``GET /models``: its entry's id, root, owner, context length;
    ``GET /version``: the engine's version where it answers). Start times and the like are left out, so that a
    restarted server serving the same model resumes a run."""
    listed = runner.get_json("models")
    entries = listed.get("data") if isinstance(listed, dict) else None
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    entry = next((e for e in entries if e.get("id") == runner.model_name), entries[0] if len(entries) == 1 else {})
    served: dict[str, Any] = {k: entry[k] for k in ("id", "root", "owned_by", "max_model_len") if k in entry}
    version = runner.get_json("/version")
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        served["version"] = version["version"]
    return served
