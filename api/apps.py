from django.apps import AppConfig


class ApiConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "api"

    def ready(self) -> None:
        from api import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from api.revocation import connect_signals

        connect_signals()
