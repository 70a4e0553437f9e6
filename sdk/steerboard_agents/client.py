"""A session's calls to the server: the ten Team tools and the member's own history.

A tool call goes over the session's own websocket (a ``tool`` frame answered
by a ``tool_result`` frame, ``SocketTools``) while it is connected and the
server takes tool frames; otherwise over REST (``POST /api/v1/tools/<name>``).

Calls survive a server restart: a call that never reached the server is simply
sent again; a call whose answer was lost (the socket dropped after the frame
went out, a REST request whose answer never came, a server failure) is sent
again over REST and made safe to repeat: ``send_message`` and
``team_task_create`` carry an idempotency key (the call id),
``team_task_update`` is compare-and-set, so a lost answer is recognised by
reading the task back, and ``spawn_teammate`` by reading the roster.
"""
from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from steerboard_agents import tracing
from steerboard_protocol.crash import CrashPoints
from steerboard_protocol.tools import KEYED_TOOLS

log = logging.getLogger(__name__)

_crashes = CrashPoints("STEERBOARD_AGENTS_CRASH_AT")


def crash_point(tool: str) -> None:
    """A hard kill at a known point, for tests that inject it on purpose: with
    ``STEERBOARD_AGENTS_CRASH_AT=<tool>`` or ``<tool>:N`` in its environment the
    process ends at once (``os._exit``, as ``kill -9``: every session it runs goes
    with it) when the Nth successful answer to that tool arrives, before the
    session writes the result to its history (sdk/steerboard_protocol/crash.py)."""
    _crashes.reached(tool)


class ToolError(Exception):
    def __init__(self, code: str, message: str, status: int = 0):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


# The HTTP status REST answers a refusal with (the server's teams/errors.py), given to a
# ToolError that came over the websocket; a code not listed here gets 0.
HTTP_STATUS = {
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "LEAD_ONLY": 403,
    "NOT_FOUND": 404,
    "TASK_NOT_FOUND": 404,
    "TEAM_UNKNOWN_TARGET": 404,
    "METHOD_NOT_ALLOWED": 405,
    "TEAM_TARGET_RETIRED": 409,
    "TEAM_ROSTER_FULL": 409,
    "TEAM_TASK_BOARD_FULL": 409,
    "TEAM_NAME_TAKEN": 409,
    "TASK_REVISION_CONFLICT": 409,
    "TASK_INVALID_ACTION": 409,
    "TASK_DEPENDENCY_CYCLE": 409,
    "IDEMPOTENCY_KEY_CONFLICT": 409,
    "TEAM_MESSAGE_TOO_LARGE": 413,
    "TEAM_MAILBOX_FULL": 429,
    "VALIDATION_ERROR": 400,
    "TEAM_SELF_MESSAGE": 400,
    "SERVER_ERROR": 500,
    "SERVICE_UNAVAILABLE": 503,
}


class FrameNotSent(Exception):
    """The tool frame never left: the call may simply be made again."""


class AnswerLost(Exception):
    """The tool frame went out and its answer will not come (the socket dropped, or it timed out):
    the server may have done the call."""


class SocketTools:
    """Tool calls as frames on one connection of a session's websocket.

    The session makes one per connection and sends ``probe_frame()`` before its
    ``hello``. A server that does not know tool frames refuses the probe with an
    ``error`` frame, and since it answers frames in order, that error comes before
    the ``welcome`` (``refused()``); a ``tool_result`` for the probe, or a welcome
    with the probe unanswered, shows that the server takes them (``welcomed()``).
    Only then does ``call`` send frames; ``answer()`` routes each ``tool_result``
    to its caller; ``close()`` (the socket dropped) fails every call in flight
    with ``AnswerLost``.
    """

    PROBE_TOOL = "list_agents"  # read-only and allowed to every member
    # daphne closes a socket that sends a message over 1 MiB (its default): a larger call goes over REST.
    MAX_FRAME = 1_000_000
    # The server takes at most 64 calls in flight per socket; past this many they go over REST.
    MAX_IN_FLIGHT = 32

    def __init__(self, send: Callable[[str], Awaitable[Any]], outbox=None):
        self._send = send
        # The session's outbox (sdk/steerboard_agents/outbox.py), whose unsent entries a call that
        # must come after them carries, once the server says it takes them (``carries``).
        self._outbox = outbox
        self.carries = False
        self._waiting: dict[str, asyncio.Future] = {}
        self.probe_id = "probe-" + uuid.uuid4().hex
        self.state = "probing"  # then "ready" or "refused"; "closed" once the socket is gone

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def probe_frame(self) -> dict:
        return {"type": "tool", "id": self.probe_id, "name": self.PROBE_TOOL, "arguments": {}}

    def welcomed(self) -> None:
        if self.state == "probing":
            self.state = "ready"

    def refused(self) -> bool:
        """An ``error`` frame arrived before the welcome: while probing, it is the probe's refusal."""
        if self.state != "probing":
            return False
        self.state = "refused"
        return True

    def answer(self, frame: dict) -> None:
        frame_id = frame.get("id")
        if frame_id == self.probe_id:
            self.welcomed()
            return
        waiter = self._waiting.pop(frame_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(frame)

    def close(self) -> None:
        self.state = "closed"
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            if not waiter.done():
                waiter.set_exception(AnswerLost("the websocket dropped before the answer came"))

    async def call(self, name: str, arguments: dict, timeout: float,
                   durable: Callable[[], Awaitable[None]] | None = None) -> dict:
        """Send one tool frame and return its ``tool_result`` frame.

        ``durable``: the session's history must be durable before the call runs. The frame
        carries the entries not yet sent (the server runs the call once they, and every entry
        before them, are answered), or, where it cannot, ``durable()`` is awaited first."""
        if not self.ready:
            raise FrameNotSent(f"tool frames are {self.state} on this connection")
        if len(self._waiting) >= self.MAX_IN_FLIGHT:
            raise FrameNotSent(f"{len(self._waiting)} tool calls are in flight on this connection")
        frame = {"type": "tool", "id": (frame_id := uuid.uuid4().hex), "name": name, "arguments": arguments}
        frame.update(tracing.trace_fields())  # the call's trace, when the session traces
        carried = None
        if durable is not None:
            carried = self._outbox.carry() if self.carries and self._outbox is not None else None
            if carried:
                frame["entries"] = carried
            else:
                if carried is None or len(self._outbox):  # entries in flight, or not to be carried
                    await durable()
                    if not self.ready:
                        raise FrameNotSent(f"tool frames are {self.state} on this connection")
                carried = None
        text = json.dumps(frame)
        if len(text) > self.MAX_FRAME and carried is not None:  # the call alone, after the entries
            self._outbox.uncarried(carried)
            del frame["entries"]
            carried = None
            await durable()
            if not self.ready:
                raise FrameNotSent(f"tool frames are {self.state} on this connection")
            text = json.dumps(frame)
        if len(text) > self.MAX_FRAME:  # ASCII (json.dumps escapes the rest): characters are bytes
            raise FrameNotSent(f"a {len(text)}-byte frame is larger than a server's websocket takes")
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[frame_id] = waiter
        try:
            try:
                await self._send(text)
            except Exception as exc:  # it may have gone out before the socket failed
                if carried is not None:
                    self._outbox.uncarried(carried)
                raise AnswerLost(f"sending the frame failed: {exc!r}") from exc
            try:
                return await asyncio.wait_for(waiter, timeout)
            except asyncio.TimeoutError:
                raise AnswerLost(f"no answer in {timeout:g}s") from None
        finally:
            self._waiting.pop(frame_id, None)


class ServerClient:
    def __init__(self, server: str, token: str, *, max_backoff: float = 2.0):
        self.server = server.rstrip("/")
        self.token = token
        self.max_backoff = max_backoff
        self.member: str | None = None
        # Set by the session while its websocket takes tool frames; None: tools go over REST.
        self.transport: SocketTools | None = None
        self._http = httpx.AsyncClient(
            base_url=self.server, headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(30.0)
        )

    def token_replace(self, token: str) -> None:
        self.token = token
        self._http.headers["Authorization"] = f"Bearer {token}"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self, method: str, url: str, *, json: Any = None, params=None, timeout: float = 30.0, headers=None
    ):
        """Send until the server answers. Returns (response, ambiguous): ambiguous is True when an
        earlier attempt may have reached the server and its answer was lost."""
        backoff, ambiguous = 0.1, False
        while True:
            try:
                response = await self._http.request(
                    method, url, json=json, params=params, timeout=timeout, headers=headers
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                log.info("%s %s: %s; retrying", method, url, exc)
            except httpx.HTTPError as exc:  # sent, answer lost
                log.info("%s %s: %s; retrying", method, url, exc)
                ambiguous = True
            else:
                if response.status_code < 500:
                    return response, ambiguous
                ambiguous = True
                log.warning("%s %s answered %s; retrying", method, url, response.status_code)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)

    # --- tools ---------------------------------------------------------------------------
    async def tool(self, name: str, arguments: dict, *, call_id: str | None = None, repeat: bool = False,
                   durable: Callable[[], Awaitable[None]] | None = None) -> dict:
        """Call one Team tool; return its result or raise ToolError.

        Over the session's websocket when ``transport`` is ready, else (and for every
        repetition of a call whose answer was lost) over REST.

        ``repeat``: this call may already have been made (a resumed session runs again a call its
        history shows without a result), so a refusal is checked against the state like a lost answer.

        ``durable``: what makes the session's history durable (its ``settle``), which the call
        must come after: awaited before a REST call; a tool frame carries the entries instead
        where the server takes them (``SocketTools.call``).

        The call is a span of its own when the session traces (sdk/steerboard_agents/tracing.py),
        and its frame or request carries that span's context to the server."""
        with tracing.tool_span(name, call_id) as span:
            try:
                return await self._tool(name, arguments, call_id=call_id, repeat=repeat, durable=durable)
            except ToolError as exc:
                tracing.tool_refused(span, exc.code)
                raise

    async def _tool(self, name: str, arguments: dict, *, call_id: str | None, repeat: bool,
                    durable: Callable[[], Awaitable[None]] | None = None) -> dict:
        body = dict(arguments)
        if name in KEYED_TOOLS and call_id and "idempotency_key" not in body:
            body["idempotency_key"] = call_id[:128]
        timeout = 30.0
        if name == "wait_agent":
            timeout = body.get("timeout_ms", 30_000) / 1000 + 30
        ambiguous = False
        transport = self.transport
        if durable is not None and (transport is None or not transport.ready):
            await durable()  # the history first (it waits for a reconnect): then maybe over its socket
            transport = self.transport
        if transport is not None and transport.ready:
            try:
                answer = await transport.call(name, body, timeout, durable)
            except FrameNotSent as exc:
                log.debug("tool %s over REST: %s", name, exc)
            except AnswerLost as exc:
                log.info("tool %s over the websocket: %s; repeating it over REST", name, exc)
                ambiguous = True
            else:
                if "result" in answer:
                    crash_point(name)
                    return answer["result"]
                error = _error_of_frame(answer)
                # SERVICE_UNAVAILABLE (the server cannot reach its database) is no refusal either:
                # over REST a 5xx is sent again until it is answered.
                if error.code not in ("SERVER_ERROR", "SERVICE_UNAVAILABLE"):
                    return await self._refused(name, arguments, error, repeat)
                log.warning("tool %s over the websocket: the server failed; repeating it over REST", name)
                ambiguous = True
                await asyncio.sleep(0.1)
        if durable is not None:
            await durable()
        response, lost = await self._request(
            "POST", f"/api/v1/tools/{name}", json=body, timeout=timeout, headers=tracing.trace_fields() or None
        )
        if response.status_code == 200:
            crash_point(name)
            return response.json()
        return await self._refused(name, arguments, _error_of(response), ambiguous or lost or repeat)

    async def _refused(self, name: str, arguments: dict, error: ToolError, maybe_done: bool) -> dict:
        """A refusal; when an earlier attempt may have succeeded, first check whether it did."""
        if maybe_done:
            recovered = await self._recover(name, arguments, error)
            if recovered is not None:
                return recovered
        raise error

    async def _recover(self, name: str, arguments: dict, error: ToolError) -> dict | None:
        """An earlier attempt may have succeeded: answer what it did, if the state shows it."""
        if name == "team_task_update" and error.code == "TASK_REVISION_CONFLICT":
            try:
                task = (await self.tool("team_task_get", {"task_id": arguments["task_id"]}))["task"]
            except ToolError:
                return None
            if task["revision"] == arguments["expected_revision"] + 1 and _looks_done(task, arguments, self.member):
                return {"task": task}
        if name == "spawn_teammate" and error.code == "TEAM_NAME_TAKEN":
            agents = (await self.tool("list_agents", {}))["agents"]
            for member in agents:
                if member["name"] == arguments.get("name"):
                    return {"member": member}
        return None

    async def policy(self) -> str | None:
        """The team policy a model's instructions should carry (GET /api/v1/tools/policy), if served."""
        try:
            response = await self._http.get("/api/v1/tools/policy", timeout=10)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            return response.json().get("policy")
        except ValueError:
            return None

    async def tool_catalogue(self) -> list[dict]:
        """The Team tools as the server describes them (GET /api/v1/tools): ``[{"name",
        "description", "input_schema", ...}]``, for a model that offers them to an LLM.
        Asked again while the server fails (5xx); a server that does not serve it: []."""
        response, _ = await self._request("GET", "/api/v1/tools")
        if response.status_code != 200:
            log.warning("GET /api/v1/tools answered %s: no tool descriptions for the model", response.status_code)
            return []
        try:
            tools = response.json()
        except ValueError:
            return []
        return [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)] if isinstance(tools, list) else []

    async def history(self) -> list[dict]:
        """This member's whole durable history, oldest first."""
        entries: list[dict] = []
        after = 0
        while True:
            response, _ = await self._request("GET", "/api/v1/session/history", params={"after": after, "limit": 1000})
            if response.status_code != 200:
                raise _error_of(response)
            page = response.json()
            self.member = page.get("member", self.member)
            for entry in page["entries"]:
                entry = dict(entry)
                entry.pop("position", None)
                entries.append(entry)
            if page.get("next_after") is None:
                return entries
            after = page["next_after"]


def _looks_done(task: dict, arguments: dict, me: str | None) -> bool:
    action = arguments.get("action")
    if action == "claim":
        return task["status"] == "in_progress" and (me is None or task["owner"] == me)
    if action == "complete":
        return task["status"] == "completed"
    if action == "release":
        return task["owner"] is None
    if action == "delete":
        return task["status"] == "deleted"
    if action == "reopen":
        return task["status"] == "pending"
    return False


def _error_of_frame(frame: dict) -> ToolError:
    """A refusal that came in a ``tool_result`` frame, with the status REST would have answered."""
    error = frame.get("error")
    if not isinstance(error, dict):  # neither result nor error: take it for a server failure
        return ToolError("SERVER_ERROR", f"a tool_result without result or error: {frame!r}"[:500], 500)
    code = str(error.get("code") or "ERROR")
    return ToolError(code, str(error.get("message", "")), HTTP_STATUS.get(code, 0))


def _error_of(response: httpx.Response) -> ToolError:
    try:
        error = response.json()["error"]
        return ToolError(error.get("code", "ERROR"), error.get("message", ""), response.status_code)
    except (ValueError, KeyError, TypeError):
        return ToolError("HTTP_" + str(response.status_code), response.text[:500], response.status_code)
