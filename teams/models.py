"""The roster and the task board: Team, Member, MemberToken, Task."""
from django.core.validators import RegexValidator
from django.db import models

MEMBER_NAME_RE = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
TEAM_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,62}$"


class Team(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[RegexValidator(TEAM_NAME_RE)])
    host_token_hash = models.CharField(max_length=64, db_index=True)
    next_task_number = models.PositiveIntegerField(default=1)
    # The tokens (input + output) the team's models may use in all, set by an operator;
    # None: STEERBOARD_TEAM_TOKEN_BUDGET, and no budget when that is unset (mailbox/members/usage.py).
    token_budget = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    LEAD = "lead"
    TEAMMATE = "teammate"


class Context(models.TextChoices):
    FRESH = "fresh"
    FORK = "fork"


class Phase(models.TextChoices):
    PROVISIONING = "provisioning"
    ACTIVE = "active"
    FAILED = "failed"
    RETIRED = "retired"


class SessionState(models.TextChoices):
    RUNNING = "running"
    IDLE = "idle"
    INACTIVE = "inactive"


class Status(models.TextChoices):
    """What docs/protocol.md calls a member's status: its phase, or, once active, its session state."""

    PROVISIONING = "provisioning"
    RUNNING = "running"
    IDLE = "idle"
    INACTIVE = "inactive"
    FAILED = "failed"
    RETIRED = "retired"


class Activity(models.TextChoices):
    """What a member is doing now, and why (docs/protocol.md, "Activity"): derived by
    mailbox/members/activity.py from what the server records, never from the agent's word."""

    WORKING = "working"  # a turn open: a tool running, or the model thinking
    WAITING_PEER = "waiting_peer"  # inside await_message or wait_agent
    WAITING_HUMAN = "waiting_human"  # a human ask of its own is pending
    IDLE = "idle"  # a session, no turn
    INACTIVE = "inactive"  # no session (or none yet: provisioning)
    STALLED = "stalled"  # a turn open, no history entry for STEERBOARD_STALL_AFTER seconds
    FAILED = "failed"  # its start or its last turn failed
    RETIRED = "retired"


class Member(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="members")
    name = models.CharField(max_length=63, validators=[RegexValidator(MEMBER_NAME_RE)])
    role = models.CharField(max_length=16, choices=Role.choices)
    description = models.TextField(blank=True, default="")
    prompt = models.TextField(blank=True, default="")
    context = models.CharField(max_length=8, choices=Context.choices, default=Context.FRESH)
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PROVISIONING)
    session_state = models.CharField(max_length=16, choices=SessionState.choices, default=SessionState.INACTIVE)
    # The channel of the websocket that currently speaks for this member; a
    # disconnect only marks the member inactive when it is still this one.
    session_channel = models.CharField(max_length=255, blank=True, default="")
    # Next per-target sequence number handed to a message addressed to this member.
    next_seq = models.PositiveBigIntegerField(default=1)
    # When the server last asked a host to start this member's session; a
    # second start is not sent while one is fresh.
    start_requested_at = models.DateTimeField(null=True, blank=True)
    status_changed_at = models.DateTimeField(auto_now_add=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="member_name_unique_in_team")]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.name}"

    @property
    def is_lead(self) -> bool:
        return self.role == Role.LEAD

    @property
    def status(self) -> str:
        return status_of(self.phase, self.session_state)


def status_of(phase: str, session_state: str) -> str:
    """A member's status from its phase and session state (Member.status, for rows read without the ORM)."""
    if phase == Phase.ACTIVE:
        return session_state
    if phase == Phase.PROVISIONING and session_state != SessionState.INACTIVE:
        return session_state
    return phase


class TokenKind(models.TextChoices):
    ISSUED = "issued"  # team_create's Lead token, manage.py member_token: live until revoked
    START = "start"  # carried by a host `start`: superseded by the member's next start (teams/tokens.py)


class MemberToken(models.Model):
    """A member's bearer token (its SHA-256 only). Revoking a token deletes its row."""

    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=8, choices=TokenKind.choices, default=TokenKind.ISSUED)
    created_at = models.DateTimeField(auto_now_add=True)


class RevokedToken(models.Model):
    """A member token revoked in the last hour (teams/tokens.py writes one with each revoke):
    what every server process reads, a few rows at a time, to close the websockets it
    holds open with a revoked token (mailbox/plumbing/auth.py)."""

    token_hash = models.CharField(max_length=64)
    revoked_at = models.DateTimeField(db_index=True)


class TaskStatus(models.TextChoices):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    DELETED = "deleted"


class Task(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="tasks")
    number = models.PositiveIntegerField()
    revision = models.PositiveIntegerField(default=1)
    subject = models.CharField(max_length=500)
    description = models.TextField(blank=True, default="")
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.PENDING)
    owner = models.ForeignKey(Member, null=True, blank=True, on_delete=models.SET_NULL, related_name="owned_tasks")
    created_by = models.ForeignKey(Member, null=True, on_delete=models.SET_NULL, related_name="created_tasks")
    blocked_by = models.ManyToManyField("self", symmetrical=False, related_name="blocks", blank=True)
    write_scopes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "number"], name="task_number_unique_in_team")]
        ordering = ["number"]

    @property
    def public_id(self) -> str:
        return f"task-{self.number}"
