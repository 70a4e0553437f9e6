"""The Redis channel layer (mailbox/plumbing/layers.py, config/settings.redis_host) against a
private redis-server (tests/support/services.py) that is killed and started again."""
import pytest

from config.settings import redis_host
from mailbox.plumbing.layers import RedisPubSubLayer
from tests.support.services import PrivateRedis


@pytest.fixture
def redis():
    server = PrivateRedis().start()
    yield server
    server.close()


async def test_the_first_publish_after_a_redis_restart_goes_out_on_a_new_connection(redis):
    layer = RedisPubSubLayer(hosts=[redis_host(redis.url)], prefix="restart-test:")
    try:
        await layer.group_send("dashboard-1", {"type": "x"})  # the pool now holds a connection
        redis.kill()
        redis.start()
        # The pooled connection was closed by the old server: without the retry this raises
        # ConnectionError("Connection closed by server."), counted as Redis being away.
        await layer.group_send("dashboard-1", {"type": "x"})
    finally:
        await layer.flush()
