"""The shell examples in docs/ run as written, against a real daphne process.

Each example a newcomer copies is a ```sh block followed by the note that this
test runs it; the only change made here is the port (the docs say 8000, each
test's server has its own). The blocks run with bash's -e and pipefail, in the
repository's directory, with the test environment's database, so the
manage.py lines and the server see the same teams.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from steerboard_protocol.tools import TEAM_TOOLS

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUN_BY_THIS_TEST = "(`tests/e2e/test_docs_examples.py` runs this block"
_BLOCK = re.compile(r"```sh\n(.*?)```\n\n" + re.escape(RUN_BY_THIS_TEST), re.S)


def examples(doc: str) -> list[str]:
    return _BLOCK.findall((ROOT / "docs" / doc).read_text())


def run(block: str, live_env, server) -> list:
    """Run the block; every JSON value it prints, in order (curl's and manage.py's answers)."""
    script = block.replace("localhost:8000", server.url.removeprefix("http://"))
    env = {**live_env.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{live_env.env.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return _json_values(done.stdout)


_JSON_START = re.compile(r"[{\[]")


def _json_values(out: str) -> list:
    """Every JSON object or array printed, in order (curl prints no newline after a body)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while start := _JSON_START.search(out, at):
        value, at = decoder.raw_decode(out, start.start())
        values.append(value)
    return values


def test_every_marked_example_is_found():
    assert [len(examples(doc)) for doc in ("api.md", "mcp.md", "protocol.md")] == [1, 1, 1]


def test_the_rest_example_of_docs_api_md(live_env, daphne_server):
    (block,) = examples("api.md")
    tools, spawned, sent = run(block, live_env, daphne_server)
    assert [tool["name"] for tool in tools] == list(TEAM_TOOLS)
    assert spawned["member"]["name"] == "implementer"
    assert sent["status"] == "queued" and sent["message_id"].startswith("team-message-")


def test_the_token_example_of_docs_mcp_md(live_env, daphne_server):
    (block,) = examples("mcp.md")
    spawned, token = run(block, live_env, daphne_server)
    assert spawned["member"]["name"] == "implementer"
    assert token["token"].startswith("sbm_")


@pytest.mark.slow
def test_the_team_and_tokens_example_of_docs_protocol_md(live_env, daphne_server):
    (block,) = examples("protocol.md")
    team, token, operator = run(block, live_env, daphne_server)
    assert team["team"] == "alpha" and team["lead"]["token"].startswith("sbm_") and team["host_token"].startswith("sbh_")
    assert token["token"].startswith("sbm_")
    assert operator["username"] == "ops" and operator["token"].startswith("sbo_")
