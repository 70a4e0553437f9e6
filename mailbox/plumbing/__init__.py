"""What every part of the mailbox stands on, and which knows none of them.

The database threads and the process's one writer that group-commits its jobs (``db``,
``writer``); the doorbells rung on the channel layer after a commit (``events``) and the
channel layer on Redis that survives a Redis restart (``layers``); PostgreSQL and Redis
outages and the 503 answer (``outage``); the fault points tests arm (``faults``); the
frames on the wire and the one JSON parser (``wire``); bearer tokens (``auth``) and quotas
(``quota``); metrics, traces and log context (``metrics``, ``tracing``, ``log_context``,
``sqlcount``); the process's in-memory state, started afresh by ``runtime.reset()``.
Nothing here imports the engine, the members, operations or the transports: what it must
run of theirs it is handed when the app is ready (mailbox/apps.py).
"""
