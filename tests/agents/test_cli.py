"""``python -m steerboard_agents``: the token, the model and the -v output.

The usage errors, --help and a refused token are the command's ``main()`` in this process
(what ``python -m`` runs; the server served in-process): they start no process. A session
run as the real command is a process: the token kept out of its command line, -v's lines."""
import subprocess
import sys
import time
from pathlib import Path

import pytest
from steerboard_agents.__main__ import main

from tests.agents.support import Team
from tests.support.live import ROOT


@pytest.fixture
def agents(capsys, monkeypatch):
    """``python -m steerboard_agents ARGS`` as its ``main()``: (exit code, stdout, stderr)."""

    def run(*args: str, env: dict | None = None) -> tuple[int, str, str]:
        monkeypatch.delenv("STEERBOARD_TOKEN", raising=False)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors and --help
            code = exc.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.mark.parametrize("command, says", [("run", "session's token"), ("host", "host token")])
def test_a_refused_token_exits_2_with_the_reason(agents, served_thread, command, says):
    code, _, err = agents(command, "--server", served_thread.url, "--token", "not-a-token")
    assert code == 2
    assert says in err


@pytest.mark.parametrize("command, says", [("run", "session's token"), ("host", "host token")])
def test_the_token_comes_from_steerboard_token(agents, served_thread, command, says):
    code, _, err = agents(command, "--server", served_thread.url, env={"STEERBOARD_TOKEN": "not-a-token"})
    assert code == 2
    assert says in err, "the variable's token was sent (and refused)"


def test_no_token_at_all_is_a_usage_error_naming_the_variable(agents):
    code, _, err = agents("run", "--server", "http://127.0.0.1:9")
    assert code == 2
    assert "no token: set STEERBOARD_TOKEN" in err


@pytest.mark.parametrize(
    "spec, says",
    [
        ("gpt", "unknown model 'gpt'; choose keyless, echo, openai:MODEL, anthropic:MODEL or package.module:Class"),
        ("no_such_package.models:Model", "cannot import 'no_such_package.models'"),
        ("tests.agents.cli_model:Missing", "'tests.agents.cli_model' has no 'Missing'"),
        ("tests.agents.cli_model:NoStep", "is not a model class: it needs an async step(context) method"),
        ("tests.agents.cli_model:", "is not package.module:Class"),
    ],
)
def test_a_bad_model_is_a_clear_usage_error(agents, spec, says):
    code, _, err = agents("run", "--server", "http://127.0.0.1:9", "--model", spec, env={"STEERBOARD_TOKEN": "x"})
    assert code == 2
    assert "argument --model" in err and says in err, err


def test_help_says_where_the_token_comes_from_without_stray_markup(agents):
    for args in ((), ("run",), ("host",)):
        code, out, _ = agents(*args, "--help")
        assert code == 0
        assert "`" not in out
        text = " ".join(out.split())  # argparse wraps lines at the terminal's width
        assert "STEERBOARD_TOKEN" in text
        if args:
            assert "package.module:Class" in text and "a token here is visible in ps" in text


@pytest.mark.e2e
def test_run_takes_any_model_class_and_v_shows_the_sessions_events(live_env, daphne_server):
    team = Team(live_env, daphne_server, "cli")
    log = Path(live_env.tmp_path) / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "steerboard_agents", "run", "--server", daphne_server.url, "--model", "tests.agents.cli_model:Shout",
             "--max-backoff", "0.5", "-v"],
            cwd=ROOT, env={**live_env.env, "STEERBOARD_TOKEN": team.lead_token}, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        # The token is not in the command line anyone can read.
        assert team.lead_token not in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        team.prompt("lead", "hello there")
        team.wait_for(lambda: any(e["kind"] == "assistant_text" and e["text"] == "lead heard: HELLO THERE"
                                  for e in team.history("lead")), "the Shout model's answer", timeout=60)
        spawned = team.tool("lead", "spawn_teammate", name="helper", description="helps", prompt="help")
        assert spawned.status_code == 200, spawned.text
        sent = team.tool("helper", "send_message", target="lead", message="ping")
        assert sent.status_code == 200, sent.text
        message_id = sent.json()["message_id"]
        team.wait_for(lambda: any(e["kind"] == "assistant_text" and e["text"] == "lead heard: PING"
                                  for e in team.history("lead")), "the answer to the steered message", timeout=60)
        deadline = time.monotonic() + 10
        while "turn_end done" not in log.read_text().split(f"message {message_id}")[-1] and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(30)
    text = log.read_text()
    for line in (
        "lead: connected to team cli",
        "lead: prompt received",
        "started (cause prompt)",
        "lead: entry recorded: prompt",
        "lead: entry recorded: assistant_text",
        f"lead: steer received: message {message_id} from helper",
        "started (cause steer)",
        "lead: entry recorded: user_message from helper",
        "ended (done)",
    ):
        assert line in text, f"{line!r} not in -v output:\n{text}"
    assert "HTTP Request" not in text, "httpx's request lines wait for -vv"
