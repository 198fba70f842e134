"""Every queueing object Accelplane renders is valid against the upstream CRD (v1beta2).

jsonschema checks the OpenAPI structure (types, enums, patterns, required fields, list sizes);
the CRDs' CEL rules (x-kubernetes-validations) are Kueue's job and are tested in test_manifests.
"""

import json
import textwrap
from functools import cache

import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.shared import SHARED, requires_shared
from workloads.manifests import QUEUE_KINDS, load_documents, queue_spec, render

pytestmark = requires_shared

SCHEMAS = SHARED / "schemas"
SEEDS = SHARED / "seed-manifests"
SUBSTITUTIONS = {
    "${NAMESPACE}": "llm",
    "<MODEL_BUCKET>": "bucket",
    "<PROJECT_ID>": "project",
    "<REGION>": "us-central1",
}
CRD_FILES = {
    "AdmissionCheck": "kueue.x-k8s.io_admissionchecks.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "Cohort": "kueue.x-k8s.io_cohorts.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "Topology": "kueue.x-k8s.io_topologies.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}
# Keywords whose value maps names to schemas (so a field called "nullable" stays a field).
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "schemas"})
HAND_BUILT = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohort: research
  queueingStrategy: StrictFIFO
  namespaceSelector:
    matchExpressions: [{key: team, operator: In, values: [a]}]
  admissionChecks: [provisioning]
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor,
                      preference: PreemptionOverBorrowing}
  fairSharing: {weight: 500m}
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: reserved
      resources:
      - {name: cpu, nominalQuota: 48, borrowingLimit: 500m, lendingLimit: 24}
      - {name: memory, nominalQuota: 192Gi, lendingLimit: 1536Mi}
      - {name: nvidia.com/gpu, nominalQuota: 4, borrowingLimit: 0}
    - name: spot
      resources:
      - {name: cpu, nominalQuota: 0}
      - {name: memory, nominalQuota: 0}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohortName: research
  stopPolicy: HoldAndDrain
  admissionChecksStrategy:
    admissionChecks: [{name: provisioning, onFlavors: [spot]}]
  resourceGroups:
  - coveredResources: [google.com/tpu]
    flavors: [{name: spot, resources: [{name: google.com/tpu, nominalQuota: 16}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec:
  parentName: org
  fairSharing: {weight: 2}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: reserved, resources: [{name: cpu, nominalQuota: 8, borrowingLimit: 2,
                                            lendingLimit: 16}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: spot}
spec:
  nodeLabels: {cloud.google.com/gke-spot: "true"}
  nodeTaints: [{key: cloud.google.com/gke-spot, value: "true", effect: NoSchedule}]
  tolerations: [{key: cloud.google.com/gke-spot, operator: Exists, effect: NoSchedule}]
  topologyName: default
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: team-a}
spec: {clusterQueue: team-a, stopPolicy: Hold}
"""


def json_schema(openapi):
    """OpenAPI 3.0 (Kubernetes flavour) -> JSON Schema 2020-12.

    1. `nullable: true` becomes a type (and enum) union with null.
    2. Objects with declared properties refuse unknown ones, as `kubectl apply` (strict field
       validation) does, unless x-kubernetes-preserve-unknown-fields says otherwise.
    3. RE2 allows an inline flag after `^` (`^(?i)...`); Python's re needs it first.
    """
    if isinstance(openapi, list):
        return [json_schema(item) for item in openapi]
    if not isinstance(openapi, dict):
        return openapi
    schema = {}
    for key, value in openapi.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            schema[key] = {name: json_schema(item) for name, item in value.items()}
        elif not (key == "nullable" and isinstance(value, bool)):
            schema[key] = json_schema(value)
    if openapi.get("nullable") is True:
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            schema["type"] = [*types, "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
    if (
        isinstance(schema.get("properties"), dict)
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        schema["additionalProperties"] = False
    if isinstance(schema.get("pattern"), str) and schema["pattern"].startswith("^(?i)"):
        schema["pattern"] = "(?i)^" + schema["pattern"][len("^(?i)") :]
    return schema


@cache
def validator(kind):
    if kind == "PriorityClass":
        document = json.loads(
            (SCHEMAS / "k8s/apis__scheduling.k8s.io__v1_openapi.json").read_text()
        )
        schema = {
            "$ref": "#/components/schemas/io.k8s.api.scheduling.v1.PriorityClass",
            "components": json_schema(document["components"]),
        }
    else:
        crd = yaml.safe_load((SCHEMAS / "kueue" / CRD_FILES[kind]).read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
        assert version["storage"] is True
        schema = json_schema(version["schema"]["openAPIV3Schema"])
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def errors(manifest):
    found = validator(manifest["kind"]).iter_errors(manifest)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


def rendered(text, source, namespace="llm"):
    docs = load_documents(
        text, source=source, default_namespace=namespace, substitutions=SUBSTITUTIONS
    )
    return [
        (f"{source}:{d.key}", render(d.kind, d.name, d.namespace, queue_spec(d)))
        for d in docs
        if d.kind in QUEUE_KINDS
    ]


def seed_objects():
    if not SEEDS.is_dir():
        return []
    return [
        pytest.param(manifest, id=key)
        for path in sorted(SEEDS.glob("**/*.yaml*"))
        if "kustomization" not in path.name and "/src/" not in str(path)
        for key, manifest in rendered(path.read_text(), str(path.relative_to(SEEDS)))
    ]


def hand_built_objects():
    return [pytest.param(m, id=key) for key, m in rendered(textwrap.dedent(HAND_BUILT), "hand")]


@pytest.mark.parametrize("manifest", seed_objects())
def test_rendered_seed_object_is_valid_against_its_crd(manifest):
    assert errors(manifest) == []


@pytest.mark.parametrize("manifest", hand_built_objects())
def test_rendered_hand_built_object_is_valid_against_its_crd(manifest):
    assert errors(manifest) == []


def test_seeds_cover_every_kueue_kind_but_cohort():
    kinds = {param.values[0]["kind"] for param in seed_objects()}
    assert kinds == set(CRD_FILES) - {"Cohort"} | {"PriorityClass"}


def test_renders_the_storage_version_with_quantities_as_kubernetes_strings():
    (_, manifest), *_ = rendered(textwrap.dedent(HAND_BUILT), "hand")
    assert manifest["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert manifest["spec"]["cohortName"] == "research"
    cpu, memory, gpu = manifest["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert cpu == {
        "name": "cpu",
        "nominalQuota": "48",
        "borrowingLimit": "500m",
        "lendingLimit": "24",
    }
    assert memory == {"name": "memory", "nominalQuota": "192Gi", "lendingLimit": "1536Mi"}
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "0"}
    assert manifest["spec"]["flavorFungibility"]["preference"] == "PreemptionOverBorrowing"
    assert manifest["spec"]["fairSharing"] == {"weight": "0.5"}
    assert manifest["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}


@pytest.mark.parametrize(
    ("field", "value"),
    [("queueingStrategy", "Sometimes"), ("cohort", "research"), ("stopPolicy", None)],
)
def test_a_broken_render_fails_validation(field, value):
    (_, manifest), *_ = rendered(textwrap.dedent(HAND_BUILT), "hand")
    manifest["spec"][field] = value
    broken_quota = json.loads(json.dumps(manifest))
    broken_quota["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "x"
    assert errors(manifest) != []
    assert errors(broken_quota) != []


def test_nullable_becomes_a_type_union():
    converted = json_schema(
        {
            "properties": {
                "a": {"type": "string", "nullable": True},
                "nullable": {"type": "boolean"},
                "properties": {"type": "object"},
            }
        }
    )
    assert converted["properties"]["a"] == {"type": ["string", "null"]}
    assert converted["properties"]["nullable"] == {"type": "boolean"}
    assert converted["properties"]["properties"] == {"type": "object"}
    assert Draft202012Validator(converted).is_valid({"a": None})
