"""A2A's share of the process's database threads (mailbox/plumbing/db.py).

Everything ``/a2a`` does in the database (the gate's lookups, the methods, the
streams' reads) runs through ``run``, which lets at most ``share()`` of those
calls be on the database threads at once; the others wait their turn on the event
loop. On SQLite the process has one database thread, and it is also the writer
of every team's sends and entries: with one A2A call at a time there, a send waits
behind at most one A2A call however many A2A requests are in flight, and a busy
A2A caller waits for itself instead of making every team wait. On PostgreSQL the
A2A calls take at most half the pool, so the agents' API and websockets always
have the other half.
"""
import asyncio
from mailbox.plumbing import db

_gates: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}


def share() -> int:
    """How many A2A calls may be on the database threads at once."""
    return max(1, db.threads() // 2)


def _gate() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        if len(_gates) > 16:  # loops of finished tests: forget them
            _gates.clear()
        gate = _gates[loop] = asyncio.Semaphore(share())
    return gate


async def run(fn, /, **kwargs):
    """``fn(**kwargs)`` on a database thread, when A2A's share has room."""
    async with _gate():
        return await db.to_db_thread(fn)(**kwargs)
