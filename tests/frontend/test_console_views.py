"""The console's pages without a browser: the trace page, the team messages page and its
filters, the old member-messages URL, Needs attention in the snapshot and on the team list."""
import json
import re
from datetime import UTC, timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from frontend import attention, selectors
from mailbox.engine import delivery, hot_path, lead_log, queue_adapter
from mailbox.members import asks
from tests.support.sends import message_send
from mailbox.models import HostPresence, HumanPrompt, LeadLogRecord, LogKind, MessageState, PromptState, TeamMessage
from teams import services as team_services
from teams.models import Member, Phase, SessionState
from teams.wire_format import iso

pytestmark = pytest.mark.django_db


def _team(name="alpha"):
    team, lead, _, _ = team_services.team_create(name=name)
    coder = team_services.member_spawn(lead=lead, name="coder", description="d", prompt="")
    return team, lead, coder


def _viewer(client):
    client.force_login(User.objects.create_user("watcher", password="pw"))


def _ages(html: str) -> list[tuple[str, str, str, str]]:
    """Each relative age (``{% age %}``) in ``html``: (datetime, title, data-ago, text)."""
    return re.findall(r'<time datetime="([^"]+)" title="([^"]+)" data-ago="([^"]+)">([^<]*)</time>', html)


def _event_rows(html: str) -> dict[str, str]:
    """The trace's rows in order, by event kind."""
    return dict(re.findall(r'<tr data-event="(\w+)"(.*?)</tr>', html, re.S))


def test_the_trace_page_lists_each_event_as_a_row_in_order(client):
    team, lead, coder = _team()
    message, _ = message_send(sender=lead, target_name="coder", content="parse **it**")
    # The queued record two minutes back: its row reads "2 min ago", the exact time on hover.
    queued_at = timezone.now() - timedelta(seconds=125)
    LeadLogRecord.objects.filter(message_id=message.id, kind=LogKind.MESSAGE_QUEUED).update(created_at=queued_at)
    _viewer(client)
    page = client.get(f"/teams/alpha/messages/{message.id}/")
    assert page.status_code == 200
    html = page.content.decode()
    rows = _event_rows(html)
    assert list(rows) == ["queued", "failed"]
    assert "no host" in rows["failed"] and "<strong>it</strong>" in html
    assert 'data-delivered-by=""' in html
    exact = queued_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert _ages(rows["queued"]) == [(iso(queued_at), exact, "{ago}", "2 min ago")]
    [(_, _, template, text)] = _ages(rows["failed"])
    # A record of this very request: its age in whole seconds, at most the time since it was written.
    failed_at = LeadLogRecord.objects.get(message_id=message.id, kind=LogKind.MESSAGE_FAILED).created_at
    since = (timezone.now() - failed_at).total_seconds()
    assert template == "{ago}"
    assert text == "just now" or (re.fullmatch(r"\d+ s ago", text) and 1 <= int(text.split()[0]) <= since), text
    # The time since the previous event stays in exact seconds.
    assert re.findall(r'data-since-previous="([\d.]*)"', html)[0] == ""
    since = re.search(r'data-since-previous="([\d.]+)">\+[\d.]+ s<', rows["failed"]).group(1)
    assert float(since) == pytest.approx(125, abs=1)

    # Delivered: the entry that carries it has an age too, never a raw ISO time.
    hot_path.entry_record(member=coder, entry={"id": "t1", "kind": "turn_start", "turn_id": "turn-1"})
    hot_path.entry_record(member=coder, entry={
        "id": "m1", "kind": "user_message", "text": "parse it",
        "source": {"kind": "team-message", "message_id": message.id, "sender": "lead"},
    })
    html = client.get(f"/teams/alpha/messages/{message.id}/").content.decode()
    rows = _event_rows(html)
    assert list(rows) == ["queued", "failed", "delivered"]
    assert [[t[2] for t in _ages(row)] for row in rows.values()] == [["{ago}"]] * 3  # one age a row
    by = re.search(r'<p data-delivered-by="m1">.*?</p>', html, re.S).group(0)
    [(at, title, template, text)] = _ages(by)
    assert template == "entered {ago}" and text in ("entered just now", "entered 1 s ago")
    assert title.endswith(" UTC") and at.endswith("Z") and at not in re.sub(r"<[^>]+>", "", by)
    assert 'data-turn-id="turn-1"' in by
    assert client.get("/teams/alpha/messages/team-message-nope/").status_code == 404


def test_the_traces_last_row_says_where_an_undelivered_message_is_now_and_why(client):
    team, lead, coder = _team()
    message, _ = message_send(sender=lead, target_name="coder", content="waiting")
    delivery.messages_retry(messages=[TeamMessage.objects.get(pk=message.id)], by="op")
    _viewer(client)
    html = client.get(f"/teams/alpha/messages/{message.id}/").content.decode()
    # The events end on the retry; the row after them says it still waits, and why.
    assert list(_event_rows(html)) == ["queued", "failed", "retried"]
    now = re.search(r'<tr data-now data-state="(\w+)".*?</tr>', html, re.S)
    assert now and now.group(1) == "queued" and html.rindex("<tr") == now.start()
    reason = re.search(r"<td class=\"small\" data-now-reason>([^<]*)</td>", now.group(0)).group(1)
    assert "coder is provisioning and no host is connected" in reason
    trace = lead_log.message_trace(message=TeamMessage.objects.get(pk=message.id))
    assert trace["now"]["state"] == "queued" and trace["now"]["reason"] == reason
    assert trace["now"]["since"] == iso(TeamMessage.objects.get(pk=message.id).queued_at)

    # Accepted (a session took the push): it waits for the session to record it.
    TeamMessage.objects.filter(pk=message.id).update(state=MessageState.ACCEPTED, accepted_at=timezone.now(), last_error="")
    html = client.get(f"/teams/alpha/messages/{message.id}/").content.decode()
    assert 'data-now data-state="accepted"' in html and "pushed to coder; delivered once coder&#x27;s session" in html

    # Delivered: the last event says it all, and no "now" row follows it.
    hot_path.entry_record(member=coder, entry={
        "id": "m1", "kind": "user_message", "text": "waiting",
        "source": {"kind": "team-message", "message_id": message.id, "sender": "lead"},
    })
    html = client.get(f"/teams/alpha/messages/{message.id}/").content.decode()
    assert list(_event_rows(html))[-1] == "delivered" and "data-now" not in html
    now = lead_log.message_trace(message=TeamMessage.objects.get(pk=message.id))["now"]
    assert now["state"] == "delivered" and now["reason"] == "in coder's history"


def test_the_team_messages_page_takes_the_filters_from_its_url(client):
    team, lead, coder = _team()
    message_send(sender=lead, target_name="coder", content="alpha beta")
    message_send(sender=lead, target_name="coder", content="gamma")
    _viewer(client)
    page = client.get("/teams/alpha/messages/?state=queued&sender=lead&q=BETA")
    assert page.status_code == 200
    assert [m["html"] for m in page.context["messages"]] == ["<p>alpha beta</p>\n"]
    assert page.context["given"]["q"] == "BETA"
    live = client.get("/teams/alpha/messages.json?state=queued&sender=lead&q=BETA").json()
    assert [m["id"] for m in live["messages"]] == [m["id"] for m in page.context["messages"]]
    bad = client.get("/teams/alpha/messages/?state=lost")
    assert bad.status_code == 400 and b'data-filter-error="state"' in bad.content
    assert client.get("/teams/alpha/messages.json?since=never").status_code == 400
    # The old member-messages URL lands on the same page, filtered by target.
    old = client.get("/teams/alpha/members/coder/messages/?state=queued")
    assert old.status_code == 302 and old["Location"] == "/teams/alpha/messages/?target=coder&state=queued"


def test_needs_attention_lists_stuck_messages_failed_members_and_the_team_list_counts_them(client, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "ATTENTION_AFTER": 5.0}
    team, lead, coder = _team()
    fresh, _ = message_send(sender=lead, target_name="coder", content="just sent")
    stuck, _ = message_send(sender=lead, target_name="coder", content="waiting")
    TeamMessage.objects.filter(pk=stuck.pk).update(queued_at=timezone.now() - timedelta(seconds=60))
    found = attention.team_attention(team=team)
    by_kind = {(i["kind"], i.get("message_id") or i["member"]) for i in found["items"]}
    assert ("message", stuck.id) in by_kind and ("message", fresh.id) not in by_kind
    # The coder has no session and the team no host: unreachable, with messages waiting for it.
    assert ("member", "coder") in by_kind
    item = next(i for i in found["items"] if i.get("message_id") == stuck.id)
    assert item["seconds"] >= 59 and "no host" in item["error"] and item["state"] == MessageState.QUEUED
    assert found["due_at"] is not None  # the fresh one crosses the threshold later

    Member.objects.filter(pk=coder.pk).update(phase=Phase.FAILED)
    _viewer(client)
    [summary] = client.get("/teams.json").json()["teams"]
    assert summary["attention"] == 2  # the stuck message and the failed member
    shown = selectors.team_snapshot(team=team)["attention"]
    assert shown["count"] == 2
    assert next(i for i in shown["items"] if i["kind"] == "member")["reason"] == "failed to start"
    # The team list page carries the same overview for dashboard.js to draw its cards from.
    page = client.get("/").content.decode()
    embedded = json.loads(page.split('<script id="teams-data" type="application/json">')[1].split("</script>")[0])
    assert embedded[0]["attention"] == 2


def test_the_team_list_and_the_team_page_count_the_same_items_unreachable_members_included(client, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "ATTENTION_AFTER": 5.0}
    team, lead, coder = _team()
    reviewer = team_services.member_spawn(lead=lead, name="reviewer", description="d", prompt="")
    other, _, _ = _team("beta")  # a second team on the same list, with nothing to look at
    for target in ("coder", "coder", "reviewer"):
        message_send(sender=lead, target_name=target, content="waiting")
    TeamMessage.objects.filter(team=team).update(queued_at=timezone.now() - timedelta(seconds=60))
    fresh, _ = message_send(sender=lead, target_name="reviewer", content="just sent")
    _viewer(client)

    def both() -> tuple[dict, dict]:
        listed = {t["team"]: t["attention"] for t in client.get("/teams.json").json()["teams"]}
        return listed, {t.name: attention.team_attention(team=t)["count"] for t in (team, other)}

    # Three stuck messages, and two members with no session and no host: unreachable.
    listed, shown = both()
    assert listed == shown == {"alpha": 5, "beta": 0}
    # A host connected: it can start them, so they are no longer unreachable (on both).
    HostPresence.objects.create(team=team, channel="host-test")
    listed, shown = both()
    assert listed == shown == {"alpha": 3, "beta": 0}
    HostPresence.objects.filter(team=team).delete()
    # A failed member counts once, whatever waits for it; a delivered message no longer counts.
    Member.objects.filter(pk=reviewer.pk).update(phase=Phase.FAILED)
    TeamMessage.objects.filter(pk=fresh.pk).update(state=MessageState.DELIVERED)
    listed, shown = both()
    assert listed == shown == {"alpha": 5, "beta": 0}
    # A member with a turn open and nothing recorded for STALL_AFTER: stalled, on both.
    settings.STEERBOARD = {**settings.STEERBOARD, "STALL_AFTER": 30.0}
    Member.objects.filter(pk=lead.pk).update(
        phase=Phase.ACTIVE, session_state=SessionState.RUNNING, status_changed_at=timezone.now() - timedelta(minutes=5))
    listed, shown = both()
    assert listed == shown == {"alpha": 6, "beta": 0}
    # A question to a person: one more, on both.
    asks.ask_create(member=coder, question="Ship it?", options=[])
    listed, shown = both()
    assert listed == shown == {"alpha": 7, "beta": 0}


def test_a_prompt_waiting_for_a_member_needs_attention_past_the_threshold(client, settings):
    settings.STEERBOARD = {**settings.STEERBOARD, "ATTENTION_AFTER": 5.0}
    team, lead, coder = _team()
    alice = User.objects.create_user("alice", password="pw")
    # The coder has no session and the team no host: the prompts stay queued.
    waiting = queue_adapter.prompt_submit(team_id=team.pk, target_name="coder", author=alice, content="Status?")
    fresh = queue_adapter.prompt_submit(team_id=team.pk, target_name="coder", author=alice, content="And then?")
    HumanPrompt.objects.filter(pk=waiting.pk).update(created_at=timezone.now() - timedelta(seconds=90))
    assert HumanPrompt.objects.get(pk=waiting.pk).state == PromptState.QUEUED

    found = attention.team_attention(team=team)
    prompts = [i for i in found["items"] if i["kind"] == "prompt"]
    assert [i["prompt_id"] for i in prompts] == [waiting.id]  # the fresh one has not waited long enough
    [item] = prompts
    assert (item["member"], item["author"], item["error"]) == ("coder", "alice", "")
    assert item["seconds"] >= 89 and item["since"] == iso(HumanPrompt.objects.get(pk=waiting.pk).created_at)
    fresh_due = HumanPrompt.objects.get(pk=fresh.pk).created_at + timedelta(seconds=5)
    assert found["due_at"] == iso(fresh_due)  # the page reads again when the fresh one crosses it
    # A prompt waiting that long also makes its member, with no session and no host, unreachable.
    assert {(i["kind"], i["member"]) for i in found["items"]} == {("prompt", "coder"), ("member", "coder")}

    _viewer(client)
    [summary] = client.get("/teams.json").json()["teams"]
    assert summary["attention"] == 2  # the team list counts what the team page lists: the prompt and the member
    page = client.get("/teams/alpha/").content.decode()
    snapshot = json.loads(page.split('<script id="snapshot" type="application/json">')[1].split("</script>")[0])
    assert [i.get("prompt_id") for i in snapshot["attention"]["items"] if i["kind"] == "prompt"] == [waiting.id]

    # Once the member takes it (its prompt turn started), it no longer waits.
    HumanPrompt.objects.filter(pk__in=[waiting.pk, fresh.pk]).update(state=PromptState.STARTED)
    assert not [i for i in attention.team_attention(team=team)["items"] if i["kind"] == "prompt"]
