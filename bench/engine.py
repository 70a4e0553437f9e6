"""What the delivery engine costs, beside the floor of the same daphne, in one run.

    python bench/engine.py                                 # embedded, then scale-out
    python bench/engine.py --backend embedded --send-via rest
    python bench/engine.py --backend scale-out --send-via ws
    python bench/engine.py --backend embedded --phases unkeyed,keyed,sdk
    python bench/engine.py --backend embedded --phases sessions --idle-sessions 2000

Per backend: (1) the floor: a bare ASGI app (bench/bare_app.py) under the same
daphne, measured with the same client: POST req/s at saturation, one POST's
p50 and a websocket echo's p50 at light load; (2) Steerboard's delivered
msg/s at saturation (closed-loop senders, at most --window messages per worker
sent and not yet delivered; the window opens once as many sends are answered as
entries acknowledged per second; a message counts at the ack of its entry at
the target) and its ratio to the bare POST rate; (3) server CPU ms
per delivered message (/proc of every daphne process); (4) SQL statements
and commits per delivered message, from a counted pass (STEERBOARD_COUNT_SQL=1,
GET /api/v1/debug/sql); (5) send→delivered p50/p99 at a light fixed rate and
at 100 msg/s, against the bare POST p50. The saturation runs on the same server
without and with an idempotency_key on each send (--phases unkeyed,keyed): four
windows, unkeyed, keyed, keyed, unkeyed, each kind's figure the mean of its two.
(6) Real SDK sessions (steerboard_agents.AgentSession, a ring model answering each team
message with one keyed send_message to the next session: --phases sdk), their
delivered msg/s beside the bare POST rate. (7) The sessions axis on a fresh
server (--phases sessions): send→delivered at --light-rate with 8 and with
--idle-sessions connected sessions, same run. (8) The metrics axis (--phases
metrics): unkeyed saturation on fresh servers with STEERBOARD_METRICS off and
on, alternating --metrics-rounds times; server CPU per delivered message and
delivered msg/s, on / off (issue 29: at most 3 % dearer). Then summaries against the targets
of issues 11 and 32. The load comes from worker processes (bench/lean.py:
`websockets` and aiohttp, no Django; the SDK sessions and the idle sessions in
worker processes of their own); their CPU is printed beside each saturation
figure so a client-bound run shows.

Needs `pip install aiohttp` (orjson is used when installed).
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from common import BACKENDS, Bench, durable_commits, free_port, pct, provision, provision_teams, rss_kib
from lean import (JSON_LIB, Pool, Unsupported, all_cpu_seconds, loadavg, machine_ticks, process_label, process_tree,
                  tree_cpu_seconds)

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
WARM = 1.0  # seconds of bare POST load before its window opens
PHASES = ("unkeyed", "keyed", "sdk", "light", "sql", "sessions", "metrics")


def section(title: str) -> None:
    print(f"\n-- {title}   [{loadavg()}]", flush=True)


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


# --- measuring windows ---------------------------------------------------------------------------
def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def sql_counters(urls: list[str], headers: dict) -> list[dict]:
    out = []
    for url in urls:
        r = httpx.get(url + "/api/v1/debug/sql", headers=headers, timeout=10)
        r.raise_for_status()
        out.append(r.json())
    return out


def window(w0: float, w1: float, pids: dict[str, list[int]], sql: tuple[list[str], dict] | None = None,
           db_name: str = "") -> dict:
    """CPU seconds of each group of processes (with their children), the machine's busy share
    and, when asked, the SQL counters' deltas, between monotonic times w0 and w1."""
    _sleep_until(w0)
    c0 = {g: [tree_cpu_seconds(p) for p in ps] for g, ps in pids.items()}
    a0 = all_cpu_seconds()
    m0 = machine_ticks()
    s0 = sql_counters(*sql) if sql else None
    t0 = time.monotonic()
    _sleep_until(w1)
    c1 = {g: [tree_cpu_seconds(p) for p in ps] for g, ps in pids.items()}
    a1 = all_cpu_seconds()
    m1 = machine_ticks()
    s1 = sql_counters(*sql) if sql else None
    span = time.monotonic() - t0
    ours = {os.getpid(), *(q for ps in pids.values() for p in ps for q in process_tree(p))}
    others: dict[str, float] = {}
    for p, cpu in a1.items():
        if p not in ours and cpu - a0.get(p, 0.0) >= 0.02:
            label = process_label(p, db_name)
            others[label] = others.get(label, 0.0) + cpu - a0.get(p, 0.0)
    out = {
        "span": span,
        "others": sorted(others.items(), key=lambda kv: -kv[1])[:4],
        "db": others.get("postgres (this run's database)", 0.0),
        "redis": others.get("redis-server", 0.0),
        "cpu": {g: [b - a for a, b in zip(c0[g], c1[g])] for g in pids},
        # shares of all cores together: 1.0 = every core busy
        "machine": {k: (m1[k] - m0[k]) / max(1, m1["total"] - m0["total"]) for k in m0 if k != "total"},
    }
    if sql:
        out["statements"] = sum(b["statements"] - a["statements"] for a, b in zip(s0, s1))
        out["commits"] = sum(b["commits"] - a["commits"] for a, b in zip(s0, s1))
        # A statement outside a transaction commits on its own; the server counts those apart (when it does).
        out["autocommit"] = sum(b.get("autocommit_statements", 0) - a.get("autocommit_statements", 0)
                                for a, b in zip(s0, s1))
    return out


def cpu_line(w: dict, groups: dict[str, str]) -> str:
    parts = []
    for g, label in groups.items():
        shares = [c / w["span"] * 100 for c in w["cpu"][g]]
        each = " + ".join(f"{s:.0f}%" for s in shares)
        parts.append(f"{label} {each}" + (f" (= {sum(shares):.0f}%)" if len(shares) > 1 else ""))
    cores = os.cpu_count() or 1
    m = w["machine"]
    ours = sum(sum(c) for c in w["cpu"].values()) / w["span"]
    parts.append(f"machine {m['busy'] * cores * 100:.0f}% of {cores * 100}% (user {m['user'] * cores * 100:.0f}%, "
                 f"system {m['system'] * cores * 100:.0f}%, irq+softirq {m['irq'] * cores * 100:.0f}%, "
                 f"steal {m['steal'] * cores * 100:.0f}%), of which not these processes "
                 f"{max(0.0, m['busy'] * cores - ours) * 100:.0f}%")
    if w["others"]:
        parts.append("busiest other processes: " + ", ".join(f"{n} {c / w['span'] * 100:.0f}%" for n, c in w["others"]))
    return "CPU (100% = one core): " + "; ".join(parts)


# --- the floor -----------------------------------------------------------------------------------
class BareDaphne:
    def __init__(self, tmp: Path):
        self.port = free_port()
        self.log = open(tmp / f"bare-daphne-{self.port}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "bare_app:app"],
            cwd=BENCH_DIR,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the bare daphne exited early")
            try:
                if httpx.post(self.url, content=b"{}", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the bare daphne did not answer in 30 s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        self.log.close()


def measure_floor(pool: Pool, args, idle_pids: list[int]) -> dict:
    section("floor: bare ASGI app (bench/bare_app.py) under the same daphne, same client")
    tmp = Path(tempfile.mkdtemp(prefix="steerboard-bench-bare-"))
    try:
        bare = BareDaphne(tmp)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        concurrency = args.bare_concurrency or args.senders
        t_start = time.monotonic() + 0.5
        for w in range(args.workers):
            pool.send(w, "bare_post_closed", url=bare.url, concurrency=concurrency, t_start=t_start, warm=WARM,
                      duration=args.saturate_for)
        win = window(t_start + WARM, t_start + WARM + args.saturate_for,
                     {"bare": [bare.proc.pid], "workers": pool.pids, "steerboard": idle_pids})
        parts = [pool.recv(w) for w in range(args.workers)]
        done = sum(p["in_window"] for p in parts)
        errors = sum(p["errors"] for p in parts)
        rate = done / args.saturate_for
        print(f"  bare POST at saturation ({args.workers} workers x {concurrency} closed-loop clients, "
              f"{args.saturate_for:.0f} s window): {rate:,.0f} req/s ({done} answered in the window, {errors} errors)")
        print("  " + cpu_line(win, {"bare": "daphne", "workers": "client workers", "steerboard": "Steerboard (idle)"}))
        post = pool.call(0, "bare_post_seq", url=bare.url, count=args.light_count)
        echo = pool.call(0, "bare_ws_seq", url=bare.url.replace("http://", "ws://"), count=args.light_count)
        post_p50 = pct(post, 50)
        print(f"  bare POST, sequential ({len(post)}): p50 {fmt_ms(post_p50)}, p99 {fmt_ms(pct(post, 99))}")
        print(f"  websocket echo, sequential ({len(echo)}): p50 {fmt_ms(pct(echo, 50))}, p99 {fmt_ms(pct(echo, 99))}")
        bare_share = win["cpu"]["bare"][0] / win["span"]
        client_share = sum(win["cpu"]["workers"]) / win["span"]
        client_max = max(win["cpu"]["workers"]) / win["span"]
        if client_max >= 0.85:
            verdict = f"a client worker used {client_max * 100:.0f}% of a core: the CLIENT may be the limit (add --workers)"
        elif bare_share >= 0.85:
            verdict = "the bare daphne used all of a core and no client worker did: the server is the limit"
        elif win["machine"]["busy"] >= 0.9:
            verdict = (f"the bare daphne used {bare_share * 100:.0f}% of a core and the machine was full: "
                       f"daphne, the client and the kernel's loopback work share {os.cpu_count()} cores")
        else:
            verdict = (f"neither the bare daphne ({bare_share * 100:.0f}%) nor a client worker was saturated: "
                       f"raise --bare-concurrency")
        print(f"  who saturates: {verdict}")
        return {"post_rate": rate, "post_p50": post_p50, "echo_p50": pct(echo, 50), "bare_cpu": bare_share,
                "client_cpu": client_share}
    finally:
        bare.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# --- Steerboard ----------------------------------------------------------------------------------
def layout(team: dict, servers: int, workers: int) -> list[list]:
    """Member i: server i % servers, worker (i // servers) % workers, so each worker's members
    (the targets of its sends) sit on every server."""
    names = sorted(team["members"], key=lambda n: int(n[1:]))
    shares: list[list] = [[] for _ in range(workers)]
    for i, name in enumerate(names):
        shares[(i // servers) % workers].append([name, team["members"][name], i % servers])
    return shares


def connect(pool: Pool, bench: Bench, team: dict, args) -> None:
    shares = layout(team, len(bench.servers), args.workers)
    if min(len(s) for s in shares) < 2:
        raise SystemExit("every worker needs at least two members: raise --members or lower --workers")
    urls = [s.url for s in bench.servers]
    for w in range(args.workers):
        pool.send(w, "agents", members=shares[w], servers=urls, send_via=args.send_via,
                  http_limit=max(256, 2 * args.senders))
    for w in range(args.workers):
        pool.recv(w, timeout=180)


def server_pids(bench: Bench) -> list[int]:
    # DaphneProcess runs `python -m daphne` itself (no shell): proc.pid is daphne; window() adds children.
    return [s.proc.pid for s in bench.servers]


def db_name(bench: Bench) -> str:
    return bench.env.env["DATABASE_URL"].rsplit("/", 1)[1] if bench.env.postgres else ""


def merge(parts: list[dict]) -> dict:
    out = {"sent_ok": 0, "missing": 0, "refused": {}, "errors": {}, "answered": [], "delivered": [],
           "answered_in_window": 0, "acked_in_window": 0, "slowest": []}
    for p in parts:
        for k in ("sent_ok", "missing", "answered_in_window", "acked_in_window"):
            out[k] += p[k]
        out["answered"] += p["answered"]
        out["delivered"] += p["delivered"]
        out["slowest"] = sorted(out["slowest"] + p.get("slowest", []), key=lambda x: -x[1])[:20]
        for k in ("refused", "errors"):
            for code, n in p[k].items():
                out[k][code] = out[k].get(code, 0) + n
    return out


def merge_counts(counts) -> dict:
    out: dict = {}
    for c in counts:
        for k, n in c.items():
            out[k] = out.get(k, 0) + n
    return out


def problems(m: dict) -> str:
    refused = sum(m["refused"].values())
    errors = sum(m["errors"].values())
    text = f"{m['missing']} missing (answered, never acked), {refused} refused, {errors} errors"
    if refused:
        text += f" refused {m['refused']}"
    if errors:
        text += f" errors {m['errors']}"
    return text


def saturate(pool: Pool, bench: Bench, args, duration: float, sql: tuple | None = None,
             keyed: bool = False) -> tuple[dict, dict]:
    """Closed-loop load; the window opens once every worker's load is steady (its backlog stopped
    growing) or after --max-warm s, and lasts `duration` s. ``keyed``: every send carries an
    idempotency_key of its own, as the SDK's do."""
    t_start = time.monotonic() + 0.5
    for w in range(args.workers):
        pool.send(w, "closed", senders=args.senders, window=args.window, t_start=t_start, max_warm=args.max_warm,
                  max_duration=duration, drain=args.drain, keyed=keyed)
    reports = [pool.progress(w, timeout=args.max_warm + 60) for w in range(args.workers)]
    w0 = time.monotonic() + 0.1
    w1 = w0 + duration
    for w in range(args.workers):
        pool.tell(w, {"w0": w0, "w1": w1})
    warm = w0 - t_start
    steady = all(r["steady"] for r in reports)
    print(f"  window opened after {warm:.1f} s of load: " + ("steady (as many sends answered as entries acked per s)"
          if steady else f"NOT steady after --max-warm {args.max_warm:g} s (the backlog was still changing)"))
    win = window(w0, w1, {"server": server_pids(bench), "workers": pool.pids}, sql, db_name(bench))
    m = merge([pool.recv(w, timeout=duration + args.drain + 120) for w in range(args.workers)])
    m["steady"] = steady
    return m, win


def open_loop(pool: Pool, bench: Bench, args, rate: float, duration: float) -> tuple[dict, dict]:
    t_start = time.monotonic() + 0.5
    share = rate / args.workers
    for w in range(args.workers):
        pool.send(w, "open", rate=share, offset=w / rate, t_start=t_start, duration=duration, drain=args.drain)
    win = window(t_start, t_start + duration, {"server": server_pids(bench), "workers": pool.pids},
                 db_name=db_name(bench))
    m = merge([pool.recv(w, timeout=duration + args.drain + 120) for w in range(args.workers)])
    return m, win


def writer_figures(bench: Bench) -> dict | None:
    """The writer's histograms summed over the servers' /metrics (sum and count of its batch
    sizes and commit seconds), or None when a server does not answer them."""
    totals: dict[str, float] = {}
    for server in bench.servers:
        try:
            text = httpx.get(f"{server.url}/metrics", timeout=10).raise_for_status().text
        except httpx.HTTPError:
            return None
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name.startswith(("steerboard_writer_commit_seconds_", "steerboard_writer_batch_size_")) and \
                    name.endswith(("_sum", "_count")):
                totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def writer_spent(before: dict | None, after: dict | None) -> dict | None:
    """The writer's batches between two readings: how many, their mean size and commit time."""
    if not before or not after:
        return None
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    batches = delta.get("steerboard_writer_commit_seconds_count", 0.0)
    if not batches:
        return None
    return {"batches": batches, "commit": delta["steerboard_writer_commit_seconds_sum"] / batches,
            "batch_size": delta.get("steerboard_writer_batch_size_sum", 0.0) / batches}


def saturation_report(m: dict, win: dict, bench: Bench, floor: dict, args) -> dict:
    """Print one saturation pass's figures; answers its rate, CPU per message, missing, steadiness."""
    delivered = m["acked_in_window"]
    rate = delivered / args.saturate_for
    server_cpu = sum(win["cpu"]["server"])
    cpu_ms = server_cpu / delivered * 1000 if delivered else float("nan")
    print(f"  delivered: {rate:,.1f} msg/s ({delivered} acks in the window; {m['answered_in_window']} sends "
          f"answered in it); ratio to the bare POST rate {rate / floor['post_rate']:.3f} "
          f"(bare {floor['post_rate']:,.0f} req/s)")
    print(f"  whole run: {m['sent_ok']} sent, {problems(m)}")
    print(f"  server CPU: {cpu_ms:.2f} ms per delivered message ({server_cpu:.2f} s over {len(bench.servers)} "
          f"daphne process(es) in {win['span']:.1f} s)")
    if bench.env.postgres and delivered:
        print(f"  beside daphne: this run's PostgreSQL backends {win['db'] / delivered * 1000:.2f} ms and "
              f"redis-server (shared) {win['redis'] / delivered * 1000:.2f} ms per delivered message; all three "
              f"{(server_cpu + win['db'] + win['redis']) / delivered * 1000:.2f} ms")
    print("  " + cpu_line(win, {"server": "daphne", "workers": "client workers"}))
    print(f"  at saturation: send→answered p50 {fmt_ms(pct(m['answered'], 50))}, send→delivered p50 "
          f"{fmt_ms(pct(m['delivered'], 50))} p99 {fmt_ms(pct(m['delivered'], 99))}")
    # In a closed loop one of the two limits always binds (Little's law); whether the server
    # itself was the limit shows in its CPU.
    mean_delivered = sum(m["delivered"]) / len(m["delivered"]) if m["delivered"] else float("nan")
    window_bound = args.workers * args.window / mean_delivered
    window_full = rate >= 0.8 * window_bound
    who_saturates(win, window_full, f"the client's window ({args.workers * args.window} undelivered / mean "
                  f"send→delivered {fmt_ms(mean_delivered)} = {window_bound:,.0f} msg/s) was full: raise --window "
                  f"to see if more gets through", "a higher --senders shows whether more concurrency gets more through")
    return {"rate": rate, "cpu_ms": cpu_ms, "missing": m["missing"], "steady": m["steady"]}


def who_saturates(win: dict, window_full: bool, window_hint: str, idle_hint: str) -> None:
    busiest = max(win["cpu"]["server"]) / win["span"]
    client_max = max(win["cpu"]["workers"]) / win["span"]
    if client_max >= 0.85:
        print(f"  NOTE: a client worker used {client_max * 100:.0f}% of a core: the CLIENT may be the limit "
              f"(add worker processes)")
    if busiest >= 0.85:
        print(f"  the server was the limit: a daphne process used {busiest * 100:.0f}% of a core"
              + (" (so the client's window stayed full)" if window_full else ""))
        return
    ours = (sum(sum(c) for c in win["cpu"].values()) + win["db"] + win["redis"]) / win["span"]
    others = max(0.0, win["machine"]["busy"] * (os.cpu_count() or 1) - ours)
    if win["machine"]["busy"] >= 0.9 and others < 0.3:
        why = ("the machine was full with this run's own work (daphne, the client, the database): on this "
               "machine that is the server's limit")
    elif win["machine"]["busy"] >= 0.9:
        why = (f"the machine was full ({others * 100:.0f}% of a core went to other processes and the kernel): "
               f"this figure is not the server's limit; run again on a quieter machine")
    elif window_full:
        why = f"the machine had idle CPU and {window_hint}"
    else:
        why = f"the machine had idle CPU, so the server waited (database, locks, timers) rather than computed; {idle_hint}"
    print(f"  NOTE: no daphne process used a whole core (busiest {busiest * 100:.0f}%): {why}")


def steerboard(pool: Pool, sdk_pool: Pool | None, backend: str, processes: int, args, result: dict) -> None:
    # /metrics open to this machine: the light runs read the writer's commit time from it.
    bench = Bench(backend, processes=processes, STEERBOARD_MAX_PENDING_PER_TARGET="1000",
                  STEERBOARD_METRICS_ALLOW="127.0.0.0/8")
    try:
        team = bench.provision("bench", args.members)
        # The SDK sessions' team, made before any load (their members are not the raw client's).
        sdk_team = provision(bench.env, bench.servers[0], "sdk", args.sdk_sessions) if sdk_pool is not None else None
        connect(pool, bench, team, args)
        print(f"  {args.members} agent sessions connected over {args.workers} worker processes; "
              f"daphne pids {server_pids(bench)}")
        if args.send_via == "ws":
            probe = pool.call(0, "probe")
            print(f"  tool frame on /ws/agent/: answered {probe['frame'].get('type')} "
                  f"({'delivered' if probe['delivered'] else 'not delivered'})")

        floor = measure_floor(pool, args, server_pids(bench))
        result["floor"] = floor
        bare_p50 = floor["post_p50"]
        # A delivered message is two durable commits in a row (the send's, then its entry's):
        # what one costs on this database, measured the way the server commits.
        commits = durable_commits(bench.env, 300)
        result["commit_p50"] = pct(commits, 50)
        print(f"  durable commit on this run's database (INSERT + COMMIT, sequential {len(commits)}): "
              f"p50 {fmt_ms(pct(commits, 50))}, p99 {fmt_ms(pct(commits, 99))}; two in a row: "
              f"{2 * pct(commits, 50) / bare_p50:.1f}x bare POST p50")

        # Both kinds: in the order unkeyed, keyed, keyed, unkeyed, each figure the mean of its two
        # windows. A later window finds the tables grown by the earlier ones (on PostgreSQL the
        # second of two windows cost it about half as much again), so one of each, in a fixed
        # order, measured the order as much as the sends.
        wanted = [kind for kind in ("unkeyed", "keyed") if kind in args.phases]
        order = ["unkeyed", "keyed", "keyed", "unkeyed"] if len(wanted) == 2 else wanted
        passes: dict[str, list[dict]] = {}
        for n, kind in enumerate(order):
            keyed = kind == "keyed"
            section(f"Steerboard saturation, {kind} sends{' (an idempotency_key on each, as the SDK sends)' if keyed else ''}"
                    f"{f' (window {n + 1} of {len(order)})' if len(order) > 1 else ''}: "
                    f"{args.workers} workers x {args.senders} closed-loop senders, at most {args.window} undelivered per "
                    f"worker, send via {args.send_via}, {args.saturate_for:.0f} s window")
            m, win = saturate(pool, bench, args, args.saturate_for, keyed=keyed)
            passes.setdefault(kind, []).append(saturation_report(m, win, bench, floor, args))
        for kind, reports in passes.items():
            result[kind] = {
                "rate": sum(r["rate"] for r in reports) / len(reports),
                "cpu_ms": sum(r["cpu_ms"] for r in reports) / len(reports),
                "missing": sum(r["missing"] for r in reports),
                "steady": all(r["steady"] for r in reports),
            }
        if "unkeyed" in result and "keyed" in result:
            u, k = result["unkeyed"], result["keyed"]
            each = "; ".join(f"{kind} " + ", ".join(f"{r['rate']:,.1f} msg/s {r['cpu_ms']:.2f} ms" for r in reports)
                             for kind, reports in passes.items())
            print(f"\n  keyed / unkeyed, same run, windows in the order unkeyed, keyed, keyed, unkeyed ({each}): "
                  f"delivered msg/s {k['rate']:,.1f} / {u['rate']:,.1f} = {k['rate'] / u['rate']:.2f}x; server CPU "
                  f"per delivered message {k['cpu_ms']:.2f} / {u['cpu_ms']:.2f} ms = {k['cpu_ms'] / u['cpu_ms']:.2f}x")
        if "unkeyed" in result:
            result.update(rate=result["unkeyed"]["rate"], cpu_ms=result["unkeyed"]["cpu_ms"],
                          sat_missing=result["unkeyed"]["missing"], steady=result["unkeyed"]["steady"])

        for label, rate_offered in (("light", args.light_rate), ("mid", args.mid_rate)):
            if "light" not in args.phases:
                break
            section(f"send→delivered at {rate_offered:g} msg/s offered (open loop, {args.light_duration:.0f} s), "
                    f"send via {args.send_via}")
            before = writer_figures(bench)
            m, win = open_loop(pool, bench, args, rate_offered, args.light_duration)
            spent = writer_spent(before, writer_figures(bench))
            d50, d99 = pct(m["delivered"], 50), pct(m["delivered"], 99)
            a50 = pct(m["answered"], 50)
            print(f"  {m['sent_ok']} sent, {len(m['delivered'])} delivered; {problems(m)}")
            print(f"  send→delivered p50 {fmt_ms(d50)} ({d50 / bare_p50:.1f}x bare POST p50), "
                  f"p99 {fmt_ms(d99)} ({d99 / bare_p50:.1f}x); send→answered p50 {fmt_ms(a50)} "
                  f"({a50 / bare_p50:.1f}x); bare POST p50 {fmt_ms(bare_p50)}")
            if spent:
                print(f"  where it went (the servers' /metrics): {spent['batches']:.0f} writer batches of "
                      f"{spent['batch_size']:.2f} jobs, each {fmt_ms(spent['commit'])} from its first statement to its "
                      f"commit (mean); a delivered message is two of them in a row: {fmt_ms(2 * spent['commit'])}")
            print("  " + cpu_line(win, {"server": "daphne", "workers": "client workers"}))
            result[label] = {"rate": rate_offered, "p50": d50, "p99": d99, "answered_p50": a50, "missing": m["missing"]}

        closed = [pool.call(w, "agents_close") for w in range(args.workers)]
        reconnects = sum(c["reconnects"] for c in closed)
        error_frames = sum(c["error_frames"] for c in closed)
        print(f"\n  raw sessions: {reconnects} reconnects, {error_frames} error frames")
        for c in closed:
            for exc in c["exceptions"]:
                print("  worker exception:\n" + exc)

        if sdk_team is not None:
            sdk_phase(sdk_pool, bench, sdk_team, floor, args, result)
            rows = [(label, result[key]) for label, key in (("raw client, unkeyed", "unkeyed"),
                    ("raw client, keyed", "keyed"), ("SDK sessions (keyed)", "sdk")) if key in result]
            print(f"\n  the user's path beside the raw client, same server (delivered msg/s; ratio to the bare POST rate "
                  f"{floor['post_rate']:,.0f} req/s; server CPU per delivered message)   [{loadavg()}]")
            for label, r in rows:
                print(f"    {label:<22} {r['rate']:>9,.1f}  {r['rate'] / floor['post_rate']:.3f}  {r['cpu_ms']:.2f} ms"
                      + (f" (SDK workers {r['client_cpu_ms']:.2f} ms)" if "client_cpu_ms" in r else ""))

        result["audit_ok"] = True
        for name in [team["team"]] + ([sdk_team["team"]] if sdk_team is not None else []):
            audit = bench.env.manage_json("delivery_audit", name, "--all-delivered", check=False)
            ok = "ok" in audit and audit["ok"]
            result["audit_ok"] = result["audit_ok"] and ok
            summary_text = audit.get("summary", audit) if "ok" in audit else f"FAILED: {audit}"
            print(f"  team {name}: audit {summary_text} (manage.py delivery_audit)   [{loadavg()}]")
    finally:
        with_cleanup(bench.close)


def sdk_phase(sdk_pool: Pool, bench: Bench, team: dict, floor: dict, args, result: dict) -> None:
    """Real SDK sessions (steerboard_agents.AgentSession) in their own worker processes, each with a model that
    answers every team message with one send_message to the next member (a ring): keyed tool frames,
    turns, entries acknowledged before the session goes on. Delivered msg/s at saturation, counted
    when the target's model sees the message, beside the bare POST rate."""
    workers = len(sdk_pool.pids)
    section(f"real SDK sessions: {args.sdk_sessions} steerboard_agents.AgentSession over {workers} worker processes, a ring "
            f"model (each team message answered with one send_message to the next member: a keyed tool frame), "
            f"{args.sdk_depth} messages in flight per session, {args.saturate_for:.0f} s window")
    shares = layout(team, len(bench.servers), workers)
    if min(len(s) for s in shares) < 2:
        raise SystemExit("every SDK worker needs at least two sessions: raise --sdk-sessions or lower --sdk-workers")
    urls = [s.url for s in bench.servers]
    for w in range(workers):
        sdk_pool.send(w, "sdk", members=shares[w], servers=urls)
    for w in range(workers):
        sdk_pool.recv(w, timeout=240)
    t_start = time.monotonic() + 0.5
    for w in range(workers):
        sdk_pool.send(w, "sdk_run", depth=args.sdk_depth, t_start=t_start, max_warm=args.max_warm,
                      max_duration=args.saturate_for, drain=args.drain)
    reports = [sdk_pool.progress(w, timeout=args.max_warm + 120) for w in range(workers)]
    w0 = time.monotonic() + 0.1
    w1 = w0 + args.saturate_for
    for w in range(workers):
        sdk_pool.tell(w, {"w0": w0, "w1": w1})
    steady = all(r["steady"] for r in reports)
    print(f"  window opened after {w0 - t_start:.1f} s of load: " + ("steady (as many messages seen per s as the "
          "second before)" if steady else f"NOT steady after --max-warm {args.max_warm:g} s"))
    win = window(w0, w1, {"server": server_pids(bench), "workers": sdk_pool.pids}, db_name=db_name(bench))
    parts = [sdk_pool.recv(w, timeout=args.saturate_for + args.drain + 120) for w in range(workers)]
    closed = [sdk_pool.call(w, "sdk_close", timeout=120) for w in range(workers)]
    seen = sum(p["seen_in_window"] for p in parts)
    rate = seen / args.saturate_for
    delivered = [d for p in parts for d in p["delivered"]]
    errors: dict[str, int] = {}
    for p in parts:
        for code, n in p["errors"].items():
            errors[code] = errors.get(code, 0) + n
    server_cpu = sum(win["cpu"]["server"])
    client_cpu = sum(win["cpu"]["workers"])
    cpu_ms = server_cpu / seen * 1000 if seen else float("nan")
    print(f"  delivered: {rate:,.1f} msg/s ({seen} messages seen by their target's model in the window); ratio to "
          f"the bare POST rate {rate / floor['post_rate']:.3f} (bare {floor['post_rate']:,.0f} req/s)"
          + (f"; to the raw client's keyed rate {rate / result['keyed']['rate']:.2f}x" if "keyed" in result else ""))
    print(f"  whole run: {sum(p['sent'] for p in parts)} sends asked for, {sum(p['missing'] for p in parts)} missing "
          f"(asked for, never seen), refused {errors or 0}; {sum(c['reconnects'] for c in closed)} reconnects")
    for c in closed:
        for exc in c["exceptions"]:
            print("  SDK session ended with: " + exc)
    print(f"  server CPU: {cpu_ms:.2f} ms per delivered message; the SDK workers' CPU: "
          f"{client_cpu / seen * 1000 if seen else float('nan'):.2f} ms per delivered message")
    print("  " + cpu_line(win, {"server": "daphne", "workers": "SDK workers"}))
    print(f"  model's send→target's model sees it: p50 {fmt_ms(pct(delivered, 50))}, p99 {fmt_ms(pct(delivered, 99))}")
    who_saturates(win, False, "", "more sessions (--sdk-sessions) or a deeper ring (--sdk-depth) show whether more "
                  "gets through")
    result["sdk"] = {"rate": rate, "cpu_ms": cpu_ms, "client_cpu_ms": client_cpu / seen * 1000 if seen else float("nan"),
                     "steady": steady, "client_max": max(win["cpu"]["workers"]) / win["span"]}


AXIS_TEAM = 8  # members of each team on the sessions axis: the measured team and every idle one


def sessions_axis(pool: Pool, idle_pool: Pool, backend: str, processes: int, args, result: dict) -> None:
    """send→delivered at --light-rate with the measured team's 8 sessions only, then with
    --idle-sessions connected in all (idle teams of 8 beside it), same process, same run."""
    idle_teams = max(0, -(-(args.idle_sessions - AXIS_TEAM) // AXIS_TEAM))
    total = AXIS_TEAM * (1 + idle_teams)
    ping = args.idle_ping or None
    section(f"sessions axis ({backend}): send→delivered at {args.light_rate:g} msg/s (open loop, "
            f"{args.axis_duration:.0f} s, send via {args.send_via}) with {AXIS_TEAM} and with {total} connected "
            f"agent sessions (idle teams of {AXIS_TEAM}, keepalive ping every {ping or 'never'} s), same run")
    bench = Bench(backend, processes=processes, STEERBOARD_MAX_PENDING_PER_TARGET="1000")
    try:
        team = bench.provision("axis", AXIS_TEAM)
        t = time.monotonic()
        teams = provision_teams(bench.env, bench.servers[0], [f"idle{i}" for i in range(idle_teams)], AXIS_TEAM)
        print(f"  {idle_teams} idle teams of {AXIS_TEAM} provisioned in {time.monotonic() - t:.0f} s "
              f"(POST /api/v1/teams, spawn_teammate, the host's start frames)")
        connect(pool, bench, team, args)
        pids = server_pids(bench)
        phases = {}

        def measure(label: str, sessions: int) -> None:
            time.sleep(1.0)
            load = loadavg()
            rss = sum(rss_kib(p) for p in pids)
            m, win = open_loop(pool, bench, args, args.light_rate, args.axis_duration)
            d50, d99 = pct(m["delivered"], 50), pct(m["delivered"], 99)
            cpu = sum(win["cpu"]["server"]) / win["span"]
            phases[label] = {"sessions": sessions, "p50": d50, "p99": d99, "cpu": cpu, "rss": rss,
                             "missing": m["missing"], "n": len(m["delivered"])}
            print(f"  {sessions:>5} sessions: send→delivered p50 {fmt_ms(d50)}, p99 {fmt_ms(d99)} "
                  f"({len(m['delivered'])} delivered; {problems(m)}); daphne CPU {cpu * 100:.1f}% of a core at "
                  f"{args.light_rate:g} msg/s; RSS {rss / 1024:.0f} MiB   [{load}]")
            print("    " + cpu_line(win, {"server": "daphne", "workers": "client workers"}))
            ours = (sum(sum(c) for c in win["cpu"].values()) + win["db"] + win["redis"]) / win["span"]
            others = max(0.0, win["machine"]["busy"] * (os.cpu_count() or 1) - ours)
            phases[label]["others"] = others
            if others >= 0.5:
                print(f"    NOTE: other processes used {others * 100:.0f}% of a core in this window: its tail is the "
                      f"machine's as much as the server's; run again on a quieter machine")
            t0 = min((t for t, _ in m["slowest"]), default=0.0)
            print("    slowest sends (s into the run: ms): " + ", ".join(
                f"{t - t0:.1f}: {d * 1000:.0f}" for t, d in sorted(m["slowest"][:8])))

        measure("few", AXIS_TEAM)
        members = [[name, token, i % len(bench.servers)]
                   for i, (name, token) in enumerate((n, tok) for t in teams.values() for n, tok in t.items())]
        workers = len(idle_pool.pids)
        urls = [s.url for s in bench.servers]
        t = time.monotonic()
        for w in range(workers):
            idle_pool.send(w, "idle", members=members[w::workers], servers=urls, ping_interval=ping)
        for w in range(workers):
            idle_pool.recv(w, timeout=900)
        status = [idle_pool.call(w, "idle_status") for w in range(workers)]
        print(f"  {len(members)} idle sessions connected and welcomed in {time.monotonic() - t:.0f} s over {workers} "
              f"worker processes ({sum(s['reconnects'] for s in status)} reconnects while connecting"
              f"{': ' + str(merge_counts(s['lost'] for s in status)) if any(s['lost'] for s in status) else ''}); settling "
              f"{args.axis_settle:g} s")
        time.sleep(args.axis_settle)
        before = [idle_pool.call(w, "idle_status") for w in range(workers)]
        measure("many", total)
        status = [idle_pool.call(w, "idle_status") for w in range(workers)]
        connected = sum(s["connected"] for s in status)
        print(f"  idle sessions at the end: {connected} of {sum(s['sessions'] for s in status)} connected, "
              f"{sum(s['reconnects'] for s in status) - sum(s['reconnects'] for s in before)} reconnects during the "
              f"second run, {sum(s['error_frames'] for s in status)} error frames")
        for s in status:
            for exc in s["exceptions"]:
                print("  idle worker exception:\n" + exc)
        few, many = phases["few"], phases["many"]
        r50, r99 = many["p50"] / few["p50"], many["p99"] / few["p99"]
        print(f"  with {total} / with {AXIS_TEAM} sessions: p50 {r50:.2f}x (target ≤ 1.5x), p99 {r99:.2f}x "
              f"(target ≤ 3x); daphne CPU {many['cpu'] * 100:.1f}% / {few['cpu'] * 100:.1f}% of a core; "
              f"RSS +{(many['rss'] - few['rss']) / max(1, total - AXIS_TEAM):.1f} KiB per added session")
        result["axis"] = {"few": few, "many": many, "p50_ratio": r50, "p99_ratio": r99,
                          "noisy": max(few["others"], many["others"]) >= 0.5}
        for w in range(workers):
            idle_pool.call(w, "agents_close", timeout=300)
        for w in range(args.workers):
            pool.call(w, "agents_close")
        audit = bench.env.manage_json("delivery_audit", "axis", "--all-delivered", check=False)
        result["axis"]["audit_ok"] = bool(audit.get("ok"))
        print(f"  team axis: audit {audit.get('summary', audit)} (manage.py delivery_audit)   [{loadavg()}]")
    finally:
        with_cleanup(bench.close)


def sql_pass(pool: Pool, backend: str, processes: int, args, result: dict) -> None:
    section(f"SQL counts: a fresh {backend} run with STEERBOARD_COUNT_SQL=1, {args.sql_for:.0f} s of saturation")
    bench = Bench(backend, processes=processes, STEERBOARD_MAX_PENDING_PER_TARGET="1000", STEERBOARD_COUNT_SQL="1")
    try:
        team = bench.provision("bench", args.members, "benchop")
        urls = [s.url for s in bench.servers]
        chosen, statuses = None, []
        for headers in ({}, {"Authorization": f"Bearer {team['lead']}"},
                        {"Authorization": f"Token {team['operator']['token']}"}):
            r = httpx.get(urls[0] + "/api/v1/debug/sql", headers=headers, timeout=10)
            statuses.append(r.status_code)
            if r.status_code == 200:
                chosen = headers
                break
            if r.status_code == 404:
                break
        if chosen is None:
            if statuses[-1] == 404:
                print("  sql counts: not available (server lacks /api/v1/debug/sql)")
            else:
                print(f"  sql counts: not available (GET /api/v1/debug/sql answered {statuses})")
            return
        connect(pool, bench, team, args)
        m, win = saturate(pool, bench, args, args.sql_for, sql=(urls, chosen))
        delivered = m["acked_in_window"]
        per = (lambda n: n / delivered) if delivered else (lambda n: float("nan"))
        transactions = win["commits"] + win["autocommit"]
        print(f"  {delivered} delivered in the window; {win['statements']} statements, {win['commits']} commits and "
              f"{win['autocommit']} autocommit statements (each a transaction of its own) over {len(urls)} process(es)")
        print(f"  per delivered message: {per(win['statements']):.2f} SQL statements, {per(transactions):.2f} "
              f"transactions ({per(win['commits']):.2f} commits + {per(win['autocommit']):.2f} autocommit statements)")
        print(f"  whole pass: {m['sent_ok']} sent, {problems(m)}")
        for w in range(args.workers):
            pool.call(w, "agents_close")
        result["sql"] = {"statements": per(win["statements"]), "transactions": per(transactions),
                         "commits": per(win["commits"]), "autocommit": per(win["autocommit"])}
    finally:
        with_cleanup(bench.close)


def metrics_axis(pool: Pool, backend: str, processes: int, args, result: dict) -> None:
    """The metrics' cost (mailbox/plumbing/metrics.py): the same saturation on fresh servers with
    STEERBOARD_METRICS off and on, alternating (off, on, off, on, ...) so that a machine
    growing busier weighs on both; the medians compared."""
    section(f"metrics axis ({backend}): unkeyed saturation, STEERBOARD_METRICS off / on alternating, "
            f"{args.metrics_rounds} round(s) of {args.saturate_for:.0f} s each, send via {args.send_via}")
    runs: dict[str, list[dict]] = {"0": [], "1": []}
    for _ in range(args.metrics_rounds):
        for on in ("0", "1"):
            bench = Bench(backend, processes=processes, STEERBOARD_MAX_PENDING_PER_TARGET="1000", STEERBOARD_METRICS=on)
            try:
                team = bench.provision("metered", args.members)
                connect(pool, bench, team, args)
                m, win = saturate(pool, bench, args, args.saturate_for)
                delivered = m["acked_in_window"]
                cpu = sum(win["cpu"]["server"])
                run = {"rate": delivered / args.saturate_for,
                       "cpu_ms": cpu / delivered * 1000 if delivered else float("nan"), "missing": m["missing"]}
                runs[on].append(run)
                print(f"  metrics {'on ' if on == '1' else 'off'}: {run['rate']:,.1f} delivered msg/s, server CPU "
                      f"{run['cpu_ms']:.3f} ms per delivered message, {problems(m)}   [{loadavg()}]")
                for w in range(args.workers):
                    pool.call(w, "agents_close")
            finally:
                with_cleanup(bench.close)

    def median(key: str, on: str) -> float:
        values = sorted(r[key] for r in runs[on])
        return values[len(values) // 2] if len(values) % 2 else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2

    cpu_off, cpu_on = median("cpu_ms", "0"), median("cpu_ms", "1")
    rate_off, rate_on = median("rate", "0"), median("rate", "1")
    cost = cpu_on / cpu_off - 1
    print(f"\n  metrics on / off (medians): server CPU per delivered message {cpu_on:.3f} / {cpu_off:.3f} ms "
          f"= {cost * 100:+.1f} % ({(cpu_on - cpu_off) * 1000:+.0f} us); delivered msg/s {rate_on:,.1f} / "
          f"{rate_off:,.1f} = {(rate_on / rate_off - 1) * 100:+.1f} %   [{loadavg()}]")
    result["metrics"] = {"cpu_cost": cost, "rate_change": rate_on / rate_off - 1, "cpu_on": cpu_on, "cpu_off": cpu_off,
                         "rounds": args.metrics_rounds}


def with_cleanup(fn) -> None:
    try:
        fn()
    except Exception as exc:  # cleanup must not hide the run's own error
        print(f"  (cleanup: {type(exc).__name__}: {exc})", file=sys.stderr)


# --- the summary ---------------------------------------------------------------------------------
def summary(results: dict) -> None:
    rows = []

    def row(target: str, figure: str, ok: bool | None) -> None:
        rows.append((target, figure, "n/a" if ok is None else ("met" if ok else "NOT met")))

    emb, sco = results.get("embedded"), results.get("scale-out")
    if emb and "rate" in emb:
        bare = emb["floor"]["post_rate"]
        flag = "" if emb["steady"] else " (not steady)"
        row("embedded delivered ≥ 1/3 bare POST rate",
            f"{emb['rate']:,.1f} / {bare:,.0f} = {emb['rate'] / bare:.3f}{flag}", emb["rate"] >= bare / 3)
        row("embedded server CPU ≤ 1.5 ms/delivered", f"{emb['cpu_ms']:.2f} ms{flag}", emb["cpu_ms"] <= 1.5)
    if sco and "rate" in sco:
        row("scale-out delivered ≥ 1000 msg/s", f"{sco['rate']:,.1f} msg/s" + ("" if sco["steady"] else " (not steady)"),
            sco["rate"] >= 1000)
        if emb and "rate" in emb:
            row("scale-out ≥ 1.5× embedded", f"{sco['rate']:,.1f} / {emb['rate']:,.1f} = {sco['rate'] / emb['rate']:.2f}x",
                sco["rate"] >= 1.5 * emb["rate"])
        else:
            row("scale-out ≥ 1.5× embedded", "(embedded not in this run)", None)
    for backend, r in results.items():
        if "floor" not in r:
            continue
        bare = r["floor"]["post_p50"]
        for label in ("light", "mid"):
            if label not in r:
                continue
            x = r[label]
            rate = x["rate"]
            row(f"{backend} p50 @{rate:g} msg/s ≤ 5× bare POST p50",
                f"{x['p50'] * 1000:.2f} ms = {x['p50'] / bare:.1f}x", x["p50"] <= 5 * bare)
            if label == "light" and "commit_p50" in r:
                floor = 2 * r["commit_p50"]
                row(f"  (floor: two durable commits on {backend}'s database)",
                    f"{floor * 1000:.2f} ms = {floor / bare:.1f}x", None)
            if label == "light":
                row(f"{backend} p99 @{rate:g} msg/s ≤ 20× bare POST p50",
                    f"{x['p99'] * 1000:.2f} ms = {x['p99'] / bare:.1f}x", x["p99"] <= 20 * bare)
        sql = r.get("sql")
        if sql is None and "sql" not in r.get("phases", ()):
            pass
        elif sql:
            row(f"{backend} ≤ 6 SQL statements/delivered", f"{sql['statements']:.2f}", sql["statements"] <= 6)
            row(f"{backend} ≤ 2 commits/delivered (+ autocommits)",
                f"{sql['commits']:.2f} + {sql['autocommit']:.2f} = {sql['transactions']:.2f}", sql["transactions"] <= 2)
        else:
            row(f"{backend} SQL statements / commits per delivered", "not available", None)
    width = max((len(t) for t, _, _ in rows), default=10)
    print(f"\n== summary against the targets (issue 11)   [{loadavg()}]")
    for target, figure, verdict in rows:
        print(f"  {target:<{width}}  {figure:>26}  {verdict}")

    rows = []
    for backend, r in results.items():
        u, k = r.get("unkeyed"), r.get("keyed")
        if u and k:
            row(f"{backend} keyed delivered ≥ 0.9× unkeyed", f"{k['rate']:,.1f} / {u['rate']:,.1f} = "
                f"{k['rate'] / u['rate']:.2f}x", k["rate"] >= 0.9 * u["rate"])
            row(f"{backend} keyed server CPU ≤ 1.15× unkeyed", f"{k['cpu_ms']:.2f} / {u['cpu_ms']:.2f} ms = "
                f"{k['cpu_ms'] / u['cpu_ms']:.2f}x", k["cpu_ms"] <= 1.15 * u["cpu_ms"])
        if u and backend == "embedded" and r["floor"].get("post_rate"):
            bare_ms = r["floor"]["bare_cpu"] / r["floor"]["post_rate"] * 1000
            row("embedded unkeyed CPU ≤ 3× bare daphne CPU/request", f"{u['cpu_ms']:.2f} / {bare_ms:.3f} ms = "
                f"{u['cpu_ms'] / bare_ms:.1f}x", u["cpu_ms"] <= 3 * bare_ms)
        sdk = r.get("sdk")
        if sdk:
            bare = r["floor"]["post_rate"]
            client = "" if sdk["client_max"] < 0.85 else " (an SDK worker at a full core)"
            row(f"{backend} SDK sessions (keyed) ≥ 1/4 bare POST rate", f"{sdk['rate']:,.1f} / {bare:,.0f} = "
                f"{sdk['rate'] / bare:.3f}{client}", sdk["rate"] >= bare / 4 if backend == "embedded" else None)
        metered = r.get("metrics")
        if metered:
            row(f"{backend} metrics on: server CPU per delivered message ≤ +3 %",
                f"{metered['cpu_on']:.3f} / {metered['cpu_off']:.3f} ms = {metered['cpu_cost'] * 100:+.1f} %",
                metered["cpu_cost"] <= 0.03)
        axis = r.get("axis")
        if axis:
            n = axis["many"]["sessions"]
            target = backend == "embedded"
            noisy = " (noisy machine)" if axis["noisy"] else ""
            row(f"{backend} p50 with {n} sessions ≤ 1.5× with 8", f"{axis['many']['p50'] * 1000:.2f} / "
                f"{axis['few']['p50'] * 1000:.2f} ms = {axis['p50_ratio']:.2f}x{noisy}",
                axis["p50_ratio"] <= 1.5 if target else None)
            row(f"{backend} p99 with {n} sessions ≤ 3× with 8", f"{axis['many']['p99'] * 1000:.2f} / "
                f"{axis['few']['p99'] * 1000:.2f} ms = {axis['p99_ratio']:.2f}x{noisy}",
                axis["p99_ratio"] <= 3 if target else None)
    if rows:
        width = max(len(t) for t, _, _ in rows)
        print(f"\n== summary against the targets (issue 32)   [{loadavg()}]")
        for target, figure, verdict in rows:
            print(f"  {target:<{width}}  {figure:>26}  {verdict}")


# --- main ----------------------------------------------------------------------------------------
def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--processes", type=int, default=None, help="daphne processes; default 1 embedded, 2 scale-out")
    parser.add_argument("--send-via", choices=["ws", "rest"], default="ws",
                        help="ws: a tool frame on the sender's own agent websocket; rest: POST /api/v1/tools/send_message")
    parser.add_argument("--members", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="load-generator processes")
    parser.add_argument("--senders", type=int, default=64, help="concurrent closed-loop senders per worker")
    parser.add_argument("--window", type=int, default=128,
                        help="at saturation, most messages a worker has sent and not yet seen delivered")
    parser.add_argument("--bare-concurrency", type=int, default=0, help="per worker, for the bare POST; default --senders")
    parser.add_argument("--saturate-for", type=float, default=10.0, help="seconds of each saturation window")
    parser.add_argument("--max-warm", type=float, default=20.0,
                        help="most seconds of closed-loop load before a saturation window opens, steady or not")
    parser.add_argument("--sql-for", type=float, default=4.0, help="seconds of the counted SQL pass's window")
    parser.add_argument("--light-rate", type=float, default=20.0)
    parser.add_argument("--mid-rate", type=float, default=100.0)
    parser.add_argument("--light-duration", type=float, default=15.0, help="seconds of each open-loop run")
    parser.add_argument("--light-count", type=int, default=300, help="sequential requests / echoes of the floor")
    parser.add_argument("--drain", type=float, default=60.0, help="most seconds to wait for acks after a phase")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated, of {', '.join(PHASES)} (default: all). unkeyed/keyed: the raw "
                             f"client's saturation without/with an idempotency_key on each send; sdk: real SDK sessions; "
                             f"light: send→delivered at --light-rate and --mid-rate; sql: the counted SQL pass; "
                             f"sessions: the sessions axis")
    parser.add_argument("--sdk-sessions", type=int, default=32, help="steerboard_agents.AgentSession sessions of the sdk phase")
    parser.add_argument("--sdk-workers", type=int, default=2, help="worker processes holding the SDK sessions")
    parser.add_argument("--sdk-depth", type=int, default=4,
                        help="ring messages each SDK session starts with (messages in flight per session)")
    parser.add_argument("--idle-sessions", type=int, default=2000,
                        help="sessions axis: connected sessions in all, in teams of 8 (the measured team is one)")
    parser.add_argument("--idle-workers", type=int, default=2, help="worker processes holding the idle sessions")
    parser.add_argument("--idle-ping", type=float, default=20.0,
                        help="the idle sessions' websocket keepalive ping interval, s (the SDK's: websockets' "
                             "default, 20); 0: none")
    parser.add_argument("--axis-duration", type=float, default=20.0, help="seconds of each open-loop run of the axis")
    parser.add_argument("--axis-settle", type=float, default=25.0,
                        help="seconds between the idle sessions' welcome and the axis's second run: the server "
                             "settles its heap every 10 s (mailbox/operations/sweeper.py heap_settle), a connect storm's "
                             "objects within two settles")
    parser.add_argument("--metrics-rounds", type=int, default=2,
                        help="metrics axis: rounds of (off, on) saturation runs on fresh servers")
    args = parser.parse_args()
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if args.phases - set(PHASES):
        parser.error(f"unknown phases {sorted(args.phases - set(PHASES))}; choose from {', '.join(PHASES)}")

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    backends = list(BACKENDS) if args.backend == "both" else [args.backend]
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"== bench/engine.py at {rev or '?'}: backends {', '.join(backends)}, send via {args.send_via}, "
          f"{os.cpu_count()} cores, {JSON_LIB}   [{loadavg()}]", flush=True)
    results: dict[str, dict] = {}
    code = 0
    pool = Pool(args.workers)
    sdk_pool = Pool(args.sdk_workers) if "sdk" in args.phases else None
    idle_pool = Pool(args.idle_workers) if "sessions" in args.phases and args.idle_sessions > AXIS_TEAM else None
    try:
        for backend in backends:
            processes = args.processes or (1 if backend == "embedded" else 2)
            print(f"\n== {backend}: {processes} daphne process(es), {args.members} members   [{loadavg()}]", flush=True)
            result = results[backend] = {"phases": args.phases}
            if args.phases & {"unkeyed", "keyed", "sdk", "light"}:
                steerboard(pool, sdk_pool, backend, processes, args, result)
                if not result.get("audit_ok", False):
                    code = 1
            if "sql" in args.phases:
                sql_pass(pool, backend, processes, args, result)
            if "metrics" in args.phases:
                metrics_axis(pool, backend, processes, args, result)
            if idle_pool is not None:
                sessions_axis(pool, idle_pool, backend, processes, args, result)
                if not result["axis"].get("audit_ok", False):
                    code = 1
    except Unsupported as exc:
        print(f"\nFAILED: --send-via ws needs the tool frame on /ws/agent/, and this server does not have it: {exc}\n"
              f"(use --send-via rest on this server)", file=sys.stderr, flush=True)
        return 2
    finally:
        for p in (pool, sdk_pool, idle_pool):
            if p is not None:
                p.close()
    summary(results)
    return code


if __name__ == "__main__":
    sys.exit(main())
