"""The values of Topology Aware Scheduling: Topology objects, PodSet requests, assignments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

HOSTNAME = "kubernetes.io/hostname"


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


def level_key(request: TopologyRequest, levels: Sequence[str]) -> str | None:
    """The level a request places the whole PodSet at (an unconstrained one: the lowest)."""
    if request.required is not None:
        return request.required
    if request.preferred is not None:
        return request.preferred
    if request.slice_only:
        return levels[0] if levels else None
    if request.unconstrained:
        return levels[-1] if levels else None
    return None
