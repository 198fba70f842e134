"""Topology Aware Scheduling: where in a Topology the pods of a PodSet go (kueue-semantics §11).

Follows Kueue's `pkg/cache/scheduler/tas_flavor_snapshot.go` (findTopologyAssignment) with its
default gates (TASProfileMixed on; balanced placement, multi-layer slices and preferred node
affinity off), `tas_topology_tree.go`, `tas_nodes_cache.go` and, for annotations,
`pkg/controller/jobframework/tas.go` and `tas_validation.go`:

1. Capacity: the leaves are the domains of the lowest level. A leaf holds the Ready nodes that
   match the flavor's nodeLabels and carry every level label; when the lowest level is the
   hostname, a node also has to pass the pod's nodeSelector, required node affinity and
   taints (pod plus flavor tolerations), as Kueue's scheduler simulation checks only then.
   Free capacity is allocatable minus `used`; a leaf fits as many pods as every requested
   resource, and `pods` (one per pod), allows.
2. Counts go up the tree: pods everywhere, whole slices from the slice level up.
3. Level selection at the requested level. BestFit order is slices descending, then pods
   ascending, then label values; the chosen domain is the tightest one that holds every
   slice. `required` fails when no single domain does; `preferred` climbs one level at a
   time and at the top takes domains greedily. Unconstrained requests (and slice-only ones)
   use LeastFreeCapacity order (slices ascending) and take the first domain that holds all.
4. Descent: level by level, children sorted the same way, as few as possible, the last one
   best-fit. Above the slice level the children of all chosen domains are filled together
   by slices; from the slice level down each domain's pods go to its own children. Below the
   slice level no domain has a slice count, so children are taken in ascending free-pod
   order there (Kueue's behaviour as implemented).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.model import ClusterQueue, PodSet, PodSetAssignment, ResourceFlavor
from scheduler.placement import PODS, Node, Pod, matches_node

HOSTNAME = "kubernetes.io/hostname"
REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_LEVEL_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
POD = 1000
"""Milli-units of the `pods` resource that one pod takes."""

Usage = Mapping[str, Mapping[str, int]]
"""Node name -> resource -> milli-units in use."""


@dataclass(frozen=True, slots=True)
class Topology:
    """Kueue's Topology object: node label keys, coarsest first, hostname last if present."""

    name: str
    levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """A PodSet's topology request, from its pod template annotations (kueue-semantics §11).

    `PodSet.topology_request is None` means the PodSet does not ask for TAS; in a ClusterQueue
    whose flavors all have a topology it still gets an implied unconstrained request."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False
    slice_level: str | None = None
    slice_size: int | None = None
    group: str | None = None

    @property
    def slice_only(self) -> bool:
        """Slices requested without a level for the whole PodSet: placed unconstrained."""
        return self.slice_level is not None and self.required is None and self.preferred is None


IMPLIED = TopologyRequest(unconstrained=True)
"""What Kueue assumes for a PodSet without annotations in a TAS-only ClusterQueue."""


@dataclass(frozen=True, slots=True)
class DomainAssignment:
    values: tuple[str, ...]
    """Label values of one lowest-level domain, for the assignment's `levels`."""
    count: int


@dataclass(frozen=True, slots=True)
class TopologyAssignment:
    """Kueue's topologyAssignment: when the lowest level is the hostname, `levels` is just
    (hostname,) and each domain is one host; otherwise `levels` is every level."""

    levels: tuple[str, ...]
    domains: tuple[DomainAssignment, ...]

    @property
    def pod_count(self) -> int:
        return sum(d.count for d in self.domains)


@dataclass(frozen=True, slots=True)
class Placement:
    """The outcome of placing one PodSet: an assignment, or why there is none."""

    assignment: TopologyAssignment | None
    reason: str = ""
    flavor: str = ""

    @property
    def fits(self) -> bool:
        return self.assignment is not None


# -- annotations ------------------------------------------------------------------------------

_TAS_ANNOTATIONS = (
    REQUIRED_ANNOTATION,
    PREFERRED_ANNOTATION,
    UNCONSTRAINED_ANNOTATION,
    SLICE_LEVEL_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    GROUP_ANNOTATION,
)
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_INT32 = re.compile(r"[+-]?[0-9]+")


def request_from_annotations(annotations: Mapping[str, str]) -> TopologyRequest | None:
    """The PodSet's topology request; None when it carries no TAS annotation.

    Raises ValueError for what Kueue's webhook rejects (ValidateTASPodSetRequest)."""
    if not any(key in annotations for key in _TAS_ANNOTATIONS):
        return None
    problems = _annotation_problems(annotations)
    if problems:
        raise ValueError("; ".join(problems))
    required = annotations.get(REQUIRED_ANNOTATION)
    preferred = None if required is not None else annotations.get(PREFERRED_ANNOTATION)
    unconstrained = required is None and preferred is None and _unconstrained(annotations)
    slice_level = annotations.get(SLICE_LEVEL_ANNOTATION)
    size = annotations.get(SLICE_SIZE_ANNOTATION)
    main = required is not None or preferred is not None
    return TopologyRequest(
        required=required,
        preferred=preferred,
        unconstrained=unconstrained,
        slice_level=slice_level,
        slice_size=int(size) if size is not None else None,
        group=annotations.get(GROUP_ANNOTATION) if main else None,
    )


def _unconstrained(annotations: Mapping[str, str]) -> bool:
    return annotations.get(UNCONSTRAINED_ANNOTATION) in _TRUE


def _annotation_problems(annotations: Mapping[str, str]) -> list[str]:
    problems = []
    main = [k for k in _TAS_ANNOTATIONS[:3] if k in annotations]
    if len(main) > 1:
        problems.append(f"must not contain more than one topology annotation: {main}")
    value = annotations.get(UNCONSTRAINED_ANNOTATION)
    if value is not None and value not in _TRUE | _FALSE:
        problems.append(f"{UNCONSTRAINED_ANNOTATION}: {value!r} must be a boolean value")
    problems += _slice_problems(annotations)
    problems += _group_problems(annotations)
    return problems


def _slice_problems(annotations: Mapping[str, str]) -> list[str]:
    level, size = annotations.get(SLICE_LEVEL_ANNOTATION), annotations.get(SLICE_SIZE_ANNOTATION)
    if level is not None and size is None:
        return [f"{SLICE_SIZE_ANNOTATION} must be set when {SLICE_LEVEL_ANNOTATION} is"]
    if size is None:
        return []
    if level is None:
        return [f"{SLICE_SIZE_ANNOTATION} may not be set without {SLICE_LEVEL_ANNOTATION}"]
    if not _INT32.fullmatch(size) or not -(2**31) <= int(size) < 2**31:
        return [f"{SLICE_SIZE_ANNOTATION}: {size!r} must be a numeric value"]
    if int(size) < 1:
        return [f"{SLICE_SIZE_ANNOTATION}: {size!r} must be greater than or equal to 1"]
    return []


def _group_problems(annotations: Mapping[str, str]) -> list[str]:
    group = annotations.get(GROUP_ANNOTATION)
    if group is None:
        return []
    problems = []
    if group.isascii() and group.isdigit():
        problems.append(f"{GROUP_ANNOTATION}: {group!r} must not be a number")
    if SLICE_LEVEL_ANNOTATION in annotations or SLICE_SIZE_ANNOTATION in annotations:
        problems.append(f"{GROUP_ANNOTATION} may not be set together with slice annotations")
    if REQUIRED_ANNOTATION not in annotations and PREFERRED_ANNOTATION not in annotations:
        problems.append(f"{GROUP_ANNOTATION} needs {REQUIRED_ANNOTATION} or {PREFERRED_ANNOTATION}")
    return problems


# -- flavor eligibility -----------------------------------------------------------------------


def is_tas_only(
    cq: ClusterQueue, flavors: Mapping[str, ResourceFlavor], topologies: Mapping[str, Topology]
) -> bool:
    """Kueue `isTASOnly`: every flavor of the queue has a known topology (vacuously true for a
    queue without flavors). PodSets there get an implied request."""
    return all(
        f.name in flavors and flavors[f.name].topology_name in topologies
        for group in cq.resource_groups
        for f in group.flavors
    )


def requests_topology(pod_set: PodSet, tas_only: bool) -> bool:
    """Kueue `isTASRequested`: explicit annotations, or implied in a TAS-only ClusterQueue."""
    return pod_set.topology_request is not None or tas_only


def flavor_mismatch(
    pod_set: PodSet,
    flavor: ResourceFlavor,
    topology: Topology | None,
    tas_only: bool,
    covered: Iterable[str] = (),
) -> str | None:
    """Kueue `checkPodSetAndFlavorMatchForTAS`: why `flavor` cannot serve this PodSet's
    resources (`covered`: the resource group's resources), or None.

    `topology` is the flavor's Topology object (None when it has none or it is missing)."""
    request = pod_set.topology_request
    if request is None and tas_only:
        return None  # implied: any flavor of a TAS-only queue will do
    if request is None:
        if flavor.topology_name is not None:
            return f'Flavor "{flavor.name}" supports only TopologyAwareScheduling'
        return None
    if flavor.topology_name is None:
        if not any(pod_set.requests.get(r, 0) for r in covered):
            return None
        return f'Flavor "{flavor.name}" does not support TopologyAwareScheduling'
    if topology is None:
        return f'Flavor "{flavor.name}" information missing in TAS cache'
    if not has_level(topology, request):
        return f'Flavor "{flavor.name}" does not contain the requested level'
    return None


def has_level(topology: Topology, request: TopologyRequest) -> bool:
    """Kueue `HasLevel`: the request's level and slice level both exist in the topology."""
    key = _level_key(request, topology.levels)
    slice_key = request.slice_level or (topology.levels[-1] if topology.levels else None)
    return key in topology.levels and slice_key in topology.levels


# -- placement --------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Domain:
    path: tuple[str, ...]
    children: list[_Domain] = field(default_factory=list)
    pods: int = 0
    """Pods that fit (phase 1), then pods assigned (phase 2)."""
    slices: int = 0


@dataclass(frozen=True, slots=True)
class _Plan:
    topology: str
    levels: tuple[str, ...]
    level: int
    slice_level: int
    slice_size: int
    count: int
    required: bool
    least_free: bool

    @property
    def slices(self) -> int:
        return self.count // self.slice_size

    def no_fit(self, fit: int) -> str:
        unit = "slice" if self.slice_size > 1 else "pod"
        name = f'topology "{self.topology}"'
        if fit <= 0:
            return f"{name} doesn't allow to fit any of {self.slices} {unit}(s)"
        return f"{name} allows to fit only {fit} out of {self.slices} {unit}(s)"


def find_assignment(
    topology: Topology,
    nodes: Sequence[Node],
    used: Usage,
    flavor: ResourceFlavor,
    pod_set: PodSet,
    count: int,
) -> TopologyAssignment | None:
    """Where `count` pods of `pod_set` go on `flavor`'s nodes; None when they cannot be placed.

    `used` is what admitted TAS workloads and non-TAS pods already take on each node. A PodSet
    without a topology request is placed as Kueue's implied (unconstrained) request: call this
    only for PodSets that `requests_topology`."""
    return place_pod_set(topology, nodes, used, flavor, pod_set, count).assignment


def assignment_fits_empty(
    topology: Topology,
    nodes: Sequence[Node],
    non_tas_used: Usage,
    flavor: ResourceFlavor,
    pod_set: PodSet,
    count: int,
) -> bool:
    """Whether the PodSet could be placed once every TAS workload is gone (Kueue's
    simulateEmpty): if not, preemption cannot help and the assignment is NoFit."""
    return place_pod_set(topology, nodes, non_tas_used, flavor, pod_set, count).fits


def place_pod_set(
    topology: Topology,
    nodes: Sequence[Node],
    used: Usage,
    flavor: ResourceFlavor,
    pod_set: PodSet,
    count: int,
) -> Placement:
    """`find_assignment` with Kueue's reason when there is no assignment."""
    plan = _plan(topology, pod_set.topology_request, count)
    if isinstance(plan, str):
        return Placement(None, plan, flavor.name)
    if count == 0:
        return Placement(_assignment(topology, []), "", flavor.name)
    per_level = _tree(topology, _leaves(topology, nodes, used, flavor, pod_set), pod_set)
    for root in per_level[0].values():
        _fill(root, 0, plan)
    chosen = _select(per_level, plan, plan.level)
    if isinstance(chosen, str):
        return Placement(None, chosen, flavor.name)
    fit_level, domains = chosen
    leaves = _descend(domains, fit_level, plan, len(topology.levels))
    return Placement(_assignment(topology, leaves), "", flavor.name)


def _level_key(request: TopologyRequest, levels: Sequence[str]) -> str | None:
    if request.required is not None:
        return request.required
    if request.preferred is not None:
        return request.preferred
    if request.slice_only:
        return levels[0] if levels else None
    if request.unconstrained:
        return levels[-1] if levels else None
    return None


def _plan(topology: Topology, request: TopologyRequest | None, count: int) -> _Plan | str:
    levels = topology.levels
    if request is None:
        request = IMPLIED
    key = _level_key(request, levels)
    if key is None:
        return "topology level not specified"
    if key not in levels:
        return f"no requested topology level: {key}"
    slice_key = request.slice_level or levels[-1]
    if slice_key not in levels:
        return f"no requested topology level for slices: {slice_key}"
    level, slice_level = levels.index(key), levels.index(slice_key)
    if level > slice_level:
        return f"podset slice topology {slice_key} is above the podset topology {key}"
    size = 1 if request.slice_level is None else (request.slice_size or 0)
    if size < 1:
        return "slice topology requested, but slice size not provided"
    if count % size:
        return f"pod count {count} is not a multiple of the slice size {size}"
    required = request.required is not None
    least_free = request.unconstrained or request.slice_only
    return _Plan(topology.name, levels, level, slice_level, size, count, required, least_free)


def _in_flavor(node: Node, flavor: ResourceFlavor, levels: Sequence[str]) -> bool:
    """Kueue's nodes cache: Ready, the flavor's nodeLabels, every level label."""
    return (
        node.ready
        and all(node.labels.get(k) == v for k, v in flavor.node_labels.items())
        and all(level in node.labels for level in levels)
    )


def _leaves(
    topology: Topology, nodes: Sequence[Node], used: Usage, flavor: ResourceFlavor, pod_set: PodSet
) -> dict[tuple[str, ...], dict[str, int]]:
    """Free capacity per lowest-level domain (its path of label values)."""
    levels = topology.levels
    by_host = levels[-1] == HOSTNAME
    pod = Pod(
        "",
        pod_set.requests,
        pod_set.node_selector,
        pod_set.required_affinity,
        pod_set.tolerations + flavor.tolerations,
    )
    leaves: dict[tuple[str, ...], dict[str, int]] = {}
    for node in nodes:
        if not _in_flavor(node, flavor, levels) or (by_host and not matches_node(pod, node)):
            continue
        _add_free(leaves.setdefault(tuple(node.labels[level] for level in levels), {}), node, used)
    return leaves


def _add_free(free: dict[str, int], node: Node, used: Usage) -> None:
    """Add the node's allocatable minus its usage to a domain's free capacity."""
    node_used = used.get(node.name, {})
    for resource in {*node.allocatable, *node_used}:
        amount = node.allocatable.get(resource, 0) - node_used.get(resource, 0)
        free[resource] = free.get(resource, 0) + amount


def per_pod(pod_set: PodSet) -> dict[str, int]:
    """What one pod takes on a node: its requests plus one `pods`."""
    requests = {r: v for r, v in pod_set.requests.items() if v}
    requests[PODS] = requests.get(PODS, 0) + POD
    return requests


def _pods_fitting(free: Mapping[str, int], requests: Mapping[str, int]) -> int:
    return min(max(0, free.get(r, 0)) // amount for r, amount in requests.items())


def _tree(
    topology: Topology, leaves: Mapping[tuple[str, ...], Mapping[str, int]], pod_set: PodSet
) -> list[dict[tuple[str, ...], _Domain]]:
    """Domains per level, each leaf knowing how many pods fit in it."""
    depth = len(topology.levels)
    requests = per_pod(pod_set)
    per_level: list[dict[tuple[str, ...], _Domain]] = [{} for _ in range(depth)]
    for path, free in sorted(leaves.items()):
        child = _Domain(path, pods=_pods_fitting(free, requests))
        per_level[-1][path] = child
        for level in range(depth - 2, -1, -1):
            parent = per_level[level].get(path[: level + 1])
            known = parent is not None
            if parent is None:
                parent = per_level[level][path[: level + 1]] = _Domain(path[: level + 1])
            parent.children.append(child)
            if known:
                break
            child = parent
    return per_level


def _fill(domain: _Domain, level: int, plan: _Plan) -> None:
    """Sum pods up the tree; whole slices at the slice level, summed above it, 0 below."""
    for child in domain.children:
        _fill(child, level + 1, plan)
    if domain.children:
        domain.pods = sum(c.pods for c in domain.children)
        domain.slices = sum(c.slices for c in domain.children)
    if level == plan.slice_level:
        domain.slices = domain.pods // plan.slice_size


def _ordered(domains: Iterable[_Domain], least_free: bool) -> list[_Domain]:
    """BestFit: most slices first; LeastFreeCapacity: fewest. Then fewest pods, then values."""
    sign = 1 if least_free else -1
    return sorted(domains, key=lambda d: (sign * d.slices, d.pods, d.path))


def _best_fit(domains: Sequence[_Domain], need: int, by_slices: bool) -> _Domain:
    """The first domain with the smallest capacity that still covers `need`."""
    fitting = [d for d in domains if (d.slices if by_slices else d.pods) >= need]
    if not fitting:
        return domains[0]
    return min(fitting, key=lambda d: d.slices if by_slices else d.pods)


def _select(
    per_level: list[dict[tuple[str, ...], _Domain]], plan: _Plan, level: int
) -> tuple[int, list[_Domain]] | str:
    """Kueue `findLevelWithFitDomains`: the level and the domains that hold every slice."""
    ordered = _ordered(per_level[level].values(), plan.least_free)
    if not ordered:
        return f"no topology domains at level: {plan.levels[level]}"
    need = plan.slices
    if plan.least_free:
        first = next((d for d in ordered if d.slices >= need), None)
        if first is not None:
            return level, [first]
    elif ordered[0].slices >= need:
        return level, [_best_fit(ordered, need, by_slices=True)]
    if plan.required:
        return plan.no_fit(ordered[0].slices)
    if level > 0 and not plan.least_free:
        return _select(per_level, plan, level - 1)
    chosen = _greedy(ordered, need, plan.least_free)
    taken = sum(d.slices for d in chosen)
    return (level, chosen) if taken >= need else plan.no_fit(taken)


def _greedy(ordered: list[_Domain], need: int, least_free: bool) -> list[_Domain]:
    """Domains in order until they hold `need` slices; BestFit makes the last one tight."""
    chosen: list[_Domain] = []
    remaining = need
    for index, domain in enumerate(ordered):
        if remaining <= 0:
            break
        if not least_free and domain.slices >= remaining:
            domain = _best_fit(ordered[index:], remaining, by_slices=True)
        chosen.append(domain)
        remaining -= domain.slices
    return chosen


def _take(
    domains: list[_Domain], count: int, size: int, by_slices: bool, least_free: bool
) -> list[_Domain]:
    """Kueue `updateCountsToMinimumGeneric` (no leaders): assign `count` pods to the fewest
    domains in order, in whole slices of `size` when `by_slices`; sets each domain's pods."""
    remaining = count // size if by_slices else count
    result: list[_Domain] = []
    for index, domain in enumerate(domains):
        capacity = domain.slices if by_slices else domain.pods
        if not least_free and capacity >= remaining:
            domain = _best_fit(domains[index:], remaining, by_slices)
            capacity = domain.slices if by_slices else domain.pods
        taken = min(capacity, remaining)
        domain.pods = taken * size if by_slices else taken
        if by_slices:
            domain.slices = taken
        result.append(domain)
        remaining -= taken
        if remaining <= 0:
            return result
    raise AssertionError(f"capacity summed up the tree does not cover {count} pods")


def _descend(domains: list[_Domain], level: int, plan: _Plan, depth: int) -> list[_Domain]:
    """Kueue phase 2b: from the chosen domains down to the leaves that get pods."""
    lf = plan.least_free
    current = _take(domains, plan.count, plan.slice_size, True, lf)
    while level < min(depth - 1, plan.slice_level):
        children = [c for d in current for c in d.children]
        current = _take(_ordered(children, lf), plan.count, plan.slice_size, True, lf)
        level += 1
    while level < depth - 1:
        current = [
            child
            for d in current
            for child in _take(_ordered(d.children, lf), d.pods, 1, False, lf)
        ]
        level += 1
    return current


def _assignment(topology: Topology, leaves: Iterable[_Domain]) -> TopologyAssignment:
    """Kueue `buildAssignment`: leaves with pods, by label values; hostname only if lowest."""
    start = len(topology.levels) - 1 if topology.levels[-1:] == (HOSTNAME,) else 0
    domains = tuple(
        DomainAssignment(leaf.path[start:], leaf.pods)
        for leaf in sorted(leaves, key=lambda d: d.path)
        if leaf.pods > 0
    )
    return TopologyAssignment(topology.levels[start:], domains)


# -- usage ------------------------------------------------------------------------------------


def node_usage(
    assignment: TopologyAssignment, pod_set: PodSet, nodes: Iterable[Node]
) -> dict[str, dict[str, int]]:
    """What an assignment takes on each node (its requests and `pods`), for `used`.

    A domain above the hostname is charged to its first node by name: only the domain's
    total matters, as Kueue counts capacity per lowest-level domain. Domains whose nodes are
    gone are skipped, as Kueue skips their usage."""
    by_values: dict[tuple[str, ...], str] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        if all(level in node.labels for level in assignment.levels):
            values = tuple(node.labels[level] for level in assignment.levels)
            by_values.setdefault(values, node.name)
    usage: dict[str, dict[str, int]] = {}
    requests = per_pod(pod_set)
    for domain in assignment.domains:
        name = by_values.get(domain.values)
        if name is None:
            continue
        node_used = usage.setdefault(name, {})
        for resource, amount in requests.items():
            node_used[resource] = node_used.get(resource, 0) + amount * domain.count
    return usage


def assignment_fits(
    assignment: TopologyAssignment,
    pod_set: PodSet,
    nodes: Iterable[Node],
    used: Usage,
    flavor: ResourceFlavor,
) -> bool:
    """Kueue `TASFlavorSnapshot.Fits`: every domain of an existing assignment still has room
    for its pods at `used` (e.g. after other workloads were admitted in the same cycle)."""
    free: dict[tuple[str, ...], dict[str, int]] = {}
    for node in nodes:
        if _in_flavor(node, flavor, assignment.levels):
            values = tuple(node.labels[level] for level in assignment.levels)
            _add_free(free.setdefault(values, {}), node, used)
    requests = per_pod(pod_set)
    return all(
        d.values in free and _pods_fitting(free[d.values], requests) >= d.count
        for d in assignment.domains
    )


def placements_fit(
    pod_sets: Sequence[PodSet],
    assignments: Sequence[PodSetAssignment],
    flavors: Mapping[str, ResourceFlavor],
    nodes: Sequence[Node],
    used: Usage,
) -> bool:
    """`assignment_fits` for every PodSetAssignment that carries a topology assignment, each
    PodSet seeing what the earlier ones take."""
    by_name = {ps.name: ps for ps in pod_sets}
    total: Usage = used
    for a in assignments:
        flavor = _tas_flavor(a, flavors)
        if a.topology_assignment is None or flavor is None:
            continue
        pod_set = by_name[a.name]
        if not assignment_fits(a.topology_assignment, pod_set, nodes, total, flavor):
            return False
        total = add_usage(total, node_usage(a.topology_assignment, pod_set, nodes))
    return True


def add_usage(*usages: Usage) -> dict[str, dict[str, int]]:
    """The sum of several per-node usages."""
    total: dict[str, dict[str, int]] = {}
    for usage in usages:
        for name, amounts in usage.items():
            node_used = total.setdefault(name, {})
            for resource, amount in amounts.items():
                node_used[resource] = node_used.get(resource, 0) + amount
    return total


class TopologyUsage:
    """Per-node usage during a scheduling pass: non-TAS pods, plus what each TAS workload
    holds, released by workload key (as ClusterState holds and releases quota)."""

    def __init__(self, non_tas: Usage | None = None):
        self.non_tas: dict[str, dict[str, int]] = add_usage(non_tas or {})
        self._held: dict[str, dict[str, dict[str, int]]] = {}
        self._total: dict[str, dict[str, int]] | None = None

    def hold(self, key: str, usage: Usage) -> None:
        self._held[key] = add_usage(usage)
        self._total = None

    def release(self, key: str) -> None:
        if self._held.pop(key, None) is not None:
            self._total = None

    def used(self) -> dict[str, dict[str, int]]:
        """Non-TAS usage plus every held workload's."""
        if self._total is None:
            self._total = add_usage(self.non_tas, *self._held.values())
        return self._total


# -- whole workloads --------------------------------------------------------------------------


def place_workload(
    pod_sets: Sequence[PodSet],
    assignments: Sequence[PodSetAssignment],
    flavors: Mapping[str, ResourceFlavor],
    topologies: Mapping[str, Topology],
    nodes: Sequence[Node],
    used: Usage,
    tas_only: bool = False,
) -> dict[str, Placement]:
    """Kueue `FindTopologyAssignmentsForWorkload`: place every PodSet that requests TAS on
    its assigned TAS flavor, each seeing what the earlier ones took (assumed usage).

    Returns a Placement per such PodSet, in PodSet order, stopping after the first that
    does not fit. Pass non-TAS usage only as `used` to simulate an empty topology."""
    by_name = {ps.name: ps for ps in pod_sets}
    result: dict[str, Placement] = {}
    assumed: dict[str, dict[str, int]] = {}
    for assignment in assignments:
        pod_set = by_name[assignment.name]
        if not requests_topology(pod_set, tas_only) or assignment.count == 0:
            continue
        placement = _place_one(pod_set, assignment, flavors, topologies, nodes, used, assumed)
        result[pod_set.name] = placement
        if placement.assignment is None:
            break
        assumed = add_usage(assumed, node_usage(placement.assignment, pod_set, nodes))
    return result


def _place_one(
    pod_set: PodSet,
    assignment: PodSetAssignment,
    flavors: Mapping[str, ResourceFlavor],
    topologies: Mapping[str, Topology],
    nodes: Sequence[Node],
    used: Usage,
    assumed: Usage,
) -> Placement:
    names = _tas_flavor_names(assignment, flavors)
    if len(names) != 1:
        problem = "no TAS flavor assigned" if not names else f"multiple TAS flavors {names}"
        return Placement(None, f"PodSet {pod_set.name}: {problem}")
    flavor = flavors[names[0]]
    topology = topologies.get(flavor.topology_name or "")
    if topology is None:
        return Placement(None, f"topology {flavor.topology_name} not found", flavor.name)
    total = add_usage(used, assumed) if assumed else used
    return place_pod_set(topology, nodes, total, flavor, pod_set, assignment.count)


def _tas_flavor_names(
    assignment: PodSetAssignment, flavors: Mapping[str, ResourceFlavor]
) -> list[str]:
    """Kueue `onlyTASFlavor`: the flavors with a topology among those assigned."""
    return sorted(
        {f for f in assignment.flavors.values() if f in flavors and flavors[f].topology_name}
    )


def _tas_flavor(
    assignment: PodSetAssignment, flavors: Mapping[str, ResourceFlavor]
) -> ResourceFlavor | None:
    names = _tas_flavor_names(assignment, flavors)
    return flavors[names[0]] if len(names) == 1 else None


def topology_frs(
    pod_sets: Sequence[PodSet], assignments: Sequence[PodSetAssignment], tas_only: bool = False
) -> set[tuple[str, str]]:
    """Every (flavor, resource) of the PodSets that request TAS: Kueue turns all of them into
    Preempt when a placement needs preemption (`updateModeForTASRequests`), so they are the
    contested resources whose users may be preempted."""
    by_name = {ps.name: ps for ps in pod_sets}
    return {
        (flavor, resource)
        for a in assignments
        if requests_topology(by_name[a.name], tas_only) and a.count > 0
        for resource, flavor in a.flavors.items()
    }
