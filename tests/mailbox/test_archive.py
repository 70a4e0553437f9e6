"""A team's export and import (mailbox/operations/archive.py; manage.py team_export / team_import;
GET /api/v1/teams/<team>/export; issue 29 item 4): export → import into a new name → export
gives the same stream but for the team's name and the message and prompt ids the import
replaced; a bad stream is refused whole; the operator's export streams the same lines."""
import io
import json
import re

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command

from accounts.tokens import operator_token_create
from mailbox.engine import delivery, hot_path, queue_adapter
from mailbox.models import HistoryEntry, HumanPrompt, TeamMessage
from teams import services
from teams.models import Member
from tests.support.sends import message_send

pytestmark = pytest.mark.django_db(transaction=True)


def export(team: str, *args: str) -> str:
    out = io.StringIO()
    call_command("team_export", team, *args, stdout=out)
    return out.getvalue()


def a_team_that_ran() -> dict:
    """A team with a roster, a board with a dependency, delivered, pending and cancelled
    messages with a reply thread, histories with a turn and usage, and human prompts."""
    team, lead, _, _ = services.team_create(name="alpha")
    impl = services.member_spawn(lead=lead, name="impl", description="builds", prompt="")
    services.member_spawn(lead=lead, name="reviewer", description="reviews", prompt="")
    first = services.task_create(member=lead, subject="design", description="d", blocked_by=[], write_scopes=["docs/"])
    services.task_create(member=lead, subject="build", description="b", blocked_by=[first.public_id], write_scopes=[])
    services.task_update(member=impl, task_id=first.public_id, expected_revision=1, action="claim")
    delivered = []
    for i in range(5):
        message, _ = message_send(sender=lead, target_name="impl", content=f"step {i}")
        delivered.append(message)
        hot_path.entry_record(member=impl, entry={
            "id": f"in-{i}", "kind": "user_message", "text": message.content,
            "source": {"kind": "team-message", "message_id": message.id, "sender": "lead"},
        })
    hot_path.entry_record(member=impl, entry={"id": "t1", "kind": "turn_start", "turn_id": "turn-1"})
    hot_path.entry_record(member=impl, entry={
        "id": "a1", "kind": "assistant_text", "text": "on it", "turn_id": "turn-1",
        "usage": {"model": "m-1", "input_tokens": 10, "output_tokens": 3},
    })
    reply, _ = message_send(sender=impl, target_name="lead", content="done", reply_to=delivered[0].id)
    waiting, _ = message_send(sender=lead, target_name="reviewer", content="look later")
    dropped, _ = message_send(sender=lead, target_name="reviewer", content="never mind")
    delivery.message_cancel(message=dropped, by="ops")
    author = User.objects.create_user("ops", password="pw")
    prompt = queue_adapter.prompt_store(team_id=team.pk, target_name="impl", author=author, content="hi from a human")
    return {"team": team, "reply": reply, "waiting": waiting, "prompt": prompt}


def ids_of(stream: str) -> list[str]:
    """Every message and prompt id, in the order they first appear."""
    seen: dict[str, None] = {}
    for found in re.finditer(r"(team-message|prompt)-[0-9a-f-]{36}", stream):
        seen.setdefault(found.group(0), None)
    return list(seen)


def test_export_import_export_gives_the_same_stream_but_for_the_ids_and_the_name():
    ran = a_team_that_ran()
    first = export("alpha")
    lines = [json.loads(line) for line in first.splitlines()]
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "export" and kinds[1] == "team" and kinds[-1] == "end"
    assert kinds.count("member") == 3 and kinds.count("task") == 2 and kinds.count("message") == 8
    assert kinds.count("prompt") == 1 and kinds.count("usage") == 1
    assert lines[-1]["counts"]["entry"] == 7
    reply = next(line for line in lines if line.get("id") == ran["reply"].id)
    assert [e["kind"] for e in reply["events"]][0] == "team/message/queued"
    assert reply["reply_to"] == reply["thread_id"]

    out = io.StringIO()
    path = f"/tmp/steerboard-export-{ran['team'].pk}.ndjson"
    with open(path, "w") as f:
        f.write(first)
    call_command("team_import", path, "--team", "beta", "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["counts"]["message"] == 8 and result["lead"]["token"].startswith("sb")
    second = export("beta")

    # Ids are new, each old one replaced by one new one wherever it appears.
    old, new = ids_of(first), ids_of(second)
    assert len(old) == len(new) == 9 and not set(old) & set(new)
    mapped = first
    for a, b in zip(old, new, strict=True):
        mapped = mapped.replace(a, b)
    mapped = mapped.replace('"team": "alpha"', '"team": "beta"').replace('"name": "alpha"', '"name": "beta"')
    assert mapped.splitlines()[1:] == second.splitlines()[1:]

    # The new team is a team: its messages, histories and prompts are its own.
    beta_impl = Member.objects.get(team__name="beta", name="impl")
    assert HistoryEntry.objects.filter(member=beta_impl).count() == 7
    assert TeamMessage.objects.filter(team__name="beta", state="cancelled").count() == 1
    assert HumanPrompt.objects.get(team__name="beta").author.username == "ops"
    assert Member.objects.get(team__name="beta", name="reviewer").session_state == "inactive"
    # The original is untouched.
    assert TeamMessage.objects.filter(team__name="alpha").count() == 8


def test_export_since_leaves_out_what_came_before():
    ran = a_team_that_ran()
    since = ran["waiting"].queued_at.isoformat()
    lines = [json.loads(line) for line in export("alpha", "--since", since).splitlines()]
    messages = [line for line in lines if line["type"] == "message"]
    assert {m["content"] for m in messages} <= {"look later", "never mind"} and messages
    assert sum(line["type"] == "member" for line in lines) == 3  # the roster is always whole


def test_a_bad_stream_is_refused_and_nothing_is_written(tmp_path):
    a_team_that_ran()
    good = export("alpha").splitlines()
    cases = {
        "not json": ["{"],
        "no header": good[1:],
        "another version": [good[0].replace('"version": 1', '"version": 99')] + good[1:],
        "cut short": good[:-1],
        "a member unknown": good[:1] + [line.replace('"sender": "lead"', '"sender": "ghost"') for line in good[1:]],
        "a bad time": good[:1] + [good[1].replace('"created_at": "', '"created_at": "x')] + good[2:],
    }
    for label, lines in cases.items():
        path = tmp_path / "bad.ndjson"
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(CommandError, match="VALIDATION_ERROR"):
            call_command("team_import", str(path), "--team", "gamma")
        assert not Member.objects.filter(team__name="gamma").exists(), label
    with pytest.raises(CommandError, match="TEAM_NAME_TAKEN"):
        path.write_text("\n".join(good) + "\n")
        call_command("team_import", str(path), "--team", "alpha")
    with pytest.raises(CommandError, match="NOT_FOUND"):
        export("nobody")


def test_import_reads_standard_input(monkeypatch):
    a_team_that_ran()
    monkeypatch.setattr("sys.stdin", io.StringIO(export("alpha")))
    out = io.StringIO()
    call_command("team_import", "-", "--team", "restored", stdout=out)
    assert "lead token" in out.getvalue()
    assert TeamMessage.objects.filter(team__name="restored").count() == 8


async def test_an_operator_streams_the_same_export_over_http(api):
    from channels.db import database_sync_to_async

    @database_sync_to_async
    def setup() -> tuple[dict, dict, str]:
        a_team_that_ran()
        operator = User.objects.create_user("op", password="pw")
        operator.groups.add(Group.objects.get_or_create(name="operators")[0])
        viewer = User.objects.create_user("viewer", password="pw")
        return ({"Authorization": f"Token {operator_token_create(user=operator)}"},
                {"Authorization": f"Token {operator_token_create(user=viewer)}"}, export("alpha"))

    ops, viewer, expected = await setup()
    response = await api.http.get("/api/v1/teams/alpha/export", headers=ops)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    streamed = response.text.splitlines()
    assert streamed[1:] == expected.splitlines()[1:]
    assert (await api.http.get("/api/v1/teams/alpha/export", headers=viewer)).status_code == 403
    assert (await api.http.get("/api/v1/teams/alpha/export")).status_code == 401
    missing = await api.http.get("/api/v1/teams/nobody/export", headers=ops)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    bad = await api.http.get("/api/v1/teams/alpha/export?since=yesterday", headers=ops)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "VALIDATION_ERROR"


def test_the_export_holds_one_page_in_memory_however_many_messages(settings, monkeypatch):
    """Bounded memory: exporting five times the messages peaks at about the same memory (one
    page of rows), not five times as much. (Pages of 50 here, so that the test sends few.)"""
    import tracemalloc

    from mailbox.operations import archive
    from mailbox.operations.archive import export_lines

    monkeypatch.setattr(archive, "PAGE", 50)
    PAGE = archive.PAGE

    settings.STEERBOARD = {**settings.STEERBOARD, "MAX_PENDING_PER_TARGET": 100_000}
    team, lead, _, _ = services.team_create(name="big")
    services.member_spawn(lead=lead, name="impl", description="d", prompt="")

    def peak_of_export() -> tuple[int, int]:
        tracemalloc.start()
        count = sum(1 for line in export_lines(team=team) if '"type": "message"' in line)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return count, peak

    def send(n: int) -> None:
        for i in range(n):
            hot_path.message_store(sender=lead, target_name="impl", content=f"message {i} " + "x" * 200)

    send(2 * PAGE)
    small_count, small = peak_of_export()
    send(8 * PAGE)
    large_count, large = peak_of_export()
    assert (small_count, large_count) == (2 * PAGE, 10 * PAGE)
    assert large < 1.5 * small, (small, large)
