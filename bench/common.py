"""What the benchmarks share: a run's servers and team on either backend
(bench/harness.py), the same-run floor, percentiles, the load driver (the
SDK's scripted wire sessions, steerboard_agents.wire_agent, and REST sends), and the operator's delivery audit.

Everything talks to 127.0.0.1 only, and every loop is bounded in count and time.
"""
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import websockets

from harness import ROOT, Environment, Server, free_port, provision, provision_teams  # noqa: F401  (for the benches)

from steerboard_agents.wire_agent import WireAgent  # noqa: E402

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
            # and per-member limits (mailbox/plumbing/quota.py) far above what it sends.
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


class Fleet:
    """N scripted sessions on the bare wire protocol (steerboard_agents.wire_agent.WireAgent: one entry
    per message, no turns, so what is measured is the server), spread over the servers, and
    senders calling the REST tool send_message. A message counts as delivered when its
    entry's ack arrives: the target's history durably holds it."""

    def __init__(self, bench: Bench, team: dict):
        self.bench = bench
        self.team = team
        self.names = sorted(team["members"], key=lambda n: int(n[1:]))
        urls = [s.ws_url for s in bench.servers]
        self.agents = {
            n: WireAgent(n, team["members"][n], urls[i % len(urls):] + urls[: i % len(urls)])
            for i, n in enumerate(self.names)
        }
        self.http = [
            httpx.AsyncClient(base_url=s.url, timeout=60, limits=httpx.Limits(max_connections=200, max_keepalive_connections=200))
            for s in bench.servers
        ]

    async def connect(self, timeout: float = 120, names: list[str] | None = None) -> None:
        chosen = [self.agents[n] for n in (names or self.names)]
        for agent in chosen:
            agent.start()
        deadline = time.monotonic() + timeout
        while not all(a.welcomed.is_set() for a in chosen):
            if time.monotonic() > deadline:
                raise RuntimeError("sessions did not all say hello")
            await asyncio.sleep(0.05)

    def connects(self) -> int:
        return sum(a.connects for a in self.agents.values())

    async def send(self, load: Load, sender_token: str, target: str, content: str, server: int = 0) -> None:
        t = time.monotonic()
        try:
            response = await self.http[server % len(self.http)].post(
                "/api/v1/tools/send_message",
                json={"target": target, "message": content},
                headers={"Authorization": f"Bearer {sender_token}"},
            )
        except httpx.HTTPError:
            load.errors += 1
            return
        if response.status_code != 200:
            load.refused += 1
            return
        body = response.json()
        load.sent.append(Sent(body["message_id"], target, t, time.monotonic(), body["status"]))

    async def drain(self, load: Load, timeout: float) -> float:
        """Wait until every sent message is integrated and acknowledged; answers when the last was."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.message_id in self.agents[s.target].acked_at for s in load.sent):
                break
            await asyncio.sleep(0.1)
        return max((self.agents[s.target].acked_at.get(s.message_id, 0.0) for s in load.sent), default=0.0)

    def latencies(self, load: Load) -> tuple[list[float], list[float], int]:
        accepted, delivered, missing = [], [], 0
        for s in load.sent:
            accepted.append(s.t_answer - s.t_send)
            done = self.agents[s.target].acked_at.get(s.message_id)
            if done is None:
                missing += 1
            else:
                delivered.append(done - s.t_send)
        return accepted, delivered, missing

    def stages(self, load: Load) -> dict[str, list[float]]:
        """Where send→delivered goes: until the session first saw the steer, held
        there for an earlier seq, then its entry's round trip to the ack."""
        stages = {"send→first steer": [], "steer→entry sent": [], "entry sent→ack": []}
        for s in load.sent:
            agent = self.agents[s.target]
            marks = [s.t_send, agent.first_seen.get(s.message_id), agent.entry_sent_at.get(s.message_id),
                     agent.acked_at.get(s.message_id)]
            for values, start, end in zip(stages.values(), marks, marks[1:]):
                if start is not None and end is not None:
                    values.append(end - start)
        return stages

    async def close(self) -> None:
        await asyncio.gather(*(a.stop() for a in self.agents.values()))
        for client in self.http:
            await client.aclose()


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
    return f"audit {audit['summary']} (manage.py delivery_audit)"
