"""Crash windows: a hard kill (os._exit, mailbox/plumbing/faults.py) at each point of the
delivery path, a restart, and then every promise checked over the database:
every stored message exactly once in its target's history, exactly one
delivered record, per-target order kept.

Each point runs a bounded loop of runs (STEERBOARD_CRASH_RUNS, default 3),
the crash landing on a different occurrence of the point each time. The runs
follow the test run's backend: SQLite + in-memory, or PostgreSQL + Redis.
"""
import asyncio
import os

import httpx
import pytest

from tests.support.audit import delivery_audit
from tests.support.live import DaphneProcess
from tests.support.wire_agent import WireAgent, send_message, spawn, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

RUNS = int(os.environ.get("STEERBOARD_CRASH_RUNS", "3"))
MESSAGES_PER_TARGET = 8
CRASH_EXIT = 137


class CrashingServer:
    """One daphne that crashes at the armed point; a watcher restarts it (unarmed) on the same port."""

    def __init__(self, environment, point: str, nth: int):
        self.environment = environment
        self.current = DaphneProcess(environment, STEERBOARD_CRASH_AT=f"{point}:{nth}").start()
        self.port = self.current.port
        self.crashes: list[int] = []
        self.up = asyncio.Event()
        self.up.set()
        self._watch = asyncio.create_task(self._watcher())

    @property
    def url(self) -> str:
        return self.current.url

    @property
    def ws_url(self) -> str:
        return self.current.ws_url

    async def _watcher(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            code = self.current.proc.poll()
            if code is None:
                continue
            self.up.clear()
            self.crashes.append(code)
            self.current = await asyncio.to_thread(DaphneProcess(self.environment, port=self.port).start)
            self.up.set()

    async def close(self) -> None:
        self._watch.cancel()
        try:
            await self._watch
        except asyncio.CancelledError:
            pass
        self.current.stop()


async def one_run(environment, point: str, nth: int, run: int) -> tuple[list[int], dict[str, list[str]]]:
    team_name = f"crash-{point.replace('_', '-')}-{run}"
    team = environment.team_create(team_name)
    lead = team["lead"]["token"]
    server = CrashingServer(environment, point, nth)
    names = ["left", "right"]
    # Provisioned by hand (no host): the sessions below say hello themselves.
    await asyncio.to_thread(spawn, server.current, lead, names)
    tokens = {n: environment.manage_json("member_token", team_name, n)["token"] for n in names}
    # mid_recovery needs work for the sweeper: "right" connects only after the first sends,
    # so its messages wait queued (no host) and every sweep pass walks them.
    late = point == "mid_recovery"
    agents = {n: WireAgent(n, tokens[n], [server.ws_url]) for n in names}
    agents["left"].start()
    if not late:
        agents["right"].start()
    accepted: dict[str, list[str]] = {n: [] for n in names}
    unknown = 0
    try:
        async with httpx.AsyncClient(timeout=15) as client:

            async def sender(target: str) -> None:
                nonlocal unknown
                for i in range(MESSAGES_PER_TARGET):
                    await asyncio.wait_for(server.up.wait(), 60)
                    try:
                        result = await send_message(client, server.url, lead, target, f"{target} {i}")
                        accepted[target].append(result["message_id"])
                    except httpx.TransportError:
                        unknown += 1  # the server died under this request: stored or not, the audit decides
                        await asyncio.sleep(0.2)

            await asyncio.gather(*(sender(n) for n in names))
            if late:
                # The sends can be over before the first sweep: keep "right" away until a
                # sweep has walked its queued messages (and the crash point ended the process).
                await wait_until(lambda: server.crashes, timeout=60, interval=0.1,
                                 what=f"a sweep to reach {point}:{nth} (run {run})")
                agents["right"].start()
            # Nothing more is sent; recovery and the sessions finish the job.
            await wait_until(lambda: delivery_audit(environment).ok, timeout=90, interval=0.5,
                             what=f"every message delivered once ({point}:{nth}, run {run})")
    finally:
        for agent in agents.values():
            await agent.stop()
        await server.close()
    stored = {
        row[0]
        for row in environment.query(
            "SELECT m.id FROM mailbox_teammessage m JOIN teams_team t ON t.id = m.team_id "
            f"WHERE t.name = '{team_name}'"
        )
    }
    for target in names:
        assert set(accepted[target]) <= stored, "a message the server accepted is not stored"
        # Per target, what the session integrated is what was sent, in send order.
        sent_and_stored = [m for m in agents[target].integrated if m in set(accepted[target])]
        assert sent_and_stored == accepted[target]
    return server.crashes, accepted


@pytest.mark.parametrize("point", ["after_queued_commit", "after_admission", "after_entry", "mid_recovery"])
async def test_a_hard_kill_at_each_point_loses_and_duplicates_nothing(live_env, point):
    crashes = []
    for run in range(RUNS):
        # The crash lands on a different occurrence of the point in each run.
        nth = 1 + (run * 3) % (MESSAGES_PER_TARGET if point != "mid_recovery" else 3)
        run_crashes, _ = await one_run(live_env, point, nth, run)
        crashes.extend(run_crashes)
        audit = delivery_audit(live_env)
        assert audit.ok, audit.details()
    # The point was really reached, and it really killed the process.
    assert crashes and all(code == CRASH_EXIT for code in crashes), crashes
    assert len(crashes) >= RUNS - 1, f"only {len(crashes)} crashes in {RUNS} runs"
