"""sdk/steerboard_agents/ speaks only the wire contract: it runs where no Django is installed."""
import ast
from pathlib import Path

from tests.support.fresh_import import fresh_import
from tests.support.live import ROOT

SERVER_PACKAGES = {"django", "channels", "rest_framework", "teams", "mailbox", "frontend", "config"}


def test_importing_agents_loads_no_django_and_no_server_app():
    """Every server package is absent (tests/support/fresh_import.py): an import of one, even
    one that would catch the ImportError, is recorded."""
    with fresh_import(["steerboard_agents"], absent=SERVER_PACKAGES) as attempted:
        import steerboard_agents.__main__
        import steerboard_agents.keyless  # noqa: F401
    assert attempted == []


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
