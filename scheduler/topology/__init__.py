"""Topology Aware Scheduling: where in a Topology the pods of a PodSet go (kueue-semantics §11).

Follows Kueue's `pkg/cache/scheduler/tas_flavor_snapshot.go` (findTopologyAssignment) with its
default gates (TASProfileMixed on; multi-layer slices and preferred node affinity off;
balanced placement behind its gate, `balanced.py`), `tas_topology_tree.go`,
`tas_nodes_cache.go` and, for annotations, `pkg/controller/jobframework/tas.go` and
`tas_validation.go`:

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
for the levels and subtrees it visits. The trees, with what fits on idle nodes, are shared by
the passes that see the same tuple of nodes, and a placement is kept until a count changes.

Modules: `values` (Topology, requests, assignments), `annotations` (requests from PodSet
annotations), `eligibility` (which queues, flavors and PodSets use TAS), `usage` (per-node
usage), `tree` (domains and their capacity), `assignment` (one PodSet), `workload` (every
PodSet of a workload, and what its assignments take).
"""

from scheduler.model import POD
from scheduler.topology.annotations import (
    GROUP_ANNOTATION,
    PREFERRED_ANNOTATION,
    REQUIRED_ANNOTATION,
    SLICE_LEVEL_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    UNCONSTRAINED_ANNOTATION,
    request_from_annotations,
)
from scheduler.topology.assignment import assignment_fits_empty, find_assignment, place_pod_set
from scheduler.topology.eligibility import (
    flavor_mismatch,
    has_level,
    is_tas_only,
    requests_topology,
)
from scheduler.topology.tree import NodeIndex
from scheduler.topology.usage import LiveUsage, TopologyUsage, Usage, add_usage, per_pod
from scheduler.topology.values import (
    HOSTNAME,
    IMPLIED,
    DomainAssignment,
    Placement,
    Topology,
    TopologyAssignment,
    TopologyRequest,
)
from scheduler.topology.workload import (
    assignment_fits,
    node_usage,
    place_workload,
    placements_fit,
    topology_frs,
)

__all__ = [
    "GROUP_ANNOTATION",
    "HOSTNAME",
    "IMPLIED",
    "POD",
    "PREFERRED_ANNOTATION",
    "REQUIRED_ANNOTATION",
    "SLICE_LEVEL_ANNOTATION",
    "SLICE_SIZE_ANNOTATION",
    "UNCONSTRAINED_ANNOTATION",
    "DomainAssignment",
    "LiveUsage",
    "NodeIndex",
    "Placement",
    "Topology",
    "TopologyAssignment",
    "TopologyRequest",
    "TopologyUsage",
    "Usage",
    "add_usage",
    "assignment_fits",
    "assignment_fits_empty",
    "find_assignment",
    "flavor_mismatch",
    "has_level",
    "is_tas_only",
    "node_usage",
    "per_pod",
    "place_pod_set",
    "place_workload",
    "placements_fit",
    "request_from_annotations",
    "requests_topology",
    "topology_frs",
]
