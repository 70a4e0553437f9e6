"""``python -m agents``: a refused token is a clear error, not an endless retry."""
import subprocess
import sys

import pytest

from tests.support.live import ROOT

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("command, says", [("run", "session's token"), ("host", "host token")])
def test_a_refused_token_exits_2_with_the_reason(daphne_server, command, says):
    result = subprocess.run(
        [sys.executable, "-m", "agents", command, "--server", daphne_server.url, "--token", "not-a-token"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert says in result.stderr
