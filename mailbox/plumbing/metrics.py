"""Prometheus metrics: what the process counted, and the mailbox's state read at scrape time
(docs/operations.md, "Monitoring").

Counters are counted where each transition commits, by the code that commits it: the writer's
jobs (mailbox/engine/hot_path.py: a send's ``queued`` and ``accepted``, an entry's ``delivered``),
the Lead log's ORM appends (mailbox/engine/lead_log.py: admission's ``accepted`` and ``failed``, an
operator's ``retried`` and ``cancelled``), the tool dispatch (mailbox/transports/tools.py) and the
writer's batches (mailbox/plumbing/writer.py). Every one is counted after its commit, once per
Lead-log record, so the sums agree with the Lead log.

The hot path pays a dictionary increment under a lock and a histogram observation per
transition: the team is kept as its id there and named only when scraped. The gauges
(undelivered messages and their oldest age, sessions, hosts, members by status) are not
kept at all: a scrape reads them from the database, a few grouped counts on indexed columns.
They are the database's, so every process answers the same; the counters are each
process's own (scrape every process and sum).

Labels are low-cardinality: the team's name, the transport, the state, the tool, the
outcome, the error code; never a message or a member.
"""
import bisect
import contextvars
import ipaddress
import threading
import time
from collections import Counter as _Tally
from datetime import UTC, datetime

from django.conf import settings
from django.core.signals import setting_changed
from django.db.models import Count, Min
from prometheus_client import CollectorRegistry, exposition, gc_collector, platform_collector, process_collector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from mailbox.plumbing import runtime
from mailbox.models import PENDING_STATES, UNDELIVERED, HostPresence, LogKind, SessionPresence, TeamMessage
from teams.models import Member, Team, status_of

# The transports a send may come through; what no transport sent (a management command, a
# test, the benches' in-process probe) is ``internal``.
TRANSPORTS = ("rest", "ws", "mcp", "a2a", "dashboard", "internal")
transport: contextvars.ContextVar[str] = contextvars.ContextVar("steerboard_transport", default="internal")

# The transitions' names, from the Lead log's record kinds.
STATE_OF_KIND = {
    LogKind.MESSAGE_QUEUED: "queued",
    LogKind.MESSAGE_ACCEPTED: "accepted",
    LogKind.MESSAGE_DELIVERED: "delivered",
    LogKind.MESSAGE_FAILED: "failed",
    LogKind.MESSAGE_RETRIED: "retried",
    LogKind.MESSAGE_CANCELLED: "cancelled",
}
OUTCOMES = ("ok", "refused", "error")
# 1 ms to 60 s.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)

CONTENT_TYPE = exposition.CONTENT_TYPE_LATEST


def enabled() -> bool:
    if _on is None:
        _settings_read()
    return _on


_on: bool | None = None  # STEERBOARD["METRICS"], read once (and again when a test changes the settings)


def _settings_read(**kwargs) -> None:
    global _on
    _on = bool(settings.STEERBOARD.get("METRICS", True))


setting_changed.connect(_settings_read, dispatch_uid="steerboard-metrics-settings")


class _Histogram:
    """A histogram kept as plain counts under the module's lock: one bisect and one lock per
    observation (prometheus_client's own takes a lock per bucket and per sum)."""

    def __init__(self, name: str, documentation: str, buckets: tuple):
        self.name, self.documentation, self.bounds = name, documentation, buckets
        self.counts = [0] * (len(buckets) + 1)  # the last: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        with _lock:
            self.observe_locked(value)

    def observe_locked(self, value: float) -> None:
        """``observe`` for a caller that holds the module's lock already."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self) -> HistogramMetricFamily:
        with _lock:
            counts, total = list(self.counts), self.sum
        cumulative, buckets = 0, []
        for bound, n in zip((*map(repr, map(float, self.bounds)), "+Inf"), counts, strict=True):
            cumulative += n
            buckets.append((bound, cumulative))
        return HistogramMetricFamily(self.name, self.documentation, buckets=buckets, sum_value=total)


registry = CollectorRegistry()  # auto_describe off: the mailbox collector reads the database only when scraped
process_collector.ProcessCollector(registry=registry)
platform_collector.PlatformCollector(registry=registry)
gc_collector.GCCollector(registry=registry)

_lock = threading.Lock()
_sent: dict[tuple, int] = {}  # (team id, transport)
_transitions: dict[tuple, int] = {}  # (team id, state)
_tool_calls: dict[tuple, int] = {}  # (tool, outcome)
_refusals: dict[str, int] = {}  # code

send_to_accepted = _Histogram(
    "steerboard_send_to_accepted_seconds",
    "From a send reaching the server to its message accepted (pushed, or its target asked for), "
    "first acceptances only.",
    LATENCY_BUCKETS,
)
send_to_delivered = _Histogram(
    "steerboard_send_to_delivered_seconds", "From a message queued to its target's history holding it.",
    LATENCY_BUCKETS,
)
writer_batch_size = _Histogram("steerboard_writer_batch_size", "Jobs committed in one writer batch.", BATCH_BUCKETS)
writer_commit_seconds = _Histogram(
    "steerboard_writer_commit_seconds", "A writer batch from its first statement to its commit.", LATENCY_BUCKETS,
)
HISTOGRAMS = (send_to_accepted, send_to_delivered, writer_batch_size, writer_commit_seconds)


# --- counted where the transitions commit -----------------------------------------------------------
def message_sent(*, team_id: int, via: str, admitted: bool, started: float, waited: bool = False) -> None:
    """A send committed (its ``queued`` record, and ``accepted`` when admitted in the same
    commit, or a waiting ``failed`` when it found the message must wait: ``waited``);
    ``started``: ``time.monotonic()`` when the send reached the server."""
    if not enabled():
        return
    sent, queued, accepted, failed = (team_id, via), (team_id, "queued"), (team_id, "accepted"), (team_id, "failed")
    took = time.monotonic() - started if admitted else 0.0
    with _lock:
        _sent[sent] = _sent.get(sent, 0) + 1
        _transitions[queued] = _transitions.get(queued, 0) + 1
        if admitted:
            _transitions[accepted] = _transitions.get(accepted, 0) + 1
            send_to_accepted.observe_locked(took)
        if waited:
            _transitions[failed] = _transitions.get(failed, 0) + 1


def message_delivered(*, team_id: int, queued_at) -> None:
    """A ``delivered`` record committed; ``queued_at`` as the driver returned it."""
    if not enabled():
        return
    key = (team_id, "delivered")
    waited = max(0.0, time.time() - _timestamp(queued_at)) if queued_at is not None else None
    with _lock:
        _transitions[key] = _transitions.get(key, 0) + 1
        if waited is not None:
            send_to_delivered.observe_locked(waited)


def records_logged(*, team_id: int, kind: str, count: int = 1, first_accepted: list | None = None) -> None:
    """Lead-log records of message transitions appended with the ORM (admission, retries,
    cancels), after their commit; ``first_accepted``: the ``queued_at`` of messages accepted
    for the first time."""
    state = STATE_OF_KIND.get(kind)
    if state is None or not enabled():
        return
    key = (team_id, state)
    with _lock:
        _transitions[key] = _transitions.get(key, 0) + count
    now = time.time()
    for queued_at in first_accepted or ():
        send_to_accepted.observe(max(0.0, now - _timestamp(queued_at)))


def tool_called(*, tool: str, outcome: str, code: str = "") -> None:
    if not enabled():
        return
    key = (tool, outcome)
    with _lock:
        _tool_calls[key] = _tool_calls.get(key, 0) + 1
        if code:
            _refusals[code] = _refusals.get(code, 0) + 1


def batch_committed(jobs: int, seconds: float) -> None:
    if not enabled():
        return
    with _lock:
        writer_batch_size.observe_locked(jobs)
        writer_commit_seconds.observe_locked(seconds)


def _timestamp(value) -> float:
    if isinstance(value, str):  # SQLite's text
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:  # stored as UTC (USE_TZ)
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


# --- read at scrape time ------------------------------------------------------------------------------
class _MailboxCollector:
    """The counters named by team, and the gauges read from the database, at each scrape."""

    def collect(self):
        names = dict(Team.objects.values_list("id", "name"))
        sent = CounterMetricFamily(
            "steerboard_messages_sent", "Messages stored by a send, by team and transport.", labels=["team", "transport"]
        )
        with _lock:
            sent_counts, transition_counts = list(_sent.items()), list(_transitions.items())
            tool_counts, refusal_counts = list(_tool_calls.items()), list(_refusals.items())
        for (team_id, via), n in sorted(sent_counts):
            if team_id in names:
                sent.add_metric([names[team_id], via], n)
        yield sent
        transitions = CounterMetricFamily(
            "steerboard_message_transitions",
            "Message transitions, one per Lead-log record (accepted counts re-pushes too).",
            labels=["team", "state"],
        )
        for (team_id, state), n in sorted(transition_counts):
            if team_id in names:
                transitions.add_metric([names[team_id], state], n)
        yield transitions
        calls = CounterMetricFamily(
            "steerboard_tool_calls", "Tool calls by tool and outcome (ok, refused with a code, error).",
            labels=["tool", "outcome"],
        )
        for (tool, outcome), n in sorted(tool_counts):
            calls.add_metric([tool, outcome], n)
        yield calls
        refused = CounterMetricFamily("steerboard_refusals", "Tool calls refused, by error code.", labels=["code"])
        for code, n in sorted(refusal_counts):
            refused.add_metric([code], n)
        yield refused
        for histogram in HISTOGRAMS:
            yield histogram.family()
        yield from _gauges(names)


def _gauges(names: dict[int, str]):
    now = time.time()
    pending = {
        row["team_id"]: row
        for row in TeamMessage.objects.filter(UNDELIVERED, state__in=PENDING_STATES)
        .values("team_id").annotate(n=Count("id"), oldest=Min("queued_at")).order_by()
    }
    undelivered = GaugeMetricFamily(
        "steerboard_undelivered_messages", "Messages queued or accepted, not yet delivered.", labels=["team"]
    )
    oldest = GaugeMetricFamily(
        "steerboard_oldest_undelivered_age_seconds", "Age of the team's oldest undelivered message (0: none).",
        labels=["team"],
    )
    for team_id, name in sorted(names.items(), key=lambda item: item[1]):
        row = pending.get(team_id)
        undelivered.add_metric([name], row["n"] if row else 0)
        oldest.add_metric([name], max(0.0, now - _timestamp(row["oldest"])) if row else 0.0)
    yield undelivered
    yield oldest

    sessions = dict(
        SessionPresence.objects.values("member__team_id").annotate(n=Count("channel")).order_by()
        .values_list("member__team_id", "n")
    )
    hosts = dict(HostPresence.objects.values("team_id").annotate(n=Count("id")).order_by().values_list("team_id", "n"))
    for metric, counts, text in (
        ("steerboard_sessions_connected", sessions, "Agent session websockets connected (all processes)."),
        ("steerboard_hosts_connected", hosts, "Team host websockets connected (all processes)."),
    ):
        family = GaugeMetricFamily(metric, text, labels=["team"])
        for team_id, name in sorted(names.items(), key=lambda item: item[1]):
            family.add_metric([name], counts.get(team_id, 0))
        yield family

    members = GaugeMetricFamily("steerboard_members", "Members by status.", labels=["team", "status"])
    by_status: _Tally = _Tally()
    for team_id, phase, state, n in (
        Member.objects.values("team_id", "phase", "session_state").annotate(n=Count("id")).order_by()
        .values_list("team_id", "phase", "session_state", "n")
    ):
        by_status[(team_id, status_of(phase, state))] += n
    for (team_id, status), n in sorted(by_status.items()):
        if team_id in names:
            members.add_metric([names[team_id], status], n)
    yield members


registry.register(_MailboxCollector())


def exposition_text() -> bytes:
    """The process's metrics in the Prometheus text format (reads the database: run on a
    database thread)."""
    return exposition.generate_latest(registry)


# --- who may scrape ----------------------------------------------------------------------------------
def scraper_allowed(address: str) -> bool:
    """Whether ``address`` is in STEERBOARD_METRICS_ALLOW (addresses or networks)."""
    allowed = settings.STEERBOARD.get("METRICS_ALLOW") or ()
    if not allowed or not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(network, strict=False) for network in allowed)


@runtime.on_reset
def reset() -> None:
    """Forget this process's counts (the ids of a test's teams come back in the next one's database)."""
    with _lock:
        for counts in (_sent, _transitions, _tool_calls, _refusals):
            counts.clear()
        for histogram in HISTOGRAMS:
            histogram.counts = [0] * len(histogram.counts)
            histogram.sum = 0.0
