from django.contrib.auth import views as auth_views
from django.urls import path

from portal.web import views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="auth/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.job_submit_view, name="job-submit"),
    path("jobs/<str:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<str:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("tokens/", views.token_list, name="token-list"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
]
