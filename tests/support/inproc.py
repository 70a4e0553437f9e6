"""In-process clients of the real ASGI application: REST through httpx's ASGI
transport, websockets through Channels' WebsocketCommunicator, on the test
database and the configured channel layer."""
import asyncio
import itertools
import json
import threading
import weakref

import httpx
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from demo.daphne_process import Loopback
from mailbox.transports import consumers
from teams.services import member_token_create, team_create
from tests.support.environment import ManageCommands

_entry_ids = itertools.count(1)


def auth(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())]


class Api:
    def __init__(self):
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://testserver")

    async def tool(self, token: str | None, tool_name: str, body=None, **arguments) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if body is not None:
            return await self.http.post(f"/api/v1/tools/{tool_name}", content=body, headers=headers)
        return await self.http.post(f"/api/v1/tools/{tool_name}", json=arguments, headers=headers)

    async def ok(self, token: str, tool_name: str, **arguments) -> dict:
        response = await self.tool(token, tool_name, **arguments)
        assert response.status_code == 200, response.text
        return response.json()

    async def close(self):
        await self.http.aclose()


class _Communicator(WebsocketCommunicator):
    """Channels' communicator, counting what its consumer is to handle in order: the connect
    and each frame (``Agent.settled`` waits for the consumer to have handled as many)."""

    sent = 0

    async def send_input(self, message):
        if message["type"] in ("websocket.connect", "websocket.receive"):
            self.sent += 1
        await super().send_input(message)


# The in-process clients, by the header that names each to its consumer (``_consumer_opened``).
_CLIENT_HEADER = b"x-steerboard-test-client"
_clients: "weakref.WeakValueDictionary[bytes, Agent]" = weakref.WeakValueDictionary()
_client_ids = itertools.count(1)
_PROBE = "test.settled"


def _consumer_opened(consumer, scope) -> None:
    """mailbox/transports/consumers.py's ``opened`` hook (installed below; None in production): an
    in-process client's consumer is handed to it as its socket starts."""
    client = _clients.get(dict(scope.get("headers") or []).get(_CLIENT_HEADER))
    if client is not None:
        client._watch(consumer)


consumers.opened = _consumer_opened


class Agent:
    """One agent session on /ws/agent/ (or a host on /ws/host/), speaking the wire protocol by hand."""

    def __init__(self, token: str, path: str = "/ws/agent/"):
        self.key = str(next(_client_ids)).encode()
        self.comm = _Communicator(application, path, headers=[*auth(token), (_CLIENT_HEADER, self.key)])
        self.buffer: list[dict] = []
        self.consumer = None
        self.handled = 0  # websocket messages (the connect, frames) its consumer finished handling
        self._handled_changed: asyncio.Event | None = None
        self._probes: dict[int, asyncio.Future] = {}
        _clients[self.key] = self

    def _watch(self, consumer) -> None:
        """Count what the consumer finished handling, and answer ``settled``'s probes, which
        reach it the way its events do: its outbox (an agent's) and the channel layer."""
        self.consumer = consumer
        self._handled_changed = asyncio.Event()
        handle = consumer.dispatch

        async def dispatch(message):
            if message["type"] == _PROBE:
                probe = self._probes.pop(message["probe"], None)
                if probe is not None and not probe.done():
                    probe.set_result(None)
                return
            try:
                await handle(message)
            finally:
                if message["type"] in ("websocket.connect", "websocket.receive"):
                    self.handled += 1
                    self._handled_changed.set()

        consumer.dispatch = dispatch

    async def connect(self, status: str | None = "idle") -> dict | None:
        connected, _ = await self.comm.connect()
        assert connected
        if status is None:
            return None
        await self.comm.send_json_to({"type": "hello", "status": status})
        return await self.expect("welcome")

    async def send(self, frame: dict) -> None:
        await self.comm.send_json_to(frame)

    async def expect(self, type_: str, timeout: float = 5) -> dict:
        for i, frame in enumerate(self.buffer):
            if frame["type"] == type_:
                return self.buffer.pop(i)
        while True:
            frame = await self.comm.receive_json_from(timeout=timeout)
            if frame["type"] == type_:
                return frame
            self.buffer.append(frame)

    def _ended(self) -> bool:
        return self.comm.future.done()

    async def settled(self, timeout: float = 10) -> None:
        """The server has done what this client's frames and the calls before now asked of it,
        and sent what it had for this socket: its consumer has handled the connect and every
        frame sent, then a probe came through each way the server reaches the socket after
        every event queued before it (its outbox, in order; the channel layer, in order per
        channel). What it sent is read into the buffer. A push made after a commit reaches the
        outbox before the call that made it returns (mailbox/engine/hot_path.py ``finish``), so what
        a call would have pushed is here once this returns."""
        if self.consumer is None:
            raise AssertionError("this client's consumer never started (connect first)")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                while self.handled < self.comm.sent and not self._ended():
                    self._handled_changed.clear()
                    await self._until(asyncio.ensure_future(self._handled_changed.wait()))
                await self._background_done(loop)
                probes = []
                if not self._ended():
                    if getattr(self.consumer, "outbox", None) is not None:
                        probe, answered = self._probe(loop)
                        probes.append(answered)
                        self.consumer.push({"type": _PROBE, "probe": probe})
                    layer = self.consumer.channel_layer
                    if layer is not None:
                        probe, answered = self._probe(loop)
                        probes.append(answered)
                        await layer.send(self.consumer.channel_name, {"type": _PROBE, "probe": probe})
                for answered in probes:
                    await self._until(answered)
        except TimeoutError:
            raise AssertionError(f"the server did not settle within {timeout}s "
                                 f"(handled {self.handled} of {self.comm.sent} messages)") from None
        self._drain()

    async def _background_done(self, loop) -> None:
        """What the server does after an answer, on this loop, finished: the budget checks after
        a reported usage, the doorbells being published (what these push is pushed before they
        end). Not the session's entries waiting for their commit: a test may hold them (a lock),
        and an entry's answers come after its ack, which the test reads first."""
        from mailbox.plumbing import events
        from mailbox.engine import hot_path

        while True:
            pending = [t for t in (*hot_path._budget_checks, *events._in_flight) if t.get_loop() is loop]
            pending = [t for t in pending if not t.done()]
            if not pending:
                return
            await asyncio.wait(pending)

    async def _until(self, future: asyncio.Future) -> None:
        """Until ``future`` is done or the consumer has ended (a closed socket answers no probe)."""
        try:
            await asyncio.wait([future, self.comm.future], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not future.done():
                future.cancel()

    def _probe(self, loop) -> tuple[int, asyncio.Future]:
        probe, answered = next(_client_ids), loop.create_future()
        self._probes[probe] = answered
        return probe, answered

    def _drain(self) -> None:
        """What the consumer has sent so far, into the buffer (a close stays queued for the reader)."""
        queue = self.comm.output_queue
        while not queue.empty():
            message = queue.get_nowait()
            if message["type"] != "websocket.send" or message.get("text") is None:
                queue.put_nowait(message)
                return
            self.buffer.append(json.loads(message["text"]))

    async def nothing(self, type_: str) -> bool:
        """True when no frame of this type came, once the server has settled (``settled``)."""
        await self.settled()
        return not any(f["type"] == type_ for f in self.buffer)

    async def status(self, status: str) -> None:
        """A status frame, handled (recorded, and what it dispatched pushed) when this returns."""
        await self.send({"type": "status", "status": status})
        await self.settled()

    async def integrate(self, message: dict, entry_id: str | None = None) -> dict:
        """Put a steered message into the history, as an SDK does at a step boundary."""
        entry = {
            "id": entry_id or f"entry-{next(_entry_ids)}",
            "kind": "user_message",
            "text": message["content"],
            "source": {"kind": "team-message", "message_id": message["id"], "sender": message["sender"]},
        }
        await self.send({"type": "entry", "entry": entry})
        return await self.expect("ack")

    async def close(self) -> None:
        _clients.pop(self.key, None)
        await self.comm.disconnect()


@database_sync_to_async
def team_new(name: str = "alpha") -> dict:
    team, lead, lead_token, host_token = team_create(name=name)
    return {"team": team, "lead": lead_token, "host": host_token}


@database_sync_to_async
def operator_token(name: str = "ops", operator: bool = True) -> str:
    """A new dashboard user's REST token: an operator's, or a viewer's (``operator=False``)."""
    from django.contrib.auth.models import Group, User

    from accounts.tokens import operator_token_create

    user = User.objects.create_user(name, password="pw")
    if operator:
        user.groups.add(Group.objects.get_or_create(name="operators")[0])
    return operator_token_create(user=user)


async def person(name: str, operator: bool = True) -> dict:
    """A new dashboard user's ``Authorization`` header for the operator REST API."""
    return {"Authorization": f"Token {await operator_token(name, operator)}"}


@database_sync_to_async
def token_for(team: str, member: str) -> str:
    from teams.models import Member

    return member_token_create(member=Member.objects.get(team__name=team, name=member))


async def spawn(api: Api, lead_token: str, team: str, name: str, prompt: str = "") -> str:
    """Spawn a teammate; without a prompt it has no first turn (its inbox starts empty)."""
    await api.ok(lead_token, "spawn_teammate", name=name, description=f"the {name}", prompt=prompt)
    return await token_for(team, name)


async def team_with_session(api: Api, member: str, status: str = "running") -> tuple[dict, Agent]:
    """A new team ``alpha`` (``team_new``) whose lead spawned ``member`` (no first turn), and an
    agent session of that member connected with ``status``: the team and the session, which
    the test closes."""
    team = await team_new()
    session = Agent(await spawn(api, team["lead"], "alpha", member))
    await session.connect(status)
    return team, session


async def manage_json(*args: str) -> dict:
    """``manage.py ARGS --json`` run in this process on the test database (a database
    thread, as the in-process clients' calls are): what it printed, read as JSON."""
    import io

    from django.core.management import call_command

    out = io.StringIO()
    await database_sync_to_async(call_command)(*args, "--json", stdout=out)
    return json.loads(out.getvalue())


def frames_json(frames) -> str:
    return json.dumps(frames, sort_keys=True)


class Served(Loopback):
    """config.asgi's application served on a real socket by this test's own event loop
    (uvicorn as the ASGI server), for clients that need a URL: the SDK's sessions and
    host, MCP and A2A clients, streams that httpx's in-process transport cannot read as
    they come. The application is the one daphne runs, on the test database and the
    run's channel layer; no process is started, and the socket is bound here, on a port
    the kernel picks, before anything connects (nothing can take it meanwhile).

    ``requests`` holds every HTTP answer's (method, path, status) and ``closes`` every
    websocket close code the application sent (what daphne's access log told the live
    tests), each as the answer starts: before its client can read it."""

    def __init__(self, app=None):
        self.app = app or application
        self.requests: list[tuple[str, str, int]] = []
        self.closes: list[int] = []
        self._server = None
        self._task: asyncio.Task | None = None

    async def _app(self, scope, receive, send):
        async def recorded(message):
            if message["type"] == "http.response.start":
                self.requests.append((scope["method"], scope["path"], message["status"]))
            elif message["type"] == "websocket.close":
                self.closes.append(message.get("code", 1000))
            await send(message)

        await self.app(scope, receive, recorded)

    async def start(self) -> "Served":
        import socket

        import uvicorn

        # IPPROTO_TCP named, not the default 0: asyncio sets TCP_NODELAY only on sockets that
        # say they are TCP, and without it every answer waited 40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        # An idle keep-alive connection is kept (uvicorn closes one after 5 s by default, and a
        # client that reuses it just then reads nothing; daphne keeps them for hours).
        config = uvicorn.Config(self._app, interface="asgi3", lifespan="off", log_config=None, access_log=False,
                                proxy_headers=False, ws_ping_interval=None, timeout_graceful_shutdown=1,
                                timeout_keep_alive=3600)
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        async with asyncio.timeout(10):
            while not self._server.started:
                if self._task.done():
                    self._task.result()
                await asyncio.sleep(0.01)
        return self

    def server_errors(self) -> list[int]:
        """The 5xx answers and the websockets closed with 1011 (an internal error)."""
        return [status for _, _, status in self.requests if status >= 500] + [code for code in self.closes if code == 1011]

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.gather(self._task, return_exceptions=True)

    async def __aenter__(self) -> "Served":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()


class ServedThread:
    """``Served`` on an event loop of its own, in a thread of this process: for tests that
    call the server synchronously (httpx, a websocket client of their own) from a test
    function or from their own event loop, as they would call a daphne process."""

    def __init__(self, app=None):
        self.served = Served(app)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        async def main():
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            try:
                await self.served.start()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                raise
            self._ready.set()
            await self._stopping.wait()
            await self.served.stop()
            await sweeper_stop()

        asyncio.run(main())

    def start(self) -> "ServedThread":
        self._thread = threading.Thread(target=self._run, name="served", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the in-process server did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(30)

    def __getattr__(self, name):  # url, ws_url, requests, closes, server_errors()
        return getattr(self.served, name)


# The timings the live environments' daphne processes run with (tests/support/live.py), for
# the application served in-process: recovery sweeps every half second, redelivers after 2 s (and
# the dashboard's Needs attention lists a message after as long: ATTENTION_AFTER follows it there).
LIVE_TIMINGS = {"SWEEP_INTERVAL": 0.5, "REDELIVER_AFTER": 2.0, "ATTENTION_AFTER": 2.0, "HEARTBEAT_INTERVAL": 0.5,
                "PROCESS_TIMEOUT": 5.0}


async def sweeper_stop() -> None:
    """End this process's background sweeper if it runs on this event loop (the application
    starts it at its first websocket or tool call; the loop ends with the test)."""
    from mailbox.operations import sweeper

    task = sweeper._task
    if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class InProcessEnvironment(ManageCommands):
    """The test database asked what a live environment (tests/support/live.py) is asked:
    ``manage.py`` commands and SQL, run in this process, for helpers written for both
    (tests/agents/support.py ``Team``). Each call runs on a thread of its own and is waited
    for, so code on the event loop may make it; its connection is closed after it."""

    def __init__(self, tmp_path):
        import os

        self.tmp_path = tmp_path
        self.env = dict(os.environ)

    @staticmethod
    def _on_thread(fn):
        from concurrent.futures import ThreadPoolExecutor

        from django.db import connections

        def run():
            try:
                return fn()
            finally:
                connections.close_all()

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(run).result(timeout=120)

    def manage(self, *args: str, check: bool = True) -> str:
        import io

        from django.core.management import call_command

        out = io.StringIO()
        self._on_thread(lambda: call_command(*args, stdout=out))
        return out.getvalue()

    def database_url(self) -> str:
        """The test database as a ``DATABASE_URL`` for a process the test starts (a ``manage.py``
        line of a docs example): it reads and writes what the served application does."""
        from django.db import connection

        db = connection.settings_dict
        if db["ENGINE"].endswith("sqlite3"):
            return f"sqlite:///{db['NAME']}"
        user = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
        return f"postgres://{user}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"

    def query(self, sql: str) -> list[tuple]:
        from django.db import connection

        def read():
            with connection.cursor() as cursor:
                cursor.execute(sql)
                return list(cursor.fetchall())

        return self._on_thread(read)
