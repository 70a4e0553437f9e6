"""The mailbox app: delivery of team messages to agent sessions (docs/code.md, "The mailbox").

At the top, what makes it a Django app and what every part reads: the models, the reads
(``selectors``), the URL and websocket routes. Below, one package per part of the design:
``engine/`` (the delivery engine), ``members/`` (sessions, hosts and what each member is
doing), ``transports/`` (the edge, REST, websockets, MCP) and ``operations/`` (recovery,
outages, health, audit, metrics, traces, export).
"""
