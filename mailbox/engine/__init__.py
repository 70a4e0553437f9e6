"""The delivery engine: how a team message is stored, admitted, pushed and delivered.

The state machine (``delivery``) and what a sender is told (``answers``); the writer's
jobs, the only code that stores a send or records a delivery (``hot_path``, their SQL
``hot_sql``), group-committed by the process's writer (mailbox/plumbing/); the Lead log
every transition is recorded in (``lead_log``) and the session history that decides
delivered (``history``); human prompts (``queue_adapter``); asking a host to start a
member (``starts``); the team's token budget, past which nothing starts a turn
(``budget``); idempotency keys claimed in a send's commit (``idempotency``).
"""
