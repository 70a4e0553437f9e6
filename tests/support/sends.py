"""Sends and entries made on the test's own thread, through the same jobs the writer runs
(mailbox/hot_path.py's sync entry points), for tests that set up a mailbox directly."""
from mailbox import hot_path
from mailbox.models import TeamMessage


def message_send(*, sender, target_name: str, content: str, reply_to: str = "") -> tuple[TeamMessage, dict]:
    """Stored, then admitted: the stored message as it is now, and its sender's answer."""
    answer = hot_path.message_send_now(sender=sender, target_name=target_name, content=content, reply_to=reply_to)
    return TeamMessage.objects.select_related("sender", "target").get(pk=answer["message_id"]), answer
