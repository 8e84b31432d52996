from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from .views import jobs, pages, teams

urlpatterns = [
    path("", pages.dashboard, name="dashboard"),
    path("live/dashboard/", pages.dashboard_live, name="dashboard-live"),
    path("login/", pages.SignIn.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("me/", pages.account, name="account"),
    path("me/email/", pages.email_set, name="email-set"),
    path("me/email/confirm/<str:token>/", pages.email_confirm, name="email-confirm"),
    path("cli/gpuq", pages.cli_download, name="cli-download"),
    path("me/tokens/", pages.token_create, name="token-create"),
    path("me/tokens/<int:pk>/revoke/", pages.token_revoke, name="token-revoke"),
    path("submit/", jobs.submit, name="submit"),
    path("submit/preview/", jobs.submit_preview, name="submit-preview"),
    path("queue/", pages.queue, name="queue"),
    path("live/queue/", pages.queue_rows, name="queue-live"),
    path("jobs/<uuid:pk>/", jobs.job_detail, name="job"),
    path("jobs/<uuid:pk>/live/", jobs.job_live, name="job-live"),
    path("jobs/<uuid:pk>/array/", jobs.job_array, name="job-array"),
    path("jobs/<uuid:pk>/log/", jobs.job_log, name="job-log"),
    path("jobs/<uuid:pk>/log/download/", jobs.job_log_download, name="job-log-download"),
    path("jobs/<uuid:pk>/cancel/", jobs.job_cancel, name="job-cancel"),
    path("jobs/<uuid:pk>/suspend/", jobs.job_suspend, name="job-suspend"),
    path("jobs/<uuid:pk>/resume/", jobs.job_resume, name="job-resume"),
    path("jobs/<uuid:pk>/update/", jobs.job_update, name="job-update"),
    path("clusters/", pages.clusters, name="clusters"),
    path("live/clusters/", pages.clusters_live, name="clusters-live"),
    path("teams/", teams.teams, name="teams"),
    path("teams/<slug:slug>/", teams.team_admin, name="team-admin"),
    path("teams/<slug:slug>/usage.csv", teams.usage_download, name="team-usage-csv"),
    path("teams/<slug:slug>/members/", teams.member_set, name="team-member-set"),
    path(
        "teams/<slug:slug>/members/<str:username>/remove/",
        teams.member_remove,
        name="team-member-remove",
    ),
    path("teams/<slug:slug>/quotas/", teams.quota_set, name="team-quota-set"),
    path("teams/<slug:slug>/quotas/delete/", teams.quota_delete, name="team-quota-delete"),
]
