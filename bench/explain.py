"""Where a first load's and a send's SQL time goes, with the database's own plans.

Runs in-process against the database of a live benchmark environment (its
DATABASE_URL and REDIS_URL), through Django's test client: every SQL statement
of the dashboard page, of `GET /api/v1/teams/<team>`, of the first messages
page and of one send_message is timed; the slowest SELECTs are run again
under ``EXPLAIN (ANALYZE, BUFFERS)`` (PostgreSQL) or ``EXPLAIN QUERY PLAN``
(SQLite) and their plans printed. bench/growth.py --explain runs it at each
size:

    python bench/explain.py TEAM OPERATOR_USERNAME LEAD_TOKEN TARGET   # with the environment's variables
"""
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from accounts.tokens import operator_token_create  # noqa: E402

TOP = 3


class Recorder:
    def __init__(self):
        self.statements: list[tuple[float, str, tuple]] = []

    def __call__(self, execute, sql, params, many, context):
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.statements.append((time.perf_counter() - t, sql, tuple(params or ())))


def plan(sql: str, params: tuple) -> list[str]:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        rows = cursor.fetchall()
    lines = [str(row[-1]) for row in rows]
    if connection.vendor == "postgresql":
        # The access paths and the total: what tells a plan that grows from one that does not.
        lines = [re.sub(r"\s*\(cost=[^)]*\)", "", line) for line in lines if "Scan" in line or "Execution Time" in line]
    return lines


def profile(label: str, call) -> None:
    recorder = Recorder()
    t = time.perf_counter()
    with connection.execute_wrapper(recorder):
        status = call()
    total = time.perf_counter() - t
    sql_time = sum(s[0] for s in recorder.statements)
    print(f"    {label}: {status}, {total * 1000:.1f} ms in-process, "
          f"{len(recorder.statements)} statements, {sql_time * 1000:.1f} ms of SQL")
    selects = sorted((s for s in recorder.statements if s[1].lstrip().upper().startswith("SELECT")), reverse=True)
    for took, sql, params in selects[:TOP]:
        text = re.sub(r"\s+", " ", sql)[:160]
        print(f"      {took * 1000:7.2f} ms  {text}")
        for row in plan(sql, params):
            print(f"                 {row}")


def send(token: str, target: str) -> str:
    """A send's database work, on this thread: the send transition's public service
    (mailbox/engine/hot_path.py: the writer's job, run here; then admission) and the sender's answer."""
    from mailbox.engine import hot_path
    from mailbox.plumbing.auth import member_from_headers

    sender = member_from_headers([(b"authorization", f"Bearer {token}".encode())])
    return hot_path.message_send_now(sender=sender, target_name=target, content="explain probe")["status"]


def main(team: str, operator: str, lead_token: str, target: str) -> None:
    browser = Client(HTTP_HOST="127.0.0.1")
    browser.force_login(User.objects.get(username=operator))
    api_token = operator_token_create(user=User.objects.get(username=operator))
    api = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {api_token}")
    calls = {
        "GET /teams/<team>/": lambda: browser.get(f"/teams/{team}/").status_code,
        "GET /api/v1/teams/<team>": lambda: api.get(f"/api/v1/teams/{team}").status_code,
        "GET /api/v1/teams/<team>/messages": lambda: api.get(f"/api/v1/teams/{team}/messages").status_code,
        # The agents' API does its database work on the process's database threads
        # (mailbox/plumbing/db.py), out of this thread's sight: the same work, called here.
        "send_message (its database work)": lambda: send(lead_token, target),
    }
    for label, call in calls.items():
        call()  # warm: templates, the first connection, caches
        profile(label, call)


if __name__ == "__main__":
    main(*sys.argv[1:5])
