"""The delivery engine: how a team message is stored, admitted, pushed and delivered.

The state machine (``delivery``) and what a sender is told (``answers``); the writer's
jobs, the only code that stores a send or records a delivery (``hot_path``, their SQL
``hot_sql``), group-committed by the process's writer (``writer``) on its database
threads (``db``); the Lead log every transition is recorded in (``lead_log``); human
prompts (``queue_adapter``); the doorbells rung after commit (``events``); idempotency
keys claimed in a send's commit (``idempotency``); the fault points tests arm (``faults``).
"""
