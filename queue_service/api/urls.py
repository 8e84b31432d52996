from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from . import views

# No `<path>.json` twins of every route: the actions take no `format` argument (each was a
# 500), the schema lists none of them, and JSON is all the API speaks.
router = DefaultRouter()
router.include_format_suffixes = False
router.register("jobs", views.JobViewSet, basename="job")
router.register("teams", views.TeamViewSet, basename="team")
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("priority-classes", views.PriorityClassViewSet, basename="priorityclass")
router.register("tokens", views.TokenViewSet, basename="token")

urlpatterns = [
    path("queue/", views.QueueView.as_view(), name="queue"),
    path("me/", views.MeView.as_view(), name="me"),
    path("", include(router.urls)),
]
