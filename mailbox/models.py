"""The durable mailbox: team messages, the Lead log, session history, human prompts."""
import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from teams.models import Member, Phase, Status, Team


def message_id_new() -> str:
    return f"team-message-{uuid.uuid4()}"


def prompt_id_new() -> str:
    return f"prompt-{uuid.uuid4()}"


def ask_id_new() -> str:
    return f"ask-{uuid.uuid4()}"


class MessageState(models.TextChoices):
    """A team message's delivery state (mailbox/engine/delivery.py has the transitions)."""

    QUEUED = "queued"
    ACCEPTED = "accepted"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"  # an operator took it back before it was delivered: final


# The states a message waits for delivery in: what counts against its target's mailbox
# limit, what admission and recovery take up, what the dashboards count as pending.
PENDING_STATES = (MessageState.QUEUED, MessageState.ACCEPTED)
# Every other state is final; delivered is the one a selector may derive (sent less the
# rest), every other is counted (mailbox/selectors.py).
COUNTED_STATES = tuple(s for s in MessageState if s != MessageState.DELIVERED)
# The messages not delivered (pending or cancelled): the rows of the partial indexes
# ``message_undelivered_*``. A delivered message leaves them, so they hold the few a mailbox
# waits on however many are stored, and marking a message delivered adds no entry to them.
# SQLite uses a partial index only for a query that repeats its condition word for word (a
# bound value counts), so every query meant for them filters on this too, and the hot path's
# SQL writes it as ``NOT (state = 'delivered')`` (mailbox/engine/hot_sql.py); PostgreSQL proves it
# from any state filter but delivered.
UNDELIVERED = ~Q(state=MessageState.DELIVERED)
# A target in one of these phases takes no messages (delivery.refuse_phase says why).
TARGET_REFUSING_PHASES = (Phase.RETIRED, Phase.FAILED)
# A target that takes messages but has no session is in one of these; with no host connected,
# a message to it waits (delivery.no_host_reason says why).
TARGET_SESSIONLESS_STATUSES = (Status.PROVISIONING, Status.INACTIVE)


class MessageKind(models.TextChoices):
    MESSAGE = "message"  # a member's send_message
    SPAWN_PROMPT = "spawn_prompt"  # the prompt spawn_teammate was given: the teammate's first turn
    HUMAN_ANSWER = "human_answer"  # a person's answer to the target's own ask_human (mailbox/members/asks.py)


class TeamMessage(models.Model):
    """The snapshot of a team message. It has no scheduling field: every message steers.

    ``state`` and the transition fields are the Lead log folded onto the row.
    """

    # On PostgreSQL Django adds a second index to a text key for LIKE (``…_like``); nothing
    # searches ids by pattern, and a random id makes every send write a random page of it:
    # migration 0013 drops it (and the Lead log's for ``message``).
    id = models.CharField(primary_key=True, max_length=64, default=message_id_new, editable=False)
    # No index of their own: (team, -queued_at) and (target, seq) lead with these
    # columns, and every send would pay for the extra index (delivery's hot path).
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="messages", db_index=False)
    # No index of its own either: (sender, -queued_at) leads with it (the operator filter's).
    sender = models.ForeignKey(Member, on_delete=models.PROTECT, related_name="sent_messages", db_index=False)
    target = models.ForeignKey(Member, on_delete=models.PROTECT, related_name="inbox", db_index=False)
    content = models.TextField()
    seq = models.PositiveBigIntegerField()
    thread_id = models.CharField(max_length=64, blank=True, default="")
    reply_to = models.CharField(max_length=64, blank=True, default="")
    # A database default too: the hot path's INSERT (mailbox/engine/hot_sql.py) leaves it out.
    kind = models.CharField(
        max_length=16, choices=MessageKind.choices, default=MessageKind.MESSAGE, db_default=MessageKind.MESSAGE
    )
    state = models.CharField(max_length=16, choices=MessageState.choices, default=MessageState.QUEUED)
    # Admissions tried for real: pushes, resume requests, re-pushes and failed tries.
    # A sweep that found nothing to do (the target waits for a host) counts nowhere.
    attempts = models.PositiveIntegerField(default=0)
    # Of those, admissions that failed (an error, not a wait) and pushes made again by
    # recovery or an operator. Database defaults: the hot path's INSERT leaves them out.
    failures = models.PositiveIntegerField(default=0, db_default=0)
    repushes = models.PositiveIntegerField(default=0, db_default=0)
    # The error of the last failed admission while the message has not moved on; the
    # trace (the Lead log's `failed` records) keeps every one.
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    queued_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # The W3C trace context of the send's span (mailbox/plumbing/tracing.py), carried in every steer
    # frame of the message, whichever process pushes it and however late, and the parent of
    # its ``deliver`` span. NULL unless the sending process traced: the send's statement
    # leaves them out, the writer's batch sets them only when it has one (hot_sql.batch_flush).
    traceparent = models.CharField(max_length=128, null=True, blank=True)
    tracestate = models.CharField(max_length=512, null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["target", "seq"], name="message_seq_unique_per_target")]
        indexes = [
            models.Index(fields=["team", "-queued_at"], name="message_team_recent"),
            # A target's pending (and cancelled) messages by state, in seq order: its mailbox
            # limit, admission, redelivery, the dashboards' counts. Partial (UNDELIVERED): a
            # million delivered messages are not in it, and delivering one writes nothing here.
            models.Index(fields=["target", "state", "seq"], name="message_undelivered_target", condition=UNDELIVERED),
            # The same messages of every team, oldest first: recovery, attention, metrics.
            models.Index(fields=["state", "queued_at"], name="message_undelivered_age", condition=UNDELIVERED),
            # The dashboard's charts: deliveries of a team in a time window (frontend/charts.py);
            # a message enters it once delivered (the charts' `delivered_at >=` implies that).
            models.Index(fields=["team", "delivered_at"], name="message_team_delivered",
                         condition=Q(delivered_at__isnull=False)),
            # The operator filters (mailbox/selectors.message_list): by sender, newest first;
            # by thread, only the replies are indexed (a root is found by its id).
            models.Index(fields=["sender", "-queued_at"], name="message_sender_recent"),
            models.Index(fields=["thread_id"], name="message_thread", condition=~Q(thread_id="")),
            # The charts' cancellations in a time window: the few cancelled messages only.
            models.Index(fields=["team", "cancelled_at"], name="message_team_cancelled",
                         condition=Q(cancelled_at__isnull=False)),
        ]


class LogKind(models.TextChoices):
    MEMBER = "team/member"
    TASK = "team/task"
    MESSAGE_QUEUED = "team/message/queued"
    MESSAGE_ACCEPTED = "team/message/accepted"
    MESSAGE_DELIVERED = "team/message/delivered"
    MESSAGE_FAILED = "team/message/failed"
    MESSAGE_RETRIED = "team/message/retried"  # an operator asked for admission again
    MESSAGE_CANCELLED = "team/message/cancelled"  # an operator took it back before it was delivered
    BUDGET = "team/budget"  # an operator set the team's token budget (mailbox/members/budget.py)
    ASK_ASKED = "team/ask/asked"  # a member asked a person (ask_human; mailbox/members/asks.py)
    ASK_ANSWERED = "team/ask/answered"  # an operator answered it: the record names the answer's message
    ASK_EXPIRED = "team/ask/expired"  # nobody answered in time: answered "expired" the same way


class LeadLogRecord(models.Model):
    """One append-only record of a team's Lead log; order is the primary key."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="log", db_index=False)  # (team, id) leads
    kind = models.CharField(max_length=32, choices=LogKind.choices)
    # Indexed (a message's trace), without PostgreSQL's LIKE index: see TeamMessage.id.
    message = models.ForeignKey(TeamMessage, null=True, blank=True, on_delete=models.CASCADE, related_name="log")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # One delivered record per message, whatever the race.
            models.UniqueConstraint(
                fields=["message"], condition=Q(kind="team/message/delivered"), name="log_one_delivered_per_message"
            ),
        ]
        indexes = [models.Index(fields=["team", "id"], name="log_team_order")]


class EntryKind(models.TextChoices):
    USER_MESSAGE = "user_message"
    PROMPT = "prompt"
    ASSISTANT_TEXT = "assistant_text"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TURN_START = "turn_start"
    TURN_END = "turn_end"


class HistoryEntry(models.Model):
    """One durable entry of a member's session history, as its session reported it.

    The partial unique constraint on (member, message_id) is target-side source
    folding: a team message enters a history at most once.
    """

    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="history", db_index=False)  # (member, ...) lead
    entry_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=EntryKind.choices)
    message_id = models.CharField(max_length=64, null=True, blank=True)
    prompt_id = models.CharField(max_length=64, null=True, blank=True)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["member", "entry_id"], name="history_entry_id_unique"),
            models.UniqueConstraint(
                fields=["member", "message_id"],
                condition=Q(message_id__isnull=False),
                name="history_message_folds",
            ),
        ]
        indexes = [
            models.Index(fields=["member", "id"], name="history_member_order"),
            # An A2A task's reads (mailbox/engine/history.py): the entry that opened a prompt's
            # turn, and the turn boundaries after it, found in O(log n) however long the
            # history. Partial: the entries of a team message's delivery pay for neither.
            models.Index(fields=["member", "prompt_id"], name="history_prompt_entry", condition=Q(prompt_id__isnull=False)),
            models.Index(
                fields=["member", "id"], name="history_turn_bounds", condition=Q(kind__in=["turn_start", "turn_end"])
            ),
        ]


class PromptState(models.TextChoices):
    QUEUED = "queued"
    STARTED = "started"
    COMPLETED = "completed"


class HumanPrompt(models.Model):
    """A person's prompt from the browser, delivered by the Queue adapter as its own turn."""

    id = models.CharField(primary_key=True, max_length=64, default=prompt_id_new, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="prompts")
    target = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="prompts")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="prompts")
    content = models.TextField()
    state = models.CharField(max_length=16, choices=PromptState.choices, default=PromptState.QUEUED)
    pushed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["target", "state", "created_at"], name="prompt_target_state")]


class HostPresence(models.Model):
    """A connected host websocket; a team with none cannot cold-resume anyone."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="hosts")
    channel = models.CharField(max_length=255, unique=True)
    # The ServerProcess holding the websocket; when it stops beating, the row is reaped.
    process_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    connected_at = models.DateTimeField(auto_now_add=True)


class ServerProcess(models.Model):
    """A running server process. Its heartbeat vouches for the websockets it holds
    (mailbox/members/presence.py); a process that stopped beating is dead and its
    sessions and hosts are reaped by recovery."""

    id = models.CharField(primary_key=True, max_length=64)
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(db_index=True)


class SessionPresence(models.Model):
    """A connected agent session websocket (after its hello) and the process holding it."""

    channel = models.CharField(primary_key=True, max_length=255)
    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="presences")
    process_id = models.CharField(max_length=64, db_index=True)
    connected_at = models.DateTimeField(auto_now_add=True)


class IdempotencyRecord(models.Model):
    """A tool call made with an idempotency key, and the result to replay for it.

    Scoped to (member, tool, key): the unique constraint is what makes two
    concurrent calls with one key produce one effect. ``fingerprint`` is the
    hash of the call's arguments; ``result`` is filled in once the call is done
    (a send stores its message id with the message, then the full result after
    admission). Expired rows are pruned (mailbox/engine/idempotency.py).
    """

    # No index of its own: the unique constraint below starts with the member (one index fewer per keyed send).
    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="idempotency_records", db_index=False)
    tool = models.CharField(max_length=64)
    key = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=64)
    result = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["member", "tool", "key"], name="idempotency_key_unique_per_member_tool")
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_age")]


class MemberUsage(models.Model):
    """What one member's model replies used, per model: the sum of the ``usage`` its
    history entries report (mailbox/members/usage.py; the writer adds each new entry's in its
    commit, a folded repeat adds nothing). Input tokens include the cached ones."""

    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="usage", db_index=False)
    model = models.CharField(max_length=200)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    replies = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["member", "model"], name="usage_one_row_per_member_model")]


class AskState(models.TextChoices):
    """An ask's state: pending until the first answer (or its expiry) wins; both are final."""

    PENDING = "pending"
    ANSWERED = "answered"
    EXPIRED = "expired"


class AskKind(models.TextChoices):
    QUESTION = "question"
    APPROVAL = "approval"


class HumanAsk(models.Model):
    """A member's question to a person (the ``ask_human`` tool, mailbox/members/asks.py).

    Its answer goes back as a team message to the asker (``answer_message``, kind
    ``human_answer``), stored and delivered by the writer's send job like any other.
    ``state`` leaves ``pending`` once, by a conditional UPDATE: the first answer (or the
    expiry) wins.
    """

    id = models.CharField(primary_key=True, max_length=64, default=ask_id_new, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="asks", db_index=False)  # (team, ...) leads
    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="asks", db_index=False)
    kind = models.CharField(max_length=16, choices=AskKind.choices, default=AskKind.QUESTION)
    question = models.TextField()
    options = models.JSONField(default=list, blank=True)
    context = models.TextField(blank=True, default="")
    state = models.CharField(max_length=16, choices=AskState.choices, default=AskState.PENDING)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    decision = models.CharField(max_length=64, blank=True, default="")
    answer = models.TextField(blank=True, default="")
    comment = models.TextField(blank=True, default="")
    answered_by = models.CharField(max_length=150, blank=True, default="")
    answer_message = models.OneToOneField(
        TeamMessage, null=True, blank=True, on_delete=models.SET_NULL, related_name="ask"
    )

    class Meta:
        indexes = [
            models.Index(fields=["team", "state", "created_at"], name="ask_team_state"),
            models.Index(fields=["member", "state"], name="ask_member_state"),
            # The sweeper's expiry: the few pending asks that have a deadline.
            models.Index(fields=["expires_at"], name="ask_pending_expiry",
                         condition=Q(state="pending", expires_at__isnull=False)),
        ]
