"""Local stand-ins for the two vendors' APIs, for tests without a network.

``FakeVendor("openai")`` serves ``POST /v1/chat/completions`` and
``FakeVendor("anthropic")`` serves ``POST /v1/messages`` on 127.0.0.1, on a
free port, from an aiohttp app in a thread of the test process. The agents
reach them through the vendors' real SDKs over real HTTP: point
``OPENAI_BASE_URL`` at ``fake.base_url`` (``http://127.0.0.1:PORT/v1``) or
``ANTHROPIC_BASE_URL`` at it (``http://127.0.0.1:PORT``).

Answers are scripted per model name (the request's ``model``), in order: a
``Reply`` (text, tool calls, usage), or a ``Fail`` (a status, with
``retry-after`` if given, for as many requests as ``times`` says). Each
member can run on a model name of its own (``--model lead=openai:fake-lead``),
so each member's requests get its own script whatever the order in which
members ask. A request with no scripted answer left gets a 500 that says so.
Every request is recorded (``requests``) with its body and the time it came.

Before answering, the fake checks the request as the vendor does and answers
400 ``invalid_request_error`` with the rule it broke (``problems()``): for
OpenAI, every assistant ``tool_calls`` id answered by a ``tool`` message right
after it, and no ``tool`` message without its call; for Anthropic, ``messages``
starting with ``user`` and alternating strictly, every ``tool_use`` answered
by a ``tool_result`` in the next ``user`` message, the ``tool_result`` blocks
first in it, ids of ``[A-Za-z0-9_-]``, no empty text block, ``max_tokens`` set.

The shapes, from the vendors' references and SDKs (not guessed):

- OpenAI chat completions, an answer with a tool call, as recorded from the
  API (gpt-4o-2024-08-06; the same shape is the SDK's
  ``openai.types.chat.ChatCompletion`` and ``CompletionUsage``)::

    {"id": "chatcmpl-BcQ8ko2nz9B7CRvV0uVbcowidHpQU", "object": "chat.completion",
     "created": 1748496646, "model": "gpt-4o-2024-08-06",
     "choices": [{"index": 0, "logprobs": null, "finish_reason": "tool_calls",
       "message": {"role": "assistant", "content": null, "refusal": null, "annotations": [],
         "tool_calls": [{"id": "call_qOfTGgDrItLORNfC6VwUbyLL", "type": "function",
           "function": {"name": "get_weather", "arguments": "{\\"location\\":\\"Shanghai\\"}"}}]}}],
     "usage": {"prompt_tokens": 91, "completion_tokens": 14, "total_tokens": 105,
       "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
       "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
         "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
     "service_tier": "default", "system_fingerprint": "fp_76544d79cb"}

  A tool's result goes back as ``{"role": "tool", "tool_call_id": <the call's
  id>, "content": <text>}`` after the assistant message that called it. An
  error is ``{"error": {"message", "type", "param", "code"}}``; a rate limit is
  429 with ``retry-after`` (the SDK also reads ``retry-after-ms`` and obeys
  ``x-should-retry``).

- Anthropic Messages, an answer with a tool call (Anthropic's tool-use
  examples)::

    {"id": "msg_01Aq9w938a90dw8q", "model": "claude-3-opus-20240229", "stop_reason": "tool_use",
     "role": "assistant",
     "content": [{"type": "text", "text": "<thinking>I need to call the get_weather function ...</thinking>"},
                 {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                  "input": {"location": "San Francisco, CA", "unit": "celsius"}}]}

  with ``"type": "message"``, ``"stop_sequence"`` and ``"usage": {"input_tokens",
  "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}``
  (the API reference's Message; the SDK's ``anthropic.types.Message`` and
  ``Usage``). The result goes back in the next user message as ``{"type":
  "tool_result", "tool_use_id": <the id>, "content": <text>, "is_error"?}``,
  before any text. An error is ``{"type": "error", "error": {"type", "message"}}``:
  429 ``rate_limit_error`` with ``retry-after``, 500 ``api_error``, 529
  ``overloaded_error`` (Anthropic's errors reference).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Tokens:
    """A reply's usage as Steerboard records it: ``input`` counts every input token, the
    ``cached`` (read from the cache) and, for Anthropic, the ``written`` (to it) included."""

    input: int = 0
    output: int = 0
    cached: int = 0
    written: int = 0

    def recorded(self, model: str) -> dict:
        return {"model": model, "input_tokens": self.input, "output_tokens": self.output, "cached_tokens": self.cached}


@dataclass
class Reply:
    """One scripted answer. A call's arguments may be a function of the request (``Seen``),
    for what only the conversation knows (a task's id and revision)."""

    text: str | None = None
    calls: list[tuple[str, dict | Callable[["Seen"], dict]]] = field(default_factory=list)
    tokens: Tokens = field(default_factory=Tokens)


@dataclass
class Fail:
    """Answer ``status`` to the next ``times`` requests (a 429 with ``retry_after`` seconds)."""

    status: int
    retry_after: float | None = None
    times: int = 1


@dataclass
class Seen:
    """A request as the script reads it: the tool results and user texts it carries, in order."""

    body: dict
    results: list = field(default_factory=list)  # each tool result's content, parsed from JSON
    texts: list[str] = field(default_factory=list)  # each user text


@dataclass
class Recorded:
    model: str
    body: dict
    at: float
    status: int


ERRORS = {
    "openai": {
        400: ("invalid_request_error", "invalid_request_error"),
        429: ("requests", "rate_limit_exceeded"),
        500: ("server_error", None),
        529: ("server_error", None),
    },
    "anthropic": {
        400: ("invalid_request_error", None),
        429: ("rate_limit_error", None),
        500: ("api_error", None),
        529: ("overloaded_error", None),
    },
}
MESSAGES = {
    400: "The request breaks the API's rules: {}",
    429: "Rate limit reached for requests. Please try again in {}s.",
    500: "The server had an error while processing your request. Sorry about that!",
    529: "Overloaded",
}


class FakeVendor:
    def __init__(self, vendor: str):
        assert vendor in ("openai", "anthropic")
        self.vendor = vendor
        self.scripts: dict[str, deque] = defaultdict(deque)
        self.requests: list[Recorded] = []
        self._failing: dict[str, list[int]] = {}  # model -> [failures left] of the Fail at its script's head
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # --- scripting and reading back ---------------------------------------------------------
    def script(self, model: str, *steps: Reply | Fail) -> None:
        self.scripts[model].extend(steps)

    def requests_of(self, model: str) -> list[Recorded]:
        return [r for r in self.requests if r.model == model]

    def left(self) -> dict[str, int]:
        return {model: len(steps) for model, steps in self.scripts.items() if steps}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}" + ("/v1" if self.vendor == "openai" else "")

    # --- the server -------------------------------------------------------------------------
    def start(self) -> "FakeVendor":
        app = web.Application(client_max_size=64 * 1024 * 1024)
        path = "/v1/chat/completions" if self.vendor == "openai" else "/v1/messages"
        app.router.add_post(path, self._answer)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def serve():
            asyncio.set_event_loop(self._loop)
            self._runner = web.AppRunner(app, access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            self._loop.run_until_complete(web.SockSite(self._runner, sock).start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name=f"fake-{self.vendor}", daemon=True)
        self._thread.start()
        assert ready.wait(10), "the fake vendor did not start"
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        model = str(body.get("model"))
        problems = self.problems(body)
        if problems:
            return self._record(model, body, self._error(400, "; ".join(problems)))
        steps = self.scripts[model]
        if not steps:
            return self._record(model, body, self._error(500, f"the fake has no scripted answer left for {model!r}"))
        step = steps[0]
        if isinstance(step, Fail):
            left = self._failing.setdefault(model, [step.times])
            left[0] -= 1
            if left[0] <= 0:
                steps.popleft()
                self._failing.pop(model, None)
            headers = {"retry-after": f"{step.retry_after:g}"} if step.retry_after is not None else {}
            return self._record(model, body, self._error(step.status, str(step.retry_after or ""), headers))
        steps.popleft()
        seen = self.seen(body)
        calls = [(name, arguments(seen) if callable(arguments) else arguments) for name, arguments in step.calls]
        answer = self._openai(model, step, calls) if self.vendor == "openai" else self._anthropic(model, step, calls)
        return self._record(model, body, web.json_response(answer))

    def _record(self, model: str, body: dict, response: web.Response) -> web.Response:
        self.requests.append(Recorded(model=model, body=body, at=time.monotonic(), status=response.status))
        return response

    def _error(self, status: int, detail: str = "", headers: dict | None = None) -> web.Response:
        kind, code = ERRORS[self.vendor][status]
        message = MESSAGES[status].format(detail) if status in (400, 429) else (detail or MESSAGES[status])
        if self.vendor == "openai":
            body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        else:
            body = {"type": "error", "error": {"type": kind, "message": message}}
        return web.json_response(body, status=status, headers=headers or {})

    # --- the vendors' answers ---------------------------------------------------------------
    def _openai(self, model: str, step: Reply, calls: list[tuple[str, dict]]) -> dict:
        tool_calls = [
            {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}
            for name, arguments in calls
        ]
        message = {"role": "assistant", "content": step.text, "refusal": None, "annotations": []}
        if tool_calls:
            message["tool_calls"] = tool_calls
        t = step.tokens
        return {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {
                "prompt_tokens": t.input,
                "completion_tokens": t.output,
                "total_tokens": t.input + t.output,
                "prompt_tokens_details": {"cached_tokens": t.cached, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
            },
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

    def _anthropic(self, model: str, step: Reply, calls: list[tuple[str, dict]]) -> dict:
        content = [{"type": "text", "text": step.text}] if step.text else []
        content += [{"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": name, "input": arguments}
                    for name, arguments in calls]
        t = step.tokens
        return {
            "id": f"msg_fake{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": t.input - t.cached - t.written,
                "output_tokens": t.output,
                "cache_creation_input_tokens": t.written,
                "cache_read_input_tokens": t.cached,
            },
        }

    # --- reading a request ------------------------------------------------------------------
    def seen(self, body: dict) -> Seen:
        seen = Seen(body=body)
        for message in body.get("messages") or []:
            content = message.get("content")
            if self.vendor == "openai":
                if message.get("role") == "tool":
                    seen.results.append(_parsed(content))
                elif message.get("role") == "user":
                    seen.texts.append(content if isinstance(content, str) else json.dumps(content))
                continue
            if message.get("role") != "user":
                continue
            for block in content if isinstance(content, list) else [{"type": "text", "text": content}]:
                if block.get("type") == "tool_result":
                    seen.results.append(_parsed(block.get("content")))
                elif block.get("type") == "text":
                    seen.texts.append(block.get("text"))
        return seen

    def problems(self, body: dict) -> list[str]:
        """The vendor's rules this request breaks (the module's docstring lists them)."""
        return openai_problems(body) if self.vendor == "openai" else anthropic_problems(body)


def _parsed(content):
    if isinstance(content, list):  # Anthropic's content blocks
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return content


def openai_problems(body: dict) -> list[str]:
    problems = []
    messages = body.get("messages") or []
    if not messages:
        problems.append("messages: empty")
    waiting: list[str] = []  # tool_call ids the next messages must answer
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in waiting:
                problems.append(f"messages[{index}]: a tool message for {call_id!r}, which no preceding tool_calls holds")
            else:
                waiting.remove(call_id)
            continue
        if waiting:
            problems.append(f"messages[{index}]: the tool_calls {waiting} have no tool message before this {role}")
            waiting = []
        if role == "assistant":
            waiting = [c.get("id") for c in message.get("tool_calls") or []]
            if not message.get("content") and not waiting:
                problems.append(f"messages[{index}]: an assistant message with neither content nor tool_calls")
        elif role not in ("system", "developer", "user"):
            problems.append(f"messages[{index}]: unknown role {role!r}")
    if waiting:
        problems.append(f"the tool_calls {waiting} have no tool message")
    for tool in body.get("tools") or []:
        if tool.get("type") != "function" or not (tool.get("function") or {}).get("name"):
            problems.append(f"tools: {tool!r} is not a function")
    return problems


_ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def anthropic_problems(body: dict) -> list[str]:
    problems = []
    if not isinstance(body.get("max_tokens"), int):
        problems.append("max_tokens: Field required")
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        problems.append("messages: the first message must use the user role")
    expected: list[str] = []  # the tool_use ids of the assistant message before
    for index, message in enumerate(messages):
        role = message.get("role")
        if index and role == messages[index - 1].get("role"):
            problems.append(f"messages[{index}]: roles must alternate between user and assistant")
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for block in blocks:
            if block.get("type") == "text" and not block.get("text"):
                problems.append(f"messages[{index}]: text content blocks must be non-empty")
        if role == "assistant":
            expected = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            for call_id in expected:
                if not _ANTHROPIC_ID.match(str(call_id)):
                    problems.append(f"messages[{index}]: tool_use id {call_id!r} does not match ^[a-zA-Z0-9_-]+$")
            continue
        kinds = [b.get("type") for b in blocks]
        answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if "tool_result" in kinds:
            last = max(i for i, kind in enumerate(kinds) if kind == "tool_result")
            if any(kind != "tool_result" for kind in kinds[:last]):
                problems.append(f"messages[{index}]: tool_result blocks must come first in the user message")
        for call_id in answered:
            if call_id not in expected:
                problems.append(f"messages[{index}]: tool_result for {call_id!r}, which the previous message did not use")
        missing = [c for c in expected if c not in answered]
        if missing:
            problems.append(f"messages[{index}]: tool_use ids {missing} were found without tool_result blocks immediately after")
        expected = []
    if expected:
        problems.append(f"tool_use ids {expected} were found without tool_result blocks immediately after")
    return problems
