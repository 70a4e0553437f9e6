from django.conf import settings
from django.contrib.auth import views as auth_views
from django.urls import path, re_path
from django.views.generic import RedirectView

from frontend import console_views, views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.team_list, name="team-list"),
    path("teams.json", views.team_list_json, name="team-list-json"),
    path("teams/", RedirectView.as_view(pattern_name="team-list")),  # the list is the front page
    path("teams/<str:team>/", views.team_page, name="team-page"),
    path("teams/<str:team>/snapshot.json", views.team_snapshot_json, name="team-snapshot"),
    path("teams/<str:team>/charts.json", views.team_charts_json, name="team-charts"),
    path("teams/<str:team>/messages/", console_views.team_messages, name="team-messages-page"),
    path("teams/<str:team>/messages.json", console_views.team_messages_json, name="team-messages-json"),
    path("teams/<str:team>/messages/<str:message_id>/", console_views.message_trace, name="message-trace"),
    # The member-messages page of before: redirects to the team messages page filtered by target.
    path("teams/<str:team>/members/<str:member>/messages/", console_views.member_messages, name="member-messages"),
    re_path(r"^%s(?P<path>.+)$" % settings.STATIC_URL.lstrip("/"), views.static_file, name="static-file"),
]
