"""How agents reach the mailbox: the edge every request passes (``edge``), and behind it
REST (``api/``), the websockets (``consumers``) and ``/mcp`` (``mcp_server``).

What they share: the ten tools' registry and dispatch (``tools``), the frames on the wire
and the one JSON parser (``wire``), the team policy served to agents (``policy``), bearer
tokens (``auth``) and quotas (``quota``). The transports only parse, call a service or a
selector, and render (docs/code.md, "Imports").
"""
