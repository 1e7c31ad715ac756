"""A small OpenAI-compatible completions server on 127.0.0.1 serving a transformers causal LM, for tests and benchmarks.

``CompletionsServer(model_dir)`` answers ``POST /v1/completions`` the way vLLM does: ``prompt`` a string or a list
of strings (one choice per prompt, ``index`` in order), the prompt tokenized with the model's tokenizer (special
tokens written in the text are read as such; ``<|endoftext|>`` is one token), greedy continuations of up to
``max_tokens`` tokens ending at the end-of-text token, and with ``logprobs: N`` the ``logprobs`` block
(``tokens``, ``token_logprobs``, ``top_logprobs`` with the ``N`` most likely tokens per position, ``text_offset``);
``echo: true`` puts the prompt's tokens first (the first one without a log-probability). Token strings are the
tokenizer's text for each token, or ``bytes:\\x..`` for a token that is no whole character (as OpenAI's API).
``GET /v1/models`` lists the one model. Every log-probability is the model's own log-softmax from one plain forward
pass over the whole sequence, so that what this server says can be checked against the model run locally.

Behaviour to test clients against:

- ``max_logprobs``: a request asking for more ``logprobs`` gets vLLM's HTTP 400 ("… greater than max allowed");
- ``refuse_echo``: ``echo`` gets HTTP 400, as from a server without prompt log-probabilities;
- ``chat_only``: ``/v1/completions`` is 404 (``{"detail": "Not Found"}``, FastAPI's missing route);
- ``retokenize``: a function applied to each prompt before it is tokenized (a server with another tokenizer);
- ``echo_shift``: added to every echoed prompt log-probability (a server whose echo disagrees with its next-token
  log-probabilities);
- ``latency``: seconds each request waits before its answer (outside the model lock, so requests overlap), or a
  function of the request body giving them (called as the request arrives);
- ``memo``: each distinct prompt (with its parameters) is computed once and then answered from memory, so that a
  warmed-up server costs only ``latency`` per request (the concurrency benchmark).

Recorded: ``calls`` (completion requests), ``prompts`` (prompts in them), ``bodies``, ``max_in_flight``.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


class CompletionsServer:
    """Context manager running the server in a thread; ``url`` is the base URL (``…/v1``), ``name`` the model."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        name: str = "tiny",
        max_logprobs: int | None = None,
        refuse_echo: bool = False,
        chat_only: bool = False,
        retokenize: Callable[[str], str] | None = None,
        echo_shift: float = 0.0,
        latency: float | Callable[[dict[str, Any]], float] = 0.0,
        memo: bool = False,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.name, self.max_logprobs, self.refuse_echo, self.chat_only = name, max_logprobs, refuse_echo, chat_only
        self.retokenize, self.echo_shift, self.latency = retokenize, echo_shift, latency
        self._memo: dict[tuple, dict[str, Any]] | None = {} if memo else None
        self.eos = self.tokenizer.eos_token_id
        self._cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        self.calls = 0
        self.prompts = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict] = []
        self._texts: dict[int, str] = {}
        self._lock = threading.Lock()  # counters
        self._model_lock = threading.Lock()  # one forward pass at a time
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": outer.name, "object": "model",
                                                                        "owned_by": "tests", "created": time.time()}]})  # fmt: skip
                return self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path != "/v1/completions" or outer.chat_only:
                    return self._send(404, {"detail": "Not Found"})
                with outer._lock:
                    outer.calls += 1
                    outer.bodies.append(body)
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    delay = outer.latency(body) if callable(outer.latency) else outer.latency
                    if delay:
                        time.sleep(delay)
                    code, payload = outer.complete(body)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1
                self._send(code, payload)

            def _send(self, code: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    # ------------------------------------------------------------------------------------------ the model ---
    def token_text(self, token_id: int) -> str:
        """The text of one token, or ``bytes:\\x..`` when it is no whole character."""
        if token_id not in self._texts:
            self._texts[token_id] = self._token_text(token_id)
        return self._texts[token_id]

    def _token_text(self, token_id: int) -> str:
        token = self.tokenizer.convert_ids_to_tokens(token_id)
        if token_id in self.tokenizer.all_special_ids:
            return token
        text = self.tokenizer.convert_tokens_to_string([token])
        if "\ufffd" not in text:
            return text
        raw = bytes(self._byte_decoder()[c] for c in token)
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)

    def _byte_decoder(self) -> dict[str, int]:
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        return {v: k for k, v in bytes_to_unicode().items()}

    def _run(self, ids: list[int], max_tokens: int) -> tuple[torch.Tensor, list[int], list[torch.Tensor]]:
        """(log-probabilities after each prompt position, greedy tokens, the distribution each was taken from)."""
        with self._model_lock, torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids]), use_cache=True)
            prompt = torch.log_softmax(out.logits[0].float(), dim=-1)
            row, cache, tokens, rows = prompt[-1], self._cache_of(out), [], []
            for _ in range(max_tokens):
                t = int(row.argmax())
                tokens.append(t)
                rows.append(row)
                if t == self.eos or len(tokens) == max_tokens:
                    break
                out = self.model(input_ids=torch.tensor([[t]]), use_cache=True, **{self._cache_arg: cache})
                row, cache = torch.log_softmax(out.logits[0, -1].float(), dim=-1), self._cache_of(out)
        return prompt, tokens, rows

    @staticmethod
    def _cache_of(output: Any) -> Any:
        cache = getattr(output, "cache", None)  # transformers 5 names it `cache`, 4.x `past_key_values`
        return output.past_key_values if cache is None else cache

    def _top(self, row: torch.Tensor, n: int) -> dict[str, float]:
        values, index = torch.topk(row, min(n, row.shape[0]))
        top: dict[str, float] = {}
        for v, i in zip(values.tolist(), index.tolist(), strict=True):
            top.setdefault(self.token_text(i), float(v))
        return top

    def _choice(self, prompt: str, index: int, max_tokens: int, logprobs: int | None, echo: bool) -> dict[str, Any]:
        text = self.retokenize(prompt) if self.retokenize else prompt
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        tokens: list[str] = []
        values: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        lp, generated, rows = self._run(ids, max_tokens)
        if echo:
            for pos, t in enumerate(ids):
                tokens.append(self.token_text(t))
                values.append(None if pos == 0 else float(lp[pos - 1, t]) + self.echo_shift)
                tops.append(None if pos == 0 else self._top(lp[pos - 1], logprobs or 1))
        out, finish = "", "length"
        for t, row in zip(generated, rows, strict=True):
            tokens.append(self.token_text(t))
            values.append(float(row[t]))
            tops.append(self._top(row, logprobs or 1))
            if t == self.eos:
                finish = "stop"
                break
            out += self.tokenizer.decode([t])
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        choice: dict[str, Any] = {"index": index, "text": (prompt if echo else "") + out, "finish_reason": finish}
        choice["logprobs"] = None if logprobs is None else {
            "tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets,
        }  # fmt: skip
        return choice

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One completions request → (HTTP status, JSON answer)."""
        prompts = body.get("prompt")
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            return 400, {"object": "error", "message": "prompt must be a string or a list of strings", "code": 400}
        if body.get("model") != self.name:
            return 404, {"object": "error", "message": f"The model `{body.get('model')}` does not exist.", "code": 404}
        logprobs = body.get("logprobs")
        if logprobs is not None and self.max_logprobs is not None and logprobs > self.max_logprobs:
            message = f"Requested sample logprobs of {logprobs}, which is greater than max allowed: {self.max_logprobs}"
            return 400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
        if body.get("echo") and self.refuse_echo:
            return 400, {"object": "error", "message": "echo is not supported", "code": 400}
        with self._lock:
            self.prompts += len(prompts)
        choices = []
        for i, p in enumerate(prompts):
            args = (p, int(body.get("max_tokens", 16)), logprobs, bool(body.get("echo")))
            if self._memo is None:
                choices.append(self._choice(p, i, *args[1:]))
                continue
            if args not in self._memo:
                self._memo[args] = self._choice(p, 0, *args[1:])
            choices.append({**self._memo[args], "index": i})
        return 200, {"id": "cmpl-test", "object": "text_completion", "model": self.name, "choices": choices}

    def __enter__(self) -> CompletionsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
