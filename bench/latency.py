"""send→accepted and send→delivered latency at a fixed offered load, and the
most delivered messages per second sustained with zero loss.

    python bench/latency.py --backend embedded            # one process, SQLite + in-memory
    python bench/latency.py --backend scale-out           # two processes, PostgreSQL + Redis

Beside each latency: the floor measured in the same run (a raw `websockets`
echo round trip + one durable commit on the same database) and the ratio.
The sessions are the SDK's scripted wire sessions (steerboard_agents.wire_agent: one
entry per message, no model), so what is measured is the server: a message
counts as delivered when its entry's ack arrives.
"""
import argparse
import asyncio
import time

from common import Bench, Fleet, Load, audit_line, closed_loop, floor_measure, line, ms, open_loop, pct, percentiles


async def run(backend: str, processes: int, rate: float, duration: float, members: int, concurrency: list[int],
              saturate_for: float) -> None:
    bench = Bench(backend, processes=processes, STEERBOARD_MAX_PENDING_PER_TARGET="1000")
    try:
        team = bench.provision("bench", members)
        fleet = Fleet(bench, team)
        await fleet.connect()
        floor = await floor_measure(bench.env)
        print(f"\n== {backend}: {processes} daphne process(es), {members} idle sessions")
        print(f"  floor parts: websockets echo p50 {ms(pct(floor.echo, 50))}, durable commit p50 {ms(pct(floor.commit, 50))}")
        warm = Load()
        await open_loop(fleet, warm, rate=50, duration=2)
        await fleet.drain(warm, 30)

        load = Load()
        await open_loop(fleet, load, rate=rate, duration=duration)
        await fleet.drain(load, 60)
        accepted, delivered, missing = fleet.latencies(load)
        print(f"  offered {rate:.0f} msg/s for {duration:.0f} s: {len(load.sent)} sent, {load.refused} refused, "
              f"{load.errors} errors, {missing} not delivered")
        print(f"  {'figure':<38} {'measured':>14}   {'floor':>14}   ratio")
        for name, values in (("send→accepted", accepted), ("send→delivered", delivered)):
            for p, value in percentiles(values).items():
                f = floor.at(float(p[1:]))
                line(f"{name} {p}", ms(value), ms(f), f"{value / f:6.1f}x")

        best = None
        for c in concurrency:
            sat = Load()
            start = time.monotonic()
            await closed_loop(fleet, sat, concurrency=c, duration=saturate_for)
            sent_done = time.monotonic()
            last = await fleet.drain(sat, 120)
            _, delivered, missing = fleet.latencies(sat)
            span = max(last, sent_done) - start
            rate_done = len(delivered) / span if span > 0 else 0.0
            print(f"  saturation, {c} concurrent senders: {len(sat.sent)} sent in {sent_done - start:.1f} s, "
                  f"{len(delivered)} delivered in {span:.1f} s = {rate_done:7.1f} delivered msg/s; "
                  f"{missing} missing, {sat.refused} refused, {sat.errors} errors; "
                  f"send→delivered p50 {ms(pct(delivered, 50))} p99 {ms(pct(delivered, 99))}")
            if missing == 0 and (best is None or rate_done > best):
                best = rate_done
        print(f"  max sustained delivered (zero loss): {best or 0:.1f} msg/s")
        print("  " + audit_line(bench))
        await fleet.close()
    finally:
        bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["embedded", "scale-out"], default="embedded")
    parser.add_argument("--processes", type=int, default=None, help="default: 1 embedded, 2 scale-out")
    parser.add_argument("--rate", type=float, default=100.0, help="offered load, messages/s")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of offered load")
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 48])
    parser.add_argument("--saturate-for", type=float, default=10.0)
    args = parser.parse_args()
    processes = args.processes or (1 if args.backend == "embedded" else 2)
    asyncio.run(run(args.backend, processes, args.rate, args.duration, args.members, args.concurrency, args.saturate_for))


if __name__ == "__main__":
    main()
