"""Sends and entries made on the test's own thread, through the same jobs the writer runs
(mailbox/engine/hot_path.py's sync entry points), for tests that set up a mailbox directly."""
from django.db import connection

from mailbox.engine import hot_path
from mailbox.models import MessageState, TeamMessage


def message_send(*, sender, target_name: str, content: str, reply_to: str = "") -> tuple[TeamMessage, dict]:
    """Stored, then admitted: the stored message as it is now, and its sender's answer."""
    answer = hot_path.message_send_now(sender=sender, target_name=target_name, content=content, reply_to=reply_to)
    return TeamMessage.objects.select_related("sender", "target").get(pk=answer["message_id"]), answer


def messages_store_delivered(*, team_id: int, sender_id: int, target_id: int, count: int, content: str = "old") -> None:
    """``count`` delivered messages with seq 1..count, stored straight into the table in one
    statement (as bench/growth.py's bulk insert): a mailbox with history, for plan tests. The
    caller moves the target's next_seq past them."""
    if connection.vendor == "postgresql":
        series, prefix = f"generate_series(1, {count}) AS s(g)", ""
        stamp = "now() - interval '1 day' + g * interval '1 millisecond'"
    else:
        series, prefix = "s", f"WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {count}) "
        stamp = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 day', '+' || (g / 1000.0) || ' seconds')"
    with connection.cursor() as cursor:
        cursor.execute(
            f"{prefix}INSERT INTO {TeamMessage._meta.db_table} (id, team_id, sender_id, target_id, content, seq, "
            f"thread_id, reply_to, kind, state, attempts, failures, repushes, last_error, created_at, queued_at, "
            f"accepted_at, delivered_at) SELECT 'team-message-stored-{target_id}-' || g, %s, %s, %s, %s || ' ' || g, "
            f"g, '', '', 'message', %s, 1, 0, 0, '', {stamp}, {stamp}, {stamp}, {stamp} FROM {series}",
            [team_id, sender_id, target_id, content, MessageState.DELIVERED],
        )
