"""The channel layer on Redis: channels_redis's pub/sub layer with a receive loop
that survives a Redis restart (docs/deployment.md, "When Redis goes away").

channels_redis's own loop (4.x) sleeps a second after each failure and logs a
traceback for it; it ends for good on a timeout; and a reconnect whose
resubscribe failed half-way leaves a connection that looks healthy and hears
nothing. Here, after any failure the pub/sub connection is dropped, so the
next attempt (a tenth of a second later) reconnects and resubscribes every
channel of the process from scratch; failures are counted
(mailbox/plumbing/outage.py), not logged one by one; and once a receive works again
the process runs its recovery pass for the sessions it holds
(``events.redis_recovered``): every doorbell lost meanwhile is rung again
from the database.
"""
import asyncio
import contextlib
import logging

from channels_redis import pubsub
from channels_redis.utils import _wrap_close

from mailbox.plumbing import outage

RECONNECT_PAUSE = 0.1  # seconds between attempts while Redis is away


class _Shard(pubsub.RedisSingleShardConnection):
    async def _do_receiving(self):
        broken = False
        while True:
            try:
                if self._pubsub is not None and self._pubsub.subscribed:
                    message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
                    if broken:  # reconnected, every channel subscribed again
                        broken = False
                        _resubscribed()
                    self._receive_message(message)
                else:
                    await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away, a timeout, a failed resubscribe: start afresh
                broken = True
                outage.redis.failed("receiving", exc)
                connection = self._pubsub.connection if self._pubsub is not None else None
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await connection.disconnect()
                await asyncio.sleep(RECONNECT_PAUSE)


def _resubscribed() -> None:
    from mailbox.plumbing import events

    if not outage.redis.ok():  # (a return runs the recovery by itself)
        events.redis_recovered()


class _CountedNotLogged(logging.Filter):
    """channels_redis logs a traceback when a websocket that closes while Redis is
    away cannot unsubscribe; that is one more failure to count, not a bug."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        from mailbox.plumbing.events import _layer_down

        if exc is not None and _layer_down(exc):
            outage.redis.failed("unsubscribing", exc)
            return False
        return True


logging.getLogger(pubsub.__name__).addFilter(_CountedNotLogged())


class _LoopLayer(pubsub.RedisPubSubLoopLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._shards = [_Shard(shard.host, self) for shard in self._shards]


class RedisPubSubLayer(pubsub.RedisPubSubChannelLayer):
    """``channels_redis.pubsub.RedisPubSubChannelLayer``, with the sturdier receive loop."""

    def _get_layer(self):
        loop = asyncio.get_running_loop()
        layer = self._layers.get(loop)
        if layer is None:
            layer = self._layers[loop] = _LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            _wrap_close(self, loop)
        return layer
