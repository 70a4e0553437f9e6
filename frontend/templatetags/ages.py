"""``{% age value "template" %}``: a relative age with the exact time on hover, for templates.

Renders ``<time datetime="ISO" title="exact time" data-ago="template">…</time>``:
in the template ``{ago}`` becomes "3 s ago" and ``{age}`` "3 s" (``"stuck {age}"``
reads "stuck 2 min"). The page module (frontend/static/frontend/ages.js) keeps
every such element current and sets its title to the reader's local time; this
tag renders the same text for the first paint. ``value``: a datetime or an ISO
string. docs/dashboard.md, "Relative ages".
"""
from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html

from teams.wire_format import iso

register = template.Library()


def age_text(seconds: float) -> str:
    """The same words as ages.js's ``age``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        hours, minutes = s // 3600, (s % 3600) // 60
        return f"{hours} h {minutes} min" if minutes and hours < 10 else f"{hours} h"
    return f"{s // 86400} d"


@register.simple_tag
def age(value, template: str = "{ago}", css_class: str = ""):
    if not value:
        return ""
    moment = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    seconds = (timezone.now() - moment).total_seconds()
    text = template.replace("{ago}", "just now" if seconds < 1 else f"{age_text(seconds)} ago").replace(
        "{age}", age_text(seconds)
    )
    utc = moment.astimezone(UTC)
    return format_html(
        '<time datetime="{}" title="{}" data-ago="{}"{}>{}</time>',
        iso(utc),
        utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
        template,
        format_html(' class="{}"', css_class) if css_class else "",
        text,
    )
