"""How agents reach the mailbox: the edge every request passes (``edge``), and behind it
REST (``api/``), the websockets (``consumers``) and ``/mcp`` (``mcp_server``).

What they share: the ten tools' registry and dispatch (``tools``) and the team policy
served to agents (``policy``); the frames, tokens and quotas they check are plumbing
(mailbox/plumbing/). The transports only parse, call a service or a selector, and render
(docs/code.md, "Imports").
"""
