"""Random sequences of applies, scales, deletes, finishes and quota changes, with admission run
by several workers at once on PostgreSQL; after every step, from the database alone:

- admission never takes a ClusterQueue past its nominal quota plus what it may borrow, nor a
  cohort past its total quota. A quota lowered below usage evicts nobody (as in Kueue), so
  the check is that no step which admitted something ends above the limit;
- no workload is admitted twice: each admission is one `workload.admitted` event, and every
  workload holding quota has a flavor for each resource it requests;
- the event log reads in commit order (nothing appears later below a sequence number already
  read), and each workload's events follow a legal order.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from clusters import services as cluster_services
from clusters.models import Cluster
from events.models import Event
from events.services import numbered_events
from tests.integration.workers import race
from tests.support import T0
from workloads import admission, services
from workloads.models import ClusterQueue, KubeObject, Workload

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 3
KUEUE = "kueue.x-k8s.io/v1beta2"
TEAMS = ("team-a", "team-b")
# Team a's ClusterQueue may borrow at most this much cpu (milli) from the cohort.
BORROWING_LIMIT = 2000
clusters = itertools.count()


def queue_manifests(nominal_a: int) -> str:
    def cluster_queue(name: str, nominal: int, borrowing_limit: int | None) -> dict:
        cpu = {"name": "cpu", "nominalQuota": f"{nominal}m"}
        if borrowing_limit is not None:
            cpu["borrowingLimit"] = f"{borrowing_limit}m"
        return {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "cohortName": "research",
                "namespaceSelector": {},
                "preemption": {
                    "withinClusterQueue": "LowerPriority",
                    "reclaimWithinCohort": "Any",
                },
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "default", "resources": [cpu]}],
                    }
                ],
            },
        }

    docs = [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        cluster_queue("team-a", nominal_a, BORROWING_LIMIT),
        cluster_queue("team-b", 4000, None),
        *(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": team},
                "spec": {"clusterQueue": team},
            }
            for team in TEAMS
        ),
        *(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
            | {"metadata": {"name": name}, "value": value}
            for name, value in (("low", 10), ("high", 100))
        ),
    ]
    return yaml.safe_dump_all(docs)


def workload_manifest(kind: str, name: str, cpu: int, replicas: int, priority: str) -> str:
    pod = {
        "priorityClassName": priority,
        "restartPolicy": "Never" if kind == "Job" else "Always",
        "containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": f"{cpu}m"}}}
        ],
    }
    metadata = {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}}
    if kind == "Job":
        spec = {"parallelism": replicas, "completions": replicas, "template": {"spec": pod}}
        return yaml.safe_dump(
            {"apiVersion": "batch/v1", "kind": "Job"} | {"metadata": metadata, "spec": spec}
        )
    spec = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
    }
    return yaml.safe_dump(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec}
    )


def usage(rows) -> dict[str, int]:
    """cpu (milli) held per ClusterQueue by workloads holding quota."""
    held: Counter[str] = Counter()
    for row in rows:
        requests = {p["name"]: p["requests"] for p in row.pod_sets}
        for assignment in row.admission["pod_sets"]:
            held[row.cluster_queue_name] += (
                requests[assignment["name"]].get("cpu", 0) * assignment["count"]
            )
    return held


# Which event kinds may follow which, per workload (None: its first event).
FOLLOWS = {
    None: {"workload.submitted"},
    # A pending workload may be ended (its Job completed or failed from outside) or deleted.
    "workload.submitted": {"workload.quota_reserved", "workload.deleted"}
    | {"workload.finished", "workload.failed"},
    "workload.quota_reserved": {"workload.admitted", "workload.preempted", "workload.evicted"}
    | {"workload.deleted", "workload.finished", "workload.failed"},
    "workload.admitted": {"workload.resumed", "workload.preempted", "workload.evicted"}
    | {"workload.deleted", "workload.finished", "workload.failed"},
    "workload.resumed": {"workload.preempted", "workload.evicted", "workload.deleted"}
    | {"workload.finished", "workload.failed"},
    "workload.preempted": {"workload.evicted", "workload.requeued", "workload.deleted"}
    | {"workload.finished", "workload.failed"},
    "workload.evicted": {"workload.requeued", "workload.deleted"}
    | {"workload.finished", "workload.failed"},
    "workload.requeued": {"workload.quota_reserved", "workload.deleted"}
    | {"workload.finished", "workload.failed"},
    "workload.finished": set(),
    "workload.failed": set(),
    "workload.deleted": set(),
}


class AdmissionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.names = itertools.count()
        self.seen_seqs: list[int] = []
        self.usage_before: dict[str, int] = {}

    @initialize()
    def cluster_with_queues(self) -> None:
        self.cluster = Cluster.objects.create(
            name=f"prop-{next(clusters)}", status=Cluster.Status.RUNNING
        )
        cluster_services.provision_now(
            self.cluster, name="cpu", machine_type="n2-standard-8", node_count=2, at=T0
        )
        self.nominal_a = 4000
        self.apply(queue_manifests(self.nominal_a))

    def tick(self) -> None:
        self.now += timedelta(seconds=5)

    def apply(self, text: str, namespace: str | None = None) -> None:
        services.apply(
            self.cluster,
            text,
            source="prop.yaml",
            now=self.now,
            namespace=namespace,
            admit=services.Admit.SKIP,
        )

    def objects(self):
        return KubeObject.objects.filter(cluster=self.cluster, kind__in=("Job", "Deployment"))

    def holding(self):
        return Workload.objects.filter(cluster=self.cluster, phase__in=Workload.HOLDING_QUOTA)

    @rule(
        kind=st.sampled_from(["Job", "Deployment"]),
        team=st.sampled_from(TEAMS),
        cpu=st.sampled_from([500, 1000, 1500, 2000]),
        replicas=st.integers(1, 3),
        priority=st.sampled_from(["low", "high"]),
    )
    def submit(self, kind, team, cpu, replicas, priority) -> None:
        self.tick()
        name = f"w{next(self.names)}"
        self.apply(workload_manifest(kind, name, cpu, replicas, priority), namespace=team)

    @precondition(lambda self: self.objects().filter(kind="Deployment").exists())
    @rule(data=st.data(), replicas=st.integers(0, 4))
    def scale(self, data, replicas) -> None:
        self.tick()
        deployments = list(self.objects().filter(kind="Deployment").order_by("pk"))
        obj = data.draw(st.sampled_from(deployments))
        services.scale(obj, replicas, self.now)

    @precondition(lambda self: self.objects().exists())
    @rule(data=st.data())
    def delete(self, data) -> None:
        self.tick()
        obj = data.draw(st.sampled_from(list(self.objects().order_by("pk"))))
        services.delete(obj, self.now)

    @precondition(lambda self: self.objects().filter(kind="Job").exists())
    @rule(data=st.data(), failed=st.booleans())
    def finish(self, data, failed) -> None:
        self.tick()
        obj = data.draw(st.sampled_from(list(self.objects().filter(kind="Job").order_by("pk"))))
        services.end(obj, self.now, failed=failed)

    @rule(nominal=st.sampled_from([0, 1000, 2000, 4000, 6000]))
    def change_quota(self, nominal) -> None:
        self.tick()
        self.nominal_a = nominal
        self.apply(queue_manifests(nominal))

    @rule()
    def admit_concurrently(self) -> None:
        """Several workers run admission and the simulated cluster at the same instant."""
        self.tick()
        self.usage_before = usage(self.holding())
        cluster, now = self.cluster, self.now
        errors = race(lambda: admission.settle(cluster, now), WORKERS)
        assert not errors, errors
        self.check_quota()

    def check_quota(self) -> None:
        after = usage(self.holding())
        nominal = {
            cq.name: cq.spec["resource_groups"][0]["flavors"][0]["resources"][0]["nominal_quota"]
            for cq in ClusterQueue.objects.filter(cluster=self.cluster)
        }
        limits = {"team-a": nominal["team-a"] + BORROWING_LIMIT}
        for cq, held in after.items():
            if held > self.usage_before.get(cq, 0) and cq in limits:
                assert held <= limits[cq], (cq, held, limits[cq], nominal)
        if sum(after.values()) > sum(self.usage_before.values()):
            assert sum(after.values()) <= sum(nominal.values()), (dict(after), nominal)

    @invariant()
    def each_admission_is_one_event_with_its_flavors(self) -> None:
        if not hasattr(self, "cluster"):
            return
        admitted_events = Counter(
            Event.objects.filter(cluster=self.cluster.name, kind="workload.admitted").values_list(
                "workload_name", flat=True
            )
        )
        for row in Workload.objects.filter(cluster=self.cluster):
            assert admitted_events[row.name] == row.admissions, (row.name, row.phase)
        for row in self.holding():
            flavors = {
                resource
                for assignment in row.admission["pod_sets"]
                for resource in assignment["flavors"]
            }
            requested = {r for p in row.pod_sets for r, amount in p["requests"].items() if amount}
            assert requested <= flavors, (row.name, requested, flavors)

    @invariant()
    def events_read_in_commit_order(self) -> None:
        seqs = list(numbered_events().order_by("seq").values_list("seq", flat=True))
        known = set(seqs)
        assert all(seq in known for seq in self.seen_seqs), "an event read before vanished"
        # Nothing committed since the last read may sort before what that read saw.
        assert seqs[: len(self.seen_seqs)] == self.seen_seqs
        self.seen_seqs = seqs

    @invariant()
    def each_workload_follows_a_legal_order(self) -> None:
        if not hasattr(self, "cluster"):
            return
        history: dict[str, list[str]] = defaultdict(list)
        for name, kind in (
            Event.objects.filter(cluster=self.cluster.name, kind__in=FOLLOWS.keys() - {None})
            .order_by("id")
            .values_list("workload_name", "kind")
        ):
            history[name].append(kind)
        for name, kinds in history.items():
            for before, after in zip([None, *kinds], kinds, strict=False):
                assert after in FOLLOWS[before], (name, before, after, kinds)


def test_admission_by_concurrent_workers_keeps_quotas_and_event_order(transactional_db):
    run_state_machine_as_test(
        AdmissionMachine,
        settings=settings(
            max_examples=25,
            stateful_step_count=15,
            deadline=None,
            derandomize=True,  # the same sequences on every run: CI does not flake on new ones
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
