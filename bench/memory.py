"""Resident memory of one daphne process holding idle agent sessions (the
SDK's scripted wire sessions, steerboard_agents.wire_agent, one per member).

    python bench/memory.py                       # embedded default, 1 000 sessions
    python bench/memory.py --backend scale-out   # PostgreSQL + Redis
    python bench/memory.py --sessions 200

Reads VmRSS of the daphne process after it has served one request and again
once every session has said hello and stays idle; prints KiB per session.
"""
import argparse
import asyncio
import gc
import time

from common import Bench, Fleet, rss_kib


async def run(args) -> None:
    bench = Bench(args.backend, processes=1)
    try:
        team = bench.provision("mem", args.sessions)
        server = bench.servers[0]
        fleet = Fleet(bench, team)
        # Warm the process (imports, first request, sweeper) before the baseline.
        warm = fleet.names[:5]
        await fleet.connect(names=warm)
        await asyncio.sleep(2)
        base = rss_kib(server.proc.pid)
        t = time.monotonic()
        await fleet.connect(timeout=600)
        took = time.monotonic() - t
        await asyncio.sleep(args.settle)
        gc.collect()
        held = rss_kib(server.proc.pid)
        n = args.sessions - len(warm)
        per = (held - base) / n if n else float("nan")
        print(f"== memory on {args.backend}: one daphne process, {args.sessions} idle agent sessions "
              f"(connected and said hello in {took:.1f} s)")
        print(f"  RSS with {len(warm)} sessions (warm baseline): {base:>9} KiB")
        print(f"  RSS with {args.sessions} sessions:               {held:>9} KiB")
        print(f"  per idle session: {per:.1f} KiB   (target: at most 150 KiB)")
        await fleet.close()
    finally:
        bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["embedded", "scale-out"], default="embedded")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
