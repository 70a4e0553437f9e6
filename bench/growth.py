"""Cost growth: send latency and dashboard first load with 1 000, 100 000 and
1 000 000 stored messages (bulk-inserted straight into the database, spread
over the team's members, delivered, with their queued and delivered Lead-log
records).

    python bench/growth.py --backend embedded
    python bench/growth.py --backend scale-out
    python bench/growth.py --sizes 1000 100000     # stop earlier
    python bench/growth.py --explain               # and where each first load's SQL time goes, with plans

    python bench/growth.py --sequential            # one environment, grown and measured size after size

First load = GET /teams/<team>/ (the dashboard page, logged in as an
operator) and, beside it, GET /api/v1/teams/<team> and the first page of
/api/v1/teams/<team>/messages, unfiltered and filtered (state + sender +
text). Each figure is the p50 of --repeats requests (and twice as many
sends); the ratio is against the first size.

Each size has its own environment (a database and one daphne process), all
filled first and then measured in turns: each round two sends and one request
of each kind on every size, the order of the sizes reversed every other round.
A busy moment of a shared machine then weighs on every size alike; measured
one after the other, minutes apart, the same code read 0.56x and 3.0x.
"""
import argparse
import asyncio
import re
import subprocess
import sys
import time

import httpx

from common import ROOT, Bench, Fleet, Load, ms, pct

BULK_MEMBERS = 10


def bulk_insert(bench: Bench, team: dict, start: int, stop: int) -> None:
    """Add stop - start delivered messages, spread evenly over the team's members as
    targets, each target's seq continuing densely from its next_seq (as the server
    hands them out), with their queued and delivered Lead-log records."""
    env = bench.env
    team_id = team["team_id"]
    members = env.query(f"SELECT id, next_seq, name FROM teams_member WHERE team_id = {team_id} ORDER BY id")
    k = len(members)
    total = stop - start
    pg = env.postgres
    statements = []
    json_object = "jsonb_build_object" if pg else "json_object"
    for index, (target_id, next_seq, target) in enumerate(members):
        n = total // k + (1 if index < total % k else 0)
        if n == 0:
            continue
        sender_id, sender = members[(index + 1) % k][0], members[(index + 1) % k][2]
        first, last = next_seq, next_seq + n - 1
        if pg:
            series = f"generate_series({first}, {last}) AS g"
            stamp = "now() - interval '30 days' + g * interval '1 millisecond'"
            prefix = ""
        else:
            series = "s"
            stamp = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-30 days', '+' || (g / 1000.0) || ' seconds')"
            prefix = f"WITH RECURSIVE s(g) AS (SELECT {first} UNION ALL SELECT g + 1 FROM s WHERE g < {last}) "
        mid = f"'team-message-bulk-{target_id}-' || g"
        statements.append(
            f"{prefix}INSERT INTO mailbox_teammessage (id, team_id, sender_id, target_id, content, seq, thread_id, "
            f"reply_to, state, attempts, last_error, created_at, queued_at, accepted_at, delivered_at) "
            f"SELECT {mid}, {team_id}, {sender_id}, {target_id}, 'a stored message number ' || g, g, '', '', "
            f"'delivered', 1, '', {stamp}, {stamp}, {stamp}, {stamp} FROM {series}"
        )
        # The records' fields are the Lead log's (mailbox/engine/lead_log.py, MESSAGE_FIELDS).
        records = {
            "team/message/queued": f"{json_object}('sender', '{sender}', 'target', '{target}', 'seq', g)",
            "team/message/delivered": f"{json_object}('target', '{target}', 'seq', g)",
        }
        for kind, data in records.items():
            statements.append(
                f"{prefix}INSERT INTO mailbox_leadlogrecord (team_id, kind, message_id, data, created_at) "
                f"SELECT {team_id}, '{kind}', {mid}, {data}, {stamp} FROM {series}"
            )
        statements.append(f"UPDATE teams_member SET next_seq = {last + 1} WHERE id = {target_id}")
    if pg:
        import psycopg

        with psycopg.connect(env.env["DATABASE_URL"]) as conn:
            for sql in statements:
                conn.execute(sql)
            conn.commit()
            conn.autocommit = True
            # The steady state of a server that has run for a while, as the SQLite
            # branch below: without this, autovacuum works through the million new
            # rows (the visibility map, statistics) during the measurement.
            conn.execute("VACUUM (ANALYZE) mailbox_teammessage, mailbox_leadlogrecord, teams_member")
            try:
                conn.execute("CHECKPOINT")  # the bulk insert's dirty pages written out
            except psycopg.Error:  # not allowed for this role: the figures then include that I/O
                pass
    else:
        import sqlite3

        conn = sqlite3.connect(env.env["DATABASE_URL"].removeprefix("sqlite:///"), timeout=60, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        for sql in statements:
            conn.execute(sql)
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        # Fold the bulk insert's WAL into the database file, as a server that has
        # been running for a while would have: the figures are then the steady state.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()


async def login(client: httpx.AsyncClient, operator: dict) -> None:
    page = await client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    await client.post(
        "/login/",
        data={"username": operator["username"], "password": operator["password"],
              "csrfmiddlewaretoken": token.group(1) if token else ""},
        headers={"Referer": str(client.base_url) + "/login/"},
    )


class Stored:
    """One environment (its database, one daphne process, a team of BULK_MEMBERS with their
    sessions) holding ``size`` stored messages, and the samples measured on it."""

    def __init__(self, bench: Bench, team: dict, fleet: Fleet):
        self.bench, self.team, self.fleet = bench, team, fleet
        self.size = 0
        self.samples: dict[str, list[float]] = {}
        self.status = 0
        self.sent = 0
        self.api: httpx.AsyncClient | None = None
        self.browser: httpx.AsyncClient | None = None

    @classmethod
    async def start(cls, backend: str) -> "Stored":
        bench = Bench(backend, processes=1, STEERBOARD_MAX_PENDING_PER_TARGET="1000")
        try:
            team = bench.provision("growth", BULK_MEMBERS, operator="grower")
            # The bulk insert (a fixture, straight into the database) needs the team's row id.
            team["team_id"] = bench.env.query(f"SELECT id FROM teams_team WHERE name = '{team['team']}'")[0][0]
            fleet = Fleet(bench, team)
            await fleet.connect()
        except BaseException:
            bench.close()
            raise
        return cls(bench, team, fleet)

    async def grow(self, size: int) -> float:
        t = time.monotonic()
        await asyncio.to_thread(bulk_insert, self.bench, self.team, self.size, size)
        # The bulk's messages are delivered without the sessions: each session goes on
        # from its inbox's last seq (it had integrated everything before the bulk).
        for name, next_seq in self.bench.env.query(
            f"SELECT name, next_seq FROM teams_member WHERE team_id = {self.team['team_id']}"
        ):
            if name in self.fleet.agents:
                self.fleet.agents[name].last_seq = next_seq - 1
        self.size = size
        self.samples = {}
        return time.monotonic() - t

    async def clients(self) -> None:
        url = self.bench.servers[0].url
        self.api = httpx.AsyncClient(base_url=url, timeout=120,
                                     headers={"Authorization": f"Token {self.team['operator']['token']}"})
        self.browser = httpx.AsyncClient(base_url=url, timeout=120, follow_redirects=True)
        await login(self.browser, self.team["operator"])

    def _add(self, key: str, values: list[float]) -> None:
        self.samples.setdefault(key, []).extend(values)

    async def sample(self, sends: int, gets: int, warm: bool = False) -> None:
        """``sends`` sends (each answered before the next), until all are delivered; then
        ``gets`` of each first load. ``warm``: first one send and one request of each kind,
        not counted (the server has been idle while the other sizes were measured)."""
        if warm:
            samples = self.samples
            self.samples = {}
            await self.sample(1, 1)
            self.samples = samples
        team, names = self.team, self.fleet.names
        load = Load()
        for _ in range(sends):
            i = self.sent
            self.sent += 1
            target, sender = names[i % len(names)], names[(i + 1) % len(names)]
            await self.fleet.send(load, team["members"][sender], target, f"growth probe {i}")
        await self.fleet.drain(load, 60)
        accepted, delivered, _missing = self.fleet.latencies(load)
        self._add("send→accepted p50", accepted)
        self._add("send→delivered p50", delivered)
        # The operator's search (issue 14): state + sender + text, combined, first page.
        filtered = f"/api/v1/teams/{team['team']}/messages?state=delivered&sender={names[1]}&q=stored"
        for key, client, path in (
            ("GET /api/v1/teams/<team> p50", self.api, f"/api/v1/teams/{team['team']}"),
            ("GET .../messages first page p50", self.api, f"/api/v1/teams/{team['team']}/messages"),
            ("GET .../messages filtered first page p50", self.api, filtered),
            ("GET /teams/<team>/ page p50", self.browser, f"/teams/{team['team']}/"),
        ):
            times = []
            for _ in range(gets):
                t = time.perf_counter()
                response = await client.get(path)
                times.append(time.perf_counter() - t)
                if client is self.browser:
                    self.status = response.status_code
            self._add(key, times)

    def figures(self) -> dict[str, float]:
        out = {key: pct(values, 50) for key, values in self.samples.items()}
        page = "GET /teams/<team>/ page p50"
        out[f"{page} (HTTP {self.status})"] = out.pop(page)
        return out

    async def close(self) -> None:
        try:
            await self.fleet.close()
            for client in (self.api, self.browser):
                if client is not None:
                    await client.aclose()
        finally:
            self.bench.close()


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


async def run(args) -> None:
    if args.sequential:
        await run_sequential(args)
        return
    # Interleaved: one environment per size, all filled first, then measured in turns (a
    # send or two and a request of each kind on each, the order reversed every round), so
    # a machine shared with other work weighs on every size alike. Measured one size after
    # the other (--sequential) minutes apart, the ratio moved 0.56-3.0x between runs of
    # the same code on this shared machine.
    print(f"== cost growth on {args.backend}, interleaved: one daphne process and database per size; "
          f"p50 of {args.repeats} requests and {args.repeats * 2} sends each (load {loadavg()})")
    sizes: list[Stored] = []
    try:
        for size in args.sizes:
            stored = await Stored.start(args.backend)
            sizes.append(stored)
            took = await stored.grow(size)
            print(f"  {size:>9} stored messages (bulk insert {took:.1f} s)")
        for stored in sizes:
            await stored.clients()
        print(f"  measuring (load {loadavg()})")
        for round_ in range(args.repeats):
            for stored in (sizes if round_ % 2 == 0 else sizes[::-1]):
                await stored.sample(sends=2, gets=1, warm=args.warm)
        print(f"  done (load {loadavg()})")
        table(args, [(s.size, s.figures()) for s in sizes])
        if args.explain:
            for stored in sizes:
                print(f"  {stored.size} stored messages:")
                await asyncio.to_thread(explain, stored.bench, stored.team, stored.fleet.names[0])
    finally:
        for stored in sizes:
            await stored.close()


async def run_sequential(args) -> None:
    """The earlier way: one environment, grown from size to size, each measured in one block."""
    stored = await Stored.start(args.backend)
    try:
        print(f"== cost growth on {args.backend} (one process), sequential; p50 of {args.repeats} requests each "
              f"(load {loadavg()})")
        await stored.clients()
        results = []
        for size in args.sizes:
            took = await stored.grow(size)
            print(f"  {size:>9} stored messages (bulk insert {took:.1f} s; load {loadavg()})")
            await stored.sample(sends=args.repeats * 2, gets=args.repeats)
            results.append((size, stored.figures()))
            if args.explain:
                await asyncio.to_thread(explain, stored.bench, stored.team, stored.fleet.names[0])
        table(args, results)
    finally:
        await stored.close()


def table(args, results: list[tuple[int, dict]]) -> None:
    base = results[0][1]
    header = "".join(f"{size:>16}" for size, _ in results)
    print(f"  {'figure':<44}{header}   ratio last/first")
    for key in base:
        cells = "".join(f"{ms(r.get(key, float('nan'))):>16}" for _, r in results)
        print(f"  {key:<44}{cells}   {results[-1][1][key] / base[key]:6.2f}x")


def explain(bench: Bench, team: dict, target: str) -> None:
    """bench/explain.py against this environment: the SQL of each first load and of a send, with plans."""
    args = [sys.executable, str(ROOT / "bench" / "explain.py"), team["team"], team["operator"]["username"],
            team["lead"], target]
    out = subprocess.run(args, cwd=ROOT, env=bench.env.env, capture_output=True, text=True, timeout=600)
    print(out.stdout.rstrip() or out.stderr[-3000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["embedded", "scale-out"], default="embedded")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100000, 1000000])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--sequential", action="store_true",
                        help="one environment grown from size to size and measured after each bulk insert "
                             "(the way before issue 32), instead of one per size measured in turns")
    parser.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True,
                        help="interleaved: each turn starts with one send and one request of each kind, not counted")
    parser.add_argument("--explain", action="store_true",
                        help="at each size, every SQL statement of a first load and a send, timed, with plans (bench/explain.py)")
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
