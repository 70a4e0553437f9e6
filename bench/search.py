"""The operators' text search (``q``, docs/api.md) beside its own baseline, in one run:
the first page of ``GET /api/v1/teams/<team>/messages?q=…`` with N stored messages
(bulk-inserted as bench/growth.py does), for a term that is on the newest page and
for terms that are nowhere (the walk then reads every message of the team).

    python bench/search.py --backend embedded
    python bench/search.py --backend scale-out --stored 100000

The baseline is an ASCII term that is nowhere: what the search cost before it
folded every letter's case (SQLite's LIKE alone). Each figure is the p50 of
--repeats requests, with its ratio to the baseline.
"""
import argparse
import asyncio
import os
import time

import httpx

from common import Bench, ms, pct
from growth import bulk_insert

QUERIES = [
    ("ASCII, on the newest page", "stored"),
    ("ASCII, nowhere (the baseline)", "zzzq"),
    ("Latin with accents, nowhere", "ünïcödé"),
    ("mixed case and accents, nowhere", "ÜNÏcödé"),
    ("only non-ASCII letters, nowhere", "σοφία"),
    ("no letters with a case, nowhere", "日本語"),
]


async def timed(client: httpx.AsyncClient, path: str, repeats: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        response = await client.get(path)
        times.append(time.perf_counter() - t)
        response.raise_for_status()
        count = len(response.json()["messages"])
    return pct(times, 50), count


async def run(args) -> None:
    bench = Bench(args.backend, processes=1)
    try:
        team = bench.provision("search", 2, operator="searcher")
        team["team_id"] = bench.env.query(f"SELECT id FROM teams_team WHERE name = '{team['team']}'")[0][0]
        t = time.monotonic()
        await asyncio.to_thread(bulk_insert, bench, team, 0, args.stored)
        print(f"== search on {args.backend} (one process), {args.stored} stored messages "
              f"(bulk insert {time.monotonic() - t:.1f} s); p50 of {args.repeats} first pages each")
        auth = {"Authorization": f"Token {team['operator']['token']}"}
        base = f"/api/v1/teams/{team['team']}/messages?q="
        results = []
        async with httpx.AsyncClient(base_url=bench.servers[0].url, headers=auth, timeout=300) as client:
            for label, q in QUERIES:
                await timed(client, base + q, 1)  # warm: the first search builds its table of cases
                value, count = await timed(client, base + q, args.repeats)
                results.append((label, q, value, count))
        baseline = next(value for label, _, value, _ in results if "baseline" in label)
        print(f"  {'q':<44}{'p50':>14}{'found':>8}   ratio to the baseline   (uptime: {uptime()})")
        for label, q, value, count in results:
            print(f"  {label + ': ' + q:<44}{ms(value):>14}{count:>8}   {value / baseline:6.2f}x")
    finally:
        bench.close()


def uptime() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["embedded", "scale-out"], default="embedded")
    parser.add_argument("--stored", type=int, default=100000)
    parser.add_argument("--repeats", type=int, default=15)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
