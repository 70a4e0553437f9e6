"""``python manage.py demo --model openai:...``: the demo team on a real model (here the local fake of
the vendor's API, tests/support/fake_models.py, reached through the vendor's SDK)."""
import subprocess
import sys

import pytest

from demo.management.commands.demo import REAL_KICKOFF
from tests.e2e.test_keyless_demo import FAST, demo, demo_env
from tests.support.fake_models import FakeVendor, Reply, Tokens
from tests.support.live import ROOT, embedded_run_only, free_port

pytestmark = [pytest.mark.e2e, embedded_run_only("the demo on the embedded default")]


@pytest.fixture
def fake():
    vendor = FakeVendor("openai").start()
    yield vendor
    vendor.stop()


def test_demo_runs_the_team_on_the_model_it_is_given(tmp_path, fake, monkeypatch):
    fake.script("fake-demo", Reply(text="Both tasks are completed. TEAM_WORKFLOW_OK", tokens=Tokens(input=500, output=9)))
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    result = demo(tmp_path / "var", *FAST, "--model", "openai:fake-demo", "--exit-when-done", "--timeout", "120")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Starting the team host (models: openai:fake-demo)" in result.stdout
    assert "TEAM_WORKFLOW_OK: the Lead reports both tasks completed." in result.stdout
    [asked] = fake.requests_of("fake-demo")
    # A real model has no script: the kickoff spells the workflow out.
    assert REAL_KICKOFF in str(asked.body["messages"])
    assert {t["function"]["name"] for t in asked.body["tools"]} >= {"spawn_teammate", "team_task_create"}


def test_demo_refuses_a_model_it_cannot_run_before_starting_anything(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    result = subprocess.run(
        [sys.executable, "manage.py", "demo", "--port", str(free_port()), *FAST, "--model", "anthropic:claude-x"],
        cwd=ROOT, env=demo_env(tmp_path / "var"), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert "--model: anthropic models need an API key: set ANTHROPIC_API_KEY" in result.stderr
    assert "Starting the server" not in result.stdout
