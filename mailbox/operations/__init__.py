"""Running the mailbox: what keeps it right and what lets an operator see it.

Recovery (``recovery``) and the sweeper that runs it (``sweeper``); health probes
(``health``); the delivery audit (``audit``); a team's export and import (``archive``).
Outages, metrics, traces and the process's runtime state are plumbing (mailbox/plumbing/).
"""
