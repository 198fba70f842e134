"""Every page of the web UI after `manage.py demo`, as admins and team members see them."""

from __future__ import annotations

from html.parser import HTMLParser
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from clusters import services as cluster_services
from clusters.models import Cluster, NodePool
from events.models import Event
from teams import services as teams
from teams.models import Team
from tests.support import deployment, row_counts
from workloads import services
from workloads.models import ClusterQueue, KubeObject, LocalQueue, ResourceFlavor

CLUSTER = "demo-gpu-cluster"
INFERENCE = "Deployment/llm/chat-inference"
FINETUNE = "Job/llm/sql-finetune"


class _Rows(HTMLParser):
    """The text of every table cell, row by row, as a reader sees the page."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def table_rows(response):
    parser = _Rows()
    parser.feed(response.content.decode())
    return parser.rows


def row_starting(rows, *cells):
    matches = [row for row in rows if row[: len(cells)] == list(cells)]
    assert len(matches) == 1, f"one row starting {cells} expected in {rows}"
    return matches[0]


def counts_without_events():
    counts = row_counts()
    counts.pop(Event._meta.label)  # a refused manifest is recorded as an event, by design
    return counts


@pytest.fixture
def demo(db, tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"  # where the command writes the password and a token

    def run():
        call_command("demo", stdout=StringIO())

    run()
    return run


@pytest.fixture
def admin(demo, client):
    client.force_login(User.objects.get(username="admin"))
    return client


@pytest.fixture
def member(demo, client):
    """ml-engineer, a submitter in team llm (namespace llm)."""
    client.force_login(User.objects.get(username="ml-engineer"))
    return client


@pytest.fixture
def outsider(demo, client):
    """A submitter of team vision, which owns namespace vision and runs one Deployment there."""
    teams.ensure_team("vision", namespaces=["vision"], members=[("viv", "submitter")])
    services.apply(
        Cluster.objects.get(),
        deployment("detector", queue=None),
        source="vision.yaml",
        now=timezone.now(),
        namespace="vision",
    )
    client.force_login(User.objects.get(username="viv"))
    return client


def object_id(key):
    kind, namespace, name = key.split("/")
    return KubeObject.objects.get(kind=kind, namespace=namespace, name=name).pk


def test_every_page_asks_to_log_in_first(demo, client):
    for path in ("/", "/workloads/", "/queues/", f"/clusters/{CLUSTER}/", "/submit/"):
        response = client.get(path)
        assert response.status_code == 302
        assert response.url == f"/login/?next={path}"


def test_the_admin_logs_in_with_the_printed_password(demo, client, tmp_path):
    password = (tmp_path / "var" / "admin-password").read_text()

    response = client.post("/login/", {"username": "admin", "password": password}, follow=True)

    assert response.redirect_chain == [("/", 302)]
    assert b'aria-label="Main"' in response.content


def test_a_wrong_password_is_refused_on_the_login_page(demo, client):
    response = client.post("/login/", {"username": "admin", "password": "nope"})

    assert response.status_code == 200
    assert "enter a correct username and password" in response.content.decode()


def test_overview_shows_the_cluster_gpu_totals_and_the_event_feed(admin):
    response = admin.get("/")

    assert CLUSTER in response.content.decode()
    assert row_starting(table_rows(response), "GPUs")[1:4] == ["6", "0", "6"]
    assert row_starting(table_rows(response), "llm")[1] == "6"
    assert 'aria-live="polite"' in response.content.decode()
    assert "workload.admitted" in response.content.decode()


def test_the_navigation_offers_admin_pages_to_admins_only(admin, client):
    assert b">Admin</a>" in admin.get("/").content
    client.force_login(User.objects.get(username="ml-engineer"))
    page = client.get("/").content
    assert b">Admin</a>" not in page
    assert b">Submit</a>" in page


def test_cluster_page_lists_node_pools_nodes_and_the_workloads_on_them(admin):
    response = admin.get(f"/clusters/{CLUSTER}/")
    text = response.content.decode()

    assert "gpupool" in text
    assert "v5e-serving" in text
    gpu_nodes = [row for row in table_rows(response) if row[1:2] == ["2 × nvidia-l4"]]
    assert len(gpu_nodes) == 3
    assert all(row[2] == "2 / 2" for row in gpu_nodes)
    assert INFERENCE in text
    assert FINETUNE in text


def test_tpu_map_shows_the_v5e_pool_provisioning_then_its_hosts(admin, settings):
    provisioning = admin.get(f"/clusters/{CLUSTER}/tpu/").content.decode()
    settings.ACCELPLANE_SIM_OPERATION_SECONDS = 0
    cluster_services.reconcile_node_pool(NodePool.objects.get(name="v5e-serving").pk)

    running = admin.get(f"/clusters/{CLUSTER}/tpu/").content.decode()

    assert "TPU pool v5e-serving (ct5lp-hightpu-8t, 2x4) is PROVISIONING" in provisioning
    assert running.count('class="host free"') == 2
    assert INFERENCE not in running  # its GPU pods are not on the TPU picture


def test_queues_page_has_a_bar_per_flavor_and_resource(admin):
    response = admin.get("/queues/")

    assert "ClusterQueue gpu-shared" in response.content.decode()
    gpu = row_starting(table_rows(response), "l4", "nvidia.com/gpu")
    assert gpu[2:7] == ["6", "6", "0", "0", "0"]  # nominal, used, borrowed, lendable, pending
    assert 'aria-label="nvidia.com/gpu in l4: 6 used of nominal 6' in response.content.decode()


def test_workloads_table_lists_both_demo_workloads_admitted(admin):
    rows = table_rows(admin.get("/workloads/"))

    assert row_starting(rows, INFERENCE)[3] == "Admitted"
    assert row_starting(rows, FINETUNE)[3] == "Admitted"


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ("kind=Job", [FINETUNE]),
        ("phase=Admitted", [INFERENCE, FINETUNE]),
        ("phase=Suspended", []),
        ("queue=team-llm&team=llm", [INFERENCE, FINETUNE]),
    ],
)
def test_workloads_table_filters(admin, query, shown):
    rows = table_rows(admin.get(f"/workloads/?{query}"))

    assert [row[0] for row in rows if "/" in row[0]] == shown


def test_a_row_fragment_is_the_one_row_an_event_is_about(admin):
    response = admin.get(f"/workloads/?fragment=row&object={CLUSTER}:{FINETUNE}")

    assert [row[0] for row in table_rows(response)] == [FINETUNE]
    assert b"<html" not in response.content


def test_an_unknown_fragment_is_not_found(admin):
    assert admin.get("/?fragment=nothing").status_code == 404


def test_scaling_from_the_detail_page_preempts_the_finetune(admin):
    response = admin.post(f"/workloads/{object_id(INFERENCE)}/", {"replicas": 3})
    assert response.status_code == 302

    detail = admin.get(f"/workloads/{object_id(FINETUNE)}/")
    text = detail.content.decode()

    assert 'id="object-phase">Suspended<' in text
    assert "preempted by Deployment/llm/chat-inference" in text  # the timeline
    assert "Last preempted" in text  # the explain panel
    assert "Waiting for quota" in text


def test_a_bad_replica_count_is_shown_next_to_the_field(admin):
    before = counts_without_events()

    response = admin.post(f"/workloads/{object_id(INFERENCE)}/", {"replicas": -1})

    assert response.status_code == 400
    assert "greater than or equal to 0" in response.content.decode()
    assert counts_without_events() == before


def test_whatif_shows_the_victims_and_stores_nothing(admin):
    before = row_counts()
    manifest = deployment("extra", gpus=2, priority_class="serving")

    response = admin.post(
        "/submit/",
        {"cluster": CLUSTER, "namespace": "llm", "manifest": manifest, "action": "whatif"},
    )

    assert response.status_code == 200
    row = row_starting(
        table_rows(response), next(r[0] for r in table_rows(response) if "extra" in r[0])
    )
    assert row[1] == "admitted_after_preemption"
    assert FINETUNE in row[3]
    assert row_counts() == before


def test_submitting_applies_and_opens_the_new_workload(member):
    manifest = deployment("extra", gpus=2, priority_class="serving")

    response = member.post(
        "/submit/",
        {"cluster": CLUSTER, "namespace": "llm", "manifest": manifest, "action": "apply"},
    )

    assert response.status_code == 302
    assert response.url == f"/workloads/{object_id('Deployment/llm/extra')}/"


def test_an_invalid_manifest_is_explained_next_to_the_field(member):
    before = counts_without_events()

    response = member.post(
        "/submit/",
        {"cluster": CLUSTER, "namespace": "llm", "manifest": "kind: Job\n", "action": "apply"},
    )

    assert response.status_code == 400
    assert 'class="field invalid"' in response.content.decode()
    assert "pasted YAML" in response.content.decode()
    assert counts_without_events() == before


def test_a_member_cannot_submit_into_another_teams_namespace(member):
    response = member.post(
        "/submit/",
        {
            "cluster": CLUSTER,
            "namespace": "vision",
            "manifest": deployment("x"),
            "action": "whatif",
        },
    )

    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()


def test_another_team_sees_none_of_llms_workloads_or_events(outsider):
    rows = table_rows(outsider.get("/workloads/"))
    overview = outsider.get("/").content.decode()

    assert [row[0] for row in rows if "/" in row[0]] == ["Deployment/vision/detector"]
    assert outsider.get(f"/workloads/{object_id(FINETUNE)}/").status_code == 404
    assert "llm" not in overview.split('id="feed-title"')[1]
    assert row_starting(table_rows(outsider.get("/")), "other teams")[1] == "6"


def test_team_members_cannot_open_admin_forms(member):
    for path in ("/platform/", "/platform/clusters/new/", f"/clusters/{CLUSTER}/nodepools/new/"):
        assert member.get(path).status_code == 403


def test_every_admin_form_renders(admin):
    kinds = ("resourceflavor", "cohort", "clusterqueue", "localqueue", "priorityclass", "yaml")
    paths = ["/platform/", "/platform/clusters/new/", "/platform/teams/new/"]
    paths += [f"/clusters/{CLUSTER}/nodepools/new/"]
    paths += [f"/platform/kueue/{kind}/new/" for kind in kinds]
    for path in paths:
        assert admin.get(path).status_code == 200, path


def test_the_node_pool_form_offers_catalog_machine_types(admin):
    text = admin.get(f"/clusters/{CLUSTER}/nodepools/new/").content.decode()

    assert "g2-standard-24 (2 x nvidia-l4 GPUs" in text
    assert "tpu7x-standard-4t (4 x tpu7x TPU chips; topologies 4x4x4" in text


def test_a_node_pool_the_catalog_refuses_is_explained_next_to_the_field(admin):
    response = admin.post(
        f"/clusters/{CLUSTER}/nodepools/new/",
        {
            "name": "cube",
            "machine_type": "tpu7x-standard-4t",
            "node_count": 8,
            "tpu_topology": "4x4x4",
        },
    )

    assert response.status_code == 400
    assert "must be 16" in response.content.decode()
    assert not NodePool.objects.filter(name="cube").exists()


def test_a_node_pool_is_created_from_the_form(admin):
    response = admin.post(
        f"/clusters/{CLUSTER}/nodepools/new/",
        {
            "name": "cube",
            "machine_type": "tpu7x-standard-4t",
            "node_count": 16,
            "tpu_topology": "4x4x4",
            "reservation": "projects/acme-ml/reservations/tpu7x-res",
            "workload_policy": "super-slice-policy",
        },
    )

    assert response.status_code == 302
    assert response.url == f"/clusters/{CLUSTER}/"
    pool = NodePool.objects.get(name="cube")
    assert pool.status == NodePool.Status.PROVISIONING
    assert (pool.reservation, pool.workload_policy) == (
        "projects/acme-ml/reservations/tpu7x-res",
        "super-slice-policy",
    )


def test_a_cluster_is_created_from_the_form_and_names_are_checked(admin):
    assert admin.post("/platform/clusters/new/", {"name": "tpu", "location": "us-east5"}).url == (
        "/clusters/tpu/"
    )
    again = admin.post("/platform/clusters/new/", {"name": "tpu", "location": "us-east5"})
    assert again.status_code == 400
    assert "already exists" in again.content.decode()


def test_kueue_objects_are_created_from_their_forms(admin):
    new = f"/platform/kueue/{{}}/new/?cluster={CLUSTER}"
    assert (
        admin.post(
            new.format("resourceflavor"),
            {"name": "a100", "node_labels": "cloud.google.com/gke-accelerator=nvidia-tesla-a100"},
        ).status_code
        == 302
    )
    assert admin.post(new.format("cohort"), {"name": "research"}).status_code == 302
    queue = {
        "name": "research-cq",
        "cohort": "research",
        "flavor": "a100",
        "gpus": "8",
        "within_cluster_queue": "LowerPriority",
        "reclaim_within_cohort": "Any",
    }
    assert admin.post(new.format("clusterqueue"), queue).status_code == 302
    local = {"name": "lq", "namespace": "research", "cluster_queue": "research-cq"}
    assert admin.post(new.format("localqueue"), local).status_code == 302

    assert ResourceFlavor.objects.filter(name="a100").exists()
    assert ClusterQueue.objects.get(name="research-cq").cohort_name == "research"
    assert LocalQueue.objects.filter(namespace="research", name="lq").exists()


def test_a_bad_quota_is_explained_next_to_its_field(admin):
    before = counts_without_events()
    queue = {
        "name": "bad",
        "flavor": "l4",
        "gpus": "lots",
        "within_cluster_queue": "Never",
        "reclaim_within_cohort": "Never",
    }

    response = admin.post(f"/platform/kueue/clusterqueue/new/?cluster={CLUSTER}", queue)

    assert response.status_code == 400
    assert "lots" in response.content.decode()
    assert counts_without_events() == before


def test_the_yaml_form_takes_only_kueue_objects(admin):
    response = admin.post(
        f"/platform/kueue/yaml/new/?cluster={CLUSTER}", {"manifest_text": deployment("x")}
    )

    assert response.status_code == 400
    assert "only Kueue and priority objects" in response.content.decode()


def test_a_team_whose_namespace_is_taken_is_refused_next_to_the_field(admin):
    response = admin.post("/platform/teams/new/", {"name": "thieves", "namespaces": "llm"})

    assert response.status_code == 400
    assert "already belongs to team" in response.content.decode()
    assert not Team.objects.filter(name="thieves").exists()


def test_a_team_is_created_with_its_members(admin):
    response = admin.post(
        "/platform/teams/new/",
        {
            "name": "vision",
            "namespaces": "vision, vision-dev",
            "members": "viv submitter\nvic viewer",
        },
    )

    assert response.status_code == 302
    assert teams.scope_of(User.objects.get(username="vic")).readable == {"vision", "vision-dev"}


def test_running_demo_twice_changes_nothing(demo):
    before = row_counts()

    demo()

    assert row_counts() == before


def _upload(name, text):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, text.encode())


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: gke, cluster: {server: "https://34.1.2.3", certificate-authority-data: Q0E=}}]
users: [{name: me, user: {exec: {command: gke-gcloud-auth-plugin}}}]
contexts: [{name: ctx, context: {cluster: gke, user: me}}]
current-context: ctx
"""


def test_a_gke_cluster_is_created_from_the_form_with_its_kubeconfig_sealed(
    admin, django_capture_on_commit_callbacks
):
    from clusters import credentials
    from clusters.models import Cluster

    fields = {"name": "real", "provider": "gke", "location": "us-east5", "project": "acme-ml"}
    with django_capture_on_commit_callbacks(execute=False):  # no GKE to provision on here
        created = admin.post(
            "/platform/clusters/new/",
            {**fields, "slice_controller": "on", "kubeconfig": _upload("config", KUBECONFIG)},
        )

    assert created.url == "/clusters/real/"
    cluster = Cluster.objects.get(name="real")
    assert (cluster.provider, cluster.project, cluster.slice_controller) == (
        "gke",
        "acme-ml",
        True,
    )
    assert "34.1.2.3" not in cluster.kubeconfig  # sealed
    assert credentials.unseal(cluster.kubeconfig)["clusters"][0]["cluster"]["server"] == (
        "https://34.1.2.3"
    )


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"provider": "gke"}, "project", "a gke cluster needs its project id"),
        (
            {"provider": "gke", "project": "p", "service_account_key": ("key.json", "{}")},
            "service_account_key",
            "key.json is not a service account key",
        ),
        (
            {"provider": "gke", "project": "p", "kubeconfig": ("config", "users: []")},
            "kubeconfig",
            "config is not a kubeconfig with a current-context",
        ),
        ({"kubeconfig": ("config", KUBECONFIG)}, "kubeconfig", "only a gke cluster takes"),
    ],
)
def test_a_cluster_form_problem_is_shown_next_to_its_field(admin, fields, field, problem):
    from clusters.models import Cluster

    body = {"name": "real", "location": "us-east5"}
    body |= {k: _upload(*v) if isinstance(v, tuple) else v for k, v in fields.items()}

    refused = admin.post("/platform/clusters/new/", body)

    assert refused.status_code == 400
    errors = refused.context["form"].errors
    assert any(problem in error for error in errors[field]), errors
    assert not Cluster.objects.filter(name="real").exists()


def test_an_admin_resizes_then_deletes_a_pool_from_the_cluster_page(
    admin, settings, django_capture_on_commit_callbacks
):
    from events.models import Event

    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.ACCELPLANE_SIM_OPERATION_SECONDS = 0
    pool = NodePool.objects.filter(cluster__name=CLUSTER).order_by("name").first()
    url = f"/clusters/{CLUSTER}/nodepools/{pool.name}/"
    assert f'action="{url}"' in admin.get(f"/clusters/{CLUSTER}/").content.decode()

    unconfirmed = admin.post(url, {"action": "delete"}, follow=True)
    assert "tick the box to confirm the deletion" in unconfirmed.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        admin.post(url, {"action": "resize", "node_count": pool.node_count + 1})
    pool.refresh_from_db()
    assert (pool.status, pool.nodes.count()) == ("RUNNING", pool.node_count)
    with django_capture_on_commit_callbacks(execute=True):
        admin.post(url, {"action": "delete", "confirm": "on"})

    assert not NodePool.objects.filter(pk=pool.pk).exists()
    audits = Event.objects.filter(kind__startswith="audit.", object_key__startswith="NodePool/")
    assert [e.kind for e in audits.order_by("id")] == ["audit.configured", "audit.deleted"]


def test_admin_changes_made_in_the_ui_are_audited_like_the_apis(admin):
    from events.models import Event

    admin.post("/platform/clusters/new/", {"name": "tpu", "location": "us-east5"})
    flavor = f"/platform/kueue/resourceflavor/new/?cluster={CLUSTER}"
    labels = "cloud.google.com/gke-accelerator=nvidia-tesla-a100"
    admin.post(flavor, {"name": "a100", "node_labels": labels})
    admin.post(flavor, {"name": "a100", "node_labels": labels})  # unchanged: not audited
    admin.post("/platform/teams/new/", {"name": "speech", "namespaces": "speech"})

    audits = Event.objects.filter(kind__startswith="audit.").order_by("id")
    assert [(e.kind, e.object_key, e.data["user"]) for e in audits] == [
        ("audit.created", "Cluster/tpu", "admin"),
        ("audit.created", "ResourceFlavor/a100", "admin"),
        ("audit.created", "Team/speech", "admin"),
    ]
    flavor_audit = audits[1].data
    assert flavor_audit["before"] is None
    assert flavor_audit["after"]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100"
    }


def test_an_admin_deletes_a_cluster_from_its_page_once_confirmed(
    admin, django_capture_on_commit_callbacks
):
    from clusters.models import Cluster

    url = f"/clusters/{CLUSTER}/delete/"
    assert f'action="{url}"' in admin.get(f"/clusters/{CLUSTER}/").content.decode()
    unconfirmed = admin.post(url, follow=True)
    assert "tick the box to confirm the deletion" in unconfirmed.content.decode()
    assert Cluster.objects.get(name=CLUSTER).status == "RUNNING"

    with django_capture_on_commit_callbacks(execute=False):  # the worker comes later
        deleting = admin.post(url, {"confirm": "on"}, follow=True)

    assert f"cluster {CLUSTER} is being deleted" in deleting.content.decode()
    assert Cluster.objects.get(name=CLUSTER).status == "DELETING"
