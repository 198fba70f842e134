"""The TPU topology picture of a cluster: SVG geometry that web/parts/tpu.html draws.

A tpu7x pool is one 4x4x4 cube of 16 hosts of 2x2x1 chips (clusters.catalog.cube_origin): it is
drawn as its four z layers side by side, each a 4x4 grid of chips in which a host is a 2x2 tile.
A v5e pool (or any pool whose hosts have no cube coordinates) is drawn as the 2D chip grid of
each of its slices. A Slice row (the slice controller's) gets a border in every layer it covers
and a short tag: the workload's legend letter, then its LWS group and its slice index when the
workload has several; a super-slice has the same tag in each cube and a connector between them.
Names appear once, in the legend; another team's workload is neither named nor tagged (as in
web/panels.py).

Everything is in viewBox units, as integers: the SVG scales to the page.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from clusters.catalog import (
    CUBE_TOPOLOGY,
    HOST_SHAPE,
    LABEL_TPU_SLICE,
    TPU_RESOURCE,
    hosts_per_slice,
)
from clusters.models import Cluster, Node, NodePool
from teams.services import Scope
from web.panels import HIDDEN, PALETTE_SIZE, colour, pod_users
from workloads.models import Slice

CHIP = 10
GAP = 6  # between the layers of a cube and the slices of a 2D pool
PAD = 8  # around a pool's block
CAPTION = 20  # the pool's name, then (cubes) the layer names
CUBE_SIDE = 4  # chips along x, y and z
LAYER = CUBE_SIDE * CHIP
CUBE_WIDTH = 2 * PAD + CUBE_SIDE * LAYER + (CUBE_SIDE - 1) * GAP
# Four cubes to a row: eight cubes are two rows, which fit one screen.
ROW_WIDTH = 4 * CUBE_WIDTH
# The events after which the picture is fetched again (web/static/web/live.js): slices, pools,
# nodes and pods coming and going; not training progress, which does not change it.
LIVE_ON = (
    "slice. node_pool. node. workload.pods workload.admitted workload.evicted "
    "workload.preempted workload.finished workload.deleted"
)
# A host's state, as its hover text says it (the picture marks each by more than colour).
STATES = {
    "free": "free",
    "used": "in use",
    "activating": "slice activating",
    "failed": "failed (node not ready)",
}


def tpu_picture(cluster: Cluster, caller: Scope) -> dict[str, Any]:
    """The picture of the cluster's TPU pools, its legend, and the pools without hosts yet.

    Four queries however many pools, hosts, slices and pods: pools, their nodes, slices and
    bound pods."""
    pods = pod_users(cluster, caller, tpu_only=True)
    slices = list(
        Slice.objects.filter(cluster=cluster).select_related("workload__owner").order_by("name")
    )
    owners = _Owners()
    for on_node in pods.values():
        for user in on_node:
            owners.add(user["key"], user["label"], user["object_id"])
    for row in slices:
        owner = row.workload.owner
        if caller.can_read(row.workload.namespace):
            owners.add(owner.key, owner.key, owner.pk)
        else:
            owners.add("", HIDDEN, None)
    owners.letter_all()
    on_host = _slices_by_host(slices, owners, caller)

    cubes: list[dict[str, Any]] = []
    flat: list[dict[str, Any]] = []
    waiting: list[NodePool] = []
    pools = NodePool.objects.filter(cluster=cluster).exclude(tpu_topology="")
    for pool in pools.prefetch_related("nodes"):
        nodes = list(pool.nodes.all())
        if not nodes:
            waiting.append(pool)
        elif pool.tpu_topology == CUBE_TOPOLOGY and all(n.coordinates for n in nodes):
            cubes.append(_cube(pool, nodes, on_host, pods, owners))
        else:
            flat.append(_flat(pool, nodes, pods, owners))
    blocks = cubes + flat
    width, height = _pack(blocks)
    hosts = [host for block in blocks for host in block["hosts"]]
    return {
        "width": width,
        "height": height,
        "cubes": cubes,
        "flat": flat,
        "links": _links(cubes),
        "owners": owners.legend(slices, caller),
        "hidden": owners.hidden,
        "states": {state: sum(h["state"] == state for h in hosts) for state in STATES},
        "waiting": waiting,
        "live_on": LIVE_ON,
    }


class _Owners:
    """The workloads on the picture, each with a legend letter (A, B, ..., Z, AA, ...) in the
    order of their names, so a refresh keeps letters unless workloads come or go."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.hidden = False

    def add(self, key: str, label: str, object_id: int | None) -> None:
        if not key:
            self.hidden = True
        elif key not in self.rows:
            self.rows[key] = {"label": label, "object_id": object_id, "colour": colour(key)}

    def letter_all(self) -> None:
        """Letters, and colours: each workload's own (web.panels.colour) unless a workload
        before it took it, then the next one free, so eight workloads never share one."""
        taken: set[int] = set()
        for index, key in enumerate(sorted(self.rows)):
            row = self.rows[key]
            row["letter"] = _letter(index)
            shade = int(row["colour"][1:])
            if len(taken) < PALETTE_SIZE:
                while shade in taken:
                    shade = (shade + 1) % PALETTE_SIZE
            taken.add(shade)
            row["colour"] = f"c{shade}"

    def letter(self, key: str) -> str:
        return self.rows[key]["letter"] if key else ""

    def colour(self, key: str) -> str:
        return self.rows[key]["colour"] if key else "hidden"

    def legend(self, slices: Sequence[Slice], caller: Scope) -> list[dict[str, Any]]:
        """Per workload: its letter, name, colour, slices and super-slices (named once here)."""
        shown = {key: {**row, "slices": 0, "supers": []} for key, row in self.rows.items()}
        for row in slices:
            if not caller.can_read(row.workload.namespace):
                continue
            entry = shown[row.workload.owner.key]
            entry["slices"] += 1
            if len(row.node_pools) > 1:
                entry["supers"].append({"topology": row.topology, "pools": row.node_pools})
        return sorted(shown.values(), key=lambda entry: (len(entry["letter"]), entry["letter"]))


def _letter(index: int) -> str:
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def _slices_by_host(
    slices: Sequence[Slice], owners: _Owners, caller: Scope
) -> dict[str, dict[str, Any]]:
    """Host name -> its slice: tag, colour, state and the lines of the hosts' hover text."""
    groups: dict[int, set[int]] = defaultdict(set)  # owner -> its workloads with slices
    per_workload: dict[int, int] = defaultdict(int)
    for row in slices:
        groups[row.workload.owner_id].add(row.workload_id)
        per_workload[row.workload_id] += 1
    hosts: dict[str, dict[str, Any]] = {}
    for row in slices:
        workload = row.workload
        super_slice = len(row.node_pools) > 1
        index = row.name.rsplit("-", 1)[-1]
        if caller.can_read(workload.namespace):
            key = workload.owner.key
            tag = owners.letter(key)
            about = [f"workload {key}"]
            # An LWS has a Workload per group: the group tells their slices apart.
            if len(groups[workload.owner_id]) > 1:
                tag += f" g{workload.replica_index}"
                about.append(f"group {workload.replica_index}")
            if per_workload[workload.id] > 1:
                tag += f" s{index}"
                about.append(f"slice {index} of {per_workload[workload.id]}")
            lines = [
                f"slice {row.name} ({row.topology}"
                + (f", super-slice over {' + '.join(row.node_pools)}" if super_slice else "")
                + f"), {row.state.lower()}",
                ", ".join(about),
            ]
            info: dict[str, Any] = {"tag": tag, "colour": owners.colour(key), "lines": lines}
        else:
            info = {"tag": "", "colour": "hidden", "lines": [f"slice {row.topology}", HIDDEN]}
        info |= {"id": row.pk, "state": row.state, "super": super_slice}
        for host in row.hosts:
            hosts[host] = info
    return hosts


def _cube(
    pool: NodePool,
    nodes: Iterable[Node],
    on_host: dict[str, dict[str, Any]],
    pods: dict[int, list[dict[str, Any]]],
    owners: _Owners,
) -> dict[str, Any]:
    """A cube's hosts as 2x2 tiles in its four layers, and its slices' borders per layer."""
    hosts = []
    extents: dict[tuple[int, int], list[int]] = {}  # (slice, z) -> [x0, y0, x1, y1] in chips
    slice_of: dict[int, dict[str, Any]] = {}
    for node in sorted(nodes, key=lambda n: n.coordinates or ()):
        x, y, z = node.coordinates or (0, 0, 0)
        left, top = PAD + z * (LAYER + GAP) + x * CHIP, PAD + CAPTION + y * CHIP
        info = on_host.get(node.name)
        where = f"host ({x}, {y}, {z}) of cube {pool.name}"
        hosts.append(
            _host(node, (left, top, HOST_SHAPE[0], HOST_SHAPE[1]), where, info, pods, owners)
        )
        if info is not None:
            slice_of[info["id"]] = info
            box = extents.setdefault((info["id"], z), [x, y, x, y])
            box[:] = [min(box[0], x), min(box[1], y), max(box[2], x), max(box[3], y)]
    borders = []
    for (slice_id, z), (x0, y0, x1, y1) in sorted(extents.items()):
        info = slice_of[slice_id]
        left = PAD + z * (LAYER + GAP) + x0 * CHIP
        top = PAD + CAPTION + y0 * CHIP
        width = (x1 - x0 + HOST_SHAPE[0]) * CHIP
        height = (y1 - y0 + HOST_SHAPE[1]) * CHIP
        borders.append(
            {
                "id": slice_id,
                "x": left,
                "y": top,
                "width": width,
                "height": height,
                "cx": left + width // 2,
                "cy": top + height // 2,
                **info,
            }
        )
    layers = [
        {"z": z, "x": PAD + z * (LAYER + GAP), "label_x": PAD + z * (LAYER + GAP) + LAYER // 2}
        for z in range(CUBE_SIDE)
    ]
    return {
        "pool": pool,
        "w": CUBE_WIDTH,
        "h": 2 * PAD + CAPTION + LAYER,
        "layers": layers,
        "layer_y": PAD + CAPTION,
        "layer_size": LAYER,
        "hosts": hosts,
        "slices": borders,
    }


def _flat(
    pool: NodePool,
    nodes: Iterable[Node],
    pods: dict[int, list[dict[str, Any]]],
    owners: _Owners,
) -> dict[str, Any]:
    """A pool without cube coordinates (v5e, or tpu7x nodes as real GKE registers them) as the
    2D chip grid of each of its slices (a multi-host pool is one slice, a single-host pool's
    every node is one), the hosts as tiles of their chips in it."""
    per_slice = hosts_per_slice(pool.machine_type, pool.tpu_topology)
    groups: dict[str, list[Node]] = defaultdict(list)
    for index, node in enumerate(sorted(nodes, key=lambda n: _natural(n.name))):
        groups[node.labels.get(LABEL_TPU_SLICE, str(index // per_slice))].append(node)
    chips = max(_tpu_chips(node) for members in groups.values() for node in members)
    most = max(len(members) for members in groups.values())
    columns, rows, tile_w, tile_h = _grid_shape(pool.tpu_topology, chips, most)
    across = columns // tile_w
    width, height = columns * CHIP, rows * CHIP
    per_line = max(1, (ROW_WIDTH - 2 * PAD + GAP) // (width + GAP))
    grids, hosts = [], []
    for number, members in enumerate(groups.values()):
        left = PAD + (number % per_line) * (width + GAP)
        top = PAD + CAPTION + (number // per_line) * (height + GAP)
        for place, node in enumerate(members):
            x, y = (place % across) * tile_w, (place // across) * tile_h
            box = (left + x * CHIP, top + y * CHIP, tile_w, tile_h)
            where = f"host ({x}, {y}) of slice {number} of pool {pool.name}"
            hosts.append(_host(node, box, where, None, pods, owners))
        grids.append({"x": left, "y": top, "width": width, "height": height})
    lines = -(-len(grids) // per_line)
    return {
        "pool": pool,
        "grid": pool.tpu_topology,
        "w": 2 * PAD + min(len(grids), per_line) * (width + GAP) - GAP,
        "h": 2 * PAD + CAPTION + lines * (height + GAP) - GAP,
        "grids": grids,
        "hosts": hosts,
        "slices": [],
    }


def _grid_shape(topology: str, chips: int, hosts: int) -> tuple[int, int, int, int]:
    """Columns and rows of chips of one slice, and a host's tile (columns, rows): a 2D
    topology as it reads, a 3D one (a cube whose hosts have no coordinates, as real GKE nodes)
    as its first dimension by the others; the rows grow to hold every host."""
    dims = [int(part) for part in topology.split("x") if part.isdigit()] or [max(1, chips)]
    columns = max(1, dims[0])
    tile_w = min(columns, 2 if chips > 1 else 1)
    tile_h = max(1, chips // tile_w)
    rows = max(math.prod(dims[1:]), -(-hosts // (columns // tile_w)) * tile_h)
    return columns, rows, tile_w, tile_h


def _host(
    node: Node,
    box: tuple[int, int, int, int],
    where: str,
    info: dict[str, Any] | None,
    pods: dict[int, list[dict[str, Any]]],
    owners: _Owners,
) -> dict[str, Any]:
    """One host's tile and chips, its state and its hover text."""
    left, top, across, down = box
    users = pods.get(node.pk, [])
    fill, tag = "free", ""
    if info is not None:
        fill = info["colour"]
        state = "activating" if info["state"] == Slice.State.ACTIVATING else "used"
    elif users:
        key = users[0]["key"]
        fill, tag, state = owners.colour(key), owners.letter(key), "used"
    else:
        state = "free"
    if not node.ready:
        state = "failed"
    lines = [node.name, f"{where}, {_tpu_chips(node)} chips"]
    lines += info["lines"] if info is not None else []
    for user in users:
        if info is None:
            lines.append(f"workload {user['label']}")
        if user["pod"]:
            lines.append(f"pod {user['pod']} ({'ready' if user['ready'] else 'starting'})")
    lines.append(f"state: {STATES[state]}")
    chips = [
        {"x": left + i * CHIP + 1, "y": top + j * CHIP + 1}
        for j in range(down)
        for i in range(across)
    ]
    return {
        "name": node.name,
        "x": left,
        "y": top,
        "width": across * CHIP,
        "height": down * CHIP,
        "cx": left + across * CHIP // 2,
        "cy": top + down * CHIP // 2,
        "chips": chips,
        "chip": CHIP - 2,
        "fill": fill,
        "tag": tag,
        "state": state,
        "title": "\n".join(lines),
    }


def _tpu_chips(node: Node) -> int:
    return int(node.allocatable.get(TPU_RESOURCE, 0)) // 1000


def _natural(name: str) -> tuple[str, int]:
    """GKE node names end in an index: host 10 comes after host 9."""
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


def _pack(blocks: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """Place the blocks left to right in rows of at most ROW_WIDTH; the picture's size."""
    x = y = row_height = width = 0
    for block in blocks:
        if x and x + block["w"] > ROW_WIDTH:
            x, y, row_height = 0, y + row_height, 0
        block["x"], block["y"] = x, y
        x += block["w"]
        row_height = max(row_height, block["h"])
        width = max(width, x)
    return max(width, 1), max(y + row_height, 1)


def _links(cubes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A super-slice's connector: from its last layer in one cube to its first in the next."""
    ends: dict[int, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for cube in cubes:
        borders = [b for b in cube["slices"] if b["super"]]
        for slice_id in dict.fromkeys(b["id"] for b in borders):
            mine = [b for b in borders if b["id"] == slice_id]
            first, last = mine[0], mine[-1]
            ends[slice_id].append((cube["x"] + first["cx"], cube["y"] + first["cy"], first))
            ends[slice_id].append((cube["x"] + last["cx"], cube["y"] + last["cy"], last))
    links = []
    for points in ends.values():
        # Cube by cube: its first and last layer; join each cube's last to the next one's first.
        for (x1, y1, border), (x2, y2, _) in zip(points[1::2], points[2::2], strict=False):
            links.append({"x1": x1, "y1": y1, "x2": x2, "y2": y2, "tag": border["tag"]})
    return links
