"""The framework internals the project still relies on, checked so an upgrade fails here, loudly.

config/asgi.py's ``AgentApiHandler`` replaces ``ASGIHandler.load_middleware``
(Django's middleware chain, skipped for the agents' bearer-token API; see
docs/performance.md). That method has no public replacement: it must set the
same attributes Django's own sets, and Django's request path must still read
them. Django is pinned to 5.2.x in pyproject.toml; when an upgrade changes
either, this test names what changed.

mailbox/plumbing/db.py no longer touches asgiref internals (it uses ``SyncToAsync``'s
public ``executor=`` argument); its test checks that a call runs on the
project's own database threads.

mailbox/plumbing/layers.py (the channel layer on Redis) subclasses channels_redis's
pub/sub layer, replaces its shards' receive loop and its per-loop layer
factory, and reads their private state; the receive loop also drops redis-py's
pub/sub connection. channels-redis is pinned to 4.x in pyproject.toml; the
tests below name the internal and the installed version when an upgrade
changes one, and play the whole layer once against a stand-in for Redis.
"""
import asyncio
import contextlib
import hashlib
import importlib.metadata
import inspect
import logging
import textwrap
import threading

import django
import pytest
import redis.asyncio.client
import redis.asyncio.connection
from channels_redis import pubsub
from channels_redis import utils as channels_redis_utils
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler

from config.asgi import AgentApiHandler
from mailbox.plumbing import db
from mailbox.plumbing import layers


def test_django_is_the_series_the_handler_override_was_written_for():
    assert django.VERSION[:2] == (5, 2), "config/asgi.py AgentApiHandler overrides ASGIHandler.load_middleware: re-check it"


def test_the_agent_api_handler_sets_what_djangos_load_middleware_sets():
    django_sets = set(vars(ASGIHandler()))
    ours = set(vars(AgentApiHandler()))
    assert django_sets == {"_view_middleware", "_template_response_middleware", "_exception_middleware", "_middleware_chain"}
    assert django_sets <= ours


def test_djangos_request_path_still_calls_the_chain_the_override_builds():
    source = inspect.getsource(BaseHandler.get_response_async)
    assert "self._middleware_chain(request)" in source
    assert inspect.signature(BaseHandler.load_middleware).parameters.keys() == {"self", "is_async"}


@pytest.mark.django_db(transaction=True)
async def test_a_database_call_runs_on_the_projects_own_threads_and_knows_its_loop():
    import asyncio

    seen = {}

    def where() -> None:
        seen["thread"] = threading.current_thread().name
        seen["loop"] = db.calling_loop()

    await db.to_db_thread(where)()
    assert seen["thread"].startswith("steerboard-db")
    assert seen["loop"] is asyncio.get_running_loop()
    assert db.calling_loop() is None  # only set on the thread, for the call


# --- mailbox/plumbing/layers.py on channels_redis (and redis-py) --------------------------------------------
CHANNELS_REDIS = f"channels_redis {importlib.metadata.version('channels-redis')}"
REDIS_PY = f"redis-py {importlib.metadata.version('redis')}"


def _changed(package: str, internal: str, how: str) -> str:
    return f"{package}: {internal} {how}; mailbox/plumbing/layers.py relies on it: re-check it"


def _fingerprint(function) -> str:
    return hashlib.sha256(textwrap.dedent(inspect.getsource(function)).encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    "replaced, ours, fingerprint",
    [
        ("RedisSingleShardConnection._do_receiving", "_Shard._do_receiving", "645ec294718899fc"),
        ("RedisPubSubChannelLayer._get_layer", "RedisPubSubLayer._get_layer", "40f40530d32ba6a6"),
        ("RedisPubSubLoopLayer.__init__", "_LoopLayer.__init__, which swaps the _shards built there,", "a4d005b2fe9a61c3"),
    ],
    ids=["_do_receiving", "_get_layer", "loop_layer_init"],
)
def test_the_channels_redis_methods_mailbox_layers_replaces_are_the_ones_it_was_written_against(
    replaced, ours, fingerprint
):
    cls, method = replaced.split(".")
    function = getattr(getattr(pubsub, cls, None), method, None)
    assert function is not None, _changed(CHANNELS_REDIS, f"channels_redis.pubsub.{replaced}", "is gone")
    assert _fingerprint(function) == fingerprint, _changed(
        CHANNELS_REDIS,
        f"channels_redis.pubsub.{replaced}",
        f"has changed (mailbox/plumbing/layers.py's {ours} replaces it); port what changed, then update the fingerprint here",
    )


def test_the_channels_redis_classes_and_helpers_mailbox_layers_uses_are_there():
    for name in ("RedisSingleShardConnection", "RedisPubSubLoopLayer", "RedisPubSubChannelLayer"):
        assert isinstance(getattr(pubsub, name, None), type), _changed(CHANNELS_REDIS, f"channels_redis.pubsub.{name}", "is gone")
    shard = pubsub.RedisSingleShardConnection
    for name in ("_do_receiving", "_receive_message", "_ensure_receiver"):
        assert callable(getattr(shard, name, None)), _changed(CHANNELS_REDIS, f"RedisSingleShardConnection.{name}", "is gone")
    assert inspect.iscoroutinefunction(shard._do_receiving), _changed(
        CHANNELS_REDIS, "RedisSingleShardConnection._do_receiving", "is no coroutine function"
    )
    assert "self._do_receiving()" in inspect.getsource(shard._ensure_receiver), _changed(
        CHANNELS_REDIS, "RedisSingleShardConnection._ensure_receiver", "no longer runs self._do_receiving()"
    )
    assert list(inspect.signature(shard).parameters) == ["host", "channel_layer"], _changed(
        CHANNELS_REDIS, "RedisSingleShardConnection(host, channel_layer)", "takes other arguments"
    )
    assert "channel_layer" in inspect.signature(pubsub.RedisPubSubLoopLayer).parameters, _changed(
        CHANNELS_REDIS, "RedisPubSubLoopLayer(channel_layer=)", "is gone"
    )
    assert list(inspect.signature(channels_redis_utils._wrap_close).parameters) == ["proxy", "loop"], _changed(
        CHANNELS_REDIS, "channels_redis.utils._wrap_close(proxy, loop)", "is gone or takes other arguments"
    )


def test_the_private_state_mailbox_layers_reads_is_set_by_channels_redis():
    proxy = layers.RedisPubSubLayer(hosts=["redis://127.0.0.1:1/0"], prefix="internals")
    for name in ("_args", "_kwargs", "_layers"):
        assert name in vars(proxy), _changed(CHANNELS_REDIS, f"RedisPubSubChannelLayer.{name}", "is no longer set")
    loop_layer = pubsub.RedisPubSubLoopLayer(hosts=["redis://127.0.0.1:1/0"], channel_layer=proxy)
    shards = getattr(loop_layer, "_shards", None)
    assert isinstance(shards, list) and shards, _changed(CHANNELS_REDIS, "RedisPubSubLoopLayer._shards", "is no list of shards")
    for name in ("host", "_pubsub", "_redis"):
        assert name in vars(shards[0]), _changed(CHANNELS_REDIS, f"RedisSingleShardConnection.{name}", "is no longer set")
    assert shards[0]._pubsub is None, _changed(
        CHANNELS_REDIS, "RedisSingleShardConnection._pubsub", "is made before first use (by _ensure_redis)"
    )
    assert pubsub.logger is logging.getLogger(pubsub.__name__), _changed(
        CHANNELS_REDIS, f"the logger {pubsub.__name__!r}", "is not the one channels_redis.pubsub logs to"
    )
    assert any(isinstance(f, layers._CountedNotLogged) for f in pubsub.logger.filters)


def test_the_redis_py_pubsub_attributes_the_receive_loop_uses_are_there():
    client = redis.asyncio.Redis.from_url("redis://127.0.0.1:1/0")  # never connects
    pubsub_client = client.pubsub()
    assert isinstance(pubsub_client, redis.asyncio.client.PubSub)
    assert "connection" in vars(pubsub_client) and pubsub_client.connection is None, _changed(
        REDIS_PY, "PubSub.connection", "is no longer set (the receive loop disconnects it after a failure)"
    )
    assert pubsub_client.subscribed is False, _changed(REDIS_PY, "PubSub.subscribed", "is gone")
    assert {"ignore_subscribe_messages", "timeout"} <= inspect.signature(pubsub_client.get_message).parameters.keys(), (
        _changed(REDIS_PY, "PubSub.get_message(ignore_subscribe_messages=, timeout=)", "takes other arguments")
    )
    assert "_resubscribe(self.channels" in inspect.getsource(redis.asyncio.client.PubSub.on_connect), _changed(
        REDIS_PY, "PubSub.on_connect", "no longer resubscribes its channels on a reconnect"
    )
    assert callable(getattr(redis.asyncio.connection.AbstractConnection, "disconnect", None)), _changed(
        REDIS_PY, "Connection.disconnect", "is gone"
    )


class _StandInPubSub:
    """What the receive loop and channels_redis's shard use of redis-py's PubSub."""

    def __init__(self):
        self.channels: set[str] = set()
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.connection = None

    @property
    def subscribed(self) -> bool:
        return bool(self.channels)

    async def subscribe(self, channel):
        self.channels.add(channel)

    async def unsubscribe(self, channel):
        self.channels.discard(channel)

    async def get_message(self, ignore_subscribe_messages, timeout):
        try:
            return await asyncio.wait_for(self.inbox.get(), timeout)
        except TimeoutError:
            return None


class _StandInRedis:
    closed = False

    async def aclose(self, close_connection_pool):
        self.closed = True


def test_the_layer_receives_through_the_replaced_loop_and_is_flushed_when_its_loop_closes():
    """The whole layer on one event loop, Redis played by a stand-in: the proxy's calls reach
    our loop layer, a subscribe starts our receive loop, and what it gets reaches the channel
    and the group through channels_redis's own bookkeeping."""
    proxy = layers.RedisPubSubLayer(hosts=["redis://127.0.0.1:1/0"], prefix="internals")
    stand_in = _StandInPubSub()
    redis_stand_in = _StandInRedis()
    seen = {}

    async def play():
        loop_layer = proxy._get_layer()
        assert isinstance(loop_layer, layers._LoopLayer)
        assert proxy._get_layer() is loop_layer and proxy._layers == {asyncio.get_running_loop(): loop_layer}
        for shard in loop_layer._shards:
            assert isinstance(shard, layers._Shard)
            shard._redis, shard._pubsub = redis_stand_in, stand_in  # so _ensure_redis connects nothing
        channel = await proxy.new_channel("internals.")
        await proxy.group_add("team", channel)
        seen["loop"] = loop_layer._get_shard(channel)._receive_task.get_coro().__qualname__
        group_channel = loop_layer._get_group_channel_name("team")
        for name, kind in ((channel, "direct"), (group_channel, "group")):
            await stand_in.inbox.put({"channel": name.encode(), "data": proxy.serialize({"type": kind})})
            with contextlib.suppress(TimeoutError):
                seen[kind] = await asyncio.wait_for(proxy.receive(channel), 5)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(play())
    finally:
        loop.close()
    assert seen["loop"] == "_Shard._do_receiving", _changed(
        CHANNELS_REDIS, "RedisSingleShardConnection.subscribe", f"starts {seen['loop']}, not mailbox/plumbing/layers.py's loop"
    )
    for kind in ("direct", "group"):
        assert seen.get(kind) == {"type": kind}, _changed(
            CHANNELS_REDIS, "RedisSingleShardConnection._receive_message", f"did not deliver a {kind} message in 5 s"
        )
    assert proxy._layers == {} and redis_stand_in.closed, _changed(
        CHANNELS_REDIS, "channels_redis.utils._wrap_close", "no longer flushes the loop's layer when the loop closes"
    )


# --- Channels, asgiref, Django's connection and psycopg (docs/code.md, "Framework internals") -------
def test_channels_dispatch_is_still_lookup_close_old_connections_call():
    """mailbox/transports/consumers.py ``LeanConsumer.dispatch`` is Channels' ``dispatch`` without its
    ``aclose_old_connections`` (the consumers reach the database only on mailbox/plumbing/db.py's threads)."""
    from channels.consumer import AsyncConsumer

    from mailbox.transports.consumers import LeanConsumer

    body = [line.strip() for line in inspect.getsource(AsyncConsumer.dispatch).splitlines()]
    assert "handler = getattr(self, get_handler_name(message), None)" in body, _changed(
        "channels", "AsyncConsumer.dispatch", "no longer looks the handler up by get_handler_name"
    )
    assert "await aclose_old_connections()" in body and "await handler(message)" in body, _changed(
        "channels", "AsyncConsumer.dispatch", "does more (or less) than close old connections and call the handler"
    )
    assert LeanConsumer.dispatch is not AsyncConsumer.dispatch


def test_asgiref_takes_the_executors_the_project_hands_it():
    from asgiref.sync import SyncToAsync, ThreadSensitiveContext

    assert "executor" in inspect.signature(ThreadSensitiveContext.__init__).parameters, _changed(
        "asgiref", "ThreadSensitiveContext(executor=)", "is gone (config/asgi.py RequestThreads)"
    )
    assert "executor" in inspect.signature(SyncToAsync.__init__).parameters, _changed(
        "asgiref", "SyncToAsync(executor=)", "is gone (mailbox/plumbing/db.py DatabaseThreads)"
    )


def test_djangos_connection_has_the_attributes_the_database_threads_keep():
    """mailbox/plumbing/db.py keeps a thread's connection open across calls by hand (``close_at``,
    ``errors_occurred``, ``in_atomic_block``, ``close_if_unusable_or_obsolete``)."""
    from django.db import connections

    wrapper = connections["default"]
    for name in ("close_at", "errors_occurred", "in_atomic_block", "connection"):
        assert hasattr(wrapper, name), _changed("Django", f"BaseDatabaseWrapper.{name}", "is gone")
    assert callable(wrapper.close_if_unusable_or_obsolete)
    assert "self.errors_occurred" in inspect.getsource(type(wrapper).close_if_unusable_or_obsolete)


def test_psycopg_prepare_threshold_is_the_switch_the_writer_flips():
    import psycopg

    assert psycopg.__version__.split(".")[0] == "3"
    assert isinstance(psycopg.Connection.prepare_threshold, property), _changed(
        "psycopg", "Connection.prepare_threshold", "is no longer a settable property"
    )
    assert psycopg.Connection.prepare_threshold.fset is not None
    assert "prepare" in inspect.signature(psycopg.Cursor.execute).parameters


@pytest.mark.django_db(transaction=True)
async def test_a_writer_batch_leaves_djangos_connection_as_it_found_it():
    """mailbox/engine/hot_sql.py ``hot_transaction`` runs BEGIN/COMMIT on the driver's connection
    behind Django's back: after a batch, Django's view of the connection is unchanged
    (autocommit on, no atomic block) and the driver is outside any transaction."""
    from mailbox.plumbing.writer import Job

    class Probe(Job):
        def execute(self, batch):
            with batch.db.cursor() as cursor:
                cursor.execute("SELECT 1")

        def committed(self):
            from django.db import connections

            db = connections["default"]
            self.result = (db.get_autocommit(), db.in_atomic_block, _driver_in_transaction(db))

    assert await db.writer().run(Probe()) == (True, False, False)


def _driver_in_transaction(wrapper) -> bool:
    raw = wrapper.connection
    if wrapper.vendor == "postgresql":
        import psycopg

        return raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    return raw.in_transaction


# --- config/websocket_frames.py on autobahn (daphne's websocket library) -----------------------------------
AUTOBAHN = f"autobahn {importlib.metadata.version('autobahn')}"


def test_autobahn_still_makes_a_masker_per_frame_by_the_name_replaced():
    """The frames a client sends are unmasked by ``create_xor_masker(mask, length)``'s object,
    looked up in autobahn's protocol module at each frame, and used only through ``process``
    and ``pointer``."""
    import autobahn.websocket.protocol as protocol

    import config.asgi  # noqa: F401  (applies config/websocket_frames.py, as daphne's import of it does)
    from config.websocket_frames import Masker

    source = inspect.getsource(protocol.WebSocketProtocol.processData)
    assert "create_xor_masker(" in source, f"{AUTOBAHN}: processData no longer calls create_xor_masker"
    used = {name for name in ("process", "pointer", "reset") if f"current_frame_masker.{name}(" in source}
    assert used <= {"process", "pointer"} and "process" in used, f"{AUTOBAHN}: the masker is used as {used}"
    assert protocol.create_xor_masker is Masker


def test_autobahns_per_frame_debug_lines_still_call_the_names_replaced():
    """sendData and dataReceived format their debug lines' arguments for every frame; the
    modules look ``hltype`` up by the name config/websocket_frames.py replaces."""
    import autobahn.twisted.websocket as twisted_websocket
    import autobahn.websocket.protocol as protocol

    import config.asgi  # noqa: F401
    from config.websocket_frames import HLTYPE_CALLERS, type_name

    assert "hltype(" in inspect.getsource(protocol.WebSocketProtocol.sendData), f"{AUTOBAHN}: sendData changed"
    assert "hltype(" in inspect.getsource(twisted_websocket.WebSocketAdapterProtocol.dataReceived), (
        f"{AUTOBAHN}: dataReceived changed"
    )
    assert all(module.hltype is type_name for module in HLTYPE_CALLERS)
    assert type_name(protocol.WebSocketProtocol.sendData) == "<autobahn.websocket.protocol.WebSocketProtocol.sendData>"


def test_autobahns_highlighting_still_reads_the_click_flag_at_each_call():
    import autobahn.util

    import config.asgi  # noqa: F401

    assert "_HAS_CLICK" in inspect.getsource(autobahn.util.hl), f"{AUTOBAHN}: hl no longer reads _HAS_CLICK"
    assert autobahn.util.hl("x") == "x"  # plain text: no click.style per frame


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 127, 128, 129, 1000, 65_537])
def test_the_masker_unmasks_as_rfc_6455_says_whatever_the_reads(size):
    """RFC 6455 5.3: octet i of the payload XOR octet i mod 4 of the mask, across reads of any size."""
    import os
    import random

    from config.websocket_frames import Masker

    payload, mask = os.urandom(size), os.urandom(4)
    expected = bytes(octet ^ mask[i % 4] for i, octet in enumerate(payload))
    masker, out, at = Masker(mask, size), b"", 0
    rng = random.Random(size)
    while at < size:
        step = rng.choice([1, 2, 3, 5, 64, 1000])
        out += masker.process(payload[at:at + step])
        at += step
        assert masker.pointer() == min(at, size)
    assert out == expected
