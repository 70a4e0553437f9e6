"""frontend/charts.py: the charts' series come from the database, their axes have real
ticks, outliers are clipped and marked, and the endpoint refuses an unknown window."""
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from frontend import charts
from mailbox.models import MessageState, TeamMessage
from teams import services as team_services
from teams.models import Member

pytestmark = pytest.mark.django_db


def _team():
    team, lead, _, _ = team_services.team_create(name="alpha")
    impl = team_services.member_spawn(lead=lead, name="implementer", description="d", prompt="p")
    return team, lead, impl


def _message(team, sender, target, seq, *, queued_ago, latency=None):
    now = timezone.now()
    queued = now - timedelta(seconds=queued_ago)
    delivered = queued + timedelta(seconds=latency) if latency is not None else None
    TeamMessage.objects.create(
        team=team, sender=sender, target=target, content="m", seq=seq,
        state=MessageState.DELIVERED if delivered else MessageState.QUEUED,
        queued_at=queued, accepted_at=delivered, delivered_at=delivered,
    )
    Member.objects.filter(pk=target.pk).update(next_seq=seq + 1)


def test_the_series_count_deliveries_per_minute_walk_the_depth_back_and_take_percentiles():
    team, lead, impl = _team()
    # Nine deliveries in the last few minutes, 1 s each, and one slow one (60 s).
    for seq in range(1, 10):
        _message(team, lead, impl, seq, queued_ago=200 - seq * 10, latency=1.0)
    _message(team, lead, impl, 10, queued_ago=100, latency=60.0)
    # Two still queued, one of them older than the window.
    _message(team, lead, impl, 11, queued_ago=30)
    _message(team, lead, impl, 12, queued_ago=3 * 3600)
    # An old delivery, outside the 15 min window.
    _message(team, impl, lead, 1, queued_ago=7200, latency=2.0)

    data = charts.chart_series(team=team, window=charts.WINDOWS["15m"])
    impl_series = next(m for m in data["members"] if m["name"] == "implementer")
    lead_series = next(m for m in data["members"] if m["name"] == "lead")
    assert sum(impl_series["rate"]) == 10  # 1-minute buckets: msg/min == messages in that minute
    assert impl_series["numbers"] == {
        "depth": 2, "queued": 2, "accepted": 0, "delivered": 10, "cancelled": 0, "rate": round(10 / 15, 3), "p50": 1.0, "p95": 60.0,
    }
    assert impl_series["depth"][-1] == 2
    assert impl_series["depth"][0] >= 1  # the three-hour-old message was pending all along
    assert lead_series["numbers"]["delivered"] == 0 and lead_series["numbers"]["p50"] is None
    assert [m["color"] for m in data["members"]] == [0, 1]
    assert data["totals"]["numbers"]["delivered"] == 10
    assert len(impl_series["rate"]) == 15 and len(charts.chart_series(team=team, window=charts.WINDOWS["24h"])["members"][0]["rate"]) == 48


def test_the_charts_read_a_bounded_number_of_queries_whatever_the_team_sent():
    team, lead, impl = _team()
    for seq in range(1, 40):
        _message(team, lead, impl, seq, queued_ago=600 - seq * 10, latency=0.5)
    with CaptureQueriesContext(connection) as captured:
        charts.chart_series(team=team, window=charts.WINDOWS["1h"])
    assert len(captured.captured_queries) <= 8


def test_nice_ticks_are_round_and_cover_the_top():
    assert charts.nice_ticks(7, whole=True) == [0, 2, 4, 6, 8]
    assert charts.nice_ticks(0.9) == [0, 0.25, 0.5, 0.75, 1.0]
    assert charts.nice_ticks(130) == [0, 50, 100, 150]
    assert charts.nice_ticks(0, whole=True) == [0, 1]


def test_an_outlier_is_clipped_and_marked_instead_of_flattening_the_rest():
    window = charts.WINDOWS["15m"]
    values = [1.0, 1.2, 0.9, 1.1, 1.0, 1.3, 0.8, 1.0, 1.1, 90.0] + [None] * 5
    svg = charts.svg_chart(kind="latency", window=window, title="t", series=[{"name": "impl", "color": 1, "values": values}])
    y_ticks = re.findall(r'class="tick y-tick" data-tick="([^"]+)"', svg)
    assert len(y_ticks) >= 3 and float(y_ticks[-1]) < 10  # the scale follows the 1 s messages
    assert 'data-clipped="90"' in svg and "above the scale" in svg
    x_ticks = re.findall(r'class="tick x-tick" data-tick="([^"]+)"', svg)
    assert x_ticks == ["−15 min", "−10 min", "−5 min", "now"]
    assert "series c1" in svg
    day = charts.svg_chart(kind="rate", window=charts.WINDOWS["24h"], title="t",
                           series=[{"name": "impl", "color": 1, "values": [0.0] * 47 + [2.0]}])
    day_ticks = re.findall(r'class="tick x-tick" data-tick="([^"]+)"', day)
    assert day_ticks[0] == "−24 h" and day_ticks[-1] == "now"


def test_the_endpoint_answers_each_window_and_refuses_another(client):
    team, lead, impl = _team()
    _message(team, lead, impl, 1, queued_ago=30, latency=2.0)
    client.force_login(User.objects.create_user("viewer", password="pw"))
    for key in ("15m", "1h", "24h"):
        body = client.get(f"/teams/alpha/charts.json?window={key}").json()
        assert body["window"] == key
        assert 'data-chart="msg-rate"' in body["members"][1]["svg"]["rate"]
        assert body["totals"]["numbers"]["p50"] == 2.0
    refused = client.get("/teams/alpha/charts.json?window=7d")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "VALIDATION_ERROR"
    assert client.get("/teams/nope/charts.json").status_code == 404
