import pytest
import pytest_asyncio

from tests.support.inproc import Api


@pytest_asyncio.fixture
async def api():
    client = Api()
    yield client
    await client.close()


@pytest.fixture(autouse=True)
def _no_sweeper(settings):
    # In-process tests drive what they test; no background sweeper races them.
    settings.STEERBOARD = {**settings.STEERBOARD, "SWEEP_INTERVAL": 0}
