"""Running the keyless team against real daphne processes: the host and the Lead's
session as real ``python -m steerboard_agents`` processes, read back over the wire."""
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from tests.support.live import ROOT

SNAPSHOTS = Path(__file__).parent / "snapshots"


class AgentProcess:
    """``python -m steerboard_agents host|run`` as a child process with its own log file."""

    def __init__(self, environment, command: str, server_url: str, token: str, model: str = "keyless", name: str = "",
                 extra: tuple[str, ...] = (), env: dict[str, str] | None = None):
        self.environment = environment
        self.extra_env = env or {}
        self.args = [sys.executable, "-m", "steerboard_agents", command, "--server", server_url, "--token", token,
                     "--model", model, "--max-backoff", "0.5", "-v", *extra]
        self.log_path = environment.tmp_path / f"agents-{name or command}-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "AgentProcess":
        self._log = open(self.log_path, "ab")
        env = {k: v for k, v in self.environment.env.items() if k != "DJANGO_SETTINGS_MODULE"} | self.extra_env
        self.proc = subprocess.Popen(self.args, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class HostThread:
    """``python -m steerboard_agents host --model MODEL``'s host in a thread of this process, on an
    event loop of its own: the same ``Host``, its models chosen as ``--model`` chooses them. For
    tests whose subject is not the host's process (no kill, no restart): the test's event loop and
    the served application's may block on their own work meanwhile."""

    def __init__(self, server_url: str, token: str, model: str = "keyless", name: str = "host"):
        from steerboard_agents import Host
        from steerboard_agents.registry import models_choose

        self.host = Host(server_url, token, models_choose([model]), max_backoff=0.5)
        self.log_path = Path(f"{name}-in-process")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> "HostThread":
        ready = threading.Event()

        async def main():
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
            ready.set()
            await self.host.run()

        def run():
            with contextlib.suppress(asyncio.CancelledError):
                asyncio.run(main())

        self._thread = threading.Thread(target=run, name=str(self.log_path), daemon=True)
        self._thread.start()
        assert ready.wait(30), "the host's thread did not start"
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._task.cancel)
            self._thread.join(30)

    def log(self) -> str:
        return ""  # its log lines go to the test's own log capture


@asynccontextmanager
async def vendor_host(team: "Team", fake, lead_model: str, others_model: str):
    """The team's host in this process on a fake vendor (tests/support/fake_models.py), its models
    chosen as ``python -m steerboard_agents host --model lead=VENDOR:LEAD --model '*=VENDOR:OTHERS'
    --model-retries 1`` chooses them. Yields the host's task; cancels it after."""
    from steerboard_agents import Host
    from steerboard_agents.registry import VendorOptions, models_choose

    vendor = fake.vendor
    options = (VendorOptions(openai_base_url=fake.base_url, openai_api_key="sk-fake", max_retries=1) if vendor == "openai"
               else VendorOptions(anthropic_base_url=fake.base_url, anthropic_api_key="sk-ant-fake", max_retries=1))
    models = models_choose([f"lead={vendor}:{lead_model}", f"*={vendor}:{others_model}"], options)
    host = Host(team.server.url, team.host_token, models, max_backoff=0.5)
    running = asyncio.create_task(host.run())
    try:
        await asyncio.wait_for(host.connected.wait(), 30)
        yield running
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


@asynccontextmanager
async def worker_session(team: "Team", model, member: str = "worker"):
    """``member`` spawned by the lead (no first prompt) and an SDK session of it on ``model``
    against the team's server, running and connected: yields the session; stops it after."""
    from steerboard_agents import AgentSession

    spawned = await asyncio.to_thread(team.tool, "lead", "spawn_teammate", name=member, description="d", prompt="")
    assert spawned.status_code == 200, spawned.text
    session = AgentSession(team.server.url, await asyncio.to_thread(team.token, member), model, max_backoff=0.3)
    running = asyncio.create_task(session.run())
    try:
        await asyncio.wait_for(session.connected.wait(), 30)
        yield session
    finally:
        await session.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


class Team:
    """A team on a live environment, read back through the REST API."""

    def __init__(self, environment, server, name: str):
        self.environment = environment
        self.server = server
        self.name = name
        created = environment.team_create(name)
        self.lead_token = created["lead"]["token"]
        self.host_token = created["host_token"]
        self.operator = environment.operator_create(f"op-{name}")
        self.tokens = {"lead": self.lead_token}
        self.processes: list[AgentProcess] = []

    # --- processes ------------------------------------------------------------------
    def start_host(self, model: str = "keyless", state=None, env: dict[str, str] | None = None) -> AgentProcess:
        extra = ("--state", str(state)) if state else ()
        proc = AgentProcess(self.environment, "host", self.server.url, self.host_token, model, name=f"host-{self.name}",
                            extra=extra, env=env).start()
        self.processes.append(proc)
        return proc

    def run_host(self, model: str = "keyless") -> HostThread:
        """The team's host in a thread of this process (``HostThread``), not a process."""
        host = HostThread(self.server.url, self.host_token, model, name=f"host-{self.name}").start()
        self.processes.append(host)
        return host

    def start_session(self, member: str = "lead", model: str = "keyless") -> AgentProcess:
        proc = AgentProcess(self.environment, "run", self.server.url, self.token(member), model, name=member).start()
        self.processes.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.processes:
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n{p.log()[-4000:]}" for p in self.processes)

    # --- reading ---------------------------------------------------------------------
    def token(self, member: str) -> str:
        if member not in self.tokens:
            self.tokens[member] = self.environment.manage_json("member_token", self.name, member)["token"]
        return self.tokens[member]

    def op(self, method: str, path: str, **kwargs) -> httpx.Response:
        return httpx.request(method, f"{self.server.url}/api/v1{path}", timeout=30,
                             headers={"Authorization": f"Token {self.operator['token']}"}, **kwargs)

    def prompt(self, target: str, content: str) -> dict:
        response = self.op("POST", f"/teams/{self.name}/prompts", json={"target": target, "content": content})
        assert response.status_code == 201, response.text
        return response.json()["prompt"]

    def tool(self, member: str, tool_name: str, **arguments) -> httpx.Response:
        return httpx.post(f"{self.server.url}/api/v1/tools/{tool_name}", json=arguments, timeout=90,
                          headers={"Authorization": f"Bearer {self.token(member)}"})

    def summary(self) -> dict:
        return self.op("GET", f"/teams/{self.name}").json()

    def messages(self) -> list[dict]:
        out, cursor = [], ""
        while True:
            page = self.op("GET", f"/teams/{self.name}/messages", params={"cursor": cursor} if cursor else {}).json()
            out.extend(page["messages"])
            if not page.get("next_cursor"):
                return out
            cursor = page["next_cursor"]

    def history(self, member: str) -> list[dict]:
        entries, after = [], 0
        while True:
            response = httpx.get(f"{self.server.url}/api/v1/session/history", params={"after": after, "limit": 1000},
                                 headers={"Authorization": f"Bearer {self.token(member)}"}, timeout=30)
            assert response.status_code == 200, response.text
            page = response.json()
            entries.extend(page["entries"])
            if page["next_after"] is None:
                return entries
            after = page["next_after"]

    # --- waiting ---------------------------------------------------------------------
    def wait_for(self, predicate, what: str, timeout: float = 90):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
            except httpx.HTTPError:
                last = None
            if last:
                return last
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def workflow_ok(self) -> bool:
        return any(e["kind"] == "assistant_text" and "TEAM_WORKFLOW_OK" in e.get("text", "") for e in self.history("lead"))

    def settled(self) -> bool:
        """Every member idle, every message delivered, every turn ended."""
        summary = self.summary()
        if any(m["status"] != "idle" or m["queued"] or m["accepted"] for m in summary["members"]):
            return False
        for member in summary["members"]:
            entries = self.history(member["name"])
            starts = sum(e["kind"] == "turn_start" for e in entries)
            ends = sum(e["kind"] == "turn_end" for e in entries)
            if starts != ends:
                return False
        return True


# --- normalising histories for the snapshot ------------------------------------------------
VOLATILE = "<timing>"


def normalise(histories: dict[str, list[dict]], team: str) -> dict[str, list[dict]]:
    """Replace ids, times and the team name; keep everything the script decides.

    Three observations depend on timing, not on the script, and are replaced by
    "<timing>": a send_message result's ``delivery`` (the target's status when
    admission looked), wait_agent's result (whether a teammate was still ending
    its turn) and the member statuses and activities in list_agents results.
    """
    names: dict[str, dict[str, str]] = {}

    def label(kind: str, value):
        table = names.setdefault(kind, {})
        if value not in table:
            table[value] = f"{kind}-{len(table) + 1}"
        return table[value]

    def walk(value, key=None):
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            if key in ("message_id", "thread_id") or value.startswith("team-message-"):
                return label("message", value)
            if key in ("created_at", "observed_at", "queued_at", "accepted_at", "delivered_at", "since"):
                return "<time>"
            if value == team:
                return "<team>"
        return value

    out: dict[str, list[dict]] = {}
    for member in sorted(histories):
        entries = []
        calls: dict[str, str] = {}
        for entry in histories[member]:
            entry = dict(entry)
            entry.pop("position", None)
            entry.pop("id", None)
            entry["turn_id"] = label(f"{member}-turn", entry.get("turn_id"))
            if "call_id" in entry:
                calls.setdefault(entry["call_id"], entry.get("tool", ""))
                entry["call_id"] = label(f"{member}-call", entry["call_id"])
            if "prompt_id" in entry:
                entry["prompt_id"] = label("prompt", entry["prompt_id"])
            if entry["kind"] == "tool_result" and "result" in entry:
                result = dict(entry["result"])
                if entry.get("tool") == "send_message":
                    result["delivery"] = VOLATILE
                elif entry.get("tool") == "wait_agent":
                    result = VOLATILE
                elif entry.get("tool") == "list_agents":
                    result["agents"] = [{**a, "status": VOLATILE, "activity": VOLATILE} for a in result["agents"]]
                entry["result"] = result
            entries.append(walk(entry))
        out[member] = entries
    return out


def snapshot_compare(name: str, actual) -> None:
    path = SNAPSHOTS / name
    text = json.dumps(actual, indent=1, sort_keys=True) + "\n"
    if os.environ.get("STEERBOARD_UPDATE_SNAPSHOTS") == "1" or not path.exists():
        if os.environ.get("STEERBOARD_UPDATE_SNAPSHOTS") != "1":
            raise AssertionError(f"no snapshot {path}; run with STEERBOARD_UPDATE_SNAPSHOTS=1 to write it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    expected = json.loads(path.read_text())
    assert actual == expected, f"the histories differ from {path}:\n{text}"
