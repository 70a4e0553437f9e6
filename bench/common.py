"""What the benchmarks share: a run's servers and team on either backend
(bench/harness.py), the same-run floor, percentiles, the load driver (the
shipped SDK's sessions and ServerClient), and the operator's delivery audit.

Everything talks to 127.0.0.1 only, and every loop is bounded in count and time.
"""
import asyncio
import contextlib
import json
import logging
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import websockets

from harness import ROOT, Environment, Server, free_port, provision  # noqa: F401  (ROOT: for the benches)

from agents import AgentSession, ModelReply, ServerClient, ToolError  # noqa: E402

BACKENDS = ("embedded", "scale-out")


# --- figures ---------------------------------------------------------------------------------------
def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f} ms"


def percentiles(values: list[float]) -> dict[str, float]:
    return {"p50": pct(values, 50), "p95": pct(values, 95), "p99": pct(values, 99)}


def line(label: str, value: str, floor: str = "", ratio: str = "") -> None:
    print(f"  {label:<38} {value:>14}   {floor:>14}   {ratio}")


def rss_kib(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1])
    return 0


# --- environments -----------------------------------------------------------------------------------
class Bench:
    """A fresh database and its daphne processes for one benchmark run (bench/harness.py)."""

    def __init__(self, backend: str, processes: int = 1, **settings_env: str):
        assert backend in BACKENDS
        self.tmp = Path(tempfile.mkdtemp(prefix=f"steerboard-bench-{backend}-"))
        defaults = {
            "STEERBOARD_MAX_MEMBERS_PER_TEAM": "2000",
            "STEERBOARD_PROCESS_TIMEOUT": "30",
            "STEERBOARD_HEARTBEAT_INTERVAL": "2",
            "STEERBOARD_SWEEP_INTERVAL": "1",
            "STEERBOARD_REDELIVER_AFTER": "5",
            # A load run sends thousands of requests a second from a few tokens: per-token
            # and per-member limits (mailbox/quota.py) far above what it sends.
            "STEERBOARD_RATE_LIMIT_PER_SECOND": "1000000",
            "STEERBOARD_RATE_LIMIT_BURST": "1000000",
            "STEERBOARD_HISTORY_BYTES_PER_MINUTE": "10000000000",
            "STEERBOARD_MAX_ENTRIES_PER_REQUEST": "100000",
            "LOG_LEVEL": "ERROR",
        }
        defaults.update(settings_env)
        self.backend = backend
        self.team = ""
        self.servers: list[Server] = []
        self.env = Environment(self.tmp, scale_out=(backend == "scale-out"), **defaults)
        try:
            for _ in range(processes):
                self.servers.append(Server(self.env).start())
        except BaseException:
            self.close()
            raise

    def provision(self, team: str, members: int, operator: str = "") -> dict:
        """A team with teammates m0..m<N-1> and their tokens (bench/harness.py: team_create, the
        Lead's spawn_teammate, the host's start frames), and an operator when named."""
        self.team = team
        return provision(self.env, self.servers[0], team, members, operator)

    def audit(self) -> dict:
        """manage.py delivery_audit TEAM --all-delivered --json on the run's team: the JSON, with "ok"."""
        return self.env.manage_json("delivery_audit", self.team, "--all-delivered", check=False)

    def close(self) -> None:
        for server in self.servers:
            server.stop()
        self.env.close()


# --- the floor: a raw websockets echo round trip + one durable commit on the same database -------
ECHO_SERVER = """
import asyncio, sys, websockets
async def echo(ws):
    async for m in ws:
        await ws.send(m)
async def main():
    async with websockets.serve(echo, "127.0.0.1", int(sys.argv[1])):
        print("ready", flush=True)
        await asyncio.Future()
asyncio.run(main())
"""


async def echo_round_trips(count: int = 400) -> list[float]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        frame = json.dumps({"type": "steer", "message": {"id": "team-message-x", "content": "x" * 64, "seq": 1}})
        times = []
        async with websockets.connect(f"ws://127.0.0.1:{port}") as ws:
            for _ in range(count):
                t = time.perf_counter()
                await ws.send(frame)
                await ws.recv()
                times.append(time.perf_counter() - t)
        return times
    finally:
        proc.kill()
        proc.wait()


def durable_commits(environment: Environment, count: int = 400) -> list[float]:
    """One small INSERT + COMMIT, the way the server commits (same database, same settings)."""
    url = environment.env["DATABASE_URL"]
    times = []
    if environment.postgres:
        import psycopg

        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial primary key, body text)")
            conn.commit()
            for _ in range(count):
                t = time.perf_counter()
                conn.execute("INSERT INTO bench_floor (body) VALUES ('x')")
                conn.commit()
                times.append(time.perf_counter() - t)
    else:
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id integer primary key, body text)")
        for _ in range(count):
            t = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO bench_floor (body) VALUES ('x')")
            conn.execute("COMMIT")
            times.append(time.perf_counter() - t)
        conn.close()
    return times


@dataclass
class Floor:
    echo: list[float]
    commit: list[float]

    def at(self, p: float) -> float:
        return pct(self.echo, p) + pct(self.commit, p)


async def floor_measure(environment: Environment) -> Floor:
    echo = await echo_round_trips()
    commit = await asyncio.to_thread(durable_commits, environment)
    return Floor(echo=echo, commit=commit)


# --- the load driver -----------------------------------------------------------------------------
@dataclass
class Sent:
    message_id: str
    target: str
    t_send: float
    t_answer: float
    status: str


@dataclass
class Load:
    sent: list[Sent] = field(default_factory=list)
    refused: int = 0
    errors: int = 0


STEER_LOGGED = re.compile(r"steer received: message (\S+) from")


class Receiver:
    """The model each bench session runs: it notes when each team message is first in its
    conversation (its user_message entry is acknowledged before the model's step) and ends
    the turn without a word."""

    def __init__(self, fleet: "Fleet"):
        self.fleet = fleet

    async def step(self, context) -> ModelReply:
        now = time.monotonic()
        seen = self.fleet.in_conversation
        for entry in context.turn_entries():
            source = entry.get("source") or {}
            if entry.get("kind") == "user_message" and source.get("kind") == "team-message":
                seen.setdefault(source["message_id"], now)
        return ModelReply()


class SteerLog(logging.Handler):
    """When each steer reached its session: the SDK's documented log line
    (docs/agents.md, "-v": "steer received: message ID from SENDER (seq N)")."""

    def __init__(self, fleet: "Fleet"):
        super().__init__(logging.INFO)
        self.fleet = fleet

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            print(f"  [agents] {record.getMessage()}", file=sys.stderr)
            return
        found = STEER_LOGGED.search(record.getMessage())
        if found:
            self.fleet.first_steer.setdefault(found.group(1), time.monotonic())


class Fleet:
    """N agent sessions of the shipped SDK (agents.AgentSession, one per member, spread over
    the servers), and senders calling send_message over REST with the SDK's ServerClient."""

    def __init__(self, bench: Bench, team: dict):
        self.bench = bench
        self.team = team
        self.names = sorted(team["members"], key=lambda n: int(n[1:]))
        self.in_conversation: dict[str, float] = {}  # message id -> when its session's model first saw it
        self.first_steer: dict[str, float] = {}  # message id -> when its first steer reached the session
        urls = [s.url for s in bench.servers]
        self.sessions = {
            n: AgentSession(urls[i % len(urls)], team["members"][n], Receiver(self), resume=False)
            for i, n in enumerate(self.names)
        }
        self._tasks: dict[str, asyncio.Task] = {}
        self._clients: dict[tuple[str, int], ServerClient] = {}
        self._log = SteerLog(self)
        logger = logging.getLogger("agents")
        logger.addHandler(self._log)
        logger.setLevel(logging.INFO)
        logger.propagate = False

    async def connect(self, timeout: float = 120, names: list[str] | None = None) -> None:
        chosen = names or self.names
        for name in chosen:
            if name not in self._tasks:
                self._tasks[name] = asyncio.create_task(self.sessions[name].run(), name=f"session-{name}")
        deadline = time.monotonic() + timeout
        while not all(self.sessions[n].connected.is_set() for n in chosen):
            failed = [t for t in self._tasks.values() if t.done()]
            if failed:
                failed[0].result()  # raises what ended the session (e.g. a refused token)
            if time.monotonic() > deadline:
                raise RuntimeError("sessions did not all say hello")
            await asyncio.sleep(0.05)

    def connects(self) -> int:
        return sum(s.stats["connects"] for s in self.sessions.values())

    async def reconnect(self, timeout: float = 120) -> None:
        """Every session drops its socket and says hello again."""
        before = {n: s.stats["connects"] for n, s in self.sessions.items()}
        for session in self.sessions.values():
            session.drop_connection()
        deadline = time.monotonic() + timeout
        while not all(s.stats["connects"] > before[n] and s.connected.is_set() for n, s in self.sessions.items()):
            if time.monotonic() > deadline:
                raise RuntimeError("sessions did not all reconnect")
            await asyncio.sleep(0.05)

    def client(self, token: str, server: int) -> ServerClient:
        key = (token, server % len(self.bench.servers))
        if key not in self._clients:
            self._clients[key] = ServerClient(self.bench.servers[key[1]].url, token)
        return self._clients[key]

    async def send(self, load: Load, sender_token: str, target: str, content: str, server: int = 0) -> None:
        t = time.monotonic()
        try:
            # No idempotency key (the sender's hot path); the SDK repeats what got no answer.
            body = await asyncio.wait_for(
                self.client(sender_token, server).tool("send_message", {"target": target, "message": content}), 60)
        except ToolError:
            load.refused += 1
            return
        except asyncio.TimeoutError:
            load.errors += 1
            return
        load.sent.append(Sent(body["message_id"], target, t, time.monotonic(), body["status"]))

    async def drain(self, load: Load, timeout: float) -> float:
        """Wait until every sent message is in its session's conversation; answers when the last was."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.message_id in self.in_conversation for s in load.sent):
                break
            await asyncio.sleep(0.1)
        return max((self.in_conversation.get(s.message_id, 0.0) for s in load.sent), default=0.0)

    def latencies(self, load: Load) -> tuple[list[float], list[float], int]:
        accepted, delivered, missing = [], [], 0
        for s in load.sent:
            accepted.append(s.t_answer - s.t_send)
            done = self.in_conversation.get(s.message_id)
            if done is None:
                missing += 1
            else:
                delivered.append(done - s.t_send)
        return accepted, delivered, missing

    def stages(self, load: Load) -> dict[str, list[float]]:
        """Where send→delivered goes: until the session got the steer, then until its model saw
        the message in the conversation (held for an earlier seq or a running turn, the entry's ack)."""
        stages = {"send→steer received": [], "steer→in conversation": []}
        for s in load.sent:
            marks = [s.t_send, self.first_steer.get(s.message_id), self.in_conversation.get(s.message_id)]
            for values, start, end in zip(stages.values(), marks, marks[1:]):
                if start is not None and end is not None:
                    values.append(end - start)
        return stages

    async def close(self) -> None:
        for session in self.sessions.values():
            await session.stop()
        for task in self._tasks.values():
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 10)
        for client in self._clients.values():
            await client.aclose()
        logging.getLogger("agents").removeHandler(self._log)


async def open_loop(fleet: Fleet, load: Load, *, rate: float, duration: float, senders: list[str] | None = None) -> None:
    """Offer `rate` messages/s for `duration` seconds, round-robin over targets and servers."""
    names = fleet.names
    tokens = fleet.team["members"]
    total = int(rate * duration)
    start = time.monotonic()
    tasks = []
    for i in range(total):
        at = start + i / rate
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        target = names[i % len(names)]
        sender = names[(i + 1 + (i // len(names)) % (len(names) - 1)) % len(names)]
        if sender == target:
            sender = names[(names.index(target) + 1) % len(names)]
        tasks.append(asyncio.create_task(fleet.send(load, tokens[sender], target, f"m{i} to {target}", server=i)))
    await asyncio.gather(*tasks)


async def closed_loop(fleet: Fleet, load: Load, *, concurrency: int, duration: float) -> None:
    """As many sends as `concurrency` senders can make in `duration` seconds."""
    names = fleet.names
    tokens = fleet.team["members"]
    deadline = time.monotonic() + duration
    counter = iter(range(10**9))

    async def worker(w: int) -> None:
        rng = random.Random(w)
        while time.monotonic() < deadline:
            i = next(counter)
            target = names[i % len(names)]
            sender = rng.choice([n for n in names[:8] if n != target])
            await fleet.send(load, tokens[sender], target, f"c{i}", server=w)

    await asyncio.gather(*(worker(w) for w in range(concurrency)))


def audit_line(bench: Bench) -> str:
    audit = bench.audit()
    if "ok" not in audit:
        return f"audit FAILED: {audit}"
    verdict = "OK" if audit["ok"] else "FAILED"
    return f"audit {verdict} (manage.py delivery_audit): {audit_summary(audit)}"


def audit_summary(audit: dict) -> str:
    return (f"{audit['messages']} messages, {audit['delivered']} delivered, {audit['undelivered']} not; missing "
            f"{audit['missing_from_history']}, duplicated {audit['duplicated_in_history']}, delivered-record errors "
            f"{audit['delivered_records_wrong']}, targets out of order {audit['out_of_order_targets']}, entries in the "
            f"wrong history {audit['foreign_entries']}")
