"""Installing Steerboard leaves the environment's names alone (issue 33, item 1).

The server runs from its folder and is not installed: outside the checkout,
``mailbox`` is the standard library's module and the server's apps are not
importable. The agent SDK is a distribution of its own (``sdk/``), imported as
``steerboard_agents``, that depends on no part of the server. Built offline
from the test environment (requirements.lock holds setuptools and wheel).
"""
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.support.live import ROOT, embedded_run_only

pytestmark = embedded_run_only("installs nothing into the database: the same in both runs")


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})


def test_outside_the_checkout_mailbox_is_the_standard_librarys_and_the_server_is_not_importable(tmp_path):
    found = _run("import mailbox; print(mailbox.__file__)", tmp_path)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).parent == Path(sysconfig.get_paths()["stdlib"])
    for name in ("teams", "config", "frontend", "accounts", "delegation", "demo", "agents"):
        missing = _run(f"import {name}", tmp_path)
        assert "ModuleNotFoundError" in missing.stderr, f"{name} is importable outside the checkout: {missing.stdout}"
    # The SDK is installed (editable, scripts/setup.sh) and imports from anywhere.
    sdk = _run("import steerboard_agents, steerboard_agents.host; print(steerboard_agents.AgentSession.__name__)", tmp_path)
    assert sdk.returncode == 0 and sdk.stdout.strip() == "AgentSession", sdk.stderr


def test_the_sdk_is_a_distribution_of_its_own_that_needs_no_server(tmp_path):
    source = tmp_path / "sdk"
    shutil.copytree(ROOT / "sdk", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(source),
         "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=180,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("steerboard_agents-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert metadata["Name"] == "steerboard-agents"
    packages = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packages == {"steerboard_agents", "steerboard_protocol"}
    requires = [r.split(";")[0].split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower()
                for r in metadata.get_all("Requires-Dist") if "extra ==" not in r]
    assert sorted(requires) == ["httpx", "websockets"]
    assert "steerboard-agents = steerboard_agents.__main__:main" in entry_points


def test_the_sdks_command_runs(tmp_path):
    command = Path(sys.executable).parent / "steerboard-agents"
    if not command.exists():
        pytest.fail(f"{command} is missing: scripts/setup.sh installs the SDK with its command")
    result = subprocess.run([str(command), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "host" in result.stdout, result.stderr
