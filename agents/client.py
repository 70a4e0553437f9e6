"""The REST side of a session: the nine Team tools and the member's own history.

Calls survive a server restart: a call that never reached the server is simply
sent again; a call whose answer was lost is made safe to repeat:
``send_message`` and ``team_task_create`` carry an idempotency key (the call
id), ``team_task_update`` is compare-and-set, so a lost answer is recognised by
reading the task back, and ``spawn_teammate`` by reading the roster.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import httpx

log = logging.getLogger(__name__)

KEYED_TOOLS = {"send_message", "team_task_create"}
TEAM_TOOLS = (
    "spawn_teammate",
    "send_message",
    "list_agents",
    "wait_agent",
    "interrupt_agent",
    "team_task_create",
    "team_task_list",
    "team_task_get",
    "team_task_update",
)


_answers_seen: dict[str, int] = {}


def crash_point(tool: str) -> None:
    """A hard kill at a known point, for tests that inject it on purpose: with
    ``STEERBOARD_AGENTS_CRASH_AT=<tool>`` or ``<tool>:N`` in its environment the
    process ends at once (``os._exit``, as ``kill -9``: every session it runs goes
    with it) when the Nth successful answer to that tool arrives, before the
    session writes the result to its history."""
    spec = os.environ.get("STEERBOARD_AGENTS_CRASH_AT")
    if not spec:
        return
    name, _, nth = spec.partition(":")
    if name != tool:
        return
    _answers_seen[tool] = _answers_seen.get(tool, 0) + 1
    if _answers_seen[tool] >= int(nth or 1):
        os._exit(137)


class ToolError(Exception):
    def __init__(self, code: str, message: str, status: int = 0):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


class ServerClient:
    def __init__(self, server: str, token: str, *, max_backoff: float = 2.0):
        self.server = server.rstrip("/")
        self.token = token
        self.max_backoff = max_backoff
        self.member: str | None = None
        self._http = httpx.AsyncClient(
            base_url=self.server, headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(30.0)
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, url: str, *, json: Any = None, params=None, timeout: float = 30.0):
        """Send until the server answers. Returns (response, ambiguous): ambiguous is True when an
        earlier attempt may have reached the server and its answer was lost."""
        backoff, ambiguous = 0.1, False
        while True:
            try:
                response = await self._http.request(method, url, json=json, params=params, timeout=timeout)
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
    async def tool(self, name: str, arguments: dict, *, call_id: str | None = None, repeat: bool = False) -> dict:
        """Call one Team tool; return its result or raise ToolError.

        ``repeat``: this call may already have been made (a resumed session runs again a call its
        history shows without a result), so a refusal is checked against the state like a lost answer."""
        body = dict(arguments)
        if name in KEYED_TOOLS and call_id and "idempotency_key" not in body:
            body["idempotency_key"] = call_id[:128]
        timeout = 30.0
        if name == "wait_agent":
            timeout = body.get("timeout_ms", 30_000) / 1000 + 30
        response, ambiguous = await self._request("POST", f"/api/v1/tools/{name}", json=body, timeout=timeout)
        if response.status_code == 200:
            crash_point(name)
            return response.json()
        error = _error_of(response)
        if ambiguous or repeat:
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


def _error_of(response: httpx.Response) -> ToolError:
    try:
        error = response.json()["error"]
        return ToolError(error.get("code", "ERROR"), error.get("message", ""), response.status_code)
    except (ValueError, KeyError, TypeError):
        return ToolError("HTTP_" + str(response.status_code), response.text[:500], response.status_code)
