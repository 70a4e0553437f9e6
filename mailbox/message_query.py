"""The query a team's messages are read by (docs/api.md, "Messages"): the filters and the
page, with their names and checks. One definition for every surface that lists them:
the operator API (``GET /api/v1/teams/<team>/messages``, mailbox/transports/api/operators.py) and
the console page (frontend/console_views.py), which both hand the result to
mailbox/selectors.py.
"""
from rest_framework import serializers

from mailbox.models import MessageState


class MessageFilterIn(serializers.Serializer):
    """The message filters (docs/api.md), combinable; every one optional."""

    target = serializers.CharField(required=False, allow_blank=True, max_length=63)
    sender = serializers.CharField(required=False, allow_blank=True, max_length=63)
    state = serializers.ChoiceField(choices=MessageState.values, required=False)
    thread = serializers.CharField(required=False, allow_blank=True, max_length=64)
    q = serializers.CharField(required=False, allow_blank=True, max_length=200, trim_whitespace=False)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)

    def filters(self) -> dict:
        data = self.validated_data
        return {key: data.get(key) or None for key in ("target", "sender", "state", "thread", "q", "since", "until")}


class MessageListIn(MessageFilterIn):
    cursor = serializers.CharField(required=False, allow_blank=True, max_length=512)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)
