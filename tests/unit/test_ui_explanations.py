"""Issue 16's small things: what a page says where a user would otherwise be left guessing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.support import at, deployment, row_counts
from tests.unit.test_pages import CLUSTER, admin, demo  # noqa: F401  (fixtures)
from tests.unit.test_tpu_admission import apply, jobset, sliced, tpu_cluster  # noqa: F401
from workloads import admission, whatif
from workloads.models import KubeObject, Workload
from workloads.status import object_status

NEW_QUEUE = f"/platform/kueue/clusterqueue/new/?cluster={CLUSTER}"


@pytest.mark.parametrize(
    ("quotas", "field"),
    [
        ({"cpu": "4", "gpus": "lots"}, "gpus"),  # resources[1] of the flavor
        ({"gpus": "8", "tpus": "-4"}, "tpus"),
        ({"memory": "12Q"}, "memory"),
    ],
)
def test_a_bad_quota_is_shown_under_the_field_that_gave_it_in_words(admin, quotas, field):  # noqa: F811
    queue = {
        "name": "bad",
        "flavor": "l4",
        "within_cluster_queue": "Never",
        "reclaim_within_cohort": "Never",
        **quotas,
    }

    response = admin.post(NEW_QUEUE, queue)

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == [field], errors
    (message,) = errors[field]
    assert quotas[field] in message
    assert "spec." not in message, message
    assert "request" not in message, message


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("root", password="x"))
    return client


def test_a_workload_whose_slices_activate_is_admitting_not_suspended(sliced, staff):  # noqa: F811
    """Kueue: quota reserved, the slice controller's AdmissionCheck still Pending, so the
    Workload is not Admitted (pkg/workload/admissionchecks.go) -- nor was it ever evicted."""
    apply(sliced, jobset())
    obj = KubeObject.objects.get(kind="JobSet")
    assert Workload.objects.get().phase == Workload.Phase.QUOTA_RESERVED

    status = object_status(obj)
    pages = [staff.get(url).content.decode() for url in (f"/workloads/{obj.pk}/", "/workloads/")]

    assert status["phase"] == "Admitting"
    assert status["admitting"] == "2 slices activating"
    for page in pages:
        assert "Admitting: 2 slices activating" in " ".join(page.split())
        assert "Suspended</span>" not in page


def test_once_its_slices_are_active_it_is_admitted(sliced):  # noqa: F811
    apply(sliced, jobset())
    admission.advance(sliced, at(), at(seconds=30))

    status = object_status(KubeObject.objects.get(kind="JobSet"))

    assert status["phase"] == "Admitted"
    assert "admitting" not in status


def tpu_deployment(replicas, selector="tpu7x"):
    """An unqueued Deployment (no queue-name label) of one-host TPU servers: 4 chips each."""
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: serve, namespace: llm}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: serve}}}}
  template:
    metadata: {{labels: {{app: serve}}}}
    spec:
      nodeSelector: {{cloud.google.com/gke-tpu-accelerator: {selector}}}
      containers:
        - name: c
          resources: {{limits: {{google.com/tpu: "4"}}}}
"""


def explain_part(client, obj):
    html = client.get(f"/workloads/{obj.pk}/?fragment=explain").content.decode()
    return " ".join(html.split())


@pytest.mark.parametrize(
    ("replicas", "selector", "why"),
    [
        (33, "tpu7x", "0/32 nodes are available: 32 Insufficient google.com/tpu."),
        (1, "tpu-v5-lite-podslice", "0/32 nodes are available: 32 node(s) didn't match Pod's"),
    ],
)
def test_a_pending_unqueued_pod_says_why_no_node_takes_it(
    tpu_cluster,  # noqa: F811
    staff,
    replicas,
    selector,
    why,
):
    """kube-scheduler's FailedScheduling event message (framework.FitError), from the same
    filters the simulator binds with."""
    apply(tpu_cluster, tpu_deployment(replicas, selector))
    admission.advance(tpu_cluster, at(), at(seconds=1))
    obj = KubeObject.objects.get(kind="Deployment")

    text = explain_part(staff, obj)

    assert "Nothing to explain" not in text
    assert "not queued by Kueue" in text
    assert why.replace("'", "&#x27;") in text
    assert "1 pod waiting for a node" in text
    api = staff.get(f"/api/v1/workloads/{obj.pk}/explain").json()
    assert api["workloads"] == []
    assert [group["why"][: len(why)] for group in api["unplaced"]] == [why]


def test_an_unqueued_deployment_whose_pods_are_all_bound_has_nothing_to_explain(
    tpu_cluster,  # noqa: F811
    staff,
):
    apply(tpu_cluster, tpu_deployment(2))
    admission.advance(tpu_cluster, at(), at(seconds=1))

    text = explain_part(staff, KubeObject.objects.get(kind="Deployment"))

    assert "not queued by Kueue" in text
    assert "all 2 of its pods are bound" in text
    assert "waiting for a node" not in text


def test_whatif_of_an_unqueued_deployment_says_it_is_not_queued_and_why_pods_wait(admin):  # noqa: F811
    """The demo's L4 GPUs are all held: every pod of the new Deployment would wait."""
    before = row_counts()
    manifest = deployment("web", queue=None, replicas=3, gpus=1)

    response = admin.post(
        "/submit/",
        {"cluster": CLUSTER, "namespace": "llm", "manifest": manifest, "action": "whatif"},
    )

    assert response.status_code == 200
    text = " ".join(response.content.decode().split())
    assert "Deployment/llm/web is not queued by Kueue" in text
    assert "0 of its 3 pods would be bound." in text
    assert (
        "3 pods would wait for a node: 0/4 nodes are available: 1 node(s) didn&#x27;t match "
        "Pod&#x27;s node affinity/selector, 3 Insufficient nvidia.com/gpu." in text
    )
    assert '<th scope="col">Would preempt</th>' not in text  # no empty Kueue table
    assert row_counts() == before


def test_whatif_of_an_unqueued_deployment_lists_the_nodes_it_would_take(tpu_cluster):  # noqa: F811
    report = whatif.whatif(tpu_cluster, tpu_deployment(33), "t.yaml", at(), namespace="llm")

    assert report["workloads"] == []
    (unqueued,) = report["unqueued"]
    assert unqueued["object"] == "Deployment/llm/serve"
    assert unqueued["pods"] == 33
    assert len({n["node"] for n in unqueued["nodes"]}) == 32
    assert {n["node_pool"] for n in unqueued["nodes"]} == {"tpu7-pool-1", "tpu7-pool-2"}
    assert unqueued["takes"] == {"google.com/tpu": "128"}
    (waiting,) = unqueued["unplaced"]
    assert len(waiting["pods"]) == 1
    assert waiting["why"] == "0/32 nodes are available: 32 Insufficient google.com/tpu."
    assert not KubeObject.objects.exists()  # rolled back
