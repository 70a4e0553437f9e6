"""One reconnecting websocket for the host (``/ws/host/``) and each agent session (``/ws/agent/``).

websockets has a reconnecting form of its own (``async for ws in connect(...)``),
but it sends the same headers on every attempt and takes its backoff (3 to 90 s)
from environment variables. Here the bearer token is read again before each
attempt (the server may hand a running session a new start token and revoke
the old one: teams/tokens.py), and a lost connection is tried again after
0.1 s, doubling up to ``max_backoff``: a member whose server went away for a
moment is back within a fraction of a second.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus, WebSocketException

log = logging.getLogger(__name__)


def ws_url(server: str, path: str) -> str:
    """``http(s)://host:port`` -> ``ws(s)://host:port/<path>``."""
    server = server.rstrip("/")
    for http, ws in (("https://", "wss://"), ("http://", "ws://")):
        if server.startswith(http):
            server = ws + server[len(http):]
            break
    return f"{server}/{path.strip('/')}/"


class Reconnects(Protocol):
    """What ``run_reconnecting`` reads of its client (the host, an agent session)."""

    server: str  # http(s)://host:port
    token: str  # read again before each attempt
    max_backoff: float

    async def _converse(self, ws: ClientConnection) -> None: ...


async def run_reconnecting(
    client: Reconnects,
    path: str,
    *,
    refused: Callable[[int], Exception],
    label: str,
    stopping: asyncio.Event | None = None,
    on_lost: Callable[[], None] | None = None,
    **connect_options,
) -> None:
    """Connect to ``path`` on the client's server, run ``client._converse(ws)`` until the
    connection ends, and connect again, until ``stopping`` is set. A 401/403 for the token
    the attempt was made with raises ``refused(status)`` (retrying cannot help; a token
    replaced meanwhile is tried at once). ``on_lost`` runs after each connection, however it ended."""
    url = ws_url(client.server, path)
    backoff = 0.1
    # Until the first connection, a failure is most likely a wrong --server or a server not
    # started yet: said once where it shows by default (later losses are the server's restarts,
    # said at INFO, with -v).
    connected = warned = False
    while stopping is None or not stopping.is_set():
        sent_token = client.token
        try:
            async with websockets.connect(
                url,
                additional_headers={"Authorization": f"Bearer {sent_token}"},
                open_timeout=10,
                close_timeout=1,
                max_queue=None,
                **connect_options,
            ) as ws:
                backoff = 0.1
                if warned and not connected:
                    log.warning("%s websocket: connected to %s", label, url)
                connected = True
                await client._converse(ws)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403):
                if client.token == sent_token:  # a token replaced meanwhile is tried next
                    raise refused(status)
            log.info("%s websocket refused: %s", label, exc)
            warned = warned or _first_failure(connected, label, url, exc)
        except (OSError, WebSocketException, asyncio.TimeoutError, ValueError) as exc:
            log.info("%s websocket lost: %r", label, exc)
            warned = warned or _first_failure(connected, label, url, exc)
        finally:
            if on_lost is not None:
                on_lost()
        if stopping is not None and stopping.is_set():
            return
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, client.max_backoff)


def _first_failure(connected: bool, label: str, url: str, exc: Exception) -> bool:
    """Say that the first connection failed (once; answers whether it said so)."""
    if connected:
        return False
    log.warning("%s websocket: cannot connect to %s (%s); trying again until it answers", label, url, str(exc) or type(exc).__name__)
    return True
