"""The shell examples in docs/ run as written (bash, curl and manage.py processes), against the
application served in-process on a thread of its own (tests/support/inproc.py).

Each example a newcomer copies is a ```sh block followed by the note that this
test runs it; the only change made here is the port (the docs say 8000, each
test's server has its own). The blocks run with bash's -e and pipefail, in the
repository's directory, with the test's database (``InProcessEnvironment.database_url``),
so the manage.py lines and the server see the same teams.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from steerboard_protocol.tools import TEAM_TOOLS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
RUN_BY_THIS_TEST = "(`tests/e2e/test_docs_examples.py` runs this block"
_BLOCK = re.compile(r"```sh\n(.*?)```\n\n" + re.escape(RUN_BY_THIS_TEST), re.S)


def examples(doc: str) -> list[str]:
    return _BLOCK.findall((ROOT / "docs" / doc).read_text())


def run(block: str, inproc_env, server) -> list:
    """Run the block; every JSON value it prints, in order (curl's and manage.py's answers)."""
    script = block.replace("localhost:8000", server.url.removeprefix("http://"))
    env = {**os.environ, "DATABASE_URL": inproc_env.database_url(),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
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


def test_the_rest_example_of_docs_api_md(inproc_env, served_thread):
    (block,) = examples("api.md")
    tools, spawned, sent = run(block, inproc_env, served_thread)
    assert [tool["name"] for tool in tools] == list(TEAM_TOOLS)
    assert spawned["member"]["name"] == "implementer"
    assert sent["status"] == "queued" and sent["message_id"].startswith("team-message-")


def test_the_token_example_of_docs_mcp_md(inproc_env, served_thread):
    (block,) = examples("mcp.md")
    spawned, token = run(block, inproc_env, served_thread)
    assert spawned["member"]["name"] == "implementer"
    assert token["token"].startswith("sbm_")


@pytest.mark.slow
def test_the_team_and_tokens_example_of_docs_protocol_md(inproc_env, served_thread):
    (block,) = examples("protocol.md")
    team, token, operator = run(block, inproc_env, served_thread)
    assert team["team"] == "alpha" and team["lead"]["token"].startswith("sbm_") and team["host_token"].startswith("sbh_")
    assert token["token"].startswith("sbm_")
    assert operator["username"] == "ops" and operator["token"].startswith("sbo_")
