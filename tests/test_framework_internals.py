"""The one framework internal the project still relies on, checked so an upgrade fails here, loudly.

config/asgi.py's ``AgentApiHandler`` replaces ``ASGIHandler.load_middleware``
(Django's middleware chain, skipped for the agents' bearer-token API; see
docs/performance.md). That method has no public replacement: it must set the
same attributes Django's own sets, and Django's request path must still read
them. Django is pinned to 5.2.x in pyproject.toml; when an upgrade changes
either, this test names what changed.

mailbox/db.py no longer touches asgiref internals (it uses ``SyncToAsync``'s
public ``executor=`` argument); its test checks that a call runs on the
project's own database threads.
"""
import inspect
import threading

import django
import pytest
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler

from config.asgi import AgentApiHandler
from mailbox import db


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
