"""The `openai` engine against a scripted stub server on 127.0.0.1: request bodies, answer
mapping, retries with backoff (429, 5xx, a closed port), clear 4xx errors, bounded concurrency;
several endpoints (`base_urls`): two stub server processes, started and stopped by PID, share
the requests round-robin, a refusing URL's requests move to the others, and the samples and the
engine version are those of a one-URL run."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from openai_stub import Stub, StubProcess

from generation.engine import Engine, PromptTooLong, Request, Sampling, build_engine
from generation.openai_engine import EndpointError, OpenAIEngine


def completion(n, text="hello", finish="stop"):
    return {"choices": [{"index": i, "text": f"{text}{i}", "finish_reason": finish, "token_ids": [7, i],
                         "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.5, -0.25]}} for i in range(n)]}


def engine(url, **kw):
    return OpenAIEngine("served", url, **{"backoff_s": 0.01, "max_retries": 3, "timeout_s": 10, **kw})


def test_completions_body_and_answer_mapping():
    with Stub(lambda body, path: (200, completion(body["n"], finish="length"), {})) as stub:
        built = build_engine("openai", "served", base_url=stub.url, backoff_s=0.01)
        assert isinstance(built, Engine) and built.version == "openai-completions"
        out = built.generate([Request(text="P1"), Request(text="P2")],
                             Sampling(max_new_tokens=9, temperature=0.5, top_p=0.9, seed=4, logprobs=True), samples=2)
    assert sorted(b["prompt"] for b in stub.bodies) == ["P1", "P2"]
    body = stub.bodies[0]
    assert {k: body[k] for k in ("model", "n", "max_tokens", "temperature", "top_p", "seed", "logprobs")} == {
        "model": "served", "n": 2, "max_tokens": 9, "temperature": 0.5, "top_p": 0.9, "seed": 4, "logprobs": 0}
    assert [[(s.request_index, s.sample_index, s.text) for s in g] for g in out] == [
        [(0, 0, "hello0"), (0, 1, "hello1")], [(1, 0, "hello0"), (1, 1, "hello1")]]
    sample = out[0][1]
    assert sample.finish_reason == "length" and sample.token_ids == [7, 1] and sample.logprobs == [-0.5, -0.25]


def test_retries_429_then_succeeds_and_asks_again_for_missing_samples():
    calls = []

    def reply(body, path):
        calls.append(time.monotonic())
        if len(calls) == 1:
            return 429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}
        return 200, completion(1), {}  # a server that ignores n

    with Stub(reply) as stub:
        out = engine(stub.url).generate([Request(text="p")], Sampling(seed=10), samples=3)
    assert [s.sample_index for s in out[0]] == [0, 1, 2] and len(stub.bodies) == 4
    assert [b["n"] for b in stub.bodies] == [3, 3, 2, 1] and [b["seed"] for b in stub.bodies] == [10, 10, 11, 12]
    assert out[0][0].logprobs is None


def test_5xx_retried_with_backoff_then_a_clear_error():
    with Stub(lambda body, path: (503, b"overloaded", {})) as stub:
        t0 = time.monotonic()
        with pytest.raises(EndpointError) as info:
            engine(stub.url, max_retries=2, backoff_s=0.05).generate([Request(text="p")], Sampling())
    assert len(stub.bodies) == 3 and info.value.status == 503
    assert f"{stub.url}/completions" in str(info.value) and "overloaded" in str(info.value) and "3 attempts" in str(info.value)
    assert time.monotonic() - t0 < 5


def test_4xx_fails_at_once_naming_url_status_and_message():
    with Stub(lambda body, path: (400, {"error": {"message": "temperature must be <= 2"}}, {})) as stub:
        with pytest.raises(EndpointError) as info:
            engine(stub.url).generate([Request(text="p")], Sampling())
    assert len(stub.bodies) == 1 and info.value.status == 400
    assert str(info.value) == f"{stub.url}/completions: HTTP 400: temperature must be <= 2"


def test_context_overflow_becomes_prompt_too_long():
    def reply(body, path):
        if body["prompt"].startswith("long"):
            return 400, {"error": {"message": "This model's maximum context length is 2048 tokens."}}, {}
        return 200, completion(1), {}

    with Stub(reply) as stub:
        with pytest.raises(PromptTooLong) as info:
            engine(stub.url).generate([Request(text="a"), Request(text="long1"), Request(text="b"),
                                       Request(text="long2")], Sampling())
    assert info.value.indexes == (1, 3) and "maximum context length" in str(info.value)


def test_a_closed_port_fails_with_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(EndpointError) as info:
        engine(url, max_retries=1).generate([Request(text="p")], Sampling())
    assert info.value.status is None and f"{url}/completions: unreachable" in str(info.value)
    assert "2 attempts" in str(info.value)


def test_concurrency_is_bounded():
    def reply(body, path):
        time.sleep(0.15)
        return 200, completion(1), {}

    with Stub(reply) as stub:
        out = engine(stub.url, concurrency=2).generate([Request(text=str(i)) for i in range(6)], Sampling())
    assert [g[0].request_index for g in out] == list(range(6))
    assert stub.most_in_flight == 2


def test_chat_api_sends_messages_and_the_key(monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-test")

    def reply(body, path):
        assert path == "/v1/chat/completions"
        return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"},
                                  "finish_reason": "eos",
                                  "logprobs": {"content": [{"token": "hi", "logprob": -0.1},
                                                           {"token": " there", "logprob": -0.2}]}}]}, {}

    messages = ({"role": "user", "content": "hello"},)
    with Stub(reply) as stub:
        chat = engine(stub.url, api="chat", api_key_env="STUB_KEY", send_seed=False, return_token_ids=True)
        out = chat.generate([Request(text="rendered", messages=messages)], Sampling(logprobs=True))
        with pytest.raises(ValueError, match="messages"):
            chat.generate([Request(text="no messages")], Sampling())
    body = stub.bodies[0]
    assert body["messages"] == [{"role": "user", "content": "hello"}] and body["logprobs"] is True
    assert "seed" not in body and body["return_token_ids"] is True
    assert stub.headers[0]["Authorization"] == "Bearer sk-test"
    sample = out[0][0]
    assert (sample.text, sample.finish_reason, sample.token_ids, sample.logprobs) == (
        "hi there", "stop", [], [-0.1, -0.2])


def test_backoff_is_jittered_exponential_and_capped():
    eng = OpenAIEngine("m", "http://127.0.0.1:1/v1", backoff_s=1.0, max_backoff_s=8.0)
    waits = [eng._wait(a, None) for a in range(6) for _ in range(50)]
    assert all(0 <= w <= 8.0 for w in waits) and max(waits[:50]) <= 1.0 and max(waits[-50:]) > 1.0
    assert eng._wait(0, "3") == 3.0 and eng._wait(0, "100") == 8.0
    with pytest.raises(ValueError, match="api"):
        OpenAIEngine("m", "http://x/v1", api="responses")


def test_a_non_json_answer_is_a_clear_error():
    with Stub(lambda body, path: (200, b"<html>proxy login</html>", {"Content-Type": "text/html"})) as stub:
        with pytest.raises(EndpointError, match="not JSON.*proxy login"):
            engine(stub.url).generate([Request(text="p")], Sampling())
    assert len(stub.bodies) == 1


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@pytest.fixture
def two_servers(tmp_path: Path):
    with StubProcess(tmp_path / "a.jsonl") as a, StubProcess(tmp_path / "b.jsonl") as b:
        yield a, b
    assert a.proc.returncode is not None and b.proc.returncode is not None  # both stopped by PID


def test_base_urls_spread_round_robin_with_the_one_url_samples(two_servers) -> None:
    a, b = two_servers
    requests = [Request(text=f"prompt {i} /no_think<|im_end|>") for i in range(7)]
    sampling = Sampling(max_new_tokens=40, seed=5)
    one = engine(a.url, concurrency=3)
    alone = one.generate(requests, sampling, samples=2)
    assert len(a.requests()) == 7 and b.requests() == []
    spread = engine(None, base_urls=[a.url, b.url + "/"], concurrency=3)
    both = spread.generate(requests, sampling, samples=2)
    assert spread.served == [4, 3]  # request i -> URL i mod 2
    assert sorted(r["prompt"] for r in b.requests()) == sorted(requests[i].text for i in (1, 3, 5))
    assert [[(s.text, s.finish_reason) for s in g] for g in both] == [[(s.text, s.finish_reason) for s in g] for g in alone]
    assert spread.version == one.version == "openai-completions"  # which URL served is not in the cache key


def test_a_refusing_url_fails_over_to_the_others_without_using_retries(two_servers) -> None:
    a, b = two_servers
    dead = _closed_port_url()
    spread = engine(None, base_urls=[dead, a.url, b.url], concurrency=2, max_retries=0)
    out = spread.generate([Request(text=f"p{i}") for i in range(6)], Sampling(seed=1))
    assert [g[0].request_index for g in out] == list(range(6))
    assert spread.served[0] == 0 and sum(spread.served) == 6 and spread.served[1] > 0 and spread.served[2] > 0
    assert len(a.requests()) + len(b.requests()) == 6  # each request answered once


def test_every_url_refusing_is_a_clear_error() -> None:
    urls = [_closed_port_url(), _closed_port_url()]
    with pytest.raises(EndpointError) as info:
        engine(None, base_urls=urls, max_retries=1).generate([Request(text="p")], Sampling())
    assert info.value.status is None and "after 2 attempts on each of 2 endpoints" in str(info.value)


def test_endpoints_are_validated() -> None:
    from spec.generation import EngineSettings

    with pytest.raises(ValueError, match="exactly one of base_url and base_urls"):
        OpenAIEngine("m", "http://a/v1", base_urls=["http://b/v1"])
    with pytest.raises(ValueError, match="exactly one"):
        OpenAIEngine("m")
    with pytest.raises(ValueError, match="non-empty"):
        OpenAIEngine("m", base_urls=[])
    assert OpenAIEngine("m", ["http://a/v1/", "http://b/v1"]).urls == ["http://a/v1/completions", "http://b/v1/completions"]
    with pytest.raises(ValueError, match="give exactly one of them"):
        EngineSettings(name="openai", base_url="http://a/v1", base_urls=["http://b/v1"])
    with pytest.raises(ValueError, match="needs the endpoint"):
        EngineSettings(name="openai")
    with pytest.raises(ValueError, match="listed twice"):
        EngineSettings(name="openai", base_urls=["http://a/v1", "http://a/v1/"])
    assert EngineSettings(name="openai", base_urls=["http://a/v1", "http://b/v1"]).urls == ["http://a/v1", "http://b/v1"]
