"""Running the mailbox: what keeps it right and what lets an operator see it.

Recovery (``recovery``) and the sweeper that runs it (``sweeper``); PostgreSQL and Redis
outages (``outage``) and the channel layer that survives them (``layers``); health probes
(``health``); the delivery audit (``audit``); metrics, traces and log context
(``metrics``, ``tracing``, ``log_context``, ``sqlcount``); a team's export and import
(``archive``); the process's in-memory state, started afresh by ``runtime.reset()``.
"""
