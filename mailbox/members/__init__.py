"""The members' side of the mailbox: who is connected, what each is doing, and how it is reached.

Agent sessions (``sessions``) and team hosts (``hosts``); which process holds which
websocket (``presence``); a member's activity (``activity``), durable history
(``history``), polling inbox (``inbox``), human asks (``asks``), interrupting its turn
(``interrupt``), ``wait_agent``'s wake-ups (``waiting``), its end of life
(``lifecycle``); what its model used and the team's budget (``usage``, ``budget``).
"""
