"""A checkpoint token cannot be forged without the key, nor used on another team's job
(issue 13, finding 6: with the old public default key anyone could sign one)."""

from __future__ import annotations

import pytest
from django.core import signing
from rest_framework.test import APIClient

from api.workloads import CHECKPOINT_SALT
from tests.api.conftest import alice, bob, tenants  # noqa: F401 (fixtures)
from tests.api.test_workloads import post_manifests
from tests.support import job
from workloads.models import Checkpoint

OLD_PUBLIC_KEY = "insecure-embedded-key-set-SECRET_KEY-in-production"


def trainer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def submit_job(client, namespace: str, name: str) -> int:
    text = job(name=name).replace("team-llm", f"team-{namespace}")
    response = post_manifests(client, text, namespace=namespace)
    assert response.status_code == 201, response.json()
    return response.json()["objects"][0]["id"]


@pytest.fixture
def vision_job(bob):  # noqa: F811
    return submit_job(bob, "vision", "vision-train")


@pytest.mark.parametrize("value", ["object-{pk}", "vision/{pk}"])
def test_a_token_forged_with_the_old_public_key_is_refused(vision_job, value):
    forged = signing.Signer(key=OLD_PUBLIC_KEY, salt=CHECKPOINT_SALT).sign(
        value.format(pk=vision_job)
    )

    response = trainer(forged).post(
        f"/api/v1/workloads/{vision_job}/checkpoints", {"step": 1}, format="json"
    )

    assert response.status_code == 401
    assert not Checkpoint.objects.exists()


def test_a_token_of_team_a_job_is_refused_on_team_b_job(alice, bob):  # noqa: F811
    llm_job = submit_job(alice, "llm", "llm-train")  # first: admitted, it may save checkpoints
    vision_job = submit_job(bob, "vision", "vision-train")
    token = alice.get(f"/api/v1/workloads/{llm_job}").json()["checkpoint_token"]
    url = f"/api/v1/workloads/{vision_job}/checkpoints"

    assert trainer(token).post(url, {"step": 1}, format="json").status_code == 404
    # Nor with its signature moved onto the other job's namespace and id.
    moved = f"vision/{vision_job}:{token.rpartition(':')[2]}"
    assert trainer(moved).post(url, {"step": 1}, format="json").status_code == 401
    assert not Checkpoint.objects.exists()
    # The token still works where it belongs.
    own = trainer(token).post(
        f"/api/v1/workloads/{llm_job}/checkpoints", {"step": 1}, format="json"
    )
    assert own.status_code == 201, own.json()


def test_a_token_of_a_deleted_job_is_not_found(alice):  # noqa: F811
    llm_job = submit_job(alice, "llm", "llm-train")
    token = alice.get(f"/api/v1/workloads/{llm_job}").json()["checkpoint_token"]
    assert alice.delete(f"/api/v1/workloads/{llm_job}").status_code == 204

    response = trainer(token).post(
        f"/api/v1/workloads/{llm_job}/checkpoints", {"step": 1}, format="json"
    )

    assert response.status_code == 404


def test_the_demo_writes_its_login_and_token_for_the_owner_only(db, tmp_path, settings):
    """`make run` prints the admin password and a team token; their files are not for others."""
    from io import StringIO

    from django.core.management import call_command

    settings.VAR_DIR = tmp_path / "var"
    call_command("demo", stdout=StringIO())
    for name in ("admin-password", "llm-token"):
        assert (settings.VAR_DIR / name).stat().st_mode & 0o777 == 0o600, name
