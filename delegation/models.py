"""A2A callers' credentials and the tasks they delegate.

A task is a human prompt (mailbox.HumanPrompt) that an outside agent sent
through the Queue adapter; its A2A state is read from the prompt and the
member's session history (delegation/tasks.py), and kept on the row once it
is final.
"""
import uuid
from mailbox.models import HumanPrompt

from django.conf import settings
from django.db import models

from teams.models import Member, Team


class A2ACredential(models.Model):
    """A named, revocable bearer credential an operator gave an outside agent,
    good for the teams it names. ``user`` is the author its prompts carry
    (``<name>@a2a``): it cannot sign in."""

    name = models.SlugField(max_length=63, unique=True)
    token_hash = models.CharField(max_length=64, unique=True)
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="a2a_credential")
    teams = models.ManyToManyField(Team, related_name="a2a_credentials")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"A2A credential {self.name} ({'revoked' if self.revoked_at else 'live'})"


class TaskState(models.TextChoices):
    """The A2A task states Steerboard uses (the wire names are TASK_STATE_<NAME>)."""

    SUBMITTED = "submitted"
    WORKING = "working"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"


FINAL_STATES = (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED)


def task_id_new() -> str:
    return str(uuid.uuid4())


class DelegatedTask(models.Model):
    """One A2A task: the prompt it became, who asked, and (once final) how it ended."""

    id = models.CharField(primary_key=True, max_length=64, default=task_id_new, editable=False)
    context_id = models.CharField(max_length=64)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="a2a_tasks")
    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="a2a_tasks")
    prompt = models.OneToOneField(HumanPrompt, on_delete=models.CASCADE, related_name="a2a_task")
    caller = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="a2a_tasks")
    # The A2A message id the caller gave: its message is the task's history.
    message_id = models.CharField(max_length=128, blank=True, default="")
    # The caller asked for the turn's tool results as further parts of the answer.
    with_tool_results = models.BooleanField(default=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Kept once final; until then the state is read from the prompt and the history.
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.SUBMITTED)
    reason = models.TextField(blank=True, default="")
    answer = models.TextField(blank=True, default="")
    # The turn's tool results (when the caller asked for them), kept with the final state;
    # None: not kept yet (a task settled before this column), read from the history once.
    tool_results = models.JSONField(null=True, blank=True, default=None)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["caller", "-created_at"], name="a2a_task_caller_recent"),
            models.Index(fields=["context_id", "created_at"], name="a2a_task_context"),
        ]
