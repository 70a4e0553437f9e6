"""The dashboard's pages and the JSON the page module re-reads. Thin: look up, call a selector, render.

Operators act through the operator REST API (mailbox.transports.api.operators) with the
session and its CSRF token; these views only read.
"""
import functools

from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.static import serve

from accounts.authentication import token_or_login_required
from accounts.operators import is_operator
from frontend import charts, selectors
from mailbox.transports.api import errors as api_errors
from mailbox.transports.api.errors import error_json
from teams import selectors as team_selectors
from teams.errors import ErrorCode, TeamError
from teams.models import Team

# The page needs nothing from elsewhere and runs no inline script: message
# content that slipped past the sanitiser still could not execute.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def content_security_policy(view):
    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        response.headers.setdefault("Content-Security-Policy", CSP)
        return response

    return wrapped


def _team_or_404(name: str) -> Team:
    try:
        return team_selectors.team_get(name=name)
    except TeamError:
        raise Http404(f"No team named {name!r}.")


def _viewer(request) -> dict:
    operator = is_operator(request.user)
    return {"username": request.user.get_username(), "role": "operator" if operator else "viewer", "can_act": operator}


@require_GET
@login_required
@content_security_policy
def team_list(request):
    return render(
        request,
        "frontend/team_list.html",
        {"teams": selectors.teams_overview(), "me": _viewer(request), "page": "teams"},
    )


@require_GET
@login_required
@never_cache
def team_list_json(request):
    return JsonResponse({"teams": selectors.teams_overview(), "me": _viewer(request)})


@require_GET
@login_required
@content_security_policy
def team_page(request, team):
    found = _team_or_404(team)
    snapshot = {**selectors.team_snapshot(team=found), "me": _viewer(request)}
    return render(
        request,
        "frontend/team.html",
        {"team": found, "snapshot": snapshot, "me": snapshot["me"], "page": "team"},
    )


@require_GET
@token_or_login_required  # scripts: Authorization: Token <operator token> (docs/api.md)
@never_cache
def team_snapshot_json(request, team):
    found = _team_or_404(team)
    return JsonResponse({**selectors.team_snapshot(team=found), "me": _viewer(request)})


@require_GET
@token_or_login_required
@never_cache
def team_charts_json(request, team):
    """The charts' series, numbers and SVG for ``?window=15m|1h|24h`` (frontend/charts.py)."""
    found = _team_or_404(team)
    key = request.GET.get("window") or charts.DEFAULT_WINDOW
    window = charts.WINDOWS.get(key)
    if window is None:
        return error_json(TeamError(ErrorCode.VALIDATION_ERROR, f"window is one of {', '.join(charts.WINDOWS)}."))
    return JsonResponse(charts.charts_view(team=found, window=window))


def static_file(request, path):
    """The module and the stylesheet (and any app's static files), served by Django itself."""
    found = finders.find(path)
    if not found:
        raise Http404(path)
    root = found[: -len(path)] if found.endswith(path) else None
    if root is None:
        raise Http404(path)
    response = serve(request, path, document_root=root)
    response.headers["Cache-Control"] = "no-cache"
    if response.streaming and isinstance(request, ASGIRequest):
        # Read here, on the view's thread (a static file is small), and handed to daphne as
        # an asynchronous iterator: Django's ASGI handler warns about a synchronous one on
        # every response (and then reads it whole on a thread anyway).
        response.streaming_content = _whole(b"".join(response.streaming_content))
    return response


async def _whole(body: bytes):
    yield body


# The paths whose clients are programs: they get the API's JSON error whatever they accept.
_PROGRAM_PATHS = ("/api/", "/mcp", "/a2a/", "/.well-known/", "/ws/", "/static/", "/metrics", "/healthz", "/readyz")


@content_security_policy
def not_found(request, exception=None):
    """A page a browser asked for that does not exist (a team that is gone, a mistyped
    address) is answered with a page that leads back to the teams; everything else, as
    the API answers it: ``NOT_FOUND`` in JSON."""
    program = request.path.startswith(_PROGRAM_PATHS) or request.path.endswith(".json")
    if "text/html" in request.headers.get("Accept", "") and not program:
        me = _viewer(request) if request.user.is_authenticated else None
        return render(request, "404.html", {"path": request.path, "me": me}, status=404)
    return api_errors.not_found(request, exception)
