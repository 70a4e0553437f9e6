"""``/healthz`` and ``/readyz`` for load balancers and orchestrators (docs/deployment.md,
"Health endpoints"). Unauthenticated, cheap, JSON.

- ``/healthz``: the process is alive and its event loop answers. It touches
  neither the database nor Redis, so a dependency's outage never makes an
  orchestrator restart every process (which would not bring it back).
- ``/readyz``: the process can reach its database (``SELECT 1`` on one of its
  database threads) and, on scale-out, Redis (a publish); 503 with what is
  out of reach otherwise, so a load balancer sends new work elsewhere. Anyone
  may ask, so the answer says only ``unavailable``: the driver's error names
  the database's host and port, and goes to the log (mailbox/plumbing/outage.py's lines).
"""
import asyncio
import os

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from mailbox.plumbing.db import to_db_thread
from mailbox.plumbing import outage

CHECK_TIMEOUT = 2.0  # seconds each dependency may take to answer /readyz
UNAVAILABLE = {"ok": False, "error": "unavailable"}  # no detail: it is logged, not shown


async def healthz(request):
    return JsonResponse({"status": "ok", "pid": os.getpid()})


def _select_one() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


async def _database() -> dict:
    try:
        await asyncio.wait_for(to_db_thread(_select_one)(), CHECK_TIMEOUT)
    except Exception as exc:
        outage.database.failed("readyz", exc)
        return UNAVAILABLE
    outage.database.ok()
    return {"ok": True}


async def _redis() -> dict:
    try:
        await asyncio.wait_for(get_channel_layer().group_send("readyz", {"type": "readyz"}), CHECK_TIMEOUT)
    except Exception as exc:
        outage.redis.failed("readyz", exc)
        return UNAVAILABLE
    outage.redis.ok()
    return {"ok": True}


async def readyz(request):
    checks = {"database": _database()}
    if settings.REDIS_URL:
        checks["redis"] = _redis()
    results = dict(zip(checks, await asyncio.gather(*checks.values())))
    ready = all(r["ok"] for r in results.values())
    body = {"status": "ready" if ready else "unavailable", **results}
    if ready:
        return JsonResponse(body)
    return JsonResponse(body, status=503, headers=outage.unavailable_headers())
