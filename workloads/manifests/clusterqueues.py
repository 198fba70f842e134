"""ClusterQueue and Cohort specs, from Kueue's v1beta1 or v1beta2 spelling to one normal form.

Defaults and rules follow the CRDs (`config/components/crd/bases`) and Kueue's webhooks
(`pkg/webhooks/clusterqueue_webhook.go`, `cohort_webhook.go`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import scheduler as s
from workloads.manifests.fields import INT32_MAX, Fields, join, label_key_problem, show
from workloads.quantities import QuantityError, parse_weight

_V1BETA1 = "kueue.x-k8s.io/v1beta1"
_COMMON = frozenset(
    {
        "admissionChecksStrategy",
        "admissionScope",
        "fairSharing",
        "flavorFungibility",
        "namespaceSelector",
        "preemption",
        "queueingStrategy",
        "resourceGroups",
        "stopPolicy",
    }
)
_CQ_FIELDS = {
    _V1BETA1: _COMMON | {"admissionChecks", "cohort"},
    "kueue.x-k8s.io/v1beta2": _COMMON | {"cohortName", "concurrentAdmissionPolicy"},
}
_COHORT_FIELDS = frozenset({"fairSharing", "parentName", "resourceGroups"})
_QUOTA_FIELDS = frozenset({"name", "nominalQuota", "borrowingLimit", "lendingLimit"})
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")
ADMISSION_MODES = ("UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing")
_MAX_FLAVORS = 256
# Kueue's webhook (`validateFairSharing`): a weight that is not 0 must be above 1n, else the
# share it divides would collapse.
_MIN_WEIGHT = 1e-9


@dataclass(frozen=True, slots=True)
class AdmissionCheckRef:
    name: str
    on_flavors: tuple[str, ...] = ()
    """Flavors the check applies to; empty: all of them."""


@dataclass(frozen=True, slots=True)
class ClusterQueueSpec:
    """A stored ClusterQueue spec, typed. Quotas, preemption and fungibility are the scheduler's
    own values; specs stored before a field existed load with Kueue's default for it."""

    cohort: str | None = None
    queueing_strategy: s.QueueingStrategy = s.QueueingStrategy.BEST_EFFORT_FIFO
    namespace_selector: Mapping[str, Any] | None = None
    """None selects no namespace (Kueue); `{}` selects all of them."""
    preemption: s.Preemption = field(default_factory=s.Preemption)
    flavor_fungibility: s.FlavorFungibility = field(default_factory=s.FlavorFungibility)
    resource_groups: tuple[s.ResourceGroup, ...] = ()
    admission_checks: tuple[AdmissionCheckRef, ...] = ()
    stop_policy: str = "None"
    fair_weight: float | None = None
    """`fairSharing.weight`; None when fairSharing is not set (Kueue then uses 1)."""
    admission_mode: str | None = None
    """`admissionScope.admissionMode`; None when admissionScope is not set."""

    @classmethod
    def from_stored(cls, spec: Mapping[str, Any]) -> ClusterQueueSpec:
        preemption = spec.get("preemption") or {}
        fungibility = spec.get("flavor_fungibility") or {}
        preference = fungibility.get("preference")
        return cls(
            cohort=spec.get("cohort") or None,
            queueing_strategy=s.QueueingStrategy(spec.get("queueing_strategy", "BestEffortFIFO")),
            namespace_selector=spec.get("namespace_selector"),
            preemption=s.Preemption(
                s.PreemptionPolicy(preemption.get("within_cluster_queue", "Never")),
                s.PreemptionPolicy(preemption.get("reclaim_within_cohort", "Never")),
                s.PreemptionPolicy(preemption.get("borrow_within_cohort", "Never")),
                preemption.get("max_priority_threshold"),
            ),
            flavor_fungibility=s.FlavorFungibility(
                s.FungibilityPolicy(fungibility.get("when_can_borrow", "MayStopSearch")),
                s.FungibilityPolicy(fungibility.get("when_can_preempt", "TryNextFlavor")),
                s.FungibilityPreference(preference) if preference else None,
            ),
            resource_groups=stored_groups(spec.get("resource_groups") or ()),
            admission_checks=tuple(
                AdmissionCheckRef(c["name"], tuple(c.get("on_flavors") or ()))
                for c in spec.get("admission_checks") or ()
            ),
            stop_policy=spec.get("stop_policy") or "None",
            fair_weight=spec.get("fair_weight"),
            admission_mode=spec.get("admission_mode"),
        )

    @property
    def weight(self) -> float:
        return 1.0 if self.fair_weight is None else self.fair_weight

    @property
    def check_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.admission_checks)

    @property
    def flavor_names(self) -> set[str]:
        return {f.name for group in self.resource_groups for f in group.flavors}

    def quotas(self) -> Iterator[tuple[str, str, s.ResourceQuota]]:
        """(flavor, resource, quota) of every quota, in the spec's order."""
        yield from quotas(self.resource_groups)


@dataclass(frozen=True, slots=True)
class CohortSpec:
    """A stored Cohort spec, typed."""

    parent: str | None = None
    resource_groups: tuple[s.ResourceGroup, ...] = ()
    fair_weight: float | None = None
    """`fairSharing.weight`; None when fairSharing is not set (Kueue then uses 1)."""

    @classmethod
    def from_stored(cls, spec: Mapping[str, Any]) -> CohortSpec:
        return cls(
            parent=spec.get("parent") or None,
            resource_groups=stored_groups(spec.get("resource_groups") or ()),
            fair_weight=spec.get("fair_weight"),
        )

    @property
    def weight(self) -> float:
        return 1.0 if self.fair_weight is None else self.fair_weight


def stored_groups(groups: Iterable[Mapping[str, Any]]) -> tuple[s.ResourceGroup, ...]:
    return tuple(
        s.ResourceGroup(
            tuple(g["covered_resources"]),
            tuple(
                s.FlavorQuotas(
                    f["name"],
                    {
                        r["name"]: s.ResourceQuota(
                            r["nominal_quota"], r.get("borrowing_limit"), r.get("lending_limit")
                        )
                        for r in f["resources"]
                    },
                )
                for f in g["flavors"]
            ),
        )
        for g in groups
    )


def quotas(groups: tuple[s.ResourceGroup, ...]) -> Iterator[tuple[str, str, s.ResourceQuota]]:
    for group in groups:
        for flavor in group.flavors:
            for resource, quota in flavor.resources.items():
                yield flavor.name, resource, quota


def cluster_queue_spec(fields: Fields, api_version: str, body: Mapping[str, Any]) -> dict[str, Any]:
    spec = fields.mapping(body, "spec", "")
    fields.known_keys(spec, _CQ_FIELDS[api_version], "spec")
    cohort_field = "cohort" if api_version == _V1BETA1 else "cohortName"
    cohort = fields.optional_string(spec, cohort_field, "spec") or None
    if cohort:
        fields.name(cohort, join("spec", cohort_field))
    return {
        "cohort": cohort,
        "queueing_strategy": fields.choice(
            spec,
            "queueingStrategy",
            "spec",
            ("BestEffortFIFO", "StrictFIFO"),
            default="BestEffortFIFO",
        ),
        # Kueue: a missing namespaceSelector selects no namespace; `{}` selects all of them.
        "namespace_selector": _namespace_selector(fields, spec),
        "preemption": _preemption(fields, spec),
        "flavor_fungibility": _flavor_fungibility(fields, spec, api_version == _V1BETA1),
        "resource_groups": resource_groups(
            fields, spec, missing_parent=None if cohort else cohort_field, check_lending=True
        ),
        "admission_checks": _admission_checks(fields, spec),
        "stop_policy": fields.choice(spec, "stopPolicy", "spec", STOP_POLICIES, default="None"),
        "fair_weight": fair_weight(fields, spec),
        "admission_mode": _admission_mode(fields, spec),
    }


def cohort_spec(fields: Fields, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    spec = fields.mapping(body, "spec", "")
    fields.known_keys(spec, _COHORT_FIELDS, "spec")
    parent = fields.optional_string(spec, "parentName", "spec") or None
    if parent:
        fields.name(parent, "spec.parentName")
        if parent == name:
            raise fields.error("spec.parentName", parent, "a Cohort cannot be its own parent")
    return {
        "parent": parent,
        # Cohorts may lend more than their nominal quota (validationConfig in Kueue's webhooks).
        "resource_groups": resource_groups(
            fields, spec, missing_parent=None if parent else "parentName", check_lending=False
        ),
        "fair_weight": fair_weight(fields, spec),
    }


def fair_weight(fields: Fields, spec: Mapping[str, Any]) -> float | None:
    """`fairSharing.weight`: 0, or above 1n (Kueue's webhook) and at most 2^63-1; 1 when
    fairSharing is given without it (the CRD default); None when fairSharing is absent."""
    base = "spec.fairSharing"
    fair_sharing = fields.optional_mapping(spec, "fairSharing", "spec")
    if fair_sharing is None:
        return None
    fields.known_keys(fair_sharing, frozenset({"weight"}), base)
    value = fair_sharing.get("weight")
    if value is None:
        return 1.0
    path = join(base, "weight")
    try:
        weight = parse_weight(value, field=path)
    except QuantityError as error:
        raise fields.error(path, value, f"{show(value)} {error.reason}") from None
    if 0 < weight <= _MIN_WEIGHT:
        raise fields.error(path, value, "when not 0, weight must be greater than 1n (10^-9)")
    return weight


def _admission_mode(fields: Fields, spec: Mapping[str, Any]) -> str | None:
    base = "spec.admissionScope"
    scope = fields.optional_mapping(spec, "admissionScope", "spec")
    if scope is None:
        return None
    fields.known_keys(scope, frozenset({"admissionMode"}), base)
    if scope.get("admissionMode") is None:
        raise fields.error(join(base, "admissionMode"), None, "is required")
    return fields.choice(scope, "admissionMode", base, ADMISSION_MODES, default="")


def resource_groups(
    fields: Fields, spec: Mapping[str, Any], *, missing_parent: str | None, check_lending: bool
) -> list[dict[str, Any]]:
    """`missing_parent` names the empty cohort field when limits are forbidden, else None."""
    base = "spec.resourceGroups"
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    groups = []
    for path, group in fields.mappings(spec, "resourceGroups", "spec", max_items=16):
        fields.known_keys(group, frozenset({"coveredResources", "flavors"}), path)
        covered = fields.strings(group, "coveredResources", path, min_items=1, max_items=64)
        for i, resource in enumerate(covered):
            where = join(join(path, "coveredResources"), i)
            problem = label_key_problem(resource, "resource name")
            if problem or resource in seen_resources:
                raise fields.error(
                    where,
                    resource,
                    problem or f"{resource!r} is already covered by another resource group",
                )
            seen_resources.add(resource)
        flavors = []
        for fpath, flavor in fields.mappings(group, "flavors", path, min_items=1, max_items=64):
            quotas = _flavor_quotas(fields, flavor, fpath, covered, missing_parent, check_lending)
            if quotas["name"] in seen_flavors:
                raise fields.error(
                    join(fpath, "name"),
                    quotas["name"],
                    f"flavor {quotas['name']!r} appears in more than one place",
                )
            seen_flavors.add(quotas["name"])
            flavors.append(quotas)
        groups.append({"covered_resources": covered, "flavors": flavors})
    if len(seen_flavors) > _MAX_FLAVORS:
        raise fields.error(base, len(seen_flavors), f"at most {_MAX_FLAVORS} flavors in total")
    return groups


def _flavor_quotas(
    fields: Fields,
    flavor: Mapping[str, Any],
    path: str,
    covered: list[str],
    missing_parent: str | None,
    check_lending: bool,
) -> dict[str, Any]:
    fields.known_keys(flavor, frozenset({"name", "resources"}), path)
    name = fields.name(fields.string(flavor, "name", path), join(path, "name"))
    items = fields.mappings(flavor, "resources", path, min_items=1, max_items=64)
    names = [fields.string(item, "name", item_path) for item_path, item in items]
    if names != covered:
        raise fields.error(
            join(path, "resources"),
            names,
            f"lists {names}; each flavor must list exactly the group's coveredResources, "
            f"in the same order: {covered}",
        )
    resources = []
    for item_path, item in items:
        fields.known_keys(item, _QUOTA_FIELDS, item_path)
        nominal = item.get("nominalQuota")
        if nominal is None:
            raise fields.error(join(item_path, "nominalQuota"), None, "is required")
        quota = {
            "name": item["name"],
            "nominal_quota": fields.quantity(nominal, join(item_path, "nominalQuota")),
            "borrowing_limit": fields.optional_quantity(item, "borrowingLimit", item_path),
            "lending_limit": fields.optional_quantity(item, "lendingLimit", item_path),
        }
        _check_limits(fields, quota, item_path, missing_parent, check_lending)
        resources.append(quota)
    return {"name": name, "resources": resources}


def _check_limits(
    fields: Fields,
    quota: Mapping[str, Any],
    path: str,
    missing_parent: str | None,
    check_lending: bool,
) -> None:
    for key, limit in (("borrowingLimit", "borrowing_limit"), ("lendingLimit", "lending_limit")):
        if quota[limit] is not None and missing_parent:
            raise fields.error(
                join(path, key), quota[limit], f"{key} must be nil when {missing_parent} is empty"
            )
    lending = quota["lending_limit"]
    if check_lending and lending is not None and lending > quota["nominal_quota"]:
        raise fields.error(
            join(path, "lendingLimit"),
            lending,
            "lendingLimit must be less than or equal to nominalQuota",
        )


def _namespace_selector(fields: Fields, spec: Mapping[str, Any]) -> dict[str, Any] | None:
    base = "spec.namespaceSelector"
    selector = fields.optional_mapping(spec, "namespaceSelector", "spec")
    if selector is None:
        return None
    fields.known_keys(selector, frozenset({"matchLabels", "matchExpressions"}), base)
    fields.string_map(selector, "matchLabels", base)
    for path, expression in fields.mappings(selector, "matchExpressions", base):
        fields.known_keys(expression, frozenset({"key", "operator", "values"}), path)
        fields.string(expression, "key", path)
        fields.string(expression, "operator", path)
        operator = fields.choice(expression, "operator", path, _SELECTOR_OPERATORS, default="")
        values = fields.strings(expression, "values", path)
        if (operator in ("In", "NotIn")) != bool(values):
            raise fields.error(
                join(path, "values"),
                values,
                "must be non-empty exactly when the operator is In or NotIn",
            )
    return dict(selector)


def _preemption(fields: Fields, spec: Mapping[str, Any]) -> dict[str, Any]:
    base = "spec.preemption"
    preemption = fields.mapping(spec, "preemption", "spec")
    fields.known_keys(
        preemption,
        frozenset({"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"}),
        base,
    )
    borrow_base = join(base, "borrowWithinCohort")
    borrow = fields.mapping(preemption, "borrowWithinCohort", base)
    fields.known_keys(borrow, frozenset({"policy", "maxPriorityThreshold"}), borrow_base)
    result = {
        "within_cluster_queue": fields.choice(
            preemption,
            "withinClusterQueue",
            base,
            ("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
            default="Never",
        ),
        "reclaim_within_cohort": fields.choice(
            preemption,
            "reclaimWithinCohort",
            base,
            ("Never", "LowerPriority", "Any"),
            default="Never",
        ),
        "borrow_within_cohort": fields.choice(
            borrow, "policy", borrow_base, ("Never", "LowerPriority"), default="Never"
        ),
        "max_priority_threshold": fields.optional_integer(
            borrow, "maxPriorityThreshold", borrow_base, minimum=-INT32_MAX - 1
        ),
    }
    # CEL rule on ClusterQueuePreemption.
    if result["reclaim_within_cohort"] == "Never" and result["borrow_within_cohort"] != "Never":
        raise fields.error(
            join(borrow_base, "policy"),
            result["borrow_within_cohort"],
            "borrowWithinCohort.policy must be Never when reclaimWithinCohort is Never",
        )
    return result


def _flavor_fungibility(fields: Fields, spec: Mapping[str, Any], v1beta1: bool) -> dict[str, Any]:
    base = "spec.flavorFungibility"
    fungibility = fields.mapping(spec, "flavorFungibility", "spec")
    fields.known_keys(
        fungibility, frozenset({"whenCanBorrow", "whenCanPreempt", "preference"}), base
    )
    policies = ("MayStopSearch", "TryNextFlavor")
    # v1beta1 still accepts the deprecated names Borrow and Preempt for MayStopSearch.
    result = {
        "when_can_borrow": fields.choice(
            fungibility,
            "whenCanBorrow",
            base,
            policies,
            default="MayStopSearch",
            aliases={"Borrow": "MayStopSearch"} if v1beta1 else None,
        ),
        "when_can_preempt": fields.choice(
            fungibility,
            "whenCanPreempt",
            base,
            policies,
            default="TryNextFlavor",
            aliases={"Preempt": "MayStopSearch"} if v1beta1 else None,
        ),
        "preference": None,
    }
    if fungibility.get("preference") is not None:
        result["preference"] = fields.choice(
            fungibility,
            "preference",
            base,
            ("BorrowingOverPreemption", "PreemptionOverBorrowing"),
            default="",
        )
    both_try_next = result["when_can_borrow"] == result["when_can_preempt"] == "TryNextFlavor"
    if result["preference"] and not both_try_next:
        raise fields.error(
            join(base, "preference"),
            result["preference"],
            "preference can only be set when whenCanBorrow and whenCanPreempt are TryNextFlavor",
        )
    return result


def _admission_checks(fields: Fields, spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    base = "spec.admissionChecksStrategy"
    names = fields.strings(spec, "admissionChecks", "spec")
    strategy = fields.optional_mapping(spec, "admissionChecksStrategy", "spec")
    if strategy is None:
        return [{"name": name, "on_flavors": []} for name in names]
    if names:
        raise fields.error(
            "spec.admissionChecks",
            names,
            "admissionChecks and admissionChecksStrategy cannot both be set",
        )
    fields.known_keys(strategy, frozenset({"admissionChecks"}), base)
    checks: list[dict[str, Any]] = []
    for path, check in fields.mappings(
        strategy, "admissionChecks", base, min_items=1, max_items=64
    ):
        fields.known_keys(check, frozenset({"name", "onFlavors"}), path)
        name = fields.string(check, "name", path)
        if any(c["name"] == name for c in checks):
            raise fields.error(
                join(path, "name"), name, f"admission check {name!r} is listed twice"
            )
        on_flavors = fields.strings(check, "onFlavors", path, max_items=64)
        for i, flavor in enumerate(on_flavors):
            fields.name(flavor, join(join(path, "onFlavors"), i))
        checks.append({"name": name, "on_flavors": on_flavors})
    return checks
