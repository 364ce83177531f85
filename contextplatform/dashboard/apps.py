from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "contextplatform.dashboard"
    label = "dashboard"
