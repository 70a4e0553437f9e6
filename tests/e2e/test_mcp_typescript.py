"""/mcp with the real TypeScript MCP clients from npm, as processes: the SDK
(@modelcontextprotocol/sdk, tests/mcp_ts/drive.mjs) and the MCP Inspector's CLI, on Node 22,
against the application served in-process on a thread of its own (tests/support/inproc.py).

scripts/test.sh installs Node 22 and both packages into tests/mcp_ts/node_modules from the
committed package-lock.json (`npm ci`); without them these tests fail and say so."""
import asyncio
import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
import websockets

from steerboard_protocol.tools import TEAM_TOOLS

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TS_DIR = Path(__file__).resolve().parents[1] / "mcp_ts"
NODE_BIN = TS_DIR / "node_modules" / ".bin"
TEN = list(TEAM_TOOLS)  # the wire contract's tools (pinned by tests/mailbox/test_tools_schema.py)
# Every code a tool call can refuse with over /mcp. The others are answered before a tool runs
# (UNAUTHENTICATED, RATE_LIMITED: HTTP 401/429), or by the history endpoints, not by a tool.
TOOL_CODES = {
    "VALIDATION_ERROR", "NOT_FOUND", "LEAD_ONLY",
    "TEAM_UNKNOWN_TARGET", "TEAM_SELF_MESSAGE", "TEAM_TARGET_RETIRED", "TEAM_TARGET_FAILED",
    "TEAM_MESSAGE_TOO_LARGE", "TEAM_MAILBOX_FULL", "IDEMPOTENCY_KEY_CONFLICT",
    "TEAM_NAME_TAKEN", "TEAM_ROSTER_FULL", "TEAM_TASK_BOARD_FULL",
    "TASK_NOT_FOUND", "TASK_REVISION_CONFLICT", "TASK_INVALID_ACTION", "TASK_DEPENDENCY_CYCLE",
    "TASK_HAS_DEPENDANTS", "TOO_MANY_WAITS",
}
# Small limits, so each full-up refusal is a few calls away.
LIMITS = {
    "MAX_MESSAGE_BYTES": 2048,
    "MAX_PENDING_PER_TARGET": 3,
    "MAX_MEMBERS_PER_TEAM": 4,  # teammates: implementer, gone, broken, reviewer
    "MAX_TASKS_PER_TEAM": 3,
    "MAX_WAITS_PER_MEMBER": 1,
}


def node_env(tmp_path: Path) -> dict:
    """Node 22 from tests/mcp_ts first on PATH (the Inspector's `#!/usr/bin/env node` finds it)."""
    node = NODE_BIN / "node"
    if not node.exists() or not (NODE_BIN / "mcp-inspector").exists():
        pytest.fail(f"Node 22 and the MCP SDK are not installed in {TS_DIR}/node_modules: run `bash scripts/test.sh`.")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 22:
        pytest.fail(f"{node} is {version}, not Node 22+: run `bash scripts/test.sh`.")
    home = tmp_path / "home"  # the Inspector keeps its catalog under $HOME
    home.mkdir(exist_ok=True)
    return {
        **os.environ,
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "MCP_INSPECTOR_SECRET_STORE": "memory",  # no OS keychain on a CI machine
    }


async def run(env: dict, *args: str, timeout: float = 180) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=TS_DIR, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode, out.decode(), err.decode()


def rest(server, token, tool_name, **arguments) -> dict:
    response = httpx.post(
        f"{server.url}/api/v1/tools/{tool_name}", json=arguments, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()


async def recv_type(ws, wanted, timeout=10):
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame["type"] == wanted:
            return frame


async def drain(ws):
    try:
        async for _ in ws:
            pass
    except websockets.ConnectionClosed:
        pass


@pytest.fixture
def limited_server(settings, served_thread):
    settings.STEERBOARD = {**settings.STEERBOARD, **LIMITS}
    return served_thread


async def test_the_typescript_sdk_calls_the_ten_tools_and_reads_every_refusal(inproc_env, limited_server, tmp_path):
    env = node_env(tmp_path)
    server = limited_server
    team = inproc_env.team_create("ts")
    lead = team["lead"]["token"]
    for name in ["implementer", "gone"]:
        await asyncio.to_thread(rest, server, lead, "spawn_teammate", name=name, description="d", prompt="")
    impl = inproc_env.manage_json("member_token", "ts", "implementer")["token"]
    inproc_env.manage("member_retire", "ts", "gone")
    # A teammate whose host could not start it is failed.
    async with websockets.connect(
        server.ws_url + "/ws/host/", additional_headers={"Authorization": f"Bearer {team['host_token']}"}
    ) as host:
        await asyncio.to_thread(rest, server, lead, "spawn_teammate", name="broken", description="d", prompt="")
        while (await recv_type(host, "start"))["member"] != "broken":  # the implementer's start comes first
            pass
        await host.send(json.dumps({"type": "start_failed", "member": "broken", "error": "no such image"}))
        for _ in range(100):
            agents = (await asyncio.to_thread(rest, server, lead, "list_agents"))["agents"]
            if {a["name"]: a["status"] for a in agents}["broken"] == "failed":
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"broken never failed: {agents}")

    # The implementer's session is connected throughout, so the Lead's wait_agent has a peer to wait on.
    async with websockets.connect(
        server.ws_url + "/ws/agent/", additional_headers={"Authorization": f"Bearer {impl}"}
    ) as ws:
        await ws.send(json.dumps({"type": "hello", "status": "idle"}))
        await recv_type(ws, "welcome")
        draining = asyncio.create_task(drain(ws))
        config = {"url": server.url + "/mcp", "lead": lead, "implementer": impl, "retired": "gone", "failed": "broken"}
        code, out, err = await run(env, str(NODE_BIN / "node"), "drive.mjs", json.dumps(config))
        draining.cancel()
    assert code == 0, f"drive.mjs failed:\n{err}\n{out}"
    summary = json.loads(out.strip().splitlines()[-1])

    assert summary["tools"] == TEN
    assert sorted(set(summary["succeeded"])) == sorted(TEN)
    assert {r["code"] for r in summary["refused"]} == TOOL_CODES
    for refusal in summary["refused"]:
        assert refusal["text"].startswith(refusal["code"] + ": "), refusal
    assert summary["resources"] == ["steerboard://inbox", "steerboard://policy"]
    assert "UNAUTHENTICATED" in summary["unauthorized"]
    assert server.server_errors() == []


async def test_the_mcp_inspector_cli_lists_calls_reads_and_reports_a_bad_token_as_unauthorized(
    inproc_env, served_thread, tmp_path
):
    """The commands of docs/mcp.md, as written there (with this server's URL and token)."""
    env = node_env(tmp_path)
    team = inproc_env.team_create("ts")
    lead = team["lead"]["token"]
    await asyncio.to_thread(rest, served_thread, lead, "spawn_teammate", name="implementer", description="d", prompt="Go.")
    impl = inproc_env.manage_json("member_token", "ts", "implementer")["token"]
    url = served_thread.url + "/mcp"
    bearer = f"Authorization: Bearer {impl}"
    inspector = [
        str(NODE_BIN / "mcp-inspector"), "--cli", url, "--transport", "http", "--header", bearer, "--stored-auth-only"
    ]

    code, out, err = await run(env, *inspector, "--method", "tools/list")
    assert code == 0, err
    assert [t["name"] for t in json.loads(out)["tools"]] == TEN

    sent = ["--tool-name", "send_message", "--tool-arg", "target=lead", "message=task-3 done"]
    code, out, err = await run(env, *inspector, "--method", "tools/call", *sent)
    assert code == 0, err
    assert json.loads(out)["structuredContent"]["status"] == "queued"

    inbox = "steerboard://inbox?after_seq=0&limit=10"
    code, out, err = await run(env, *inspector, "--method", "resources/read", "--uri", inbox)
    assert code == 0, err
    page = json.loads(json.loads(out)["contents"][0]["text"])
    assert [m["content"] for m in page["messages"]] == ["Go."]

    tool_arg = ["--tool-arg", "target=nobody", "message=hi"]
    code, out, err = await run(env, *inspector, "--method", "tools/call", "--tool-name", "send_message", *tool_arg)
    assert code == 5, (out, err)  # the Inspector's exit code for a tool error
    result = json.loads(out)
    assert result["isError"] is True
    assert "structuredContent" not in result
    assert result["content"][0]["text"].startswith("TEAM_UNKNOWN_TARGET: No member named 'nobody'")
    assert json.loads(result["content"][1]["text"])["persisted"] is False

    # A bad token: with --stored-auth-only (the Inspector's flag for scripts and CI) the 401 is
    # reported with the server's answer, and no OAuth metadata is looked for (there is none).
    bad = [a if a != bearer else "Authorization: Bearer sbm_not-a-token" for a in inspector]
    code, out, err = await run(env, *bad, "--method", "tools/list")
    assert code == 3, (out, err)  # auth_required
    error = json.loads(err.strip().splitlines()[-1])["error"]
    assert error["code"] == "auth_required"
    assert "UNAUTHENTICATED" in error["message"]
    paths = [path for _, path, _ in served_thread.requests]
    assert not any("/.well-known/" in p or "/register" in p for p in paths), paths
    assert served_thread.server_errors() == []
