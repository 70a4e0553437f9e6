"""sdk/steerboard_agents/ speaks only the wire contract: it runs where no Django is installed."""
import ast
import subprocess
import sys
from pathlib import Path

from tests.support.live import ROOT

SERVER_PACKAGES = {"django", "channels", "rest_framework", "teams", "mailbox", "frontend", "config"}


def test_importing_agents_loads_no_django_and_no_server_app():
    code = (
        "import sys, steerboard_agents, steerboard_agents.__main__, steerboard_agents.keyless; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(SERVER_PACKAGES)!r})))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_no_module_in_agents_imports_a_server_package():
    for path in Path(ROOT, "sdk", "steerboard_agents").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in SERVER_PACKAGES, f"{path.name} imports {name}"
