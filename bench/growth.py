"""Cost growth: send latency and dashboard first load with 1 000, 100 000 and
1 000 000 stored messages (bulk-inserted straight into the database, spread
over the team's members, delivered, with their queued and delivered Lead-log
records).

    python bench/growth.py --backend embedded
    python bench/growth.py --backend scale-out
    python bench/growth.py --sizes 1000 100000     # stop earlier
    python bench/growth.py --explain               # and where each first load's SQL time goes, with plans

First load = GET /teams/<team>/ (the dashboard page, logged in as an
operator) and, beside it, GET /api/v1/teams/<team> and the first page of
/api/v1/teams/<team>/messages, unfiltered and filtered (state + sender +
text). Each figure is the p50 of --repeats requests; the ratio is against the
first size.
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
        # The records' fields are the Lead log's (mailbox/lead_log.py, MESSAGE_FIELDS).
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


async def timed_get(client: httpx.AsyncClient, path: str, repeats: int, **kw) -> tuple[float, int]:
    times, status = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        response = await client.get(path, **kw)
        times.append(time.perf_counter() - t)
        status = response.status_code
    return pct(times, 50), status


async def measure(bench: Bench, fleet: Fleet, team: dict, repeats: int) -> dict:
    out = {}
    load = Load()
    names = fleet.names
    for i in range(repeats * 2):
        target = names[i % len(names)]
        sender = names[(i + 1) % len(names)]
        await fleet.send(load, team["members"][sender], target, f"growth probe {i}")
    await fleet.drain(load, 60)
    accepted, delivered, missing = fleet.latencies(load)
    out["send→accepted p50"] = pct(accepted, 50)
    out["send→delivered p50"] = pct(delivered, 50)
    url = bench.servers[0].url
    auth = {"Authorization": f"Token {team['operator']['token']}"}
    async with httpx.AsyncClient(base_url=url, timeout=120) as api:
        out["GET /api/v1/teams/<team> p50"], _ = await timed_get(api, f"/api/v1/teams/{team['team']}", repeats, headers=auth)
        out["GET .../messages first page p50"], _ = await timed_get(
            api, f"/api/v1/teams/{team['team']}/messages", repeats, headers=auth
        )
        # The operator's search (issue 14): state + sender + text, combined, first page.
        filtered = f"/api/v1/teams/{team['team']}/messages?state=delivered&sender={names[1]}&q=stored"
        out["GET .../messages filtered first page p50"], _ = await timed_get(api, filtered, repeats, headers=auth)
    async with httpx.AsyncClient(base_url=url, timeout=120, follow_redirects=True) as browser:
        await login(browser, team["operator"])
        value, status = await timed_get(browser, f"/teams/{team['team']}/", repeats)
        out[f"GET /teams/<team>/ page p50 (HTTP {status})"] = value
    return out


async def run(args) -> None:
    bench = Bench(args.backend, processes=1, STEERBOARD_MAX_PENDING_PER_TARGET="1000")
    try:
        team = bench.provision("growth", BULK_MEMBERS, operator="grower")
        # The bulk insert (a fixture, straight into the database) needs the team's row id.
        team["team_id"] = bench.env.query(f"SELECT id FROM teams_team WHERE name = '{team['team']}'")[0][0]
        fleet = Fleet(bench, team)
        await fleet.connect()
        print(f"== cost growth on {args.backend} (one process); p50 of {args.repeats} requests each")
        results = []
        stored = 0
        for size in args.sizes:
            t = time.monotonic()
            await asyncio.to_thread(bulk_insert, bench, team, stored, size)
            # The bulk's messages are delivered without the sessions: each session goes on
            # from its inbox's last seq (it had integrated everything before the bulk).
            for name, next_seq in bench.env.query(
                f"SELECT name, next_seq FROM teams_member WHERE team_id = {team['team_id']}"
            ):
                if name in fleet.agents:
                    fleet.agents[name].last_seq = next_seq - 1
            stored = size
            print(f"  {size:>9} stored messages (bulk insert {time.monotonic() - t:.1f} s)")
            results.append((size, await measure(bench, fleet, team, args.repeats)))
            if args.explain:
                await asyncio.to_thread(explain, bench, team, fleet.names[0])
        base = results[0][1]
        header = "".join(f"{size:>16}" for size, _ in results)
        print(f"  {'figure':<44}{header}   ratio last/first")
        for key in base:
            cells = "".join(f"{ms(r.get(key, float('nan'))):>16}" for _, r in results)
            print(f"  {key:<44}{cells}   {results[-1][1][key] / base[key]:6.2f}x")
        await fleet.close()
    finally:
        bench.close()


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
    parser.add_argument("--explain", action="store_true",
                        help="at each size, every SQL statement of a first load and a send, timed, with plans (bench/explain.py)")
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
