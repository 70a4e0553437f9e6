from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from mailbox.operations import health
from mailbox.transports.api import metrics

urlpatterns = [
    # For load balancers and orchestrators: unauthenticated, cheap, JSON (docs/deployment.md).
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Prometheus: an operator's token or an allowed address (docs/operations.md, "Monitoring").
    path("metrics", metrics.metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("mailbox.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include("frontend.urls")),
]

handler404 = "frontend.views.not_found"  # a page for a browser, the API's JSON for the rest
handler500 = "mailbox.transports.api.errors.server_error"
