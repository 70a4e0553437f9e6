"""Load and soak: N scripted wire sessions of the SDK (steerboard_agents.wire_agent)
exchange M messages sent over REST with random disconnects and reconnects; then
the operator's check (`manage.py delivery_audit TEAM --all-delivered`) proves
zero loss, zero duplicates, per-target order and one delivered record each,
and the run prints throughput and latency.

    python bench/soak.py                                   # embedded default, 50 sessions, 20 000 messages
    python bench/soak.py --backend scale-out --processes 2 # PostgreSQL + Redis, two daphne processes
    python bench/soak.py --sessions 10 --messages 500      # a quick one
    python bench/soak.py --messages 3000 --rate 10         # at an offered rate the server keeps up with

Bounded: stops sending after --messages or --max-seconds, whichever first,
and waits at most --drain-seconds for the last deliveries.
"""
import argparse
import asyncio
import random
import time

from common import Bench, Fleet, Load, ms, pct


async def run(args) -> int:
    bench = Bench(args.backend, processes=args.processes, STEERBOARD_MAX_PENDING_PER_TARGET="1000")
    try:
        team = bench.provision("soak", args.sessions)
        fleet = Fleet(bench, team)
        await fleet.connect()
        names, tokens = fleet.names, team["members"]
        load = Load()
        rng = random.Random(args.seed)
        drops = 0
        stop = asyncio.Event()

        async def chaos() -> None:
            nonlocal drops
            while not stop.is_set():
                await asyncio.sleep(rng.expovariate(1 / args.drop_every))
                fleet.agents[rng.choice(names)].drop()
                drops += 1

        counter = iter(range(args.messages))
        deadline = time.monotonic() + args.max_seconds

        async def sender(w: int) -> None:
            local = random.Random(args.seed * 1000 + w)
            for i in counter:
                if time.monotonic() > deadline:
                    return
                if args.rate:
                    # Open loop: message i leaves at start + i / rate, whoever sends it.
                    delay = start + i / args.rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                target = names[local.randrange(len(names))]
                sender_name = names[(names.index(target) + 1 + local.randrange(len(names) - 1)) % len(names)]
                await fleet.send(load, tokens[sender_name], target, f"soak {i} {sender_name}->{target}", server=w)

        print(f"== soak on {args.backend}: {args.processes} process(es), {args.sessions} sessions, "
              f"{args.messages} messages, {args.concurrency} concurrent senders, a random drop every ~{args.drop_every}s")
        start = time.monotonic()
        chaos_task = asyncio.create_task(chaos())
        await asyncio.gather(*(sender(w) for w in range(args.concurrency)))
        sent_done = time.monotonic()
        stop.set()
        chaos_task.cancel()
        last = await fleet.drain(load, args.drain_seconds)
        # The agents reconnect after a drop; give recovery its turn, then check the database.
        audit = bench.audit()
        ok = bool(audit.get("ok"))
        accepted, delivered, missing = fleet.latencies(load)
        span = max(last, sent_done) - start
        print(f"  sent {len(load.sent)} in {sent_done - start:.1f} s ({len(load.sent) / (sent_done - start):.1f} msg/s offered); "
              f"{load.refused} refused, {load.errors} transport errors (outcome unknown, the audit covers them)")
        print(f"  delivered {len(delivered)} in {span:.1f} s = {len(delivered) / span:.1f} msg/s; {drops} forced disconnects, "
              f"{fleet.connects() - len(names)} reconnects")
        print(f"  send→accepted  p50 {ms(pct(accepted, 50))}  p95 {ms(pct(accepted, 95))}  p99 {ms(pct(accepted, 99))}")
        print(f"  send→delivered p50 {ms(pct(delivered, 50))}  p95 {ms(pct(delivered, 95))}  p99 {ms(pct(delivered, 99))}")
        for label, values in fleet.stages(load).items():
            print(f"  {label:<22}p50 {ms(pct(values, 50))}  p95 {ms(pct(values, 95))}  p99 {ms(pct(values, 99))}")
        print(f"  checker (manage.py delivery_audit): {audit.get('summary', audit)}; "
              f"{missing} sent messages not acknowledged by their session")
        if audit.get("examples"):
            print(f"  examples: {audit['examples']}")
        await fleet.close()
        return 0 if ok and not missing else 1
    finally:
        bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["embedded", "scale-out"], default="embedded")
    parser.add_argument("--processes", type=int, default=None, help="default: 1 embedded, 2 scale-out")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=float, default=0.0, help="offered msg/s (0: as fast as the senders go)")
    parser.add_argument("--drop-every", type=float, default=0.5, help="mean seconds between forced disconnects")
    parser.add_argument("--max-seconds", type=float, default=1800)
    parser.add_argument("--drain-seconds", type=float, default=300)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    args.processes = args.processes or (1 if args.backend == "embedded" else 2)
    raise SystemExit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
