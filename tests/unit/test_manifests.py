import json
import textwrap

import pytest
import yaml

from tests.shared import SHARED, requires_shared
from workloads.manifests import (
    ClusterQueueSpec,
    CohortSpec,
    ManifestError,
    load_documents,
    queue_spec,
    render,
    scale,
    workload_shape,
)

GI = 2**30
SEEDS = SHARED / "seed-manifests"
SUBSTITUTIONS = {
    "${NAMESPACE}": "llm",
    "<MODEL_BUCKET>": "bucket",
    "<PROJECT_ID>": "project",
    "<REGION>": "us-central1",
}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def load(text, source="test.yaml", **kwargs):
    return load_documents(textwrap.dedent(text), source=source, **kwargs)


def one(text, **kwargs):
    (doc,) = load(text, **kwargs)
    return doc


def rejected(text, **kwargs):
    with pytest.raises(ManifestError) as caught:
        load(text, **kwargs)
    return caught.value


def seed(path, **kwargs):
    text = (SEEDS / path).read_text()
    return load_documents(
        text, source=path, default_namespace="llm", substitutions=SUBSTITUTIONS, **kwargs
    )


def seed_doc(path, kind):
    return next(d for d in seed(path) if d.kind == kind)


def snippet(text):
    return yaml.safe_load(textwrap.dedent(text)) or {}


def job(spec="", meta="", pod="", container=""):
    """A one-container Job with YAML snippets merged into its metadata, spec, pod and container."""
    pod_spec = {**snippet(pod), "containers": [{"name": "main", **snippet(container)}]}
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "llm", **snippet(meta)},
        "spec": {**snippet(spec), "template": {"spec": pod_spec}},
    }
    return one(yaml.safe_dump(body, sort_keys=False))


def shape_error(doc):
    with pytest.raises(ManifestError) as caught:
        workload_shape(doc)
    return caught.value


# Documents ------------------------------------------------------------------------------------


@requires_shared
def test_error_is_one_line_naming_file_document_object_field_and_value():
    text = (SEEDS / "mix-train-and-inference/workloads/fine-tune-l4.yaml").read_text()
    docs = load_documents(
        text.replace("parallelism: 2", "parallelism: two"),
        source="fine-tune.yaml",
        default_namespace="llm",
        substitutions=SUBSTITUTIONS,
    )
    error = shape_error(docs[1])
    assert str(error) == (
        "fine-tune.yaml, document 2 (Job llm/finetune-gemma-l4): "
        "spec.parallelism: 'two' is not an integer"
    )
    assert (error.source, error.document, error.object) == (
        "fine-tune.yaml",
        2,
        "Job llm/finetune-gemma-l4",
    )
    assert (error.path, error.value) == ("spec.parallelism", "two")


def test_rejects_malformed_yaml_naming_the_line_and_document():
    error = rejected(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n bad: x\n"
    )
    assert error.document == 2
    assert str(error).startswith("test.yaml, document 2: invalid YAML at line 9, column 2: ")


def test_rejects_malformed_json_naming_the_line():
    error = rejected('{"apiVersion": "v1",\n "kind": "ConfigMap",\n "metadata": {"name": }}\n')
    assert str(error) == "test.yaml: invalid JSON at line 3, column 23: Expecting value"


def test_rejects_duplicate_yaml_keys_naming_the_line():
    error = rejected("apiVersion: v1\nkind: ConfigMap\nkind: Secret\nmetadata: {name: a}\n")
    assert "line 3" in str(error)
    assert "duplicate key 'kind'" in str(error)


def test_rejects_a_document_that_is_not_a_mapping():
    error = rejected("- apiVersion: v1\n")
    assert str(error) == "test.yaml, document 1: a document must be a mapping, not list"


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("kind: ConfigMap\nmetadata: {name: a}", "apiVersion"),
        ("apiVersion: v1\nmetadata: {name: a}", "kind"),
        ("apiVersion: v1\nkind: ConfigMap", "metadata"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: a-}", "metadata.name"),
    ],
)
def test_rejects_missing_required_fields(text, path):
    error = rejected(text)
    assert (error.path, error.message) == (path, "is required")


@pytest.mark.parametrize(
    ("kind", "name", "rule"),
    [
        ("ConfigMap", "Fine_Tune", "RFC 1123 subdomain"),
        ("Namespace", "a.b", "RFC 1123 label"),
        ("Service", "1svc", "RFC 1035 label"),
        ("ClusterQueue", "x" * 254, "RFC 1123 subdomain"),
    ],
)
def test_rejects_invalid_names_saying_which_rule(kind, name, rule):
    version = "kueue.x-k8s.io/v1beta2" if kind == "ClusterQueue" else "v1"
    error = rejected(f"apiVersion: {version}\nkind: {kind}\nmetadata: {{name: '{name}'}}\n")
    assert error.path == "metadata.name"
    assert rule in error.message


def test_rejects_kustomization_telling_how_to_apply_it():
    error = rejected(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n",
        source="kustomization.yaml",
    )
    assert str(error) == (
        "kustomization.yaml, document 1: apiVersion: Kustomize files are not "
        "applied directly; run `kubectl kustomize` and apply its output"
    )


def test_rejects_unknown_kind_naming_file_and_document():
    error = rejected(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: b}\n",
        source="jobs.yaml",
    )
    assert str(error).startswith("jobs.yaml, document 2: kind: unsupported kind 'CronJob'")
    assert "ClusterQueue" in error.message
    assert "LeaderWorkerSet" in error.message


def test_rejects_known_kind_at_unsupported_version_listing_supported_ones():
    error = rejected("apiVersion: kueue.x-k8s.io/v1alpha1\nkind: Cohort\nmetadata: {name: a}\n")
    assert error.path == "apiVersion"
    assert error.message.endswith("supported: kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2")


def test_rejects_two_documents_with_the_same_key():
    error = rejected(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\n"
    )
    assert error.document == 2
    assert "ConfigMap/default/a is defined twice in one request (also document 1)" in str(error)


def test_same_name_in_two_namespaces_is_two_objects():
    docs = load(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: y}\n"
    )
    assert [d.key for d in docs] == ["ConfigMap/x/a", "ConfigMap/y/a"]


def test_rejects_invalid_label_value_with_its_path():
    error = rejected(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
        "  labels: {kueue.x-k8s.io/queue-name: 'not ok'}\n"
    )
    assert error.path == "metadata.labels[kueue.x-k8s.io/queue-name]"


JOB_WITH = """\
apiVersion: batch/v1
kind: Job
metadata: {{name: j}}
spec:
  template:
    spec:
      containers:
        - name: a
        - name: b
          env: [{{name: x, value: {value}}}]
"""


@pytest.mark.parametrize(
    ("value", "problem"),
    [(".nan", "nan is not a finite number"), ('"a\\u0000b"', "contains a NUL character")],
)
def test_a_value_json_cannot_store_is_refused_with_its_path(value, problem):
    error = rejected(JOB_WITH.format(value=value))
    assert problem in error.message
    assert error.path == "spec.template.spec.containers[1].env[0].value"


def test_an_alias_past_the_limit_is_refused_with_its_path(settings):
    settings.ACCELPLANE_MAX_MANIFEST_ALIASES = 1
    error = rejected(JOB_WITH.format(value="&v one") + "  labels: {a: *v, b.c/d: *v}\n")
    assert "more than 1 YAML aliases" in error.message
    assert error.path == "spec.labels[b.c/d]"


def test_rejects_non_string_label_values_as_kubernetes_does():
    assert (
        rejected("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: {b: 1}}\n").message
        == "1 is not a string"
    )


def test_namespace_comes_from_metadata_then_default_namespace_then_default():
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: mine}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
    )
    assert [d.namespace for d in load(text, default_namespace="llm")] == ["mine", "llm"]
    assert load(text)[1].namespace == "default"


def test_cluster_scoped_kinds_have_no_namespace_even_if_one_is_written():
    doc = one(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n"
        "metadata: {name: cq, namespace: llm}\n",
        default_namespace="llm",
    )
    assert (doc.namespace, doc.key, doc.title) == (None, "ClusterQueue/cq", "ClusterQueue cq")


def test_document_keeps_the_body_verbatim_and_its_position():
    text = (
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n---\n# empty\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n"
    )
    namespace, doc = load(text)
    assert doc.body == yaml.safe_load(text.split("---\n")[-1])
    assert (doc.index, doc.api_version, doc.kind, doc.name) == (3, "v1", "ConfigMap", "a")


def test_substitutions_are_literal_replacements_made_before_parsing():
    doc = one(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ${NAMESPACE}}\n"
        "data: {bucket: <MODEL_BUCKET>, dollar: $(X)}\n",
        substitutions={"${NAMESPACE}": "llm", "<MODEL_BUCKET>": "b"},
    )
    assert doc.namespace == "llm"
    assert doc.body["data"] == {"bucket": "b", "dollar": "$(X)"}


def test_yaml_timestamps_stay_strings_as_kubectl_sends_them():
    doc = one("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {day: 2024-01-01}\n")
    assert doc.body["data"]["day"] == "2024-01-01"


def test_accepts_bytes():
    assert (
        load_documents(
            b"apiVersion: v1\nkind: Namespace\nmetadata: {name: llm}\n", source="ns.yaml"
        )[0].key
        == "Namespace/llm"
    )


def test_reads_json_object_array_and_list():
    item = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    other = {**item, "metadata": {"name": "b"}}
    assert one(json.dumps(item)).key == "ConfigMap/default/a"
    assert [d.index for d in load(json.dumps([item, other]))] == [1, 2]
    listed = load(json.dumps({"apiVersion": "v1", "kind": "List", "items": [item, other]}))
    assert [d.name for d in listed] == ["a", "b"]


# Queueing objects -----------------------------------------------------------------------------

CQ_V1BETA1 = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  cohort: team
  queueingStrategy: StrictFIFO
  namespaceSelector: {}
  admissionChecks: [ac]
  flavorFungibility: {whenCanBorrow: Borrow}
  preemption:
    withinClusterQueue: LowerOrNewerEqualPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: on-demand
      resources:
      - {name: cpu, nominalQuota: 72, borrowingLimit: 8, lendingLimit: "36"}
      - {name: memory, nominalQuota: 288Gi}
"""
CQ_V1BETA2 = (
    CQ_V1BETA1.replace("v1beta1", "v1beta2")
    .replace("cohort: team", "cohortName: team")
    .replace("admissionChecks: [ac]", "admissionChecksStrategy: {admissionChecks: [{name: ac}]}")
    .replace("whenCanBorrow: Borrow", "whenCanBorrow: MayStopSearch")
)


def queue(text, **kwargs):
    return queue_spec(one(text, **kwargs))


def queue_error(text):
    with pytest.raises(ManifestError) as caught:
        queue(text)
    return caught.value


def test_v1beta1_and_v1beta2_cluster_queues_give_the_same_spec():
    assert queue(CQ_V1BETA1) == queue(CQ_V1BETA2)
    spec = queue(CQ_V1BETA2)
    assert spec["cohort"] == "team"
    assert spec["admission_checks"] == [{"name": "ac", "on_flavors": []}]
    assert spec["resource_groups"][0]["flavors"][0]["resources"] == [
        {"name": "cpu", "nominal_quota": 72_000, "borrowing_limit": 8000, "lending_limit": 36_000},
        {
            "name": "memory",
            "nominal_quota": 288 * GI * 1000,
            "borrowing_limit": None,
            "lending_limit": None,
        },
    ]


def test_cluster_queue_gets_kueue_defaults():
    spec = queue("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\n")
    assert spec == {
        "cohort": None,
        "queueing_strategy": "BestEffortFIFO",
        "namespace_selector": None,
        "preemption": {
            "within_cluster_queue": "Never",
            "reclaim_within_cohort": "Never",
            "borrow_within_cohort": "Never",
            "max_priority_threshold": None,
        },
        "flavor_fungibility": {
            "when_can_borrow": "MayStopSearch",
            "when_can_preempt": "TryNextFlavor",
            "preference": None,
        },
        "resource_groups": [],
        "admission_checks": [],
        "stop_policy": "None",
        "fair_weight": None,
        "admission_mode": None,
    }


@pytest.mark.parametrize(
    ("old", "new", "path", "message"),
    [
        (
            "  cohortName: team\n",
            "",
            "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
            "borrowingLimit must be nil when cohortName is empty",
        ),
        (
            "borrowingLimit: 8, ",
            "",
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
            "lendingLimit must be less than or equal to nominalQuota",
        ),
        (
            "reclaimWithinCohort: Any",
            "reclaimWithinCohort: Never",
            "spec.preemption.borrowWithinCohort.policy",
            "must be Never when reclaimWithinCohort",
        ),
        (
            "[cpu, memory]",
            "[memory, cpu]",
            "spec.resourceGroups[0].flavors[0].resources",
            "exactly the group's coveredResources, in the same order",
        ),
        ("StrictFIFO", "Strict", "spec.queueingStrategy", "not one of: BestEffortFIFO, StrictFIFO"),
        (
            "nominalQuota: 72,",
            "nominalQuota: lots,",
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "is not a valid quantity",
        ),
        ("cohortName: team", "cohort: team", "spec.cohort", "unknown field 'cohort'"),
    ],
)
def test_rejects_invalid_cluster_queue_with_field_path(old, new, path, message):
    text = CQ_V1BETA2.replace(old, new)
    if "lendingLimit" in path:
        text = text.replace('lendingLimit: "36"', "lendingLimit: 80")
    error = queue_error(text)
    assert error.path == path
    assert message in error.message


def test_rejects_a_flavor_in_two_resource_groups():
    text = CQ_V1BETA2 + (
        "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n"
        "    - {name: on-demand, resources: [{name: nvidia.com/gpu, "
        "nominalQuota: 6}]}\n"
    )
    assert queue_error(text).path == "spec.resourceGroups[1].flavors[0].name"


def test_rejects_both_admission_check_spellings_at_once():
    text = CQ_V1BETA1.replace(
        "admissionChecks: [ac]",
        "admissionChecks: [ac]\n  admissionChecksStrategy: {admissionChecks: [{name: ac}]}",
    )
    assert "cannot both be set" in queue_error(text).message


def test_cohort_with_parent_may_set_limits_and_one_without_may_not():
    text = """
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: Cohort
        metadata: {name: team}
        spec:
          parentName: org
          resourceGroups:
          - coveredResources: [cpu]
            flavors: [{name: f, resources: [{name: cpu, nominalQuota: 4, lendingLimit: 9}]}]
    """
    spec = queue(text)
    assert spec["parent"] == "org"
    assert spec["resource_groups"][0]["flavors"][0]["resources"][0]["lending_limit"] == 9000
    assert "when parentName is empty" in queue_error(text.replace("parentName: org", "")).message


FAIR_CQ = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor,
                      preference: BorrowingOverPreemption}
  fairSharing: {weight: WEIGHT}
  admissionScope: {admissionMode: NoAdmissionFairSharing}
"""


@pytest.mark.parametrize(
    ("weight", "expected"),
    [("2", 2.0), ('"500m"', 0.5), ("0.25", 0.25), ("0", 0.0), ('"1u"', 1e-6), ('"2n"', 2e-9)],
)
def test_fair_sharing_weight_is_a_quantity(weight, expected):
    """Kueue reads `fairSharing.weight` as a resource.Quantity, as a float
    (pkg/cache/scheduler/fair_sharing.go `parseFairWeight`); its webhook allows 0, 0.1, 1u,
    2n (test/integration/singlecluster/webhook/core/clusterqueue_test.go)."""
    spec = queue(FAIR_CQ.replace("WEIGHT", weight))
    assert spec["fair_weight"] == pytest.approx(expected)
    assert spec["admission_mode"] == "NoAdmissionFairSharing"
    assert spec["flavor_fungibility"]["preference"] == "BorrowingOverPreemption"


def test_fair_sharing_without_a_weight_gets_the_crd_default_of_one():
    text = FAIR_CQ.replace("fairSharing: {weight: WEIGHT}", "fairSharing: {}")
    assert queue(text)["fair_weight"] == 1.0


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ("-1", "must not be negative"),
        ('"1n"', "greater than 1n"),
        ("0.0000000001", "greater than 1n"),
        ("heavy", "is not a valid quantity"),
        ('"1e30"', "is too large"),
    ],
)
def test_rejects_a_fair_sharing_weight_kueue_refuses(weight, message):
    """Kueue pkg/webhooks/common.go `validateFairSharing`: not negative, and above 1n when
    not 0 (test/integration/singlecluster/webhook/core/clusterqueue_test.go, "Should forbid
    threshold/collapsed/negative FairSharing weight")."""
    error = queue_error(FAIR_CQ.replace("WEIGHT", weight))
    assert error.path == "spec.fairSharing.weight"
    assert message in error.message


@pytest.mark.parametrize(
    ("old", "new", "path", "message"),
    [
        (
            "{admissionMode: NoAdmissionFairSharing}",
            "{}",
            "spec.admissionScope.admissionMode",
            "is required",
        ),
        (
            "NoAdmissionFairSharing",
            "Sometimes",
            "spec.admissionScope.admissionMode",
            "not one of: UsageBasedAdmissionFairSharing, NoAdmissionFairSharing",
        ),
        (
            "BorrowingOverPreemption",
            "Cheapest",
            "spec.flavorFungibility.preference",
            "not one of: BorrowingOverPreemption, PreemptionOverBorrowing",
        ),
        (
            "whenCanBorrow: TryNextFlavor",
            "whenCanBorrow: MayStopSearch",
            "spec.flavorFungibility.preference",
            "only be set when whenCanBorrow and whenCanPreempt are TryNextFlavor",
        ),
    ],
)
def test_rejects_bad_admission_scope_and_preference(old, new, path, message):
    error = queue_error(FAIR_CQ.replace("WEIGHT", "1").replace(old, new))
    assert error.path == path
    assert message in error.message


def test_fair_sharing_and_preference_render_back_to_the_same_spec():
    for weight in ("3", '"0.5"', "0"):
        spec = queue(FAIR_CQ.replace("WEIGHT", weight))
        again = one(yaml.safe_dump(render("ClusterQueue", "cq", None, spec)))
        assert queue_spec(again) == spec
    cohort = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: c}\n"
    spec = queue(cohort + "spec: {fairSharing: {weight: 250m}}\n")
    assert spec["fair_weight"] == 0.25
    assert render("Cohort", "c", None, spec)["spec"]["fairSharing"] == {"weight": "0.25"}
    assert "fairSharing" not in render("Cohort", "c", None, queue(cohort))["spec"]


def test_a_spec_stored_before_fair_sharing_loads_with_kueue_defaults():
    stored = queue(FAIR_CQ.replace("WEIGHT", "1"))
    for key in ("fair_weight", "admission_mode"):
        del stored[key]
    del stored["flavor_fungibility"]["preference"]
    spec = ClusterQueueSpec.from_stored(stored)
    assert (spec.weight, spec.admission_mode, spec.flavor_fungibility.preference) == (
        1.0,
        None,
        None,
    )
    assert "fairSharing" not in render("ClusterQueue", "cq", None, stored)["spec"]
    assert CohortSpec.from_stored({"parent": None, "resource_groups": []}).weight == 1.0


def test_typed_spec_lists_quotas_in_spec_order():
    spec = ClusterQueueSpec.from_stored(queue(CQ_V1BETA2))
    assert [
        (flavor, resource, q.nominal, q.borrowing_limit) for flavor, resource, q in spec.quotas()
    ][:2] == [("on-demand", "cpu", 72_000, 8000), ("on-demand", "memory", 288 * GI * 1000, None)]
    assert spec.check_names == ("ac",)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (["kubernetes.io/hostname", "rack"], "can only be the last level"),
        ([f"l{i}" for i in range(17)], "at most 16"),
        ([], "is required"),
        (["rack", "rack"], "appears twice"),
    ],
)
def test_rejects_invalid_topology_levels(levels, message):
    items = "".join(f"\n  - nodeLabel: {level}" for level in levels) or " []"
    text = (
        f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {{name: t}}\n"
        f"spec:\n  levels:{items}\n"
    )
    assert message in queue_error(text).message


def test_resource_flavor_normalises_taints_and_requires_labels_for_topology():
    base = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: spot}\n"
    spec = queue(base + "spec:\n  nodeTaints: [{key: spot, effect: NoSchedule}]\n")
    assert spec["node_taints"] == [{"key": "spot", "value": "", "effect": "NoSchedule"}]
    assert queue_error(base + "spec: {topologyName: t}\n").path == "spec.topologyName"


def test_priority_classes_get_defaults_and_limits():
    spec = queue(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: p}\nvalue: 10\n"
    )
    assert spec == {
        "value": 10,
        "global_default": False,
        "preemption_policy": "PreemptLowerPriority",
        "description": "",
    }
    error = queue_error(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n"
        "metadata: {name: p}\nvalue: 2000000000\n"
    )
    assert (error.path, error.value) == ("value", 2_000_000_000)
    assert (
        queue_error(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\n"
            "metadata: {name: w}\nvalue: high\n"
        ).path
        == "value"
    )


def test_local_queue_needs_a_cluster_queue():
    error = queue_error(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
        "metadata: {name: lq}\nspec: {stopPolicy: Hold}\n"
    )
    assert (error.path, error.object) == ("spec.clusterQueue", "LocalQueue default/lq")


@requires_shared
def test_seed_cluster_queue_quota_in_milli_units():
    spec = queue_spec(
        seed_doc("mix-train-and-inference/workloads/cluster-queue.yaml", "ClusterQueue")
    )
    quotas = {
        r["name"]: r["nominal_quota"] for r in spec["resource_groups"][0]["flavors"][0]["resources"]
    }
    assert quotas == {
        "cpu": 72_000,
        "memory": 288 * GI * 1000,
        "nvidia.com/gpu": 6000,
        "ephemeral-storage": 200 * GI * 1000,
    }
    assert spec["preemption"]["reclaim_within_cohort"] == "LowerPriority"


@requires_shared
@pytest.mark.parametrize(
    "path",
    sorted(str(p.relative_to(SEEDS)) for p in SEEDS.glob("**/*.yaml")) if SEEDS.is_dir() else [],
)
def test_every_seed_manifest_loads_and_renders_back_to_the_same_spec(path):
    if path.startswith("mix-train-and-inference/kueue/kustomization"):
        assert "Kustomize" in str(pytest.raises(ManifestError, seed, path).value)
        return
    if path.startswith("mix-train-and-inference/src/"):  # Accelerate's config, no manifest
        assert pytest.raises(ManifestError, seed, path).value.path == "apiVersion"
        return
    for doc in seed(path):
        if doc.kind in (
            "ClusterQueue",
            "ResourceFlavor",
            "LocalQueue",
            "WorkloadPriorityClass",
            "AdmissionCheck",
            "Topology",
            "Cohort",
            "PriorityClass",
        ):
            spec = queue_spec(doc)
            rendered = render(doc.kind, doc.name, doc.namespace, spec)
            again = one(yaml.safe_dump(rendered), default_namespace=doc.namespace)
            assert queue_spec(again) == spec
        else:
            workload_shape(doc)


# Workloads ------------------------------------------------------------------------------------


@requires_shared
def test_tgi_deployment_pod_requests_and_queue_from_the_pod_template():
    shape = workload_shape(
        seed_doc("mix-train-and-inference/workloads/tgi-gemma-2-9b-it-hp.yaml", "Deployment")
    )
    (pod,) = shape.pod_sets
    assert pod.requests == {
        "cpu": 4000,
        "memory": 30 * GI * 1000,
        "nvidia.com/gpu": 2000,
        "ephemeral-storage": 30 * GI * 1000,
    }
    assert (shape.queue_name, shape.pod_priority_class) == ("lq", "high-priority-preempting")
    assert (shape.replicas, shape.per_replica, pod.count) == (1, True, 1)
    assert GPU_TOLERATION in pod.tolerations
    assert pod.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-l4"}


@requires_shared
def test_fine_tune_job_is_one_pod_set_of_two_pods_with_two_gpus():
    shape = workload_shape(seed_doc("mix-train-and-inference/workloads/fine-tune-l4.yaml", "Job"))
    (pod,) = shape.pod_sets
    assert (pod.name, pod.count, pod.requests) == ("main", 2, {"nvidia.com/gpu": 2000})
    assert (shape.queue_name, shape.replicas, shape.per_replica) == ("lq", 1, False)


@requires_shared
def test_subslicing_jobset_is_one_pod_set_of_twelve_pods_with_four_chips():
    shape = workload_shape(
        seed_doc("dynamic-slicing/kueue-jobset-simple-subslicing.yaml", "JobSet")
    )
    (pod,) = shape.pod_sets
    assert (pod.name, pod.count, pod.requests) == ("job-jax", 12, {"google.com/tpu": 4000})
    assert shape.priority_class == "low-priority-1000"
    assert pod.annotations["cloud.google.com/gke-tpu-slice-topology"] == "2x2x2"


@requires_shared
def test_prefill_leader_worker_set_is_four_groups_of_leader_and_one_worker():
    shape = workload_shape(
        seed_doc("dynamic-slicing/kueue-lws-prefill-model-streamer.yaml", "LeaderWorkerSet")
    )
    assert (shape.replicas, shape.per_replica) == (4, True)
    assert [(p.name, p.count) for p in shape.pod_sets] == [("leader", 1), ("worker", 1)]
    assert shape.pod_sets[1].requests == {
        "cpu": 220_000,
        "memory": 850 * GI * 1000,
        "google.com/tpu": 4000,
    }


@requires_shared
def test_decode_leader_requests_include_its_native_sidecar():
    path = "dynamic-slicing/kueue-lws-decode-model-streamer.yaml"
    text = (SEEDS / path).read_text().replace("resources: {}", "resources: {requests: {cpu: 1}}")
    (doc,) = load_documents(text, source=path, substitutions=SUBSTITUTIONS)
    leader, worker = workload_shape(doc).pod_sets
    assert leader.requests["cpu"] == 221_000
    assert worker.requests["cpu"] == 220_000
    unchanged = workload_shape(seed_doc(path, "LeaderWorkerSet")).pod_sets[0]
    assert unchanged.requests == {"cpu": 220_000, "memory": 850 * GI * 1000, "google.com/tpu": 4000}


@requires_shared
def test_startup_probe_delay_becomes_startup_seconds():
    shape = workload_shape(
        seed_doc("jetstream/jetstream-pytorch-gemma-7b-it-2x4.yaml", "Deployment")
    )
    assert shape.pod_sets[0].startup_seconds == 90
    # GKE's ExtendedResourceToleration lets TPU pods onto tainted TPU nodes as well.
    assert {
        "key": "google.com/tpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in shape.pod_sets[0].tolerations


def requests_of(**kwargs):
    return workload_shape(job(**kwargs)).pod_sets[0].requests


def test_limits_fill_missing_requests():
    assert requests_of(
        container="resources: {requests: {cpu: 1}, limits: {cpu: 2, memory: 1Gi}}"
    ) == {"cpu": 1000, "memory": GI * 1000}


def test_containers_may_ask_standard_resources_hugepages_and_extended_ones():
    container = (
        "resources: {requests: {cpu: 1, memory: 1Gi, ephemeral-storage: 1Gi, hugepages-2Mi: 2Mi,"
        " example.com/fpga: 1}, limits: {example.com/fpga: 1, hugepages-2Mi: 2Mi}}"
    )
    assert set(requests_of(container=container)) == {
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-2Mi",
        "example.com/fpga",
    }


def test_pod_request_is_the_larger_of_containers_and_each_init_container():
    pod = """
        initContainers:
        - {name: big, resources: {requests: {cpu: 8, memory: 1Gi}}}
        - {name: small, resources: {requests: {cpu: 500m}}}
    """
    assert requests_of(pod=pod, container="resources: {requests: {cpu: 2, memory: 2Gi}}") == {
        "cpu": 8000,
        "memory": 2 * GI * 1000,
    }


def test_sidecars_add_to_containers_and_to_init_containers_started_after_them():
    pod = """
        initContainers:
        - {name: before, resources: {requests: {cpu: 5}}}
        - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 1}}}
        - {name: after, resources: {requests: {cpu: 4}}}
    """
    assert requests_of(pod=pod, container="resources: {requests: {cpu: 2}}") == {"cpu": 5000}
    assert requests_of(
        pod=pod.replace("cpu: 5", "cpu: 1"), container="resources: {requests: {cpu: 2}}"
    ) == {"cpu": 5000}
    assert requests_of(
        pod=pod.replace("cpu: 5", "cpu: 1").replace("cpu: 4", "cpu: 1"),
        container="resources: {requests: {cpu: 2}}",
    ) == {"cpu": 3000}


def test_overhead_and_pod_level_resources_apply_and_zeros_are_dropped():
    pod = "overhead: {cpu: 250m}\nresources: {limits: {memory: 4Gi}}"
    container = "resources: {requests: {cpu: 1, memory: 1Gi, example.com/fpga: 0}}"
    assert requests_of(pod=pod, container=container) == {"cpu": 1250, "memory": 4 * GI * 1000}


def test_gpu_toleration_is_added_once():
    pod = "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]"
    container = "resources: {limits: {nvidia.com/gpu: 1}}"
    assert workload_shape(job(container=container)).pod_sets[0].tolerations == (GPU_TOLERATION,)
    assert workload_shape(job(pod=pod, container=container)).pod_sets[0].tolerations == (
        GPU_TOLERATION,
    )
    assert workload_shape(job()).pod_sets[0].tolerations == ()


@pytest.mark.parametrize(
    ("spec", "meta", "count", "min_count"),
    [
        ("", "", 1, None),
        ("parallelism: 4", "", 4, None),
        ("parallelism: 4\ncompletions: 2", "", 2, None),
        ("parallelism: 4", "annotations: {kueue.x-k8s.io/job-min-parallelism: '2'}", 4, 2),
    ],
)
def test_job_pod_count_is_parallelism_capped_by_completions(spec, meta, count, min_count):
    (pod,) = workload_shape(job(spec=spec, meta=meta)).pod_sets
    assert (pod.name, pod.count, pod.min_count) == ("main", count, min_count)


@pytest.mark.parametrize(
    ("kwargs", "path", "message"),
    [
        ({"spec": "parallelism: '2'"}, "spec.parallelism", "'2' is not an integer"),
        ({"spec": "completions: -1"}, "spec.completions", "-1 must be at least 0"),
        (
            {"container": "resources: {requests: [cpu]}"},
            "spec.template.spec.containers[0].resources.requests",
            "['cpu'] is not a mapping",
        ),
        (
            {"container": "resources: {requests: {cpu: two}}"},
            "spec.template.spec.containers[0].resources.requests.cpu",
            "'two' is not a valid quantity",
        ),
        (
            {"container": "resources: {limits: {nvidia.com/gpu: 500m}}"},
            "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "not a whole number",
        ),
        (
            {"container": "resources: {requests: {cpu: 2}, limits: {cpu: 1}}"},
            "spec.template.spec.containers[0].resources.requests.cpu",
            "less than or equal",
        ),
        (
            {"container": "resources: {requests: {cpu: 1, pods: 1}}"},
            "spec.template.spec.containers[0].resources.requests.pods",
            "must be a standard resource for containers",
        ),
        (
            {"container": "resources: {limits: {gpu: 1}}"},
            "spec.template.spec.containers[0].resources.limits.gpu",
            "or an extended resource (domain/name)",
        ),
        (
            {"meta": "annotations: {kueue.x-k8s.io/job-min-parallelism: '1'}"},
            "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]",
            "between 1 and 0",
        ),
        (
            {"meta": "annotations: {sim.accelplane.dev/steps: '3'}"},
            "metadata.annotations[sim.accelplane.dev/steps]",
            "unknown simulation annotation",
        ),
        (
            {"pod": "tolerations: [{operator: Equal, value: x}]"},
            "spec.template.spec.tolerations[0].operator",
            "must be Exists when key is empty",
        ),
    ],
)
def test_rejects_wrong_workload_fields_with_exact_path(kwargs, path, message):
    error = shape_error(job(**kwargs))
    assert (error.path, error.object) == (path, "Job llm/train")
    assert message in error.message


def test_rejects_negative_replicas():
    doc = one(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: -1\n"
        "  template: {spec: {containers: [{name: c}]}}\n"
    )
    assert str(shape_error(doc)) == (
        "test.yaml, document 1 (Deployment default/d): spec.replicas: -1 must be at least 0"
    )


def test_job_queue_and_priority_come_from_the_job_labels_and_sim_from_annotations():
    meta = (
        "labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: high}\n"
        "annotations: {sim.accelplane.dev/total-steps: '30'}"
    )
    shape = workload_shape(job(meta=meta, pod="priorityClassName: low"))
    assert (shape.queue_name, shape.priority_class, shape.pod_priority_class) == (
        "lq",
        "high",
        "low",
    )
    assert shape.sim == {"total-steps": "30"}


def test_jobset_pod_sets_are_replicas_times_pods_per_job():
    doc = one("""
        apiVersion: jobset.x-k8s.io/v1alpha2
        kind: JobSet
        metadata: {name: js}
        spec:
          replicatedJobs:
          - name: driver
            template: {spec: {template: {spec: {containers: [{name: c}]}}}}
          - name: workers
            replicas: 3
            template: {spec: {parallelism: 4, template: {spec: {containers: [{name: c}]}}}}
    """)
    assert [(p.name, p.count) for p in workload_shape(doc).pod_sets] == [
        ("driver", 1),
        ("workers", 12),
    ]


def lws(group):
    return one(f"""
        apiVersion: leaderworkerset.x-k8s.io/v1
        kind: LeaderWorkerSet
        metadata: {{name: l}}
        spec:
          leaderWorkerTemplate: {group}
    """)


def test_leader_worker_set_of_size_one_has_only_its_leader():
    pods = "{spec: {containers: [{name: c}]}}"
    shape = workload_shape(lws(f"{{size: 1, leaderTemplate: {pods}, workerTemplate: {pods}}}"))
    assert (shape.replicas, [(p.name, p.count) for p in shape.pod_sets]) == (1, [("leader", 1)])


def test_leader_worker_set_without_leader_template_is_one_main_pod_set_as_in_kueue():
    pods = "{spec: {containers: [{name: c}]}}"
    shape = workload_shape(lws(f"{{size: 3, workerTemplate: {pods}}}"))
    assert [(p.name, p.count) for p in shape.pod_sets] == [("main", 3)]


def test_required_node_affinity_is_read_as_terms_of_expressions():
    pod = """
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions: [{key: zone, operator: In, values: [a, b]}]
    """
    (pod_set,) = workload_shape(job(pod=pod)).pod_sets
    assert pod_set.required_node_affinity == (
        ({"key": "zone", "operator": "In", "values": ["a", "b"]},),
    )


def test_inert_and_queue_kinds_have_no_workload_shape():
    assert workload_shape(one("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")) is None
    assert workload_shape(one(CQ_V1BETA2)) is None


def test_scale_changes_only_replicas_of_a_copy():
    doc = one(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: 1\n"
        "  template: {spec: {containers: [{name: c}]}}\n"
    )
    body = scale(doc, 4)
    assert body["spec"]["replicas"] == 4
    assert doc.body["spec"]["replicas"] == 1
    assert {**body, "spec": {**body["spec"], "replicas": 1}} == doc.body


def test_scale_rejects_jobs_and_negative_replicas():
    with pytest.raises(ManifestError, match="Job cannot be scaled"):
        scale(job(), 2)
    deployment = one("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {}\n")
    with pytest.raises(ManifestError, match="spec.replicas: -1 must be at least 0"):
        scale(deployment, -1)
