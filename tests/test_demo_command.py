"""``python manage.py demo``'s usage, as manage.py runs it (Django's ManagementUtility) in this
process: its --help, and the refusals it makes before it starts anything (a model it cannot run,
a port in use). What the demo does once it starts its processes is tests/e2e/test_keyless_demo.py's."""
import signal
import socket

import pytest
from django.core.management import ManagementUtility


@pytest.fixture
def manage(capsys):
    """``python manage.py ARGS``: (exit code, stdout, stderr). The demo's SIGTERM handler
    (it stops its children) is this process's only while the command runs."""
    sigterm = signal.getsignal(signal.SIGTERM)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            ManagementUtility(["manage.py", *args]).execute()
            code = 0
        except SystemExit as exc:
            code = exc.code
        finally:
            signal.signal(signal.SIGTERM, sigterm)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_demo_help_names_its_options(manage):
    code, out, err = manage("demo", "--help")
    assert code == 0, err
    for option in ("--port", "--bind", "--team", "--password", "--step-delay", "--no-wait", "--exit-when-done"):
        assert option in out


def test_demo_refuses_a_model_it_cannot_run_before_starting_anything(manage, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    code, out, err = manage("demo", "--port", "9", "--no-wait", "--step-delay", "0", "--model", "anthropic:claude-x")
    assert code != 0
    assert "--model: anthropic models need an API key: set ANTHROPIC_API_KEY" in err
    assert "Starting the server" not in out


@pytest.mark.django_db(transaction=True)
def test_demo_fails_with_a_reason_when_the_port_is_taken(manage):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = manage("demo", "--port", str(port), "--exit-when-done")
    assert code != 0
    assert f"port {port} is in use" in err
    assert "Starting the server" not in out
