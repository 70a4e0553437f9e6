"""Bench-only probe: what one writer batch's mechanics cost, without the server (issue 32 item 5).

    python bench/writer_probe.py postgres://postgres@127.0.0.1:5432/DBNAME [rounds]

One transaction of one prepared INSERT ... RETURNING, awaited from an asyncio event loop,
three ways, alternating in blocks of 50 so the machine's noise falls on each alike:

- thread: as mailbox/plumbing/writer.py does it: the job queued under a Condition for a
  writer thread with its own psycopg connection, BEGIN and the statement in one pipeline
  sync, COMMIT in the next, the answer handed back with call_soon_threadsafe;
- loop: as the measured, not kept, loop writer did it (branch ``pgasync-loop-writer``,
  docs/performance.md "An asyncio writer for PostgreSQL, measured"): the same two syncs
  on a psycopg.AsyncConnection owned by the event loop;
- loop-1rt: the same on the loop with COMMIT in the first sync (one round trip), what a
  batch could do if no job ever needed a statement after reading its row.

Prints each way's p50 / p99 of the round and the process's CPU per round (both threads).
"""
import asyncio
import collections
import statistics
import sys
import threading
import time

import psycopg

STATEMENT = "INSERT INTO writer_probe (v) VALUES (%s) RETURNING id"
BLOCK = 50


class ThreadWriter:
    def __init__(self, url: str):
        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=5)
        self.items = collections.deque()
        self.ready = threading.Condition()
        threading.Thread(target=self.loop, daemon=True).start()

    def put(self, loop, future) -> None:
        with self.ready:
            self.items.append((loop, future))
            self.ready.notify()

    def loop(self) -> None:
        while True:
            with self.ready:
                while not self.items:
                    self.ready.wait()
                loop, future = self.items.popleft()
            with self.conn.pipeline() as pipeline:
                self.conn.execute("BEGIN")
                cursor = self.conn.cursor()
                cursor.execute(STATEMENT, ["x"], prepare=True)
                pipeline.sync()
                row = cursor.fetchone()
                self.conn.execute("COMMIT")
            loop.call_soon_threadsafe(future.set_result, row)


async def thread_round(writer: ThreadWriter) -> None:
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    writer.put(loop, future)
    await future


async def loop_round(conn) -> None:
    async with conn.pipeline() as pipeline:
        await conn.execute("BEGIN")
        cursor = psycopg.AsyncCursor(conn)
        await cursor.execute(STATEMENT, ["x"], prepare=True)
        await pipeline.sync()
        await cursor.fetchone()
        await conn.execute("COMMIT")


async def loop_one_trip(conn) -> None:
    async with conn.pipeline():
        await conn.execute("BEGIN")
        cursor = psycopg.AsyncCursor(conn)
        await cursor.execute(STATEMENT, ["x"], prepare=True)
        await conn.execute("COMMIT")
    await cursor.fetchone()


async def main(url: str, rounds: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS writer_probe (id bigserial PRIMARY KEY, v text)")
    writer = ThreadWriter(url)
    aconn = await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=5)
    ways = {"thread": lambda: thread_round(writer), "loop": lambda: loop_round(aconn),
            "loop-1rt": lambda: loop_one_trip(aconn)}
    times = {name: [] for name in ways}
    cpu = {name: 0.0 for name in ways}
    for _ in range(10):  # warm: the statement prepared on both connections
        for way in ways.values():
            await way()
    for _ in range(rounds // BLOCK):
        for name, way in ways.items():
            c0 = time.process_time()
            for _ in range(BLOCK):
                t0 = time.perf_counter()
                await way()
                times[name].append(time.perf_counter() - t0)
            cpu[name] += time.process_time() - c0
    for name, spent in times.items():
        spent.sort()
        print(f"{name:9} p50 {statistics.median(spent) * 1000:.3f} ms  p99 {spent[int(len(spent) * 0.99)] * 1000:.3f} ms"
              f"  CPU {cpu[name] / len(spent) * 1000:.3f} ms a round  ({len(spent)} rounds)")
    await aconn.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE writer_probe")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000))
