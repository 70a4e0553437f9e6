"""The team page's charts: delivered msg/min, pending depth and send→delivered p50/p95
over a window (15 min, 1 h, 24 h), per member and for the team, read from the
database and drawn here as SVG.

Reads (``chart_series``), all index-backed and bounded by the window, never by
how many messages a team ever had:

- deliveries per (target, minute) since the window's start, counted in SQL on the
  (team, delivered_at) index;
- queued messages per (target, minute) on the (team, queued_at) index;
- cancellations per (target, minute), on the partial (team, cancelled_at) index;
- the pending depth now (``mailbox.selectors.member_counts``): the depth over the
  window is walked back from it, bucket by bucket (depth before a bucket = depth
  after it − queued in it + delivered in it + cancelled in it);
- the latencies of the newest ``LATENCY_SAMPLE`` deliveries in the window (the
  same index, newest first): p50 and p95 per bucket and for the window. A window
  with more deliveries than that says ``"sampled": true``.

Drawing (``svg_chart``): a y axis with "nice" ticks (1, 2, 5 × 10ⁿ), an x axis
with ticks at round ages ("−10 min" … "now", so the labels need no time zone);
values far above the rest (over 2.5× the 90th percentile) are clipped at the
top and marked with a ▲ whose title says the real value, instead of flattening
every other point. Series carry the member's colour class ``c<N>`` (its place in
the roster, mod 8), the same the lane and the legend use.
"""
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

from mailbox import selectors as mailbox_selectors
from mailbox.plumbing import db
from mailbox.models import TeamMessage
from teams import selectors as team_selectors
from teams.models import Team
from teams.wire_format import iso

LATENCY_SAMPLE = 5000
COLORS = 8


@dataclass(frozen=True)
class Window:
    key: str
    minutes: int
    bucket_minutes: int
    tick_minutes: int  # x-axis tick spacing

    @property
    def buckets(self) -> int:
        return self.minutes // self.bucket_minutes


WINDOWS = {
    "15m": Window("15m", 15, 1, 5),
    "1h": Window("1h", 60, 2, 15),
    "24h": Window("24h", 24 * 60, 30, 240),
}
DEFAULT_WINDOW = "15m"


def color_of(index: int) -> int:
    return index % COLORS


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1) of unsorted values; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def chart_series(*, team: Team, window: Window, now: datetime | None = None) -> dict:
    """Per member and for the team: msg/min delivered, pending depth and p50/p95 latency
    per bucket over ``window``, and the numbers shown beside the charts."""
    now = now or timezone.now()
    # Buckets end at the next whole minute: a bucket is complete minutes, the last one "now".
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(minutes=window.minutes)
    with db.read_snapshot():
        roster = team_selectors.member_list(team_id=team.pk)
        counts = mailbox_selectors.member_counts(team=team)
        delivered_rows = list(
            TeamMessage.objects.filter(team=team, delivered_at__gte=start)
            .annotate(minute=TruncMinute("delivered_at"))
            .values("target_id", "minute")
            .annotate(n=Count("pk"))
            .order_by()
        )
        queued_rows = list(
            TeamMessage.objects.filter(team=team, queued_at__gte=start)
            .annotate(minute=TruncMinute("queued_at"))
            .values("target_id", "minute")
            .annotate(n=Count("pk"))
            .order_by()
        )
        # Cancelled messages left the pending depth too: the few of them, by their partial index.
        cancelled_rows = list(
            TeamMessage.objects.filter(team=team, cancelled_at__isnull=False, cancelled_at__gte=start)
            .annotate(minute=TruncMinute("cancelled_at"))
            .values("target_id", "minute")
            .annotate(n=Count("pk"))
            .order_by()
        )
        latencies = list(
            TeamMessage.objects.filter(team=team, delivered_at__gte=start)
            .order_by("-delivered_at")
            .values_list("target_id", "queued_at", "delivered_at")[:LATENCY_SAMPLE]
        )

    def bucket_of(moment: datetime) -> int | None:
        i = int((moment - start).total_seconds() // (window.bucket_minutes * 60))
        return i if 0 <= i < window.buckets else None

    ids = [m.pk for m in roster]
    delivered = {pk: [0] * window.buckets for pk in ids}
    queued = {pk: [0] * window.buckets for pk in ids}
    cancelled = {pk: [0] * window.buckets for pk in ids}
    for rows, into in ((delivered_rows, delivered), (queued_rows, queued), (cancelled_rows, cancelled)):
        for row in rows:
            i = bucket_of(row["minute"]) if row["minute"] is not None else None
            if i is not None and row["target_id"] in into:
                into[row["target_id"]][i] += row["n"]
    samples: dict[int, list[list[float]]] = {pk: [[] for _ in range(window.buckets)] for pk in ids}
    for target_id, queued_at, delivered_at in latencies:
        i = bucket_of(delivered_at)
        if i is not None and target_id in samples:
            samples[target_id][i].append(max((delivered_at - queued_at).total_seconds(), 0.0))

    per_minute = 1 / window.bucket_minutes
    members = []
    for index, member in enumerate(roster):
        c = counts.get(member.pk, {"queued": 0, "accepted": 0, "delivered": 0})
        depth_now = c["queued"] + c["accepted"]
        depth = [0] * window.buckets
        level = depth_now
        for i in range(window.buckets - 1, -1, -1):
            depth[i] = level  # the depth at the end of bucket i
            level = max(0, level - queued[member.pk][i] + delivered[member.pk][i] + cancelled[member.pk][i])
        flat = [v for bucket in samples[member.pk] for v in bucket]
        members.append(
            {
                "name": member.name,
                "color": color_of(index),
                "status": member.status,
                "rate": [round(n * per_minute, 3) for n in delivered[member.pk]],
                "depth": depth,
                "p50": [_round(percentile(b, 0.5)) for b in samples[member.pk]],
                "p95": [_round(percentile(b, 0.95)) for b in samples[member.pk]],
                "numbers": {
                    "depth": depth_now,
                    "queued": c["queued"],
                    "accepted": c["accepted"],
                    "delivered": sum(delivered[member.pk]),
                    "cancelled": sum(cancelled[member.pk]),
                    "rate": round(sum(delivered[member.pk]) / window.minutes, 3),
                    "p50": _round(percentile(flat, 0.5)),
                    "p95": _round(percentile(flat, 0.95)),
                },
            }
        )
    team_samples = [[v for pk in ids for v in samples[pk][i]] for i in range(window.buckets)]
    team_flat = [v for bucket in team_samples for v in bucket]
    team_delivered = [sum(delivered[pk][i] for pk in ids) for i in range(window.buckets)]
    return {
        "team": team.name,
        "window": window.key,
        "windows": list(WINDOWS),
        "generated_at": iso(now),
        "start": iso(start),
        "end": iso(end),
        "bucket_seconds": window.bucket_minutes * 60,
        "sampled": len(latencies) == LATENCY_SAMPLE,
        "members": members,
        "totals": {
            "rate": [round(n * per_minute, 3) for n in team_delivered],
            "depth": [sum(m["depth"][i] for m in members) for i in range(window.buckets)],
            "p50": [_round(percentile(b, 0.5)) for b in team_samples],
            "p95": [_round(percentile(b, 0.95)) for b in team_samples],
            "numbers": {
                "depth": sum(m["numbers"]["depth"] for m in members),
                "delivered": sum(team_delivered),
                "cancelled": sum(m["numbers"]["cancelled"] for m in members),
                "rate": round(sum(team_delivered) / window.minutes, 3),
                "p50": _round(percentile(team_flat, 0.5)),
                "p95": _round(percentile(team_flat, 0.95)),
            },
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)




# ------------------------------------------------------------------------------ drawing
def nice_ticks(top: float, *, count: int = 4, whole: bool = False) -> list[float]:
    """0 and evenly spaced round values (1, 2, 5 × 10ⁿ) up to at least ``top``."""
    if top <= 0:
        return [0, 1]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if whole:
        step = max(1, math.ceil(step))
    ticks = [0.0]
    while ticks[-1] < top - 1e-9:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def clip_top(values: list[float]) -> float:
    """The top of the y axis: the largest value, unless a few lie far above the rest
    (over 2.5× the 90th percentile); then 1.5× that percentile, and those are clipped."""
    present = [v for v in values if v is not None]
    if not present:
        return 0
    top = max(present)
    p90 = percentile([v for v in present if v > 0], 0.9) or 0
    if len(present) >= 5 and p90 > 0 and top > 2.5 * p90:
        return p90 * 1.5
    return top


def fmt_seconds(value: float) -> str:
    if value == 0:
        return "0"
    if value < 1:
        return f"{round(value * 1000)} ms"
    if value < 120:
        return f"{value:.1f} s".replace(".0 s", " s")
    return f"{value / 60:.1f} min".replace(".0 min", " min")


def fmt_number(value: float) -> str:
    if value == int(value):
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".") if value < 10 else f"{value:.1f}".rstrip("0").rstrip(".")


def age_label(minutes: int) -> str:
    if minutes == 0:
        return "now"
    return f"−{minutes // 60} h" if minutes % 60 == 0 and minutes >= 60 else f"−{minutes} min"


UNITS = {
    "rate": ("msg/min", fmt_number, False),
    "depth": ("pending", fmt_number, True),
    "latency": ("send → delivered", fmt_seconds, False),
}
# The svg's data-chart (docs/dashboard.md): "latency" already names the recent-deliveries scatter.
HOOKS = {"rate": "msg-rate", "depth": "pending-depth", "latency": "latency-percentiles"}
WIDTH, HEIGHT = 320, 150
LEFT, RIGHT, TOP, BOTTOM = 46, 10, 10, 22


def svg_chart(*, kind: str, window: Window, series: list[dict], title: str) -> str:
    """One chart: ``series`` is [{"name", "color", "values", "dashed"?}], one value per bucket (None: no point)."""
    unit, fmt, whole = UNITS[kind]
    values = [v for s in series for v in s["values"] if v is not None]
    top = clip_top(values)
    ticks = nice_ticks(top, whole=whole)
    y_max = ticks[-1] or 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = window.buckets

    def x(i: float) -> float:
        return LEFT + (i + 1) / n * plot_w  # a bucket's point sits at its end

    def y(v: float) -> float:
        return TOP + (1 - min(v, y_max) / y_max) * plot_h

    label = f"{title}, last {window.key}"
    out = [
        f'<svg class="chart-svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}" '
        f'data-chart="{HOOKS[kind]}" data-window="{window.key}" data-y-max="{fmt_number(y_max)}">',
        f"<title>{escape(label)}</title>",
    ]
    for t in ticks:
        out.append(
            f'<g class="tick y-tick" data-tick="{fmt_number(t)}"><line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" '
            f'y1="{y(t):.1f}" y2="{y(t):.1f}"/><text class="axis" x="{LEFT - 4}" y="{y(t) + 3.5:.1f}" '
            f'text-anchor="end">{escape(fmt(t))}</text></g>'
        )
    for ago in range(window.minutes, -1, -window.tick_minutes):
        px = LEFT + (1 - ago / window.minutes) * plot_w
        anchor = "start" if ago == window.minutes else ("end" if ago == 0 else "middle")
        out.append(
            f'<g class="tick x-tick" data-tick="{escape(age_label(ago))}"><line class="axis-line" x1="{px:.1f}" '
            f'x2="{px:.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 4}"/><text class="axis" x="{px:.1f}" '
            f'y="{HEIGHT - 6}" text-anchor="{anchor}">{escape(age_label(ago))}</text></g>'
        )
    out.append(f'<line class="axis-line" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}"/>')
    if not values:
        out.append(
            f'<text class="axis empty-note" x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle">'
            f"nothing in the last {window.key}</text>"
        )
    for s in series:
        cls = f"series c{s['color']}" + (" dashed" if s.get("dashed") else "")
        run: list[str] = []
        runs: list[list[str]] = []
        for i, v in enumerate(s["values"]):
            if v is None:
                if run:
                    runs.append(run)
                run = []
                continue
            run.append(f"{x(i):.1f},{y(v):.1f}")
        if run:
            runs.append(run)
        for points in runs:
            if len(points) > 1:
                out.append(f'<polyline class="{cls} line" points="{" ".join(points)}"/>')
        for i, v in enumerate(s["values"]):
            if v is None:
                continue
            tip = escape(f"{s['name']}: {fmt(v)} {unit if kind != 'latency' else ''}".strip())
            if v > y_max:
                out.append(
                    f'<path class="{cls} clipped" data-clipped="{fmt_number(v)}" '
                    f'd="M{x(i) - 4:.1f},{TOP + 6} L{x(i):.1f},{TOP - 1} L{x(i) + 4:.1f},{TOP + 6} Z">'
                    f"<title>{tip} (above the scale)</title></path>"
                )
            elif len(s["values"]) <= 60 and (kind == "latency" or v):
                out.append(f'<circle class="{cls} dot" cx="{x(i):.1f}" cy="{y(v):.1f}" r="2"><title>{tip}</title></circle>')
    out.append("</svg>")
    return "".join(out)


def charts_view(*, team: Team, window: Window, now: datetime | None = None) -> dict:
    """The JSON the page polls: the series, the numbers and each chart's SVG."""
    data = chart_series(team=team, window=window, now=now)
    for member in data["members"]:
        color = member["color"]
        member["svg"] = {
            "rate": svg_chart(kind="rate", window=window, title=f"{member['name']}: delivered msg/min",
                              series=[{"name": member["name"], "color": color, "values": member["rate"]}]),
            "depth": svg_chart(kind="depth", window=window, title=f"{member['name']}: pending depth",
                               series=[{"name": member["name"], "color": color, "values": member["depth"]}]),
            "latency": svg_chart(kind="latency", window=window, title=f"{member['name']}: send → delivered p50 and p95",
                                 series=[{"name": f"{member['name']} p50", "color": color, "values": member["p50"]},
                                         {"name": f"{member['name']} p95", "color": color, "values": member["p95"],
                                          "dashed": True}]),
        }
    members = data["members"]
    totals = data["totals"]
    totals["svg"] = {
        "rate": svg_chart(kind="rate", window=window, title="Team: delivered msg/min per member",
                          series=[{"name": m["name"], "color": m["color"], "values": m["rate"]} for m in members]),
        "depth": svg_chart(kind="depth", window=window, title="Team: pending depth per member",
                           series=[{"name": m["name"], "color": m["color"], "values": m["depth"]} for m in members]),
        "latency": svg_chart(kind="latency", window=window, title="Team: send → delivered p50 and p95",
                             series=[{"name": "team p50", "color": "team", "values": totals["p50"]},
                                     {"name": "team p95", "color": "team", "values": totals["p95"], "dashed": True}]),
    }
    return data
