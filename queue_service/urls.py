from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from queue_service.api.errors import not_found

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("queue_service.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    # Whatever else is under api/ answers in JSON (a 404, or a 308 to the slashed path).
    re_path(r"^api/", not_found, name="api-not-found"),
    path("", include("frontend.urls")),
]

handler400 = "queue_service.api.errors.bad_request"
handler500 = "queue_service.api.errors.server_error"
