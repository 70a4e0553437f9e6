"""The dashboard's views and selectors: who sees what, and how much a page load reads."""
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from frontend import selectors
from frontend.markdown import markdown_html
from mailbox.models import HistoryEntry, HumanPrompt, MessageState, TeamMessage
from teams import services as team_services
from teams.models import Member

pytestmark = pytest.mark.django_db


def _team(name="alpha"):
    team, lead, _, _ = team_services.team_create(name=name)
    impl = team_services.member_spawn(lead=lead, name="implementer", description="d", prompt="p")
    return team, lead, impl


def _messages(team, sender, target, n, *, state=MessageState.DELIVERED, start=1):
    now = timezone.now()
    TeamMessage.objects.bulk_create(
        TeamMessage(
            team=team,
            sender=sender,
            target=target,
            content=f"message **{i}**",
            seq=i,
            state=state,
            queued_at=now - timedelta(seconds=n - i + 2),
            accepted_at=now - timedelta(seconds=n - i + 1),
            delivered_at=(now - timedelta(seconds=n - i)) if state == MessageState.DELIVERED else None,
        )
        for i in range(start, start + n)
    )
    Member.objects.filter(pk=target.pk).update(next_seq=start + n)  # as message_enqueue keeps it


def _user(username, operator):
    user = User.objects.create_user(username, password="pw")
    if operator:
        user.groups.add(Group.objects.get_or_create(name="operators")[0])
    return user


def _entries(member, *entries):
    for i, (kind, data) in enumerate(entries):
        HistoryEntry.objects.create(
            member=member,
            entry_id=f"e{i}",
            kind=kind,
            message_id=(data.get("source") or {}).get("message_id"),
            prompt_id=data.get("prompt_id"),
            data={"id": f"e{i}", "kind": kind, **data},
        )


def test_snapshot_reads_the_same_bounded_windows_for_ten_messages_or_two_thousand():
    def measure(n):
        team, lead, impl = _team(f"team-{n}")
        _messages(team, lead, impl, n)
        _messages(team, lead, impl, 5, state=MessageState.QUEUED, start=n + 1)
        with CaptureQueriesContext(connection) as queries:
            snapshot = selectors.team_snapshot(team=team)
        return snapshot, len(queries)

    small, small_queries = measure(10)
    large, large_queries = measure(2000)
    assert large_queries == small_queries
    impl = next(m for m in large["members"] if m["name"] == "implementer")
    assert impl["counts"] == {"queued": 5, "accepted": 0, "delivered": 2000, "cancelled": 0}
    assert len(impl["messages"]["delivered"]) == selectors.DELIVERED_WINDOW
    assert [m["seq"] for m in impl["messages"]["delivered"]][:2] == [2000, 1999]  # newest first
    assert [m["seq"] for m in impl["messages"]["queued"]] == [2001, 2002, 2003, 2004, 2005]
    assert len(impl["latency"]) == selectors.LATENCY_WINDOW
    assert impl["latency"][-1]["seconds"] == pytest.approx(2.0, abs=0.01)
    assert impl["messages"]["delivered"][0]["html"] == "<p>message <strong>2000</strong></p>\n"


def test_pages_need_a_signed_in_person(client):
    _team()
    for url in ("/", "/teams.json", "/teams/alpha/", "/teams/alpha/snapshot.json"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_operator_gets_controls_and_csrf_token_viewer_gets_neither(client):
    _team()
    client.force_login(_user("viewer", operator=False))
    page = client.get("/teams/alpha/").content.decode()
    assert 'data-action="prompt"' not in page and 'name="csrf-token"' not in page
    assert client.get("/teams/alpha/snapshot.json").json()["me"] == {
        "username": "viewer",
        "role": "viewer",
        "can_act": False,
    }
    client.force_login(_user("op", operator=True))
    page = client.get("/teams/alpha/").content.decode()
    assert 'data-action="prompt"' in page and 'name="csrf-token"' in page
    assert client.get("/teams/alpha/snapshot.json").json()["me"]["can_act"] is True


def test_team_page_forbids_inline_script_and_unknown_team_is_404(client):
    _team()
    client.force_login(_user("viewer", operator=False))
    response = client.get("/teams/alpha/")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert client.get("/teams/nope/").status_code == 404
    assert client.get("/teams/nope/snapshot.json").status_code == 404


def test_a_missing_page_is_a_page_for_a_browser_and_the_apis_json_for_a_program(client):
    _team()
    client.force_login(_user("viewer", operator=False))
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    page = client.get("/teams/nope/", HTTP_ACCEPT=browser)
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
    assert b"/teams/nope/" in page.content and b'<a href="/">All teams</a>' in page.content
    assert b'data-role="viewer">viewer \xc2\xb7 viewer<' in page.content  # who is signed in, as on every page
    assert "script-src 'self'" in page["Content-Security-Policy"]
    for path, accept in [("/teams/nope/", ""), ("/teams/nope/snapshot.json", browser), ("/api/v1/nothing", browser)]:
        answer = client.get(path, HTTP_ACCEPT=accept)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "NOT_FOUND", path
    # The team list is the front page; its old-looking address leads there.
    assert client.get("/teams/")["Location"] == "/"


def test_module_and_stylesheet_are_served_by_django(client):
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # served synchronously too (config/wsgi.py)
        warnings.simplefilter("always")
        js = client.get("/static/frontend/dashboard.js")
        assert b"".join(js.streaming_content)
    assert [str(w.message) for w in caught] == []
    assert js.status_code == 200 and "javascript" in js["Content-Type"]
    css = client.get("/static/frontend/dashboard.css")
    assert css.status_code == 200 and css["Content-Type"].startswith("text/css")
    assert client.get("/static/../config/settings.py").status_code in (400, 404)  # nothing outside static/


def test_member_messages_page_walks_every_message_by_cursor(client):
    team, lead, impl = _team()
    _messages(team, lead, impl, 120)
    client.force_login(_user("viewer", operator=False))
    seen, url = [], "/teams/alpha/members/implementer/messages/?state=delivered"
    while url:
        response = client.get(url, follow=True)  # the old URL redirects to the team messages page
        seen += [m["seq"] for m in response.context["messages"]]
        cursor = response.context["next_cursor"]
        url = f"/teams/alpha/members/implementer/messages/?state=delivered&cursor={cursor}" if cursor else None
    assert seen == list(range(120, 0, -1))


def test_team_list_summarises_statuses_messages_and_open_tasks(client):
    team, lead, impl = _team()
    _messages(team, lead, impl, 3)
    _messages(team, lead, impl, 2, state=MessageState.QUEUED, start=4)
    team_services.task_create(member=lead, subject="s", description="", blocked_by=[], write_scopes=[])
    client.force_login(_user("viewer", operator=False))
    [summary] = client.get("/teams.json").json()["teams"]
    assert summary["messages"] == {"queued": 2, "accepted": 0, "delivered": 3, "cancelled": 0}
    assert summary["open_tasks"] == 1
    assert [(m["name"], m["status"]) for m in summary["members"]] == [
        ("lead", "inactive"),
        ("implementer", "provisioning"),
    ]


def test_timeline_puts_a_steered_message_in_the_step_it_entered_and_a_prompt_in_its_own_turn():
    team, lead, impl = _team()
    _messages(team, lead, impl, 1, state=MessageState.ACCEPTED)
    message_id = TeamMessage.objects.get().pk
    _entries(
        impl,
        ("turn_start", {"turn_id": "t1", "step": 0}),
        ("assistant_text", {"turn_id": "t1", "step": 0, "text": "first"}),
        ("tool_call", {"turn_id": "t1", "step": 1, "name": "team_task_list", "arguments": {}}),
        ("user_message", {"turn_id": "t1", "step": 2, "text": "steer", "source": {"kind": "team-message", "message_id": message_id, "sender": "lead"}}),
        ("assistant_text", {"turn_id": "t1", "step": 2, "text": "ok"}),
        ("turn_end", {"turn_id": "t1", "step": 2}),
        ("turn_start", {"turn_id": "t2", "step": 0}),
        ("prompt", {"turn_id": "t2", "step": 0, "prompt_id": "prompt-1", "text": "human"}),
    )
    rows = list(HistoryEntry.objects.filter(member=impl).order_by("id"))
    turns, current = selectors.timeline_build(rows, status="running")
    assert [(t["turn_id"], t["kind"], t["ended"]) for t in turns] == [("t1", "turn", True), ("t2", "prompt", False)]
    steps = {s["step"]: [e["kind"] for e in s["entries"]] for s in turns[0]["steps"]}
    assert steps == {0: ["turn_start", "assistant_text"], 1: ["tool_call"], 2: ["user_message", "assistant_text", "turn_end"]}
    steered = turns[0]["steps"][2]["entries"][0]
    assert steered["message_id"] == message_id and steered["sender"] == "lead"
    assert turns[1]["prompt_id"] == "prompt-1"
    assert current == {"turn_id": "t2", "kind": "prompt", "step": 0, "started_at": turns[1]["started_at"]}


def test_timeline_without_turn_ids_opens_a_turn_at_each_start_and_each_prompt():
    team, lead, impl = _team()
    _entries(
        impl,
        ("turn_start", {}),
        ("assistant_text", {"text": "a"}),
        ("turn_end", {}),
        ("prompt", {"prompt_id": "prompt-2", "text": "b"}),
        ("assistant_text", {"text": "c"}),
    )
    turns, current = selectors.timeline_build(list(HistoryEntry.objects.filter(member=impl).order_by("id")), status="idle")
    assert [t["kind"] for t in turns] == ["turn", "prompt"]
    assert current is None


@pytest.mark.parametrize(
    "payload, absent",
    [
        ("<script>alert(1)</script>", "<script"),
        ('<img src=x onerror="alert(1)">', "<img"),
        ("[x](javascript:alert(1))", "<a "),
        ('<a href="javascript:alert(1)">x</a>', "<a "),
        ("[x](JaVaScRiPt:alert(1))", "<a "),
        ("<svg onload=alert(1)>", "<svg"),
        ("<iframe src=https://example.com></iframe>", "<iframe"),
    ],
)
def test_markdown_is_rendered_and_raw_html_stays_text(payload, absent):
    html = markdown_html(payload)
    assert absent.lower() not in html.lower()
    assert markdown_html("see [docs](https://example.com) **now**") == (
        '<p>see <a href="https://example.com" rel="noopener noreferrer nofollow">docs</a> <strong>now</strong></p>\n'
    )


def test_timeline_summarises_tool_calls_results_errors_and_why_a_turn_ended():
    team, lead, impl = _team()
    # The author shown is the prompt's (the server's record), not what the entry claims.
    prompt = HumanPrompt.objects.create(team=team, target=impl, author=_user("op", operator=True), content="go")
    _entries(
        impl,
        ("turn_start", {"turn_id": "t", "step": 0, "cause": "prompt"}),
        ("prompt", {"turn_id": "t", "step": 0, "prompt_id": prompt.id, "author": "someone-else", "text": "go"}),
        ("tool_call", {"turn_id": "t", "step": 0, "tool": "team_task_get", "arguments": {"task_id": "task-1"}}),
        ("tool_result", {"turn_id": "t", "step": 0, "tool": "team_task_get", "result": {"task": {"id": "task-1"}}}),
        ("tool_result", {"turn_id": "t", "step": 0, "tool": "team_task_get", "error": {"code": "TASK_NOT_FOUND"}}),
        ("turn_end", {"turn_id": "t", "step": 0, "reason": "done"}),
    )
    [turn], _ = selectors.timeline_build(list(HistoryEntry.objects.filter(member=impl).order_by("id")), status="idle")
    texts = [(e["kind"], e["text"]) for e in turn["steps"][0]["entries"]]
    assert texts == [
        ("turn_start", "prompt"),
        ("prompt", "go"),
        ("tool_call", 'team_task_get({"task_id": "task-1"})'),
        ("tool_result", 'team_task_get → {"task": {"id": "task-1"}}'),
        ("tool_result", 'team_task_get ✗ {"code": "TASK_NOT_FOUND"}'),
        ("turn_end", "done"),
    ]
    assert turn["steps"][0]["entries"][1]["author"] == "op"


def test_team_list_reads_only_pending_messages_however_many_were_delivered():
    def measure(n):
        team, lead, impl = _team(f"list-{n}")
        _messages(team, lead, impl, n)
        with CaptureQueriesContext(connection) as queries:
            overview = selectors.teams_overview()
        return next(t for t in overview if t["team"] == f"list-{n}"), len(queries)

    small, small_queries = measure(3)
    large, large_queries = measure(1500)
    assert large_queries == small_queries
    assert large["messages"] == {"queued": 0, "accepted": 0, "delivered": 1500, "cancelled": 0}


@pytest.mark.django_db(transaction=True)
def test_a_message_delivered_while_the_snapshot_is_read_shows_in_one_column_only():
    """The snapshot reads counts, then each state's list; a delivery committing in
    between showed one message both as queued (or accepted) and as delivered."""
    import threading

    from mailbox.engine import hot_path

    team, lead, impl = _team("moment")
    sent = hot_path.message_store(sender=lead, target_name="implementer", content="hello")
    entry = {"id": "e1", "kind": "user_message", "source": {"kind": "team-message", "message_id": sent.id}}
    delivered_meanwhile = []

    def deliver_after_the_first_read(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not delivered_meanwhile and sql.lstrip().upper().startswith("SELECT"):
            delivered_meanwhile.append(None)
            # Another connection commits the delivery between two of the snapshot's reads.
            worker = threading.Thread(target=deliver)
            worker.start()
            worker.join(30)
        return result

    def deliver():
        try:
            hot_path.entry_record(member=impl, entry=entry)
            delivered_meanwhile[0] = TeamMessage.objects.get(pk=sent.id).state
        finally:
            connection.close()

    with connection.execute_wrapper(deliver_after_the_first_read):
        snapshot = selectors.team_snapshot(team=team)

    assert delivered_meanwhile[0] == MessageState.DELIVERED  # it did commit during the read
    lane = next(m for m in snapshot["members"] if m["name"] == "implementer")
    columns = [state for state, listed in lane["messages"].items() if any(m["id"] == sent.id for m in listed)]
    assert columns == ["queued"]  # the moment the read began
    assert lane["counts"] == {"queued": 1, "accepted": 0, "delivered": 0, "cancelled": 0}
    # The next read sees the delivery.
    lane = next(m for m in selectors.team_snapshot(team=team)["members"] if m["name"] == "implementer")
    assert [m["id"] for m in lane["messages"]["delivered"]] == [sent.id] and lane["counts"]["delivered"] == 1


@pytest.mark.django_db
async def test_a_static_file_reaches_an_asgi_server_whole_and_without_a_warning():
    """Django's ASGI handler (what daphne runs) warns about a synchronous streaming body."""
    import warnings
    from pathlib import Path

    import httpx
    from django.core.handlers.asgi import ASGIHandler

    transport = httpx.ASGITransport(app=ASGIHandler())
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            js = await client.get("/static/frontend/dashboard.js")
            fresh = await client.get("/static/frontend/dashboard.js", headers={"If-Modified-Since": js.headers["Last-Modified"]})
    assert [str(w.message) for w in caught] == []
    expected = (Path(__file__).parents[2] / "frontend/static/frontend/dashboard.js").read_bytes()
    assert js.status_code == 200 and js.content == expected and int(js.headers["Content-Length"]) == len(expected)
    assert js.headers["Cache-Control"] == "no-cache" and "javascript" in js.headers["Content-Type"]
    assert fresh.status_code == 304
