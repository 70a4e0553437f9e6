"""The parts of Steerboard's wire contract (docs/protocol.md) that both sides run as code:
which turn a history entry belongs to (``turns``), the crash points fault tests count
(``crash``), the Team tools' names (``tools``) and the trace context's fields and the
``OTEL_*`` rule for tracing (``tracing``). Django-free and dependency-free: the
server (mailbox/, frontend/) and the agent SDK (steerboard_agents) both import it; it
imports neither. It ships in the SDK's distribution (sdk/pyproject.toml).
"""
