"""Accelplane's GKE machine catalog and the simulated nodes of a node pool, labelled as GKE does.

Stdlib only, so the scheduler, the sim provider and the UI can all read it. Quantities in
`NodeTemplate.allocatable`/`capacity` are milli-units, like `scheduler.model`: cpu in millicores,
memory and ephemeral-storage in bytes x 1000, GPUs, TPU chips and pods in count x 1000.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from types import MappingProxyType

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"
MAX_PODS = 110
# GKE's limit is 1,000 nodes per node pool per zone; the simulator enforces it as the ceiling.
MAX_NODES = 1000

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_NODEPOOL = "cloud.google.com/gke-nodepool"
LABEL_ACCELERATOR = "cloud.google.com/gke-accelerator"
LABEL_ACCELERATOR_COUNT = "cloud.google.com/gke-accelerator-count"
LABEL_GPU_DRIVER_VERSION = "cloud.google.com/gke-gpu-driver-version"
LABEL_TPU_ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
LABEL_TPU_TOPOLOGY = "cloud.google.com/gke-tpu-topology"
LABEL_TOPOLOGY_BLOCK = "cloud.google.com/gce-topology-block"
LABEL_SUBBLOCK = "cloud.google.com/gke-tpu-reservation-subblock"
LABEL_TOPOLOGY_MODE = "cloud.google.com/gke-accelerator-topology-mode"
# GKE has no label naming the slice of a multi-host TPU pool (its `gke-tpu-slice` label is set
# by the dynamic-slicing controller only); the simulator marks v5e multi-host slices with ours.
LABEL_TPU_SLICE = "accelplane.dev/tpu-slice"

# TPU7x dynamic slicing: a pool is one 4x4x4 sub-block ("cube") of 16 hosts of 2x2x1 chips.
CUBE_TOPOLOGY = "4x4x4"
CUBE_HOSTS = 16
HOST_SHAPE = (2, 2, 1)
PARTITION_SHAPES = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4")
DEFAULT_BLOCK = "block-0"
HEALTHY = "HEALTHY"

V5E = "tpu-v5-lite-podslice"
V5E_TOPOLOGIES = ("2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")


@dataclass(frozen=True, slots=True)
class MachineType:
    name: str
    family: str
    cpu_milli: int
    memory_bytes: int
    accelerator: str | None
    accelerator_count: int
    accelerator_resource: str | None
    tpu_topologies: tuple[str, ...]

    @property
    def is_gpu(self) -> bool:
        return self.accelerator_resource == GPU_RESOURCE

    @property
    def is_tpu(self) -> bool:
        return self.accelerator_resource == TPU_RESOURCE


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: dict[str, int]
    capacity: dict[str, int]
    coordinates: tuple[int, int, int] | None


class CatalogError(ValueError):
    """A node pool the catalog cannot build; the message names the field and the value."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def _invalid(field: str, value: object, problem: str) -> CatalogError:
    return CatalogError(f"{field}: {value!r} {problem}", field=field)


# Memory is in GiB: Compute Engine's "GB" for machine memory is GiB (its API reports
# memoryMb = GB x 1024, e.g. n2-standard-2 -> 8192). Rows: name, vCPU, GiB, accelerator, count.
_Row = tuple[str, int, int, str | None, int]
_ROWS: tuple[_Row, ...] = (
    *((f"e2-standard-{n}", n, 4 * n, None, 0) for n in (2, 4, 8, 16, 32)),
    *((f"n2-standard-{n}", n, 4 * n, None, 0) for n in (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
    *(
        (f"g2-standard-{n}", n, 4 * n, "nvidia-l4", gpus)
        for n, gpus in ((4, 1), (8, 1), (12, 1), (16, 1), (24, 2), (32, 1), (48, 4), (96, 8))
    ),
    *((f"a2-highgpu-{g}g", 12 * g, 85 * g, "nvidia-tesla-a100", g) for g in (1, 2, 4, 8)),
    ("a2-megagpu-16g", 96, 1360, "nvidia-tesla-a100", 16),
    *((f"a2-ultragpu-{g}g", 12 * g, 170 * g, "nvidia-a100-80gb", g) for g in (1, 2, 4, 8)),
    *((f"a3-highgpu-{g}g", 26 * g, 234 * g, "nvidia-h100-80gb", g) for g in (1, 2, 4, 8)),
    ("a3-megagpu-8g", 208, 1872, "nvidia-h100-mega-80gb", 8),
    ("tpu7x-standard-4t", 224, 960, "tpu7x", 4),
    ("ct5lp-hightpu-1t", 24, 48, V5E, 1),
    ("ct5lp-hightpu-4t", 112, 192, V5E, 4),
    ("ct5lp-hightpu-8t", 224, 384, V5E, 8),
)
_TOPOLOGIES: Mapping[str, tuple[str, ...]] = {
    "tpu7x-standard-4t": (CUBE_TOPOLOGY,),
    "ct5lp-hightpu-1t": ("1x1",),
    "ct5lp-hightpu-4t": V5E_TOPOLOGIES,
    "ct5lp-hightpu-8t": ("2x4",),
}


def _machine(row: _Row) -> MachineType:
    name, vcpus, gib, accelerator, count = row
    resource = None
    if accelerator is not None:
        resource = GPU_RESOURCE if accelerator.startswith("nvidia-") else TPU_RESOURCE
    return MachineType(
        name=name,
        family=name.split("-", 1)[0],
        cpu_milli=vcpus * 1000,
        memory_bytes=gib * GiB,
        accelerator=accelerator,
        accelerator_count=count,
        accelerator_resource=resource,
        tpu_topologies=_TOPOLOGIES.get(name, ()),
    )


CATALOG: Mapping[str, MachineType] = MappingProxyType({r[0]: _machine(r) for r in _ROWS})


def get_machine_type(name: str) -> MachineType:
    """The catalog entry for `name`; CatalogError naming `machineType` if there is none."""
    try:
        return CATALOG[name]
    except KeyError:
        known = ", ".join(CATALOG)
        raise _invalid(
            "machineType", name, f"is not a known machine type (known: {known})"
        ) from None


def _chips(topology: str) -> int:
    return prod(int(part) for part in topology.split("x"))


def _is_cube_pool(machine: MachineType, tpu_topology: str | None) -> bool:
    return machine.accelerator == "tpu7x" and tpu_topology == CUBE_TOPOLOGY


def hosts_per_slice(machine_type: str, tpu_topology: str | None) -> int:
    """VMs that form one slice of `tpu_topology` (a TPU7x pool: its cube); 1 for non-TPU nodes."""
    machine = get_machine_type(machine_type)
    if not machine.is_tpu or not tpu_topology:
        return 1
    return max(1, _chips(tpu_topology) // machine.accelerator_count)


def validate_pool(machine_type: str, nodes: int, tpu_topology: str | None) -> None:
    """Raise CatalogError (naming machineType, tpuTopology or nodes) unless GKE would accept it."""
    machine = get_machine_type(machine_type)
    _validate_topology(machine, tpu_topology)
    if nodes < 1 or nodes > MAX_NODES:
        raise _invalid("nodes", nodes, f"must be between 1 and {MAX_NODES}")
    if _is_cube_pool(machine, tpu_topology):
        if nodes != CUBE_HOSTS:
            raise _invalid(
                "nodes",
                nodes,
                f"must be {CUBE_HOSTS}: a {machine.name} pool with tpuTopology {CUBE_TOPOLOGY} "
                f"is exactly one {CUBE_TOPOLOGY} sub-block of {CUBE_HOSTS} hosts",
            )
        return
    per_slice = hosts_per_slice(machine_type, tpu_topology)
    # GKE: a multi-host TPU node pool is exactly one slice.
    if per_slice > 1 and nodes != per_slice:
        raise _invalid(
            "nodes",
            nodes,
            f"must be {per_slice}: a multi-host {tpu_topology} {machine.name} node pool is "
            "exactly one slice",
        )


def _validate_topology(machine: MachineType, tpu_topology: str | None) -> None:
    if not machine.is_tpu:
        if tpu_topology:
            raise _invalid(
                "tpuTopology",
                tpu_topology,
                f"is only valid on TPU machine types, not {machine.name}",
            )
        return
    offered = ", ".join(machine.tpu_topologies)
    if not tpu_topology:
        raise _invalid(
            "tpuTopology", tpu_topology, f"is required for {machine.name} (one of: {offered})"
        )
    if tpu_topology not in machine.tpu_topologies:
        raise _invalid(
            "tpuTopology", tpu_topology, f"is not offered on {machine.name} (offered: {offered})"
        )


def gke_allocatable(cpu_milli: int, memory_bytes: int) -> tuple[int, int]:
    """(cpu millicores, memory bytes) left for pods after GKE's documented node reservations.

    GKE "Plan node sizes": CPU 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25%
    above 4 cores; memory 255 MiB below 1 GiB, else 25% of the first 4 GiB, 20% of the next 4,
    10% of the next 8, 6% of the next 112, 2% above 128 GiB; plus a 100 MiB eviction threshold.
    Fractions are rounded up, so allocatable is never overstated.
    """
    cpu_weights = ((1000, 24), (1000, 4), (2000, 2), (None, 1))  # percent x 4
    cpu_reserved = _ceil_div(_tiered(cpu_milli, cpu_weights), 400)
    if memory_bytes < GiB:
        memory_reserved = 255 * MiB
    else:
        memory_weights = ((4 * GiB, 25), (4 * GiB, 20), (8 * GiB, 10), (112 * GiB, 6), (None, 2))
        memory_reserved = _ceil_div(_tiered(memory_bytes, memory_weights), 100)
    return cpu_milli - cpu_reserved, memory_bytes - memory_reserved - 100 * MiB


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def _tiered(amount: int, tiers: Sequence[tuple[int | None, int]]) -> int:
    """Sum of weight x the part of `amount` in each successive tier (None: the rest)."""
    total = 0
    for size, weight in tiers:
        part = amount if size is None else min(amount, size)
        total += part * weight
        amount -= part
    return total


# Every node gets the GKE default 100 GiB boot disk. Its filesystem reports 98831908Ki (GKE "Plan
# node sizes" example); GKE keeps 10% of that for eviction plus min(50%, 6 GiB + 35%, 100 GiB) of
# the disk for the system, which reproduces that page's allocatable to within 200 bytes.
BOOT_DISK_BYTES = 100 * GiB
EPHEMERAL_CAPACITY_BYTES = 98_831_908 * KiB
EPHEMERAL_ALLOCATABLE_BYTES = (
    EPHEMERAL_CAPACITY_BYTES
    - _ceil_div(EPHEMERAL_CAPACITY_BYTES, 10)
    - min(BOOT_DISK_BYTES // 2, 6 * GiB + BOOT_DISK_BYTES * 35 // 100, 100 * GiB)
)


def _resources(machine: MachineType, *, allocatable: bool) -> dict[str, int]:
    cpu, memory, storage = machine.cpu_milli, machine.memory_bytes, EPHEMERAL_CAPACITY_BYTES
    if allocatable:
        cpu, memory = gke_allocatable(cpu, memory)
        storage = EPHEMERAL_ALLOCATABLE_BYTES
    resources = {
        "cpu": cpu,
        "memory": memory * 1000,
        "ephemeral-storage": storage * 1000,
        "pods": MAX_PODS * 1000,
    }
    if machine.accelerator_resource:
        resources[machine.accelerator_resource] = machine.accelerator_count * 1000
    return resources


def _taints(machine: MachineType) -> tuple[Taint, ...]:
    if machine.accelerator_resource is None:
        return ()
    return (Taint(machine.accelerator_resource, "present", "NoSchedule"),)


def _node_names(cluster: str, pool: str, nodes: int) -> list[str]:
    # GKE names nodes gke-<cluster>-<pool>-<8 hex of the instance group>-<suffix>, cutting long
    # names to fit the 63-character hostname. Here each name keeps at most 20 characters (the
    # hash of the full names keeps them unique) and the suffix is the index, not random.
    digest = hashlib.sha256(f"{cluster}/{pool}".encode()).hexdigest()[:8]
    head = f"gke-{cluster[:20].rstrip('-')}-{pool[:20].rstrip('-')}-{digest}"
    return [f"{head}-{index}" for index in range(nodes)]


def cube_origin(host: int) -> tuple[int, int, int]:
    """Chip coordinates of host `host` (0-15) in its cube: z fastest, then y, then x.

    Consecutive hosts stack along z, so host // (chips of a shape / 4) is the host's partition
    of that shape and partitions nest: 2x2x2 = 2 hosts along z, 2x2x4 = a z column, 2x4x4 =
    half the cube along x, 4x4x4 = the cube.
    """
    return (HOST_SHAPE[0] * (host // 8), HOST_SHAPE[1] * (host // 4 % 2), host % 4)


def partition_id_label(shape: str) -> str:
    return f"cloud.google.com/gke-tpu-partition-{shape}-id"


def partition_state_label(shape: str) -> str:
    return f"cloud.google.com/gke-tpu-partition-{shape}-state"


def _cube_labels(pool: str, block: str | None, host: int) -> dict[str, str]:
    # The sub-block is named after the pool: pool names are unique in a cluster and a pool is
    # one cube, so partition ids are unique across the cluster.
    subblock = f"{pool}-subblock"
    labels = {
        LABEL_TOPOLOGY_BLOCK: block or DEFAULT_BLOCK,
        LABEL_SUBBLOCK: subblock,
        LABEL_TOPOLOGY_MODE: "PROVISION_ONLY",
    }
    for shape in PARTITION_SHAPES:
        index = host // (_chips(shape) // prod(HOST_SHAPE))
        labels[partition_id_label(shape)] = f"{subblock}-{shape}-{index}"
        labels[partition_state_label(shape)] = HEALTHY
    return labels


def _accelerator_labels(
    machine: MachineType, pool: str, tpu_topology: str | None, host: int, driver: str | None
) -> dict[str, str]:
    if machine.is_gpu:
        labels = {
            LABEL_ACCELERATOR: str(machine.accelerator),
            # Seen on real GKE GPU nodes (`kubectl describe node`) and used in nodeSelectors.
            LABEL_ACCELERATOR_COUNT: str(machine.accelerator_count),
        }
        if driver:
            labels[LABEL_GPU_DRIVER_VERSION] = driver
        return labels
    if not machine.is_tpu:
        return {}
    labels = {LABEL_TPU_ACCELERATOR: str(machine.accelerator)}
    if _is_cube_pool(machine, tpu_topology):
        # With dynamic slicing, gke-tpu-topology is set by the slice controller when a slice forms.
        return labels
    labels[LABEL_TPU_TOPOLOGY] = str(tpu_topology)
    per_slice = hosts_per_slice(machine.name, tpu_topology)
    if per_slice > 1:
        labels[LABEL_TPU_SLICE] = f"{pool}-slice-{host // per_slice}"
    return labels


def node_templates(
    *,
    cluster: str,
    pool: str,
    machine_type: str,
    nodes: int,
    tpu_topology: str | None = None,
    block: str | None = None,
    zone: str = "us-central1-a",
    gpu_driver_version: str | None = "latest",
) -> list[NodeTemplate]:
    """The nodes GKE creates for this pool, in order; validates the pool first."""
    validate_pool(machine_type, nodes, tpu_topology)
    machine = CATALOG[machine_type]
    cube = _is_cube_pool(machine, tpu_topology)
    base = {
        LABEL_NODEPOOL: pool,
        "node.kubernetes.io/instance-type": machine.name,
        "cloud.google.com/machine-family": machine.family,
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zone.rsplit("-", 1)[0],
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "cloud.google.com/gke-os-distribution": "cos",
    }
    templates = []
    for host, name in enumerate(_node_names(cluster, pool, nodes)):
        labels = {LABEL_HOSTNAME: name, **base}
        labels |= _accelerator_labels(machine, pool, tpu_topology, host, gpu_driver_version)
        if cube:
            labels |= _cube_labels(pool, block, host)
        templates.append(
            NodeTemplate(
                name=name,
                labels=labels,
                taints=_taints(machine),
                allocatable=_resources(machine, allocatable=True),
                capacity=_resources(machine, allocatable=False),
                coordinates=cube_origin(host) if cube else None,
            )
        )
    return templates


def partition_hosts(nodes: Sequence[NodeTemplate], shape: str) -> dict[str, list[str]]:
    """Partition id -> sorted host names, for the TPU7x nodes among `nodes`."""
    if shape not in PARTITION_SHAPES:
        raise _invalid("shape", shape, f"is not a partition shape ({', '.join(PARTITION_SHAPES)})")
    key = partition_id_label(shape)
    partitions: dict[str, list[str]] = {}
    for node in nodes:
        if key in node.labels:
            partitions.setdefault(node.labels[key], []).append(node.name)
    return {pid: sorted(names) for pid, names in partitions.items()}
