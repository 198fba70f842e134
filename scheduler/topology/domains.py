"""What one placement sees of a topology: its domains with what fits in them (Kueue's
`domainState`), and the plan of a request (`findTopologyAssignmentState`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.topology.tree import Capacity, Tree


@dataclass(slots=True, eq=False)
class Domain:
    """One domain as a placement sees it; `pods` and `slices` are what fits (phase 1), then
    what is assigned (phase 2)."""

    level: int
    index: int
    path: tuple[str, ...]
    pods: int
    slices: int


@dataclass(frozen=True, slots=True)
class Plan:
    topology: str
    levels: tuple[str, ...]
    level: int
    slice_level: int
    slice_size: int
    count: int
    required: bool
    least_free: bool
    balanced: bool = False
    """Kueue gate TASBalancedPlacement, for a `preferred` request only."""

    @property
    def slices(self) -> int:
        return self.count // self.slice_size

    def no_fit(self, fit: int) -> str:
        unit = "slice" if self.slice_size > 1 else "pod"
        name = f'topology "{self.topology}"'
        if fit <= 0:
            return f"{name} doesn't allow to fit any of {self.slices} {unit}(s)"
        return f"{name} allows to fit only {fit} out of {self.slices} {unit}(s)"


class Counts:
    """Phase 1 for one placement: what fits in each domain. Pods come from the capacity;
    slices are counted at the slice level and summed above it (none below). Domains are made
    as the search reaches them, so a placement touches only the levels and subtrees it uses."""

    def __init__(self, tree: Tree, capacity: Capacity, plan: Plan):
        self.tree = tree
        self.pods = capacity.pods
        self.plan = plan

    def domains(self, level: int) -> list[Domain]:
        return [self._domain(level, i) for i in range(len(self.tree.paths[level]))]

    def children(self, domain: Domain) -> list[Domain]:
        level = domain.level + 1
        return [self._domain(level, i) for i in self.tree.children[domain.level][domain.index]]

    def _domain(self, level: int, index: int) -> Domain:
        path = self.tree.paths[level][index]
        return Domain(level, index, path, self.pods[level][index], self._slices(level, index))

    def _slices(self, level: int, index: int) -> int:
        slice_level, size = self.plan.slice_level, self.plan.slice_size
        if level > slice_level:
            return 0
        if level == slice_level or size == 1:  # slices of one pod sum up like pods
            return self.pods[level][index] // size
        return sum(self._slices(level + 1, i) for i in self.tree.children[level][index])


def sort_domains(domains: Iterable[Domain], least_free: bool) -> list[Domain]:
    """BestFit: most slices first; LeastFreeCapacity: fewest. Then fewest pods, then values."""
    sign = 1 if least_free else -1
    return sorted(domains, key=lambda d: (sign * d.slices, d.pods, d.path))
