"""Does one A2A caller slow every team? (issue 26, item 2)

    python bench/a2a_isolation.py                          # embedded, then scale-out
    python bench/a2a_isolation.py --backend embedded --duration 20

Per backend, in one run: another team's send→delivered p50 and p99 at a light
fixed rate (`--rate`, REST sends to scripted wire sessions, as bench/latency.py
measures it) while nothing else happens, then while an A2A burst runs on a
second team, then quiet again:

- "ListTasks loops": `--loops` loops call `ListTasks` back to back, as
  `--callers` A2A callers (one credential each; the loops take turns), on a
  member whose history holds `--history` entries and who has `--tasks` of their
  tasks waiting (SUBMITTED: the member has no session and the team no host, so
  they never start);
- "streams": `--streams` open `SubscribeToTask` streams on those tasks.

Meanwhile the A2A team's own members talk (`--chatter` msg/s), so its
doorbells ring as a busy team's do. Each burst's ratio to the first quiet
phase is printed (the target: ≤ 2× on p50), with the load average beside
each phase, and what the A2A callers got (calls answered, refused 429
`RATE_LIMITED`, their p50). The rate limits are the product's defaults
(`--no-rate-limit` raises them, to see the reads' cost alone); after a 429 a
loop waits as `Retry-After` says (`--ignore-retry-after`: it asks again at once).
"""
import argparse
import asyncio
import json
import time
import uuid

import httpx

from common import BACKENDS, Bench, Fleet, Load, audit_line, open_loop, pct
from harness import provision
from lean import cpu_seconds, loadavg

A2A_HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}


def rpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex[:8], "method": method, "params": params}


async def fill_history(url: str, token: str, count: int, batch: int = 1000) -> None:
    """``count`` entries of finished turns (ten entries each, one a human prompt's), over REST."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        n = 0
        while n < count:
            entries = []
            for i in range(n, min(count, n + batch)):
                turn, step = divmod(i, 10)
                kind = {0: "turn_start", 1: "prompt", 9: "turn_end"}.get(step, "assistant_text")
                entry = {"id": f"fill-{i}", "kind": kind, "turn_id": f"fill-turn-{turn}", "step": step}
                if kind == "prompt":
                    entry["prompt_id"] = f"prompt-fill-{turn}"
                elif kind == "turn_end":
                    entry["reason"] = "done"
                else:
                    entry["text"] = f"thought {i}"
                entries.append(entry)
            response = await http.post("/api/v1/session/entries", json={"entries": entries}, headers=headers)
            response.raise_for_status()
            n += len(entries)


class Caller:
    """One A2A client credential and the tasks it sent to the member."""

    def __init__(self, token: str, url: str):
        self.headers = {**A2A_HEADERS, "Authorization": f"Bearer {token}"}
        self.url = url
        self.tasks: list[str] = []

    async def send(self, http: httpx.AsyncClient, text: str) -> str | None:
        params = {"message": {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": text}]},
                  "configuration": {"returnImmediately": True}}
        response = await http.post(self.url, json=rpc("SendMessage", params), headers=self.headers)
        body = response.json() if response.status_code == 200 else {}
        task = body.get("result", {}).get("task", {}).get("id")
        if task:
            self.tasks.append(task)
        return task


class Loops:
    """Callers calling ListTasks back to back."""

    def __init__(self, honour_retry_after: bool):
        self.honour_retry_after = honour_retry_after
        self.answered: list[float] = []
        self.limited = 0
        self.other = 0

    async def run(self, http: httpx.AsyncClient, caller: Caller, until: float) -> None:
        while time.monotonic() < until:
            t = time.monotonic()
            try:
                response = await http.post(caller.url, json=rpc("ListTasks", {"pageSize": 100}), headers=caller.headers)
            except httpx.HTTPError:
                self.other += 1
                continue
            if response.status_code == 429:
                self.limited += 1
                if self.honour_retry_after:
                    await asyncio.sleep(min(float(response.headers.get("retry-after", "1")), until - time.monotonic()))
                continue
            if response.status_code == 200 and "result" in response.json():
                self.answered.append(time.monotonic() - t)
            else:
                self.other += 1


async def hold_stream(http: httpx.AsyncClient, caller: Caller, task_id: str, until: float, opened: list) -> None:
    body = rpc("SubscribeToTask", {"id": task_id})
    try:
        async with http.stream("POST", caller.url, json=body,
                               headers={**caller.headers, "Accept": "text/event-stream"}) as response:
            opened.append(response.status_code)
            async for _ in response.aiter_lines():
                if time.monotonic() >= until:
                    return
    except (httpx.HTTPError, asyncio.TimeoutError):
        pass


async def phase(name: str, fleet: Fleet, rate: float, duration: float, burst=None) -> dict:
    load = Load()
    pids = [s.proc.pid for s in fleet.bench.servers]
    cpu0 = [cpu_seconds(p) for p in pids]
    started = time.monotonic()
    side = asyncio.create_task(burst(started + duration)) if burst else None
    await open_loop(fleet, load, rate=rate, duration=duration)
    await fleet.drain(load, 60)
    if side is not None:
        await side
    span = time.monotonic() - started
    cpu = " + ".join(f"{(cpu_seconds(p) - c) / span * 100:.0f}%" for p, c in zip(pids, cpu0))
    _, delivered, missing = fleet.latencies(load)
    return {"name": name, "p50": pct(delivered, 50), "p99": pct(delivered, 99), "sent": len(load.sent),
            "missing": missing, "errors": load.errors + load.refused, "load": loadavg(), "cpu": cpu}


async def run(backend: str, args) -> dict:
    processes = args.processes or (1 if backend == "embedded" else 2)
    limits = {} if args.no_rate_limit else {"STEERBOARD_RATE_LIMIT_PER_SECOND": "50", "STEERBOARD_RATE_LIMIT_BURST": "300"}
    bench = Bench(backend, processes=processes, **limits)
    results = []
    try:
        other = bench.provision("other", args.members)
        fleet = Fleet(bench, other)
        await fleet.connect()
        servers = bench.servers
        deleg = provision(bench.env, servers[0], "deleg", 2)  # m0: the A2A member; m1: the team's chatter
        chatter_fleet = Fleet(bench, {"team": "deleg", "lead": deleg["lead"], "members": {"m1": deleg["members"]["m1"]}})
        await chatter_fleet.connect()
        t = time.monotonic()
        await fill_history(servers[0].url, deleg["members"]["m0"], args.history)
        print(f"\n== {backend}: {processes} daphne process(es); {args.history} history entries written in "
              f"{time.monotonic() - t:.1f} s", flush=True)

        callers = []
        limits_http = httpx.Limits(max_connections=args.streams + 50, max_keepalive_connections=args.streams + 50)
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, read=None), limits=limits_http) as http:
            for i in range(args.callers):
                token = bench.env.manage_json("a2a_credential", f"caller{i}", "--team", "deleg")["token"]
                server = servers[i % len(servers)]
                callers.append(Caller(token, f"{server.url}/a2a/deleg/m0/"))
            per_caller = max(1, args.tasks // len(callers))
            for caller in callers:
                for n in range(per_caller):
                    await caller.send(http, f"task {n}")
            sent = sum(len(c.tasks) for c in callers)
            print(f"  {sent} A2A tasks waiting on m0 from {len(callers)} caller(s); other team: {args.members} "
                  f"sessions, {args.rate:.0f} msg/s; the A2A team's own chatter {args.chatter:.0f} msg/s", flush=True)

            chatter_stop = asyncio.Event()

            async def chatter() -> None:
                headers = {"Authorization": f"Bearer {deleg['lead']}"}
                while not chatter_stop.is_set():
                    try:
                        await fleet.http[0].post(servers[0].url + "/api/v1/tools/send_message",
                                                 json={"target": "m1", "message": "chatter"}, headers=headers)
                    except httpx.HTTPError:
                        pass
                    await asyncio.sleep(1 / args.chatter)

            talking = asyncio.create_task(chatter()) if args.chatter > 0 else None
            warm = Load()
            await open_loop(fleet, warm, rate=args.rate, duration=2)
            await fleet.drain(warm, 30)

            results.append(await phase("quiet", fleet, args.rate, args.duration))
            loops = Loops(not args.ignore_retry_after)

            async def list_loops(until: float) -> None:
                await asyncio.gather(*(loops.run(http, callers[i % len(callers)], until) for i in range(args.loops)))

            row = await phase(f"{args.loops} ListTasks loops", fleet, args.rate, args.duration, list_loops)
            row["a2a"] = (f"ListTasks answered {len(loops.answered)} (p50 {pct(loops.answered, 50) * 1000:.1f} ms), "
                          f"429 {loops.limited}, other {loops.other}")
            results.append(row)
            opened: list[int] = []
            if not args.no_rate_limit:  # the streams start with the callers' rate buckets full again
                await asyncio.sleep(300 / 50 + 1)

            async def streams(until: float) -> None:
                await asyncio.gather(*(
                    hold_stream(http, callers[i % len(callers)],
                                callers[i % len(callers)].tasks[i // len(callers) % len(callers[i % len(callers)].tasks)],
                                until, opened)
                    for i in range(args.streams)
                ))

            row = await phase(f"{args.streams} streams", fleet, args.rate, args.duration, streams)
            row["a2a"] = f"streams opened {sum(1 for s in opened if s == 200)} of {args.streams}"
            results.append(row)
            results.append(await phase("quiet again", fleet, args.rate, args.duration))
            chatter_stop.set()
            if talking is not None:
                await talking
        base = results[0]
        print(f"  {'phase':<22} {'p50':>10} {'p99':>10} {'p50 ×':>7} {'p99 ×':>7}   sent/missing/errors   "
              "daphne CPU   machine")
        for row in results:
            print(f"  {row['name']:<22} {row['p50'] * 1000:8.1f} ms {row['p99'] * 1000:8.1f} ms "
                  f"{row['p50'] / base['p50']:6.2f}x {row['p99'] / base['p99']:6.2f}x   "
                  f"{row['sent']}/{row['missing']}/{row['errors']}   {row['cpu']}   [{row['load']}]")
            if "a2a" in row:
                print(f"  {'':<22} A2A: {row['a2a']}")
        worst = max(r["p50"] / base["p50"] for r in results[1:3])
        print(f"  target (issue 26): a burst moves the other team's p50 by ≤ 2×: worst {worst:.2f}x — "
              f"{'met' if worst <= 2 else 'NOT met'}")
        print("  " + audit_line(bench))
        await fleet.close()
        await chatter_fleet.close()
        return {"backend": backend, "worst": worst}
    finally:
        bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--processes", type=int, default=None, help="default: 1 embedded, 2 scale-out")
    parser.add_argument("--members", type=int, default=4, help="sessions of the other team")
    parser.add_argument("--rate", type=float, default=20.0, help="the other team's sends a second")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of each phase")
    parser.add_argument("--history", type=int, default=41_000, help="entries in the A2A member's history")
    parser.add_argument("--tasks", type=int, default=60, help="A2A tasks waiting on the member, over all callers")
    parser.add_argument("--loops", type=int, default=3, help="loops calling ListTasks back to back")
    parser.add_argument("--callers", type=int, default=1, help="A2A credentials the loops and streams use")
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--chatter", type=float, default=5.0, help="the A2A team's own sends a second")
    parser.add_argument("--no-rate-limit", action="store_true", help="raise the per-token rate limit out of the way")
    parser.add_argument("--ignore-retry-after", action="store_true",
                        help="the loops ask again at once after a 429 (a flood no rate limit stops)")
    args = parser.parse_args()
    for backend in (BACKENDS if args.backend == "both" else [args.backend]):
        asyncio.run(run(backend, args))


if __name__ == "__main__":
    main()
