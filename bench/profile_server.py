"""Profile one daphne process under an offered load with py-spy (pip install py-spy).

    python bench/profile_server.py --backend embedded --rate 100 --seconds 8

Writes the collapsed stacks to var/bench-profile-<backend>.txt and prints the
functions with the most samples (own and cumulative)."""
import argparse
import asyncio
import collections
import subprocess
import sys

from common import ROOT, Bench, Fleet, Load, open_loop


def summarize(path: str, top: int = 25) -> None:
    own, total = collections.Counter(), collections.Counter()
    samples = 0
    for row in open(path):
        stack, _, count = row.rstrip().rpartition(" ")
        n = int(count)
        samples += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    print(f"{samples} samples")
    print("-- own")
    for frame, n in own.most_common(top):
        print(f"{100 * n / samples:6.1f}%  {frame}")
    print("-- cumulative")
    for frame, n in total.most_common(top * 2):
        print(f"{100 * n / samples:6.1f}%  {frame}")


async def run(backend: str, rate: float, seconds: float, idle: bool) -> None:
    bench = Bench(backend, processes=1, STEERBOARD_MAX_PENDING_PER_TARGET="1000")
    out = ROOT / "var" / f"bench-profile-{backend}.txt"
    out.parent.mkdir(exist_ok=True)
    try:
        team = bench.provision("prof", 20)
        fleet = Fleet(bench, team)
        await fleet.connect()
        spy = subprocess.Popen(
            ["py-spy", "record", "--pid", str(bench.servers[0].proc.pid), "--duration", str(int(seconds)),
             "--format", "raw", "--rate", "200", "-o", str(out)] + (["--idle"] if idle else ["--gil"]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        load = Load()
        await open_loop(fleet, load, rate=rate, duration=seconds)
        await asyncio.to_thread(spy.wait, 60)
        await fleet.drain(load, 30)
        await fleet.close()
    finally:
        bench.close()
    summarize(str(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["embedded", "scale-out"], default="embedded")
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--idle", action="store_true", help="count threads waiting too")
    args = parser.parse_args()
    asyncio.run(run(args.backend, args.rate, args.seconds, args.idle))
    sys.exit(0)
