from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from clusters import services as cluster_services
from clusters.models import Cluster
from teams import services as teams
from workloads import services

DEMO = Path(__file__).resolve().parents[2] / "demo"
CLUSTER = "demo-gpu-cluster"


class Command(BaseCommand):
    help = "Load the demo cluster, queues and workloads (idempotent) and print the admin login."

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=CLUSTER).first()
        if cluster is None:
            cluster = Cluster.objects.create(name=CLUSTER, status=Cluster.Status.RUNNING)
            cluster_services.provision_now(
                cluster, name="default-pool", machine_type="e2-standard-4", node_count=1
            )
            cluster_services.provision_now(
                cluster, name="gpupool", machine_type="g2-standard-24", node_count=3
            )
            # Provisioned by the Celery worker, so the page shows a live operation.
            cluster_services.create_node_pool(
                cluster,
                name="v5e-serving",
                machine_type="ct5lp-hightpu-8t",
                node_count=2,
                tpu_topology="2x4",
            )
        now = timezone.now()
        for name, namespace in (("queues.yaml", None), ("workloads.yaml", "llm")):
            services.apply(
                cluster, (DEMO / name).read_text(), source=name, now=now, namespace=namespace
            )
        self._print_login()
        self._print_team_token()

    def _print_login(self) -> None:
        user_model = get_user_model()
        password_file = settings.VAR_DIR / "admin-password"
        if not user_model.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            user_model.objects.create_superuser("admin", "admin@example.com", password)
            _write_private(password_file, password)
        password = password_file.read_text() if password_file.exists() else "(set earlier)"
        self.stdout.write(f"Admin login: admin / {password}")

    def _print_team_token(self) -> None:
        """Team llm owns namespace llm; its submitter's token goes in var/ for the README's curl."""
        token_file = settings.VAR_DIR / "llm-token"
        if not token_file.exists() or teams.authenticate(token_file.read_text()) is None:
            teams.ensure_team("llm", namespaces=["llm"], members=[("ml-engineer", "submitter")])
            _, token = teams.issue_token(
                get_user_model().objects.get(username="ml-engineer"), name="demo"
            )
            _write_private(token_file, token)
        self.stdout.write(f"API token of team llm (ml-engineer): {token_file.read_text()}")


def _write_private(path: Path, text: str) -> None:
    """A secret for this machine's owner only, in ACCELPLANE_VAR_DIR (wherever it runs from)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)
