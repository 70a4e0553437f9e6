from django.conf import settings
from django.contrib.auth import views as auth_views
from django.urls import path, re_path

from frontend import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.team_list, name="team-list"),
    path("teams.json", views.team_list_json, name="team-list-json"),
    path("teams/<str:team>/", views.team_page, name="team-page"),
    path("teams/<str:team>/snapshot.json", views.team_snapshot_json, name="team-snapshot"),
    path("teams/<str:team>/charts.json", views.team_charts_json, name="team-charts"),
    path("teams/<str:team>/members/<str:member>/messages/", views.member_messages, name="member-messages"),
    re_path(r"^%s(?P<path>.+)$" % settings.STATIC_URL.lstrip("/"), views.static_file, name="static-file"),
]
