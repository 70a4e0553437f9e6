import pytest


@pytest.fixture(autouse=True)
def _no_sweeper(settings):
    # In-process tests drive what they test; no background sweeper races them.
    settings.STEERBOARD = {**settings.STEERBOARD, "SWEEP_INTERVAL": 0}
