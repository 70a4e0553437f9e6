"""The lean load generator of bench/engine.py: worker processes that hold raw
agent sessions (the `websockets` asyncio client) and send with aiohttp or with
tool frames on the sender's own session, plus the /proc readers the parent uses
to account CPU. No Django, no httpx in the hot loop; orjson when installed.

A worker is driven over a multiprocessing pipe, one operation at a time
(``Pool.call``). Targets of a worker's sends are members the same worker holds
sessions for, so a worker sees both ends of each of its messages: the send (its
start and its answer) and the ack of its entry at the target. Every loop is
bounded in count and time; a worker exits when its pipe closes.
"""
import asyncio
import contextlib
import itertools
import multiprocessing
import os
import time
import traceback
from collections import Counter
from pathlib import Path

try:
    import orjson

    def dumps(obj) -> str:
        return orjson.dumps(obj).decode()

    loads = orjson.loads
    JSON_LIB = "orjson"
except ImportError:  # pragma: no cover - depends on the machine
    import json

    def dumps(obj) -> str:
        return json.dumps(obj, separators=(",", ":"))

    loads = json.loads
    JSON_LIB = "json"

CLK_TCK = os.sysconf("SC_CLK_TCK")
CONTENT_PAD = 64  # characters of a message's content, about a short instruction


# --- /proc ---------------------------------------------------------------------------------------
def loadavg() -> str:
    parts = Path("/proc/loadavg").read_text().split()
    return f"load average: {parts[0]}, {parts[1]}, {parts[2]}"


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; everything after its ')' is fixed.
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), in seconds."""
    f = _stat_fields(pid)
    if f is None:
        return 0.0
    # after ')': state(0) ppid(1) ... utime(11) stime(12)
    return (int(f[11]) + int(f[12])) / CLK_TCK


def process_tree(pid: int) -> list[int]:
    """The process and all its descendants (daphne forks none, but be sure)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        f = _stat_fields(int(entry.name))
        if f is not None:
            children.setdefault(int(f[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo and len(out) < 10_000:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in process_tree(pid))


def all_cpu_seconds() -> dict[int, float]:
    """CPU seconds of every process on the machine."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            f = _stat_fields(int(entry.name))
            if f is not None:
                out[int(entry.name)] = (int(f[11]) + int(f[12])) / CLK_TCK
    return out


def process_label(pid: int, db_name: str = "") -> str:
    """A short name: the executable, and for python its module or script; a
    PostgreSQL backend serving `db_name` is "postgres (this run's database)"."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        argv = [a.decode(errors="replace") for a in argv if a]
    except OSError:
        return f"pid {pid}"
    if argv and argv[0].startswith("postgres"):
        # A backend's title: "postgres: 15/main: user database host(port) state"
        if db_name and f" {db_name} " in f" {' '.join(argv)} ":
            return "postgres (this run's database)"
        return "postgres"
    if not argv:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return f"pid {pid}"
    name = os.path.basename(argv[0].split()[0]) if argv[0].split() else argv[0]
    if name.startswith("python") and len(argv) > 1:
        rest = argv[1:]
        if rest[0] == "-m" and len(rest) > 1:
            return f"python -m {rest[1]}"
        return f"python {os.path.basename(rest[0])}"
    return name.split(":")[0]


def machine_ticks() -> dict[str, int]:
    """Jiffies over all cores, from /proc/stat: busy, total, and busy split into
    user (+nice), system, irq (+softirq: loopback networking mostly) and steal."""
    v = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    total = sum(v[:8])  # guest time is already counted in user
    return {"busy": total - idle - iowait, "total": total, "user": user + nice, "system": system,
            "irq": irq + softirq, "steal": steal}


# --- the worker's sessions -------------------------------------------------------------------------
class Unsupported(Exception):
    pass


class Session:
    """One raw agent session on /ws/agent/: hello, steers integrated in seq order
    (a message after a gap is held until the gap fills; repeats ignored), one
    user_message entry per message, acks recorded; tool frames correlated by id.
    Reconnects (bounded) and resends unacknowledged entries if the socket drops."""

    MAX_CONNECTS = 50  # connection attempts per session in one run

    def __init__(self, worker: "Worker", name: str, token: str, url: str, ping_interval: float | None = None):
        self.worker = worker
        self.ping_interval = ping_interval  # None: no keepalive pings (the load sessions)
        self.name = name
        self.token = token
        self.url = url
        self.ws = None
        self.last_seq = 0
        self.held: dict[int, dict] = {}
        self.integrated: set[str] = set()
        self.unacked: dict[str, str] = {}  # entry id -> its frame
        self.calls: dict[str, asyncio.Future] = {}
        self.welcomed = asyncio.Event()
        self.error_frames: list[dict] = []
        self.error_event = asyncio.Event()
        self.connects = 0
        self.stopping = False
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        attempts = 0
        while not self.stopping and attempts < self.MAX_CONNECTS:
            attempts += 1
            try:
                async with connect(
                    self.url + "/ws/agent/",
                    additional_headers={"Authorization": f"Bearer {self.token}"},
                    compression=None,
                    proxy=None,
                    open_timeout=15,
                    close_timeout=2,
                    ping_interval=self.ping_interval,
                    max_queue=None,
                    max_size=None,
                ) as ws:
                    self.ws = ws
                    self.connects += 1
                    await ws.send(dumps({"type": "hello", "status": "idle"}))
                    async for raw in ws:
                        await self._frame(ws, loads(raw))
                    self.worker.lost[f"closed {ws.close_code}"] += 1
            except (OSError, WebSocketException, asyncio.TimeoutError) as exc:
                code = getattr(getattr(exc, "rcvd", None), "code", None) or getattr(getattr(exc, "response", None), "status_code", None)
                self.worker.lost[f"{type(exc).__name__}{f' {code}' if code else ''}"] += 1
            except Exception:  # a frame this client did not expect: note it, reconnect
                if len(self.worker.exceptions) < 5:
                    self.worker.exceptions.append(traceback.format_exc())
            finally:
                self.ws = None
                self.welcomed.clear()
                for fut in self.calls.values():
                    if not fut.done():
                        fut.set_exception(ConnectionError("session socket closed"))
                self.calls.clear()
            if self.stopping:
                return
            self.worker.reconnects += 1
            await asyncio.sleep(0.1)

    async def _frame(self, ws, frame: dict) -> None:
        kind = frame.get("type")
        if kind == "ack":
            eid = frame.get("entry_id", "")
            if self.unacked.pop(eid, None) is not None:
                self.worker.on_ack(eid.split(":", 1)[1])
        elif kind == "steer":
            message = frame["message"]
            seq = message["seq"]
            if message["id"] in self.integrated or seq <= self.last_seq:
                return  # a repeated doorbell: already integrated
            self.held[seq] = message
            while self.last_seq + 1 in self.held:
                current = self.held.pop(self.last_seq + 1)
                self.last_seq += 1
                mid = current["id"]
                self.integrated.add(mid)
                eid = f"{self.name}:{mid}"
                out = dumps(
                    {
                        "type": "entry",
                        "entry": {
                            "id": eid,
                            "kind": "user_message",
                            "text": current["content"],
                            "source": {"kind": "team-message", "message_id": mid},
                        },
                    }
                )
                self.unacked[eid] = out
                await ws.send(out)
        elif kind == "tool_result":
            fut = self.calls.pop(frame.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(frame)
        elif kind == "welcome":
            for out in list(self.unacked.values()):
                await ws.send(out)
            self.welcomed.set()
        elif kind == "error":
            self.error_frames.append(frame)
            self.worker.error_frames += 1
            self.error_event.set()

    async def tool(self, call_id: str, name: str, arguments: dict, timeout: float = 60) -> dict:
        ws = self.ws
        if ws is None:
            raise ConnectionError("session not connected")
        fut = asyncio.get_running_loop().create_future()
        self.calls[call_id] = fut
        try:
            await ws.send(dumps({"type": "tool", "id": call_id, "name": name, "arguments": arguments}))
            async with asyncio.timeout(timeout):
                return await fut
        finally:
            self.calls.pop(call_id, None)

    async def stop(self) -> None:
        self.stopping = True
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self.task, 5)


# --- the worker ----------------------------------------------------------------------------------
class Worker:
    CONNECTING = 16  # idle sessions opening at once (op_idle)

    def __init__(self, conn, index: int):
        self.conn = conn
        self.index = index
        self.sessions: list[Session] = []
        self.http = None  # aiohttp.ClientSession
        self.servers: list[str] = []
        self.send_via = "rest"
        self.acked_at: dict[str, float] = {}
        self.ack_times: list[float] = []
        self.awaiting: dict[str, asyncio.Semaphore] = {}  # message id -> window slot it holds
        self.reconnects = 0
        self.error_frames = 0
        self.exceptions: list[str] = []
        self.ids = itertools.count()
        self.lost: Counter = Counter()  # how sessions' connections ended or failed, by close code or error
        self.run_id = f"{os.getpid()}-{time.time_ns()}"  # idempotency keys: new in every run

    # The parent process's pipe: one operation at a time.
    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        parent = os.getppid()
        try:
            while True:
                try:
                    cmd = await loop.run_in_executor(None, self.conn.recv)
                except (EOFError, OSError):
                    return
                if cmd["op"] == "stop" or os.getppid() != parent:
                    return
                try:
                    result = await getattr(self, "op_" + cmd["op"])(**cmd.get("args", {}))
                    self.conn.send({"ok": True, "result": result})
                except Unsupported as exc:
                    self.conn.send({"ok": False, "unsupported": str(exc)})
                except Exception:
                    self.conn.send({"ok": False, "error": traceback.format_exc()})
        finally:
            await self._close_all()

    async def _close_all(self) -> None:
        if getattr(self, "sdk", None):
            await self.op_sdk_close()
        await asyncio.gather(*(s.stop() for s in self.sessions), return_exceptions=True)
        self.sessions = []
        if self.http is not None:
            with contextlib.suppress(Exception):
                await self.http.close()
            self.http = None

    @staticmethod
    def _client(limit: int):
        import aiohttp

        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=60),
            skip_auto_headers=("User-Agent",),
        )

    async def _http(self, limit: int):
        """The client for Steerboard's REST sends (one connection pool per worker)."""
        if self.http is not None:
            await self.http.close()
        self.http = self._client(limit)
        return self.http

    def on_ack(self, mid: str) -> None:
        if mid in self.acked_at:
            return
        t = time.monotonic()
        self.acked_at[mid] = t
        self.ack_times.append(t)
        slot = self.awaiting.pop(mid, None)
        if slot is not None:
            slot.release()

    # --- the floor: the bare app --------------------------------------------------------------------
    async def op_bare_post_closed(self, url: str, concurrency: int, t_start: float, warm: float, duration: float) -> dict:
        http = self._client(concurrency)
        body = dumps({"target": "m7", "message": "x" * CONTENT_PAD}).encode()
        headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
        w0, w1 = t_start + warm, t_start + warm + duration
        done_in_window, errors, total = 0, 0, 0
        cap = int((warm + duration) * 100_000)

        async def loop_one() -> None:
            nonlocal done_in_window, errors, total
            while time.monotonic() < w1 and total < cap:
                try:
                    async with http.post(url, data=body, headers=headers) as r:
                        await r.read()
                        ok = r.status == 200
                except Exception:
                    ok = False
                t = time.monotonic()
                total += 1
                if not ok:
                    errors += 1
                elif w0 <= t <= w1:
                    done_in_window += 1

        try:
            await asyncio.sleep(max(0.0, t_start - time.monotonic()))
            await asyncio.gather(*(loop_one() for _ in range(concurrency)))
        finally:
            await http.close()
        return {"in_window": done_in_window, "errors": errors, "total": total}

    async def op_bare_post_seq(self, url: str, count: int) -> list[float]:
        body = dumps({"target": "m7", "message": "x" * CONTENT_PAD}).encode()
        headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
        times = []
        async with self._client(1) as http:
            for i in range(count + 20):
                t = time.monotonic()
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"bare POST answered {r.status}")
                if i >= 20:  # the first ones warm the connection
                    times.append(time.monotonic() - t)
        return times

    async def op_bare_ws_seq(self, url: str, count: int) -> list[float]:
        from websockets.asyncio.client import connect

        frame = dumps({"type": "steer", "message": {"id": "team-message-x", "seq": 1, "content": "x" * CONTENT_PAD}})
        times = []
        async with connect(url, compression=None, proxy=None, ping_interval=None, open_timeout=10) as ws:
            for i in range(count + 20):
                t = time.monotonic()
                await ws.send(frame)
                await asyncio.wait_for(ws.recv(), 10)
                if i >= 20:
                    times.append(time.monotonic() - t)
        return times

    # --- Steerboard ---------------------------------------------------------------------------------
    async def op_agents(self, members: list, servers: list[str], send_via: str, http_limit: int, timeout: float = 120) -> dict:
        """members: [name, token, server index]; connect a session for each and wait for every welcome."""
        await self._close_all()
        self.servers = servers
        self.send_via = send_via
        self.acked_at.clear()
        self.ack_times.clear()
        self.awaiting.clear()
        self.sessions = [Session(self, n, tok, servers[s].replace("http://", "ws://")) for n, tok, s in members]
        self.server_of = {n: s for n, _, s in members}
        for s in self.sessions:
            s.start()
            await asyncio.sleep(0.002)  # do not open them all in one burst
        deadline = time.monotonic() + timeout
        while not all(s.welcomed.is_set() for s in self.sessions):
            if time.monotonic() > deadline:
                missing = [s.name for s in self.sessions if not s.welcomed.is_set()]
                raise RuntimeError(f"sessions not welcomed after {timeout}s: {missing[:10]}")
            await asyncio.sleep(0.05)
        await self._http(http_limit)
        return {"sessions": len(self.sessions)}

    async def op_agents_close(self) -> dict:
        errors = sum(len(s.error_frames) for s in self.sessions)
        await self._close_all()
        return {"error_frames": errors, "reconnects": self.reconnects, "exceptions": self.exceptions[:3]}

    async def op_probe(self, timeout: float = 10) -> dict:
        """Is there a tool frame on /ws/agent/? One real send_message over it."""
        sender, target = self.sessions[0], self.sessions[1]
        sender.error_event.clear()
        before = len(sender.error_frames)
        call = asyncio.create_task(
            sender.tool(f"probe-{self.index}", "send_message", {"target": target.name, "message": "engine.py probe"}, timeout)
        )
        err = asyncio.create_task(sender.error_event.wait())
        done, _ = await asyncio.wait({call, err}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        err.cancel()
        if call in done and call.exception() is None:
            frame = call.result()
            if "result" in frame:
                mid = frame["result"].get("message_id")
                deadline = time.monotonic() + timeout
                while mid and mid not in self.acked_at and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                return {"frame": frame, "delivered": bool(mid and mid in self.acked_at)}
            return {"frame": frame, "delivered": False}
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
        if len(sender.error_frames) > before:
            raise Unsupported(
                "the server answered the tool frame with an error frame: "
                + dumps(sender.error_frames[before])
            )
        raise Unsupported(f"no tool_result for the tool frame within {timeout}s")

    async def _send(self, sender: Session, target: str, content: str, keyed: bool = False) -> tuple:
        """One send_message; (outcome, t_send, t_answer, message_id or error code). ``keyed``: with an
        idempotency_key, new for every send, as the SDK puts on each (steerboard_protocol.tools.KEYED_TOOLS)."""
        t = time.monotonic()
        call_id = f"{self.index}-{next(self.ids)}"
        arguments = {"target": target, "message": content}
        if keyed:
            arguments["idempotency_key"] = f"bench-{self.index}-{self.run_id}-{call_id}"
        if self.send_via == "ws":
            try:
                frame = await sender.tool(call_id, "send_message", arguments)
            except Exception as exc:
                return ("error", t, time.monotonic(), type(exc).__name__)
            ta = time.monotonic()
            if "result" in frame:
                return ("ok", t, ta, frame["result"]["message_id"])
            return ("refused", t, ta, (frame.get("error") or {}).get("code", "?"))
        url = self.servers[self.server_of[sender.name]] + "/api/v1/tools/send_message"
        try:
            async with self.http.post(
                url,
                data=dumps(arguments).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {sender.token}"},
            ) as r:
                raw = await r.read()
                status = r.status
        except Exception as exc:
            return ("error", t, time.monotonic(), type(exc).__name__)
        ta = time.monotonic()
        if status == 200:
            return ("ok", t, ta, loads(raw)["message_id"])
        try:
            code = loads(raw)["error"]["code"]
        except Exception:
            code = f"http {status}"
        return ("refused", t, ta, code)

    def _pair(self, i: int) -> tuple[Session, str]:
        """The i-th send's sender and target: every target in turn, senders rotating, never oneself."""
        n = len(self.sessions)
        target = self.sessions[i % n]
        sender = self.sessions[(i + 1 + (i // n) % (n - 1)) % n]
        return sender, target.name

    async def _drain(self, sent: list[tuple], timeout: float) -> int:
        deadline = time.monotonic() + timeout
        ids = [r[3] for r in sent if r[0] == "ok"]
        while time.monotonic() < deadline:
            missing = sum(1 for m in ids if m not in self.acked_at)
            if missing == 0:
                return 0
            await asyncio.sleep(0.05)
        return sum(1 for m in ids if m not in self.acked_at)

    def _summary(self, sent: list[tuple], w0: float, w1: float, missing: int) -> dict:
        refused = Counter(r[3] for r in sent if r[0] == "refused")
        errors = Counter(r[3] for r in sent if r[0] == "error")
        ok = [r for r in sent if r[0] == "ok"]
        return {
            "sent_ok": len(ok),
            "refused": dict(refused),
            "errors": dict(errors),
            "missing": missing,
            "answered": [r[2] - r[1] for r in ok],
            "delivered": [self.acked_at[r[3]] - r[1] for r in ok if r[3] in self.acked_at],
            # (monotonic send time, send→delivered) of the slowest: where in the run the tail was
            "slowest": sorted(((r[1], self.acked_at[r[3]] - r[1]) for r in ok if r[3] in self.acked_at),
                              key=lambda x: -x[1])[:20],
            "answered_in_window": sum(1 for r in ok if w0 <= r[2] <= w1),
            "acked_in_window": sum(1 for t in self.ack_times if w0 <= t <= w1),
        }

    async def op_closed(self, senders: int, window: int, t_start: float, max_warm: float, max_duration: float,
                        drain: float, keyed: bool = False) -> dict:
        """Closed loop: `senders` concurrent send_message calls, each waiting for its answer, with at most
        `window` messages sent and not yet delivered. When the load is steady (as many sends answered as
        entries acknowledged over the last second; or after `max_warm` s), tell the parent, which answers
        with the measuring window [w0, w1]; sending stops at w1. Acks are counted in the window."""
        loop = asyncio.get_running_loop()
        bounds = {"w1": t_start + max_warm + max_duration + 5.0}  # until the parent says
        slots = asyncio.Semaphore(window)
        sent: list[tuple] = []
        counter = itertools.count()
        cap = int((max_warm + max_duration + 5) * 50_000)

        async def one(k: int) -> None:
            while time.monotonic() < bounds["w1"]:
                i = next(counter)
                if i >= cap:
                    return
                while time.monotonic() < bounds["w1"]:
                    try:
                        async with asyncio.timeout(0.1):
                            await slots.acquire()
                        break
                    except TimeoutError:
                        continue
                else:
                    return
                sender, target = self._pair(i)
                r = await self._send(sender, target, f"sat {self.index}-{i} ".ljust(CONTENT_PAD, "x"), keyed)
                sent.append(r)
                if r[0] != "ok" or r[3] in self.acked_at:
                    slots.release()
                else:
                    self.awaiting[r[3]] = slots

        await asyncio.sleep(max(0.0, t_start - time.monotonic()))
        tasks = [asyncio.create_task(one(k)) for k in range(senders)]
        try:
            steady = await self._steady(sent, t_start, max_warm)
            self.conn.send({"steady": steady, "warm": time.monotonic() - t_start})
            window_msg = await loop.run_in_executor(None, self.conn.recv)
            bounds["w1"] = window_msg["w1"]
            w0 = window_msg["w0"]
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
        missing = await self._drain(sent, drain)
        self.awaiting.clear()
        out = self._summary(sent, w0, bounds["w1"], missing)
        out["steady"] = steady
        return out

    async def _steady(self, sent: list[tuple], t_start: float, max_warm: float) -> bool:
        """Wait (at least 1 s, at most max_warm) until, twice in a row, the sends answered and the entries
        acknowledged over the last second differ by at most 10 %: the backlog stopped growing."""
        deadline = t_start + max_warm
        await asyncio.sleep(max(0.0, t_start + 1.0 - time.monotonic()))
        good = 0
        while time.monotonic() < deadline:
            now = time.monotonic()
            answered = 0
            for r in reversed(sent):  # appended as answered: newest last
                if r[2] < now - 1.0:
                    break
                answered += r[0] == "ok"
            acked = 0
            for t in reversed(self.ack_times):
                if t < now - 1.0:
                    break
                acked += 1
            good = good + 1 if acked and abs(answered - acked) <= 0.1 * max(answered, acked) + 2 else 0
            if good >= 2:
                return True
            await asyncio.sleep(0.25)
        return False

    async def op_open(self, rate: float, offset: float, t_start: float, duration: float, drain: float,
                      keyed: bool = False) -> dict:
        """Open loop: this worker's share, `rate` sends/s starting `offset` s after t_start."""
        total = int(rate * duration)
        sent: list[tuple] = []
        tasks = []

        async def one(i: int) -> None:
            sender, target = self._pair(i)
            sent.append(await self._send(sender, target, f"open {self.index}-{i} ".ljust(CONTENT_PAD, "x"), keyed))

        start = t_start + offset
        for i in range(total):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        missing = await self._drain(sent, drain)
        return self._summary(sent, t_start, t_start + duration, missing)


    # --- idle sessions: bench/engine.py's sessions axis ---------------------------------------------
    async def op_idle(self, members: list, servers: list[str], ping_interval: float | None, timeout: float = 600) -> dict:
        """Hold one idle session per member ([name, token, server index]): hello, then nothing but
        the websocket keepalive pings every ``ping_interval`` s (the SDK keeps websockets' default, 20 s)."""
        await self._close_all()
        self.reconnects = 0
        self.sessions = [Session(self, n, tok, servers[s].replace("http://", "ws://"), ping_interval)
                         for n, tok, s in members]
        deadline = time.monotonic() + timeout
        started: list[Session] = []
        for s in self.sessions:
            # At most CONNECTING handshakes and hellos at once: a storm of them past what the server
            # answers in time ends in handshake timeouts and a storm of reconnects.
            while sum(not x.welcomed.is_set() for x in started[-4 * self.CONNECTING:]) >= self.CONNECTING:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"idle sessions not welcomed after {timeout}s")
                await asyncio.sleep(0.005)
            s.start()
            started.append(s)
        while not all(s.welcomed.is_set() for s in self.sessions):
            if time.monotonic() > deadline:
                missing = [s.name for s in self.sessions if not s.welcomed.is_set()]
                raise RuntimeError(f"{len(missing)} idle sessions not welcomed after {timeout}s: {missing[:10]}")
            await asyncio.sleep(0.1)
        return {"sessions": len(self.sessions)}

    async def op_idle_status(self) -> dict:
        """How the idle sessions fare: still connected (welcomed), reconnects since op_idle, error frames."""
        return {"connected": sum(s.welcomed.is_set() for s in self.sessions), "sessions": len(self.sessions),
                "reconnects": self.reconnects, "lost": dict(self.lost), "error_frames": self.error_frames, "exceptions": self.exceptions[:3]}

    # --- real SDK sessions: steerboard_agents.AgentSession with a ring model -----------------------------------
    async def op_sdk(self, members: list, servers: list[str], timeout: float = 180) -> dict:
        """One steerboard_agents.AgentSession per member ([name, token, server index]), each with a RingModel
        whose successor is the next member of this worker (a ring); wait until every one is connected."""
        from steerboard_agents import AgentSession

        await self._close_all()
        self.ring = Ring(self.index)
        names = [m[0] for m in members]
        self.sdk = []
        self.sdk_tasks = []
        for i, (name, token, s) in enumerate(members):
            successor = names[(i + 1) % len(names)]
            session = AgentSession(servers[s], token, RingModel(successor, self.ring), resume=True)
            session.successor = successor
            self.sdk.append(session)
            self.sdk_tasks.append(asyncio.create_task(session.run()))
            await asyncio.sleep(0.005)
        deadline = time.monotonic() + timeout
        while not all(s.connected.is_set() for s in self.sdk):
            failed = [t for t in self.sdk_tasks if t.done()]
            if failed:
                raise RuntimeError(f"an SDK session ended: {failed[0].exception()!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"SDK sessions not connected after {timeout}s")
            await asyncio.sleep(0.05)
        return {"sessions": len(self.sdk)}

    async def op_sdk_run(self, depth: int, t_start: float, max_warm: float, max_duration: float, drain: float) -> dict:
        """The ring: each session sends ``depth`` messages to its successor (ServerClient.tool, as a
        model's call would go: a keyed tool frame), and every model forwards each message it is
        given; when the load is steady (or after ``max_warm`` s) tell the parent, which answers with
        the window [w0, w1]; the models stop forwarding at w1 and the ring drains."""
        from steerboard_agents import ToolError

        loop = asyncio.get_running_loop()
        ring = self.ring
        ring.sending = True

        async def seed(session) -> None:
            for _ in range(depth):
                content = ring.content()
                ring.sent[content] = time.monotonic()
                try:
                    await session.client.tool("send_message", {"target": session.successor, "message": content},
                                              call_id=f"seed-{self.run_id}-{content.split()[1]}")
                except ToolError as exc:
                    ring.errors[exc.code] += 1

        await asyncio.sleep(max(0.0, t_start - time.monotonic()))
        await asyncio.gather(*(seed(s) for s in self.sdk))
        steady = await self._steady_rate(ring.seen_times, t_start, max_warm)
        self.conn.send({"steady": steady, "warm": time.monotonic() - t_start})
        window_msg = await loop.run_in_executor(None, self.conn.recv)
        w0, w1 = window_msg["w0"], window_msg["w1"]
        await asyncio.sleep(max(0.0, w1 - time.monotonic()))
        ring.sending = False
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline and len(ring.seen) < len(ring.sent) - sum(ring.errors.values()):
            if any(t.done() for t in self.sdk_tasks):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        delivered = [ring.seen[c] - t for c, t in ring.sent.items() if c in ring.seen]
        return {
            "steady": steady,
            "seen_in_window": sum(1 for t in ring.seen_times if w0 <= t <= w1),
            "sent": len(ring.sent),
            "missing": len(ring.sent) - len(delivered) - sum(ring.errors.values()),
            "errors": dict(ring.errors),
            "delivered": delivered,
        }

    async def _steady_rate(self, times: list[float], t_start: float, max_warm: float) -> bool:
        """Wait (at least 2 s, at most max_warm) until, twice in a row, the events of the last second
        differ by at most 10 % from those of the second before."""
        deadline = t_start + max_warm
        await asyncio.sleep(max(0.0, t_start + 2.0 - time.monotonic()))
        good = 0
        while time.monotonic() < deadline:
            now = time.monotonic()
            last = sum(1 for t in times[-50_000:] if now - 1.0 <= t <= now)
            before = sum(1 for t in times[-50_000:] if now - 2.0 <= t < now - 1.0)
            good = good + 1 if last and abs(last - before) <= 0.1 * max(last, before) + 2 else 0
            if good >= 2:
                return True
            await asyncio.sleep(0.25)
        return False

    async def op_sdk_close(self) -> dict:
        for session in getattr(self, "sdk", []):
            await session.stop()
        results = await asyncio.gather(*getattr(self, "sdk_tasks", []), return_exceptions=True)
        exceptions = [repr(r) for r in results if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
        reconnects = sum(max(0, s.stats["connects"] - 1) for s in getattr(self, "sdk", []))
        self.sdk, self.sdk_tasks = [], []
        return {"reconnects": reconnects, "exceptions": exceptions[:3], "model_errors": dict(self.ring.model_errors)}


class Ring:
    """What one worker's SDK sessions measure: when each ring message was asked for (the model's
    reply, or a seed) and when its target's model first saw it (its user_message entry is in the
    conversation: the session reported it; its ack comes before the model's send leaves the session)."""

    def __init__(self, index: int):
        self.index = index
        self.sent: dict[str, float] = {}  # content -> monotonic time the send was asked for
        self.seen: dict[str, float] = {}  # content -> monotonic time the target's model saw it
        self.seen_times: list[float] = []
        self.sending = True
        self.errors: Counter = Counter()  # send_message refusals, by code
        self.model_errors: Counter = Counter()
        self.counter = itertools.count()

    def content(self) -> str:
        return f"ring {self.index}-{next(self.counter)} ".ljust(CONTENT_PAD, "x")


class RingModel:
    """A model (steerboard_agents.model.Model) that answers each team message it is given with one
    send_message of a new message to its successor. It reads only the entries of its current and
    previous step (walking back from the end of the conversation), so a step costs the same
    however long the history grows."""

    def __init__(self, successor: str, ring: Ring):
        self.successor = successor
        self.ring = ring

    async def step(self, context):
        from steerboard_agents.model import ModelReply, ToolCall

        ring = self.ring
        now = time.monotonic()
        fresh = 0
        for entry in reversed(context.entries):
            if entry.get("turn_id") != context.turn_id or int(entry.get("step") or 0) < context.step - 1:
                break
            kind = entry.get("kind")
            if kind == "user_message" and entry.get("step") == context.step:
                text = entry.get("text") or ""
                if text not in ring.seen:
                    ring.seen[text] = now
                    ring.seen_times.append(now)
                fresh += 1
            elif kind == "tool_result" and entry.get("step") == context.step - 1 and "error" in entry:
                ring.errors[(entry["error"] or {}).get("code", "?")] += 1
        calls = []
        if ring.sending:
            for _ in range(fresh):
                content = ring.content()
                ring.sent[content] = now
                calls.append(ToolCall("send_message", {"target": self.successor, "message": content}))
        return ModelReply(tool_calls=calls)


def _worker_main(conn, index: int) -> None:
    asyncio.run(Worker(conn, index).serve())


class Pool:
    """N worker processes (spawned: no state inherited from the parent), one pipe each."""

    def __init__(self, n: int):
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for i in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(child, i), daemon=True, name=f"engine-worker-{i}")
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def send(self, index: int, op: str, **args) -> None:
        self.conns[index].send({"op": op, "args": args})

    def recv(self, index: int, timeout: float = 600):
        conn = self.conns[index]
        if not conn.poll(timeout):
            raise RuntimeError(f"worker {index} did not answer in {timeout}s")
        answer = conn.recv()
        if answer.get("unsupported"):
            raise Unsupported(answer["unsupported"])
        if not answer["ok"]:
            raise RuntimeError(f"worker {index} failed:\n{answer['error']}")
        return answer["result"]

    def progress(self, index: int, timeout: float = 600) -> dict:
        """A message a worker sends in the middle of an operation (op_closed's "steady")."""
        conn = self.conns[index]
        if not conn.poll(timeout):
            raise RuntimeError(f"worker {index} did not report in {timeout}s")
        message = conn.recv()
        if message.get("ok") is False:
            raise RuntimeError(f"worker {index} failed:\n{message.get('error') or message.get('unsupported')}")
        return message

    def tell(self, index: int, message: dict) -> None:
        self.conns[index].send(message)

    def call(self, index: int, op: str, timeout: float = 600, **args):
        self.send(index, op, **args)
        return self.recv(index, timeout)

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(Exception):
                conn.send({"op": "stop"})
        deadline = time.monotonic() + 10
        for p in self.procs:
            p.join(max(0.1, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(3)
            if p.is_alive():
                p.kill()
                p.join(3)
        for conn in self.conns:
            conn.close()
