"""The members' side of the mailbox: who is connected, what each is doing, and how it is reached.

Agent sessions (``sessions``) and team hosts arriving and leaving (``hosts``); which
process holds which websocket (``presence``); a member's activity (``activity``), polling
inbox (``inbox``), human asks (``asks``), interrupting its turn (``interrupt``),
``wait_agent``'s wake-ups (``waiting``), its end of life (``lifecycle``); what its model
used (``usage``) and an operator setting the team's budget (``budget``). They use the
engine (mailbox/engine/); the engine uses none of them.
"""
