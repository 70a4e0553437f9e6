"""Counts of the SQL this process runs, for the engine benchmark (bench/engine.py).

Off unless ``STEERBOARD_COUNT_SQL=1``: then every connection of the process
counts its statements and its commits, and ``GET /api/v1/debug/sql`` answers
the running totals. A statement run outside a transaction is a transaction of
its own (autocommit) and is counted as one.
"""
import threading

from django.db.backends.signals import connection_created
from django.http import JsonResponse

_lock = threading.Lock()
totals = {"statements": 0, "commits": 0, "autocommit_statements": 0}


def _add(name: str, n: int = 1) -> None:
    with _lock:
        totals[name] += n


def _counted(execute, sql, params, many, context):
    _add("statements", len(params) if many and params is not None and hasattr(params, "__len__") else 1)
    if not context["connection"].in_atomic_block:
        _add("autocommit_statements")
    return execute(sql, params, many, context)


_installed = False


def installed() -> bool:
    return _installed


def commit_run() -> None:
    """A commit made on the driver's connection (the writer's batches)."""
    _add("commits")


def statement_run(*, in_transaction: bool) -> None:
    """For statements run on the driver's cursor (mailbox/engine/hot_sql.py), which Django does not see."""
    _add("statements")
    if not in_transaction:
        _add("autocommit_statements")


def _on_connection(sender, connection, **kwargs) -> None:
    if _counted in connection.execute_wrappers:
        return
    connection.execute_wrappers.append(_counted)
    commit = connection.commit

    def counted_commit():
        _add("commits")
        return commit()

    connection.commit = counted_commit


def install() -> None:
    global _installed
    _installed = True
    connection_created.connect(_on_connection, dispatch_uid="steerboard-sqlcount")


def view(request):
    with _lock:
        return JsonResponse(dict(totals))
