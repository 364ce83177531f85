"""Per-session token spend and reservations for the gateway's session budgets."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("routing", "0003_route_upstreams_name_deployments")]

    operations = [
        migrations.CreateModel(
            name="SessionSpend",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("session_key", models.CharField(max_length=200)),
                ("user_id", models.CharField(blank=True, default="", max_length=200)),
                ("spent", models.BigIntegerField(default=0)),
                ("reserved", models.BigIntegerField(default=0)),
                ("updated_at", models.DateTimeField()),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("session_key", "user_id"), name="session_spend_session_user_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(spent__gte=0, reserved__gte=0),
                        name="session_spend_not_negative",
                    ),
                ],
            },
        ),
    ]
