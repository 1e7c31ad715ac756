"""The endpoint client's rules one at a time, fast: ``Retry-After`` parsing, loopback hosts, the rate limiter on a
fake clock, the backoff formula, argument checks word for word, the fingerprint, and what each failure becomes.

Requests go to the local fake server (``tests/openai_server.py``) with no latency and an injected ``sleep``, so
nothing here waits; ``tools/mutation.py`` runs this file (with ``test_chat_endpoint.py``) against every mutant of
``queerbench/models/generation/endpoint.py`` and ``queerbench/base/http.py``.
"""

from __future__ import annotations

import email.utils
import logging
import threading

import pytest

from queerbench.base.http import RateLimiter as _RateLimiter
from queerbench.base.http import retry_after_seconds
from queerbench.models.generation import EndpointError, GenerationSettings, OpenAIChatRunner, Reply, is_loopback
from tests.net import free_port
from tests.openai_server import FakeOpenAI

KEY = "sk-rules-SECRET-987654"
GREEDY = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=4)


def _runner(url: str, monkeypatch: pytest.MonkeyPatch, sleeps: list[float] | None = None, **kw) -> OpenAIChatRunner:
    monkeypatch.setenv("QB_RULES_KEY", KEY)
    kw.setdefault("requests_per_minute", None)
    kw.setdefault("jitter", lambda: 0.0)  # no jitter: the backoff sequence is exact
    return OpenAIChatRunner(
        url, kw.pop("model", "m"), api_key_env="QB_RULES_KEY", sleep=(sleeps if sleeps is not None else []).append, **kw
    )


# ------------------------------------------------------------------------------------------------ Retry-After
NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        ("3", 3.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        ("-4", 0.0),  # never negative
        ("soon", None),
        ("Wed, 99 Foo 2023 00:00:00 GMT", None),
        (email.utils.formatdate(NOW + 7, usegmt=True), 7.0),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),  # a date in the past: retry now
    ],
)
def test_retry_after_seconds(value: str | None, seconds: float | None):
    assert retry_after_seconds(value, now=NOW) == seconds


def test_retry_after_date_defaults_to_the_current_time():
    import time

    when = email.utils.formatdate(time.time() + 100, usegmt=True)
    assert 98 <= retry_after_seconds(when) <= 100


# ------------------------------------------------------------------------------------------------ loopback
@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://localhost:8000/v1", True),
        ("http://LOCALHOST/v1", True),
        ("http://api.localhost/v1", True),
        ("http://127.0.0.1:1/v1", True),
        ("http://127.9.9.9/v1", True),
        ("http://[::1]:8080/v1", True),
        ("http://localhost.example.com/v1", False),
        ("http://128.0.0.1/v1", False),
        ("https://api.openai.com/v1", False),
        ("http://[::2]/v1", False),
        ("not a url", False),
    ],
)
def test_is_loopback(url: str, loopback: bool):
    assert is_loopback(url) is loopback


# ------------------------------------------------------------------------------------------------ rate limit
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_limiter_spaces_request_starts():
    clock, sleeps = Clock(), []
    limiter = _RateLimiter(2.0, clock)
    limiter.wait(sleeps.append)  # the first start: at once
    limiter.wait(sleeps.append)  # the next slot is 2 s later
    limiter.wait(sleeps.append)  # and the one after, 4 s later
    assert sleeps == [2.0, 4.0]
    clock.now = 110.0  # long after the last slot: at once again
    limiter.wait(sleeps.append)
    clock.now = 111.5
    limiter.wait(sleeps.append)
    assert sleeps == [2.0, 4.0, 0.5]
    unlimited = _RateLimiter(0.0, clock)
    for _ in range(3):
        unlimited.wait(sleeps.append)
    assert sleeps == [2.0, 4.0, 0.5]


def test_a_limit_under_one_second_still_limits():
    clock, sleeps = Clock(), []
    limiter = _RateLimiter(0.5, clock)  # 120 a minute
    for _ in range(3):
        limiter.wait(sleeps.append)
    assert sleeps == [0.5, 1.0]


def test_requests_per_minute_sets_the_interval(monkeypatch):
    sleeps: list[float] = []
    with FakeOpenAI() as server:
        runner = _runner(server.url, monkeypatch, sleeps, requests_per_minute=30.0, clock=Clock())
        for _ in range(3):
            assert runner.call("hi", 0, GREEDY).error is None
    assert sleeps == [2.0, 4.0]  # 30 a minute: one start every 2 s on a clock that does not move


# ------------------------------------------------------------------------------------------------ backoff
def test_backoff_is_base_times_two_to_the_attempt_set_by_retry_after_and_capped(monkeypatch):
    runner = _runner("http://127.0.0.1:1/v1", monkeypatch, backoff_base=0.5, backoff_max=10.0)
    assert [runner.backoff(a) for a in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    # the server's Retry-After sets the wait, shorter or longer than the exponential one (and its cap), up to 60 s
    assert runner.backoff(0, 3.0) == 3.0 and runner.backoff(3, 1.0) == 1.0 and runner.backoff(1, 30.0) == 30.0
    assert runner.backoff(1, 600.0) == 60.0
    assert runner.backoff(0, 0.0) == 0.0  # Retry-After: 0 is "now", not the 0.5 s floor


# ------------------------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_url": "localhost:8000"}, "--endpoint must be an http(s) URL such as https://api.openai.com/v1, got 'localhost:8000'"),
        ({"model": ""}, "--endpoint needs --model NAME (the model name the endpoint serves)"),
        ({"concurrency": 0}, "--concurrency must be a whole number >= 1, got 0"),
        ({"concurrency": True}, "--concurrency must be a whole number >= 1, got True"),
        ({"concurrency": 2.0}, "--concurrency must be a whole number >= 1, got 2.0"),
        ({"requests_per_minute": 0}, "--requests-per-minute must be > 0, got 0"),
        ({"max_retries": -1}, "max_retries, backoff_base and backoff_max must be >= 0, timeouts > 0"),
        ({"backoff_base": -1}, "max_retries, backoff_base and backoff_max must be >= 0, timeouts > 0"),
        ({"backoff_max": -1}, "max_retries, backoff_base and backoff_max must be >= 0, timeouts > 0"),
        ({"timeout": 0}, "max_retries, backoff_base and backoff_max must be >= 0, timeouts > 0"),
        ({"connect_timeout": 0}, "max_retries, backoff_base and backoff_max must be >= 0, timeouts > 0"),
        ({"extra_body": [1]}, "extra_body must be a JSON object (a dict)"),
    ],
)  # fmt: skip
def test_bad_arguments_word_for_word(monkeypatch, kwargs: dict, message: str):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    args = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(ValueError) as info:
        OpenAIChatRunner(args.pop("base_url"), args.pop("model"), **args)
    assert str(info.value) == message


def test_the_edges_of_the_arguments_are_allowed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    runner = OpenAIChatRunner(
        "https://h.example/v1/", "m", concurrency=1, requests_per_minute=0.5, max_retries=0, backoff_base=0,
        backoff_max=0, timeout=0.1, connect_timeout=0.1, extra_body={},
    )  # fmt: skip
    assert runner.base_url == "https://h.example/v1" and runner.url == "https://h.example/v1/chat/completions"
    assert runner.name == "https://h.example/v1#m" and runner.timeout == (0.1, 0.1) and runner.concurrency == 1
    assert runner.calls == 0 and runner._limiter.interval == 120.0


def test_a_missing_key_for_a_remote_host_names_the_variable(monkeypatch):
    monkeypatch.delenv("QB_NONE", raising=False)
    with pytest.raises(ValueError) as info:
        OpenAIChatRunner("https://api.example.com/v1", "m", api_key_env="QB_NONE")
    assert str(info.value) == (
        "environment variable QB_NONE is not set: https://api.example.com/v1 needs an API key "
        "(export QB_NONE=…; only servers on localhost/127.0.0.1 may run without one)"
    )
    monkeypatch.setenv("QB_NONE", "")  # set but empty: no key either
    with pytest.raises(ValueError, match="QB_NONE is not set"):
        OpenAIChatRunner("https://api.example.com/v1", "m", api_key_env="QB_NONE")


def test_a_local_server_without_a_key_is_noted_once(monkeypatch, caplog):
    monkeypatch.delenv("QB_NONE", raising=False)
    with caplog.at_level(logging.WARNING, logger="queerbench.models.generation.endpoint"):
        OpenAIChatRunner("http://127.0.0.1:1/v1", "m", api_key_env="QB_NONE")
    assert [r.getMessage() for r in caplog.records] == [
        "QB_NONE is not set: calling the local server http://127.0.0.1:1/v1 without an API key"
    ]


# ------------------------------------------------------------------------------------------------ identity
def test_the_fingerprint_names_the_endpoint_model_and_optional_parts_only(monkeypatch):
    plain = _runner("http://127.0.0.1:1/v1/", monkeypatch)
    assert plain.fingerprint() == {"kind": "openai-chat", "base_url": "http://127.0.0.1:1/v1", "model": "m"}
    full = _runner("http://127.0.0.1:1/v1", monkeypatch, system_prompt="", extra_body={"a": 1})
    assert full.fingerprint() == {
        "kind": "openai-chat",
        "base_url": "http://127.0.0.1:1/v1",
        "model": "m",
        "system": "",
        "extra_body": {"a": 1},
    }
    assert KEY not in str(full.fingerprint())


def test_the_request_body_word_for_word(monkeypatch):
    runner = _runner("http://127.0.0.1:1/v1", monkeypatch, extra_body={"temperature": 0.1, "x": [1]})
    body = runner.request_body("hi", 9, GenerationSettings(temperature=0.7, top_p=1.0, max_new_tokens=3))
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.1,  # extra_body wins
        "max_tokens": 3,
        "seed": 9,
        "n": 1,
        "top_p": 1.0,
        "x": [1],
    }
    empty_system = _runner("http://127.0.0.1:1/v1", monkeypatch, system_prompt="")
    assert empty_system.request_body("hi", 0, GREEDY)["messages"] == [{"role": "user", "content": "hi"}]


# ------------------------------------------------------------------------------------------------ failures
@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("401", "the API key in $QB_RULES_KEY is missing or was rejected"),
        ("403", "the API key in $QB_RULES_KEY is missing or was rejected"),
        ("404", "unknown model 'm' or wrong URL (check --model and --endpoint)"),
    ],
)
def test_fatal_answers_word_for_word(monkeypatch, code: str, why: str):
    sleeps: list[float] = []
    with FakeOpenAI(script=[code]) as server:
        runner = _runner(server.url, monkeypatch, sleeps)
        with pytest.raises(EndpointError) as info:
            runner.call("hi", 0, GREEDY)
    assert str(info.value) == (
        f"{server.url}/chat/completions answered HTTP {code}: {why}; server said: "
        + '{"error": {"message": "injected"}}'
    )
    assert sleeps == [] and server.calls == 1


def test_other_client_errors_fail_the_item_at_once(monkeypatch):
    sleeps: list[float] = []
    with FakeOpenAI(script=["400"]) as server:
        reply = _runner(server.url, monkeypatch, sleeps).call("hi", 0, GREEDY)
    assert reply.text is None and reply.error == 'HTTP 400: {"error": {"message": "injected"}}'
    assert reply.meta == {"attempts": 1} and sleeps == []


@pytest.mark.parametrize("code", ["408", "409", "429", "500", "502", "503", "504", "599"])
def test_retried_statuses(monkeypatch, code: str):
    sleeps: list[float] = []
    with FakeOpenAI(script=[code]) as server:
        runner = _runner(server.url, monkeypatch, sleeps, max_retries=1, backoff_base=0.25)
        reply = runner.call("hi", 3, GREEDY)
    # the fake server's 429 says Retry-After: 0 (retry at once); the others send no hint: the backoff base
    expected = [0.0] if code == "429" else [0.25]
    assert reply.error is None and reply.meta["attempts"] == 2 and reply.meta["seed"] == 3 and sleeps == expected


def test_giving_up_lists_every_problem(monkeypatch):
    sleeps: list[float] = []
    with FakeOpenAI(script=["500", "malformed", "nochoices", "drop"]) as server:
        runner = _runner(server.url, monkeypatch, sleeps, max_retries=3, backoff_base=1, backoff_max=100)
        reply = runner.call("hi", 0, GREEDY)
    assert reply.text is None and reply.meta == {"attempts": 4} and sleeps == [1, 2, 4]
    assert reply.error.startswith("gave up after 4 attempts: HTTP 500; malformed reply (")
    assert "; malformed reply (KeyError: " in reply.error and reply.error.endswith(
        "; connection dropped (ProtocolError)"
    )
    assert server.calls == runner.calls == 4


def test_no_retries_means_one_attempt(monkeypatch):
    sleeps: list[float] = []
    with FakeOpenAI(script=["503"]) as server:
        reply = _runner(server.url, monkeypatch, sleeps, max_retries=0).call("hi", 0, GREEDY)
    assert reply.error == "gave up after 1 attempts: HTTP 503" and sleeps == [] and server.calls == 1


def test_a_slow_answer_is_a_read_timeout(monkeypatch):
    with FakeOpenAI(latency=0.5) as server:
        reply = _runner(server.url, monkeypatch, max_retries=0, timeout=0.05).call("hi", 0, GREEDY)
    assert reply.error == "gave up after 1 attempts: no answer within 0.05 s (ReadTimeout)"


def test_a_reply_records_how_it_was_made(monkeypatch):
    with FakeOpenAI(script=["length"], answer="nurse") as server:
        reply = _runner(server.url, monkeypatch).call("hi", 5, GREEDY)
    assert reply.text.startswith("nurse") and reply.error is None
    assert reply.meta == {"prompt_format": "chat", "finish_reason": "length", "attempts": 1, "seed": 5}


def test_the_key_goes_only_in_the_header_and_is_scrubbed(monkeypatch):
    with FakeOpenAI(script=["400"]) as server:
        runner = _runner(server.url, monkeypatch)
        assert runner._scrub(f"bad key {KEY}\n  here") == "bad key *** here"
        runner.call(f"my key is {KEY}", 0, GREEDY)
    assert server.auth_headers == [f"Bearer {KEY}"] and server.content_types == ["application/json"]


def test_a_stopped_run_asks_nothing_more(monkeypatch):
    stop = threading.Event()
    stop.set()
    with FakeOpenAI() as server:
        reply = _runner(server.url, monkeypatch).call("hi", 0, GREEDY, stop)
    assert reply == Reply(None, "cancelled: the run was stopped", {"attempts": 0}) and server.calls == 0


def test_generate_checks_its_inputs(monkeypatch):
    runner = _runner("http://127.0.0.1:1/v1", monkeypatch)
    with pytest.raises(ValueError) as info:
        list(runner.generate(["a"], [], GREEDY))
    assert str(info.value) == "prompts and seeds must have the same length"
    assert list(runner.generate([], [], GREEDY)) == []


def test_a_refused_connection_word_for_word(monkeypatch):
    port = free_port()  # a loopback port nobody listens on
    runner = _runner(f"http://127.0.0.1:{port}/v1", monkeypatch)
    with pytest.raises(EndpointError) as info:
        runner.call("hi", 0, GREEDY)
    assert str(info.value) == (
        f"cannot connect to http://127.0.0.1:{port}/v1/chat/completions (connection refused or unknown host): is the "
        "server running and the URL right? Replies received so far are cached; rerun the same command to resume."
    )


def test_the_documented_defaults(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    runner = OpenAIChatRunner("https://h.example/v1", "m")
    assert (runner.concurrency, runner.max_retries, runner.backoff_base, runner.backoff_max) == (8, 5, 0.5, 8.0)
    assert runner.timeout == (10.0, 60.0) and runner._limiter.interval == 0.1  # 600 requests a minute, as the CLI
    assert runner.api_key_env == "OPENAI_API_KEY" and runner.system_prompt is None and runner.extra_body == {}


def test_a_local_server_without_a_key_gets_its_errors_reported(monkeypatch):
    monkeypatch.delenv("QB_NONE", raising=False)
    with FakeOpenAI(script=["400"]) as server:
        runner = OpenAIChatRunner(server.url, "m", api_key_env="QB_NONE", sleep=lambda s: None)
        reply = runner.call("hi", 0, GREEDY)  # no key to scrub from the message
    assert reply.error == 'HTTP 400: {"error": {"message": "injected"}}'


class Shaped(FakeOpenAI):
    """The fake endpoint with the message of every completion changed by ``shape``."""

    def __init__(self, shape, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shape = shape

    def _completion(self, body: dict, mode: str) -> dict:
        out = super()._completion(body, mode)
        self.shape(out["choices"][0]["message"])
        return out


def test_a_refusal_field_is_recorded_and_the_reply_is_empty(monkeypatch):
    def refuse(message: dict) -> None:
        message.update(content=None, refusal="I can't help with that. " + "x" * 600)

    with Shaped(refuse) as server:
        reply = _runner(server.url, monkeypatch).call("hi", 0, GREEDY)
    assert reply.text == "" and reply.error is None
    assert reply.meta["refusal"] == ("I can't help with that. " + "x" * 600)[:500]


def test_content_that_is_not_text_is_a_malformed_reply(monkeypatch):
    with Shaped(lambda message: message.update(content=42)) as server:
        reply = _runner(server.url, monkeypatch, max_retries=0).call("hi", 0, GREEDY)
    assert reply.error == "gave up after 1 attempts: malformed reply (content is not a string)"


def test_a_reply_without_choices_names_what_is_missing(monkeypatch):
    with FakeOpenAI(script=["nochoices"]) as server:
        reply = _runner(server.url, monkeypatch, max_retries=0).call("hi", 0, GREEDY)
    assert reply.error == "gave up after 1 attempts: malformed reply (KeyError: 'choices')"


def test_each_prompt_is_sent_with_its_own_seed(monkeypatch):
    with FakeOpenAI(echo=True) as server:
        runner = _runner(server.url, monkeypatch, concurrency=2)
        got = dict(runner.generate(["first", "second", "third"], [11, 22, 33], GREEDY))
    assert sorted(got) == [0, 1, 2] and got[1].text == "echo: second" and got[2].meta["seed"] == 33
    assert sorted((b["messages"][-1]["content"], b["seed"]) for b in server.bodies) == [
        ("first", 11),
        ("second", 22),
        ("third", 33),
    ]
