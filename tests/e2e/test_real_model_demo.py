"""``python manage.py demo --model openai:...``: the demo team on a real model (here the local fake of
the vendor's API, tests/support/fake_models.py, reached through the vendor's SDK). Its refusal of a model
it cannot run is tests/test_demo_command.py's."""
import pytest

from demo.management.commands.demo import REAL_KICKOFF
from tests.e2e.test_keyless_demo import FAST, demo
from tests.support.fake_models import FakeVendor, Reply, Tokens
from tests.support.live import embedded_run_only

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
