"""Audit events are recorded by the services, in the transaction of the change they describe:
a refused or failed change leaves none, and no path around the API or the UI misses one."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from events.models import Event
from teams import services as teams
from teams.models import Team
from tests.api.conftest import admin, tenants  # noqa: F401 (fixtures)
from tests.api.test_workloads import post_manifests
from tests.support import T0, job
from workloads import services
from workloads.models import ResourceFlavor

pytestmark = pytest.mark.django_db

FLAVOR = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {cloud.google.com/gke-accelerator: nvidia-tesla-a100}}
"""


def audits():
    return list(Event.objects.filter(kind__startswith="audit.").order_by("id"))


def test_a_change_that_fails_part_way_records_no_audit_event(admin):  # noqa: F811
    # The flavor is written (and audited) first; the Job's missing PriorityClass then fails
    # the same transaction.
    text = FLAVOR + "---\n" + job(name="orphan", priority_class="no-such-class")

    response = post_manifests(admin, text, namespace="llm")

    assert response.status_code == 400
    assert "no-such-class" in response.json()["detail"]
    assert not ResourceFlavor.objects.filter(name="a100").exists()
    assert audits() == []


def test_a_refused_team_change_records_no_audit_event(tenants):  # noqa: F811
    root = User.objects.create_user("root", is_staff=True)

    with pytest.raises(teams.TeamError, match="already belongs to team 'vision'"):
        teams.ensure_team("thieves", namespaces=["vision"], actor=root)

    assert not Team.objects.filter(name="thieves").exists()
    assert audits() == []


def test_kueue_objects_applied_with_workloads_are_audited_too(admin):  # noqa: F811
    assert post_manifests(admin, FLAVOR, namespace="llm").status_code == 201

    (audit,) = audits()
    assert (audit.kind, audit.object_key, audit.data["user"]) == (
        "audit.created",
        "ResourceFlavor/a100",
        "root",
    )
    assert audit.data["after"]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100"
    }


def test_changes_the_system_makes_are_not_audited(tenants):  # noqa: F811
    services.apply(tenants, FLAVOR, source="demo", now=T0)
    teams.ensure_team("speech", namespaces=["speech"])

    assert ResourceFlavor.objects.filter(name="a100").exists()
    assert audits() == []
