"""Kueue objects in the web UI: each object's page, edit (YAML and form), delete with the
reasons Kueue would keep it; ClusterQueue and LocalQueue workloads in queue order."""

from __future__ import annotations

import re

import pytest
import yaml
from django.contrib.auth.models import User

from events.models import Event
from teams import services as teams
from tests.support import at, job, row_counts
from tests.unit.test_pages import table_rows
from workloads import services
from workloads.models import ClusterQueue, Cohort, LocalQueue, PriorityClass

CQ = "/clusters/llm-cluster/kueue/clusterqueue/gpu-queue/"
LQ = "/clusters/llm-cluster/namespaces/llm/kueue/localqueue/team-llm/"


def apply(cluster, text, minutes, namespace="llm"):
    services.apply(cluster, text, source="test.yaml", now=at(minutes=minutes), namespace=namespace)


@pytest.fixture
def queued(gpu_queues):
    """gpu-queue (6 GPUs): `first` (4 GPUs, low) admitted; pending, in the order they came:
    `a-low` and `b-low` (4 GPUs, low) that do not fit, and `huge` (8 GPUs, high) that never can."""
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    apply(gpu_queues, job("first"), 0)
    apply(gpu_queues, job("a-low"), 1)
    apply(gpu_queues, job("b-low"), 2)
    apply(gpu_queues, job("huge", pods=4, priority_class="high"), 3)
    return gpu_queues


@pytest.fixture
def admin(queued, client):
    client.force_login(User.objects.create_user("root", is_staff=True))
    return client


@pytest.fixture
def alice(queued, client):
    client.force_login(User.objects.get(username="alice"))
    return client


JOBS = ("huge", "a-low", "b-low", "first", "secret")


def job_of(workload):
    """The Job a Kueue workload (`job-<name>-<hash>`) belongs to; the cell as is otherwise."""
    return next((j for j in JOBS if workload.startswith(f"job-{j}-")), workload)


def pending_table(response):
    rows = table_rows(response)
    start = rows.index(next(r for r in rows if r[:3] == ["Position", "In LocalQueue", "Workload"]))
    return rows[start + 1 : start + 1 + sum(1 for r in rows[start + 1 :] if r[0].isdigit())]


def test_the_platform_page_links_every_kueue_object(admin):
    page = admin.get("/platform/").content.decode()

    for key, url in (("ClusterQueue/gpu-queue", CQ), ("LocalQueue/llm/team-llm", LQ)):
        assert f'<a href="{url}">{key}</a>' in page
    shown = admin.get(CQ)
    assert shown.status_code == 200
    assert "kind: ClusterQueue" in shown.content.decode()
    assert "nominalQuota: &#x27;6&#x27;" in shown.content.decode() or "nominalQuota: 6" in (
        shown.content.decode()
    )


def test_team_members_cannot_see_change_or_delete_kueue_objects(alice):
    for url in (CQ, CQ + "yaml/", CQ + "edit/", LQ):
        assert alice.get(url).status_code == 403
    assert alice.post(CQ + "delete/", {"confirm": "1"}).status_code == 403
    assert ClusterQueue.objects.filter(name="gpu-queue").exists()


@pytest.mark.parametrize(
    "url",
    [
        "/clusters/llm-cluster/kueue/nosuchkind/gpu-queue/",
        "/clusters/llm-cluster/kueue/clusterqueue/nosuchqueue/",
        "/clusters/llm-cluster/kueue/localqueue/team-llm/",  # a LocalQueue needs its namespace
        "/clusters/llm-cluster/namespaces/llm/kueue/clusterqueue/gpu-queue/",
        "/clusters/nosuchcluster/kueue/clusterqueue/gpu-queue/",
    ],
)
def test_an_unknown_kind_or_object_is_not_found(admin, url):
    assert admin.get(url).status_code == 404


def test_a_cluster_queue_is_edited_with_its_form_and_audited(admin):
    form = admin.get(CQ + "edit/")
    assert form.status_code == 200
    page = form.content.decode()
    assert re.search(r'name="gpus" value="6"', page)
    assert re.search(r'name="name"[^>]*disabled', page)

    fields = {
        "name": "renamed",  # ignored: the name is fixed
        "flavor": "l4",
        "cpu": "72",
        "memory": "288Gi",
        "gpus": "8",
        "within_cluster_queue": "LowerPriority",
        "reclaim_within_cohort": "Never",
    }
    response = admin.post(CQ + "edit/", fields)

    assert response.status_code == 302
    assert response.url == CQ
    quotas = services.rendered(ClusterQueue.objects.get(name="gpu-queue"))["spec"]
    gpu = quotas["resourceGroups"][0]["flavors"][0]["resources"][2]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "8"}
    assert not ClusterQueue.objects.filter(name="renamed").exists()
    audit = Event.objects.get(kind="audit.configured", object_key="ClusterQueue/gpu-queue")
    assert audit.data["user"] == "root"


def test_a_form_error_is_shown_next_to_its_field_and_nothing_changes(admin):
    before = ClusterQueue.objects.get(name="gpu-queue").spec
    fields = {
        "flavor": "l4",
        "gpus": "lots",
        "within_cluster_queue": "Never",
        "reclaim_within_cohort": "Never",
    }

    response = admin.post(CQ + "edit/", fields)

    assert response.status_code == 400
    assert "lots" in response.content.decode()
    assert ClusterQueue.objects.get(name="gpu-queue").spec == before


def test_an_object_its_form_cannot_show_is_edited_as_yaml_only(admin):
    """PriorityClass `high` is form-shaped; a global default with a preemption policy is not:
    saving the form would drop both."""
    services.apply(
        ClusterQueue.objects.get().cluster,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: fallback}\n"
        "value: 1\nglobalDefault: true\npreemptionPolicy: Never\n",
        source="pc.yaml",
        now=at(minutes=5),
    )
    shaped = "/clusters/llm-cluster/kueue/priorityclass/high/"
    assert "Edit with the form" in admin.get(shaped).content.decode()
    other = "/clusters/llm-cluster/kueue/priorityclass/fallback/"

    assert "Edit with the form" not in admin.get(other).content.decode()
    assert admin.get(other + "edit/").url == other + "yaml/"


def test_a_yaml_edit_is_applied(admin):
    text = admin.get(LQ + "yaml/").context["form"].initial["manifest_text"]
    manifest = yaml.safe_load(text)
    manifest["spec"]["clusterQueue"] = "elsewhere"

    response = admin.post(LQ + "yaml/", {"manifest_text": yaml.safe_dump(manifest)})

    assert response.status_code == 302
    assert LocalQueue.objects.get(name="team-llm").cluster_queue_name == "elsewhere"


def test_a_bad_yaml_edit_names_the_line_and_changes_nothing(admin):
    text = admin.get(CQ + "yaml/").context["form"].initial["manifest_text"]
    lines = text.splitlines()
    line = next(
        i for i, t in enumerate(lines, 1) if "nominalQuota: '6'" in t or "nominalQuota: 6" in t
    )
    lines[line - 1] = lines[line - 1].split(":")[0] + ": lots"
    before = row_counts()
    before.pop(Event._meta.label)  # the refusal is recorded, by design

    response = admin.post(CQ + "yaml/", {"manifest_text": "\n".join(lines)})

    assert response.status_code == 400
    page = response.content.decode()
    assert f"line {line}: manifest, document 1 (ClusterQueue gpu-queue)" in page
    assert "nominalQuota" in page
    after = row_counts()
    after.pop(Event._meta.label)
    assert after == before


def test_a_yaml_edit_may_change_only_its_own_object(admin):
    text = admin.get(CQ + "yaml/").context["form"].initial["manifest_text"]

    response = admin.post(
        CQ + "yaml/", {"manifest_text": text.replace("name: gpu-queue", "name: copy")}
    )

    assert response.status_code == 400
    assert "this page edits ClusterQueue/gpu-queue" in response.content.decode()
    assert not ClusterQueue.objects.filter(name="copy").exists()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (CQ, "ClusterQueue/gpu-queue still holds quota for 1 workloads"),
        ("/clusters/llm-cluster/kueue/resourceflavor/l4/", "is used by ClusterQueue gpu-queue"),
    ],
)
def test_a_deletion_kueue_would_block_is_refused_with_its_reason(admin, url, reason):
    before = row_counts()

    response = admin.post(url + "delete/", {"confirm": "1"})

    assert response.status_code == 409
    assert reason in response.content.decode()
    assert row_counts() == before


def test_an_unused_object_is_deleted_once_confirmed(admin):
    services.apply(
        ClusterQueue.objects.get().cluster,
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: spare}\n",
        source="cohort.yaml",
        now=at(minutes=5),
    )
    url = "/clusters/llm-cluster/kueue/cohort/spare/"

    unconfirmed = admin.post(url + "delete/")
    assert unconfirmed.status_code == 400
    assert "tick the box" in unconfirmed.content.decode()
    assert Cohort.objects.filter(name="spare").exists()

    deleted = admin.post(url + "delete/", {"confirm": "1"})
    assert deleted.url == "/platform/"
    assert not Cohort.objects.filter(name="spare").exists()
    assert Event.objects.filter(kind="audit.deleted", object_key="Cohort/spare").exists()
    assert not PriorityClass.objects.filter(name="spare").exists()


def test_a_cluster_queue_lists_its_workloads_in_queue_order(alice):
    """Kueue's pendingworkloads visibility order (pkg/queue/cluster_queue.go Snapshot):
    priority first (`huge`, though it can never fit, keeps its place), then queue time."""
    response = alice.get("/clusters/llm-cluster/clusterqueues/gpu-queue/")

    assert response.status_code == 200
    pending = pending_table(response)
    assert [(r[0], r[1], job_of(r[2]), r[5]) for r in pending] == [
        ("1", "1", "huge", "100 high"),
        ("2", "2", "a-low", "10 low"),
        ("3", "3", "b-low", "10 low"),
    ]
    assert "job-first-" in response.content.decode()


def test_other_teams_workloads_are_shown_without_their_names(queued, client):
    teams.ensure_team("vision", namespaces=["vision"], members=[("viv", "viewer")])
    apply(
        queued,
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
        "metadata: {name: team-vision, namespace: vision}\nspec: {clusterQueue: gpu-queue}\n",
        4,
    )
    apply(queued, job("secret").replace("team-llm", "team-vision"), 5, namespace="vision")
    client.force_login(User.objects.get(username="viv"))

    response = client.get("/clusters/llm-cluster/clusterqueues/gpu-queue/")

    page = response.content.decode()
    pending = pending_table(response)
    hidden = "another team's workload"
    assert [job_of(r[2]) for r in pending] == [hidden, hidden, hidden, "secret"]
    for name in ("job-huge-", "job-a-low-", "job-first-", "team-llm"):
        assert name not in page


def test_a_local_queue_shows_its_places_to_its_team_only(alice, client):
    url = "/clusters/llm-cluster/namespaces/llm/localqueues/team-llm/"
    response = alice.get(url)
    assert response.status_code == 200
    assert [job_of(r[2]) for r in pending_table_lq(response)] == ["huge", "a-low", "b-low"]
    assert alice.get(url + "?fragment=queued").status_code == 200

    teams.ensure_team("vision", namespaces=["vision"], members=[("viv", "viewer")])
    client.force_login(User.objects.get(username="viv"))
    assert client.get(url).status_code == 404


def pending_table_lq(response):
    rows = table_rows(response)
    start = rows.index(
        next(r for r in rows if r[:3] == ["Position", "In ClusterQueue", "Workload"])
    )
    return [r for r in rows[start + 1 :] if r and r[0].isdigit()][:3]


def test_the_queues_page_links_the_queue_views(alice):
    page = alice.get("/queues/").content.decode()

    assert 'href="/clusters/llm-cluster/clusterqueues/gpu-queue/"' in page
    assert 'href="/clusters/llm-cluster/namespaces/llm/localqueues/team-llm/"' in page
    assert "manage" not in page  # admin links, for admins
