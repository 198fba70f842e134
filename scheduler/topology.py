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
5. Groups: the PodSets of one `podset-group-name` (a leader of one pod and its workers) are
   placed as one PodSet of the group's pod count, so they share a domain at the requested
   level; each pod is sized for the larger of the two requests (Kueue counts the leader
   with its own, `podCountWithLeader`).

Speed, as Kueue's per-snapshot TAS index: a NodeIndex (one per scheduling pass) keeps the
domain trees and, per pod shape, the pods that fit in every domain; a LiveUsage logs the nodes
whose usage changes, so a placement recounts only their leaves and builds domain objects only
for the levels and subtrees it visits.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import overload

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
    """One domain as a placement sees it; `pods` and `slices` are what fits (phase 1), then
    what is assigned (phase 2)."""

    level: int
    index: int
    path: tuple[str, ...]
    pods: int
    slices: int


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
    index = _indexed(nodes)
    tree = index.tree(topology.levels, flavor, pod_set)
    counts = _Counts(tree, index.capacity(tree, used, per_pod(pod_set)), plan)
    chosen = _select(counts, plan, plan.level)
    if isinstance(chosen, str):
        return Placement(None, chosen, flavor.name)
    fit_level, domains = chosen
    leaves = _descend(counts, domains, fit_level, plan)
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


def per_pod(pod_set: PodSet) -> dict[str, int]:
    """What one pod takes on a node: its requests plus one `pods`."""
    requests = {r: v for r, v in pod_set.requests.items() if v}
    requests[PODS] = requests.get(PODS, 0) + POD
    return requests


def _pods_fitting(nodes: Iterable[Node], requests: Mapping[str, int], *usages: Usage) -> int:
    """How many pods fit in the nodes' allocatable minus `usages`, pooled: Kueue counts free
    capacity per domain, not per node."""
    free = dict.fromkeys(requests, 0)
    for node in nodes:
        taken = [usage[node.name] for usage in usages if node.name in usage]
        for resource in free:
            amount = node.allocatable.get(resource, 0)
            free[resource] += amount - sum(t.get(resource, 0) for t in taken)
    return min(max(0, free[r]) // amount for r, amount in requests.items())


class _Counts:
    """Phase 1 for one placement: what fits in each domain. Pods come from the capacity;
    slices are counted at the slice level and summed above it (none below). Domains are made
    as the search reaches them, so a placement touches only the levels and subtrees it uses."""

    def __init__(self, tree: _Tree, capacity: _Capacity, plan: _Plan):
        self.tree = tree
        self.pods = capacity.pods
        self.plan = plan

    def domains(self, level: int) -> list[_Domain]:
        return [self._domain(level, i) for i in range(len(self.tree.paths[level]))]

    def children(self, domain: _Domain) -> list[_Domain]:
        level = domain.level + 1
        return [self._domain(level, i) for i in self.tree.children[domain.level][domain.index]]

    def _domain(self, level: int, index: int) -> _Domain:
        path = self.tree.paths[level][index]
        return _Domain(level, index, path, self.pods[level][index], self._slices(level, index))

    def _slices(self, level: int, index: int) -> int:
        slice_level, size = self.plan.slice_level, self.plan.slice_size
        if level > slice_level:
            return 0
        if level == slice_level or size == 1:  # slices of one pod sum up like pods
            return self.pods[level][index] // size
        return sum(self._slices(level + 1, i) for i in self.tree.children[level][index])


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


def _select(counts: _Counts, plan: _Plan, level: int) -> tuple[int, list[_Domain]] | str:
    """Kueue `findLevelWithFitDomains`: the level and the domains that hold every slice."""
    ordered = _ordered(counts.domains(level), plan.least_free)
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
        return _select(counts, plan, level - 1)
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


def _descend(counts: _Counts, domains: list[_Domain], level: int, plan: _Plan) -> list[_Domain]:
    """Kueue phase 2b: from the chosen domains down to the leaves that get pods."""
    lf, leaf_level = plan.least_free, len(plan.levels) - 1
    current = _take(domains, plan.count, plan.slice_size, True, lf)
    while level < min(leaf_level, plan.slice_level):
        children = [c for d in current for c in counts.children(d)]
        current = _take(_ordered(children, lf), plan.count, plan.slice_size, True, lf)
        level += 1
    while level < leaf_level:
        current = [
            child
            for d in current
            for child in _take(_ordered(counts.children(d), lf), d.pods, 1, False, lf)
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


# -- node index -------------------------------------------------------------------------------


class _Tree:
    """The domains of a topology over the nodes one kind of pod may use: each level's label
    values in order, the children of each domain, and each leaf's nodes and ancestors."""

    def __init__(self, levels: tuple[str, ...], leaves: Mapping[tuple[str, ...], Sequence[Node]]):
        self.paths: list[list[tuple[str, ...]]] = [[] for _ in levels]
        self.children: list[list[list[int]]] = [[] for _ in levels]
        self.leaf_nodes: list[Sequence[Node]] = []
        self.ancestors: list[tuple[int, ...]] = []
        """Per leaf, its domain's index at every level (its own last)."""
        self.leaves_of: dict[str, list[int]] = {}
        for path in sorted(leaves):
            self._add_leaf(path, leaves[path])

    def _add_leaf(self, path: tuple[str, ...], nodes: Sequence[Node]) -> None:
        chain: list[int] = []
        for level, paths in enumerate(self.paths):
            prefix = path[: level + 1]
            if not paths or paths[-1] != prefix:  # leaves come sorted: a new prefix is last
                paths.append(prefix)
                self.children[level].append([])
                if chain:
                    self.children[level - 1][chain[-1]].append(len(paths) - 1)
            chain.append(len(paths) - 1)
        for node in nodes:
            self.leaves_of.setdefault(node.name, []).append(len(self.leaf_nodes))
        self.leaf_nodes.append(nodes)
        self.ancestors.append(tuple(chain))


class _Capacity:
    """Pods of one shape that fit in every domain of a tree (per level), at some usage."""

    def __init__(self, tree: _Tree, requests: Mapping[str, int], used: Usage):
        self.tree = tree
        self.requests = requests
        self.pods = [[0] * len(paths) for paths in tree.paths]
        self.seen = len(used.changes) if isinstance(used, LiveUsage) else 0
        """How many of the usage's changes the counts include."""
        for leaf in range(len(tree.leaf_nodes)):
            self._recount(leaf, used)

    def catch_up(self, used: LiveUsage) -> None:
        """Recount only the leaves whose nodes' usage changed since last time."""
        changed = set(used.changes[self.seen :])
        self.seen = len(used.changes)
        for name in changed:
            for leaf in self.tree.leaves_of.get(name, ()):
                self._recount(leaf, used)

    def _recount(self, leaf: int, used: Usage) -> None:
        fit = _pods_fitting(self.tree.leaf_nodes[leaf], self.requests, used)
        ancestors = self.tree.ancestors[leaf]
        delta = fit - self.pods[-1][ancestors[-1]]
        for level, index in enumerate(ancestors):
            self.pods[level][index] += delta


_CapacityKey = tuple[int, int, tuple[tuple[str, int], ...]]


class NodeIndex(Sequence[Node]):
    """A snapshot's nodes with what placement derives from them, kept for the snapshot's life
    (Kueue's per-snapshot TAS index): domain trees per flavor and pod filters, and the pods of
    each shape that fit per domain, kept in step with a LiveUsage node by node instead of
    recounted for every placement."""

    def __init__(self, nodes: Iterable[Node]):
        self._nodes = tuple(nodes)
        self._in_flavor: dict[Hashable, dict[tuple[str, ...], list[Node]]] = {}
        self._trees: dict[Hashable, _Tree] = {}
        self._capacities: dict[_CapacityKey, tuple[LiveUsage, _Capacity]] = {}
        self._first_names: dict[tuple[str, ...], dict[tuple[str, ...], str]] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    @overload
    def __getitem__(self, index: int) -> Node: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Node]: ...

    def __getitem__(self, index: int | slice) -> Node | Sequence[Node]:
        return self._nodes[index]

    def in_flavor(
        self, levels: tuple[str, ...], flavor: ResourceFlavor
    ) -> dict[tuple[str, ...], list[Node]]:
        """Kueue's nodes cache: the Ready nodes with the flavor's nodeLabels and every level
        label, by their level values."""
        key = (levels, tuple(sorted(flavor.node_labels.items())))
        if key not in self._in_flavor:
            domains: dict[tuple[str, ...], list[Node]] = {}
            for node in self._nodes:
                if _in_flavor(node, flavor, levels):
                    domains.setdefault(tuple(node.labels[v] for v in levels), []).append(node)
            self._in_flavor[key] = domains
        return self._in_flavor[key]

    def tree(self, levels: tuple[str, ...], flavor: ResourceFlavor, pod_set: PodSet) -> _Tree:
        """The domains whose nodes can take the PodSet's pods. Pod filters apply only when the
        lowest level is the hostname, as Kueue's scheduler simulation checks them only then."""
        by_host = levels[-1] == HOSTNAME
        tolerations = pod_set.tolerations + flavor.tolerations
        pod = Pod("", {}, pod_set.node_selector, pod_set.required_affinity, tolerations)
        filters = (tuple(sorted(pod.node_selector.items())), pod.required_affinity, tolerations)
        key = (levels, tuple(sorted(flavor.node_labels.items())), filters if by_host else None)
        if key not in self._trees:
            leaves = {
                path: [n for n in nodes if not by_host or matches_node(pod, n)]
                for path, nodes in self.in_flavor(levels, flavor).items()
            }
            self._trees[key] = _Tree(levels, {p: ns for p, ns in leaves.items() if ns})
        return self._trees[key]

    def capacity(self, tree: _Tree, used: Usage, requests: Mapping[str, int]) -> _Capacity:
        """Pods of this shape that fit per domain at `used`; kept across placements when
        `used` is a LiveUsage, counted afresh otherwise."""
        if not isinstance(used, LiveUsage):
            return _Capacity(tree, requests, used)
        key = (id(used), id(tree), tuple(sorted(requests.items())))
        kept = self._capacities.get(key)
        if kept is None or kept[0] is not used:
            self._capacities[key] = (used, _Capacity(tree, requests, used))
            return self._capacities[key][1]
        kept[1].catch_up(used)
        return kept[1]

    def first_names(self, levels: tuple[str, ...]) -> dict[tuple[str, ...], str]:
        """Per level values, the first node by name that carries them (any node with the
        level labels, as usage is charged whatever the node's state)."""
        if levels not in self._first_names:
            names: dict[tuple[str, ...], str] = {}
            for node in sorted(self._nodes, key=lambda n: n.name):
                if all(level in node.labels for level in levels):
                    names.setdefault(tuple(node.labels[v] for v in levels), node.name)
            self._first_names[levels] = names
        return self._first_names[levels]


def _indexed(nodes: Sequence[Node]) -> NodeIndex:
    return nodes if isinstance(nodes, NodeIndex) else NodeIndex(nodes)


def _in_flavor(node: Node, flavor: ResourceFlavor, levels: Sequence[str]) -> bool:
    """Kueue's nodes cache: Ready, the flavor's nodeLabels, every level label."""
    return (
        node.ready
        and all(node.labels.get(k) == v for k, v in flavor.node_labels.items())
        and all(level in node.labels for level in levels)
    )


# -- usage ------------------------------------------------------------------------------------


def node_usage(
    assignment: TopologyAssignment, pod_set: PodSet, nodes: Sequence[Node]
) -> dict[str, dict[str, int]]:
    """What an assignment takes on each node (its requests and `pods`), for `used`.

    A domain above the hostname is charged to its first node by name: only the domain's
    total matters, as Kueue counts capacity per lowest-level domain. Domains whose nodes are
    gone are skipped, as Kueue skips their usage."""
    first_names = _indexed(nodes).first_names(assignment.levels)
    usage: dict[str, dict[str, int]] = {}
    requests = per_pod(pod_set)
    for domain in assignment.domains:
        name = first_names.get(domain.values)
        if name is None:
            continue
        node_used = usage.setdefault(name, {})
        for resource, amount in requests.items():
            node_used[resource] = node_used.get(resource, 0) + amount * domain.count
    return usage


def assignment_fits(
    assignment: TopologyAssignment,
    pod_set: PodSet,
    nodes: Sequence[Node],
    used: Usage,
    flavor: ResourceFlavor,
) -> bool:
    """Kueue `TASFlavorSnapshot.Fits`: every domain of an existing assignment still has room
    for its pods at `used` (e.g. after other workloads were admitted in the same cycle)."""
    return _still_fits(_indexed(nodes), assignment, pod_set, flavor, used, {})


def _still_fits(
    index: NodeIndex,
    assignment: TopologyAssignment,
    pod_set: PodSet,
    flavor: ResourceFlavor,
    *usages: Usage,
) -> bool:
    domains = index.in_flavor(assignment.levels, flavor)
    requests = per_pod(pod_set)
    return all(
        d.values in domains and _pods_fitting(domains[d.values], requests, *usages) >= d.count
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
    index = _indexed(nodes)
    assumed: dict[str, dict[str, int]] = {}
    for a in assignments:
        flavor = _tas_flavor(a, flavors)
        if a.topology_assignment is None or flavor is None:
            continue
        pod_set = by_name[a.name]
        if not _still_fits(index, a.topology_assignment, pod_set, flavor, used, assumed):
            return False
        assumed = add_usage(assumed, node_usage(a.topology_assignment, pod_set, index))
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


class LiveUsage(dict[str, dict[str, int]]):
    """Per-node usage that changes in place and logs the nodes it changed on, so that a
    NodeIndex recounts only their domains (Kueue updates free capacity incrementally)."""

    def __init__(self, usage: Usage | None = None):
        super().__init__(add_usage(usage or {}))
        self.changes: list[str] = []

    def add(self, usage: Usage) -> None:
        for name, amounts in usage.items():
            node_used = self.setdefault(name, {})
            for resource, amount in amounts.items():
                node_used[resource] = node_used.get(resource, 0) + amount
            self.changes.append(name)

    def subtract(self, usage: Usage) -> None:
        """Take off what `add` put on; what drops to nothing is gone."""
        for name, amounts in usage.items():
            node_used = self.setdefault(name, {})
            for resource, amount in amounts.items():
                node_used[resource] = node_used.get(resource, 0) - amount
                if not node_used[resource]:
                    del node_used[resource]
            if not node_used:
                del self[name]
            self.changes.append(name)


class TopologyUsage:
    """Per-node usage during a scheduling pass: non-TAS pods, plus what each TAS workload
    holds, released by workload key (as ClusterState holds and releases quota)."""

    def __init__(self, non_tas: Usage | None = None):
        self.non_tas = LiveUsage(non_tas)
        self._held: dict[str, dict[str, dict[str, int]]] = {}
        self._total = LiveUsage(self.non_tas)

    def hold(self, key: str, usage: Usage) -> None:
        self.release(key)
        self._held[key] = add_usage(usage)
        self._total.add(self._held[key])

    def release(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self._total.subtract(held)

    def used(self) -> LiveUsage:
        """Non-TAS usage plus every held workload's, kept up to date in place."""
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
    its assigned TAS flavor, each seeing what the earlier ones took (assumed usage). The
    PodSets of one `podset-group-name` are placed together, as one unit.

    Returns a Placement per such PodSet, in PodSet order, stopping after the first unit that
    does not fit. Pass non-TAS usage only as `used` to simulate an empty topology."""
    by_name = {ps.name: ps for ps in pod_sets}
    members = [
        (by_name[a.name], a)
        for a in assignments
        if requests_topology(by_name[a.name], tas_only) and a.count > 0
    ]
    result: dict[str, Placement] = {}
    assumed: dict[str, dict[str, int]] = {}
    for unit in _placement_units(members):
        total = add_usage(used, assumed) if assumed else used
        placements = _place_unit(unit, flavors, topologies, nodes, total)
        result.update(placements)
        for pod_set, _ in unit:
            placed = placements[pod_set.name].assignment
            if placed is None:
                return result
            assumed = add_usage(assumed, node_usage(placed, pod_set, nodes))
    return result


_Member = tuple[PodSet, PodSetAssignment]


def _placement_units(members: Sequence[_Member]) -> list[list[_Member]]:
    """Each PodSet alone, except that a group's PodSets form one unit where its first is."""
    units: list[list[_Member]] = []
    groups: dict[str, list[_Member]] = {}
    for member in members:
        request = member[0].topology_request
        group = request.group if request is not None else None
        if group is None:
            units.append([member])
        elif group in groups:
            groups[group].append(member)
        else:
            groups[group] = [member]
            units.append(groups[group])
    return units


def _place_unit(
    unit: list[_Member],
    flavors: Mapping[str, ResourceFlavor],
    topologies: Mapping[str, Topology],
    nodes: Sequence[Node],
    used: Usage,
) -> dict[str, Placement]:
    flavor = _unit_flavor(unit, flavors)
    if isinstance(flavor, str):
        return {pod_set.name: Placement(None, flavor) for pod_set, _ in unit}
    topology = topologies.get(flavor.topology_name or "")
    if topology is None:
        reason = f"topology {flavor.topology_name} not found"
        return {pod_set.name: Placement(None, reason, flavor.name) for pod_set, _ in unit}
    if len(unit) == 1:
        pod_set, assignment = unit[0]
        return {
            pod_set.name: place_pod_set(topology, nodes, used, flavor, pod_set, assignment.count)
        }
    return _place_group(unit, topology, nodes, used, flavor)


def _unit_flavor(
    unit: list[_Member], flavors: Mapping[str, ResourceFlavor]
) -> ResourceFlavor | str:
    """The one TAS flavor of the unit's PodSets, or why there is none."""
    names: set[str] = set()
    for pod_set, assignment in unit:
        found = _tas_flavor_names(assignment, flavors)
        if len(found) != 1:
            problem = "no TAS flavor assigned" if not found else f"multiple TAS flavors {found}"
            return f"PodSet {pod_set.name}: {problem}"
        names.update(found)
    if len(names) > 1:
        return f"PodSet group {_group_of(unit)}: different TAS flavors {sorted(names)}"
    return flavors[names.pop()]


def _group_of(unit: list[_Member]) -> str | None:
    request = unit[0][0].topology_request
    return request.group if request is not None else None


def _place_group(
    unit: list[_Member],
    topology: Topology,
    nodes: Sequence[Node],
    used: Usage,
    flavor: ResourceFlavor,
) -> dict[str, Placement]:
    """Kueue's grouped placement: a leader of one pod and its workers go into one domain at
    the workers' requested level as a single PodSet whose pod count is the group's. Every pod
    is sized for the larger of the two requests (exact when they ask for the same); the
    leader takes one pod of the first domain."""
    (leader, lead), (workers, work) = _leader_and_workers(unit)
    if len(unit) != 2 or lead.count != 1:
        reason = f"PodSet group {_group_of(unit)}: needs one leader pod and one workers PodSet"
        return {pod_set.name: Placement(None, reason, flavor.name) for pod_set, _ in unit}
    together = replace(workers, requests=_larger(leader.requests, workers.requests))
    placement = place_pod_set(topology, nodes, used, flavor, together, lead.count + work.count)
    if placement.assignment is None:
        return {pod_set.name: placement for pod_set, _ in unit}
    first, *others = placement.assignment.domains
    levels = placement.assignment.levels
    rest = (replace(first, count=first.count - 1),) if first.count > 1 else ()
    split = {
        leader.name: TopologyAssignment(levels, (replace(first, count=1),)),
        workers.name: TopologyAssignment(levels, (*rest, *others)),
    }
    return {pod_set.name: Placement(split[pod_set.name], "", flavor.name) for pod_set, _ in unit}


def _leader_and_workers(unit: list[_Member]) -> tuple[_Member, _Member]:
    """Kueue `findLeaderAndWorkers`: the second PodSet leads unless it has more pods."""
    first, second = unit[0], unit[-1]
    return (first, second) if second[1].count > first[1].count else (second, first)


def _larger(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {r: max(a.get(r, 0), b.get(r, 0)) for r in {*a, *b}}


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
