"""The TPU map page's SVG picture (web/tpu.py, web/parts/tpu.html): cubes as their 4x4x4 chip
and host geometry, slice borders and tags, super-slices across cubes, v5e grids, team
visibility, host states, and a query count that does not grow with the cluster."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters import services as cluster_services
from clusters.models import Cluster, Node
from teams import services as teams
from tests.support import at, tpu_jobset
from tests.unit.test_tpu_admission import lws
from tests.unit.test_tpu_admission import queues as tpu_queues
from workloads import admission, services
from workloads.models import Pod, Slice

SVG = "{http://www.w3.org/2000/svg}"
CUBES = ("cube-a", "cube-b", "cube-c")


def cube_cluster(pools=CUBES):
    cluster = Cluster.objects.create(name="tpu-cluster", status=Cluster.Status.RUNNING)
    for pool in pools:
        cluster_services.provision_now(
            cluster,
            name=pool,
            machine_type="tpu7x-standard-4t",
            node_count=16,
            tpu_topology="4x4x4",
            block="block-0",
        )
    services.apply(cluster, tpu_queues(), source="q.yaml", now=at(), namespace="llm")
    return cluster


def run(cluster, *manifests, seconds=120, namespace="llm"):
    for text in manifests:
        services.apply(cluster, text, source="tpu.yaml", now=at(), namespace=namespace)
    admission.advance(cluster, at(), at(seconds=seconds))


@pytest.fixture
def root(db, client):
    client.force_login(User.objects.create_user("root", is_staff=True))
    return client


def picture(client, cluster="tpu-cluster", query=""):
    """The page's SVG as an element tree, and the page's text."""
    response = client.get(f"/clusters/{cluster}/tpu/{query}")
    assert response.status_code == 200
    text = response.content.decode()
    start = text.index('<svg class="tpu-map"')
    return ET.fromstring(text[start : text.index("</svg>", start) + 6]), text


def groups(svg, kind):
    return svg.findall(f".//{SVG}g[@class='{kind}']")


def box(element):
    """(x, y, width, height) of a group's first rect: a host's tile, a slice's border."""
    rect = element.find(f"{SVG}rect")
    return tuple(int(rect.get(name)) for name in ("x", "y", "width", "height"))


def slices(cube):
    return [s for s in cube.findall(f"{SVG}g") if s.get("class", "").startswith("slice")]


def borders(svg):
    """(pool, tag, width, height) of each slice border, in chips."""
    return [
        (cube.get("data-pool"), s.get("data-tag"), box(s)[2] // 10, box(s)[3] // 10)
        for cube in groups(svg, "cube")
        for s in slices(cube)
    ]


def hosts(svg):
    return [g for g in svg.iter(f"{SVG}g") if g.get("class", "").startswith("host")]


def test_each_cube_is_its_four_layers_of_16_hosts_and_64_chips(root):
    cube_cluster()

    svg, _ = picture(root)

    cubes = groups(svg, "cube")
    assert [c.get("data-pool") for c in cubes] == list(CUBES)
    for cube in cubes:
        layers = [t.text for t in cube.findall(f"{SVG}text[@class='layer']")]
        assert layers == ["z = 0", "z = 1", "z = 2", "z = 3"]
        tiles = [h for h in cube.findall(f"{SVG}g") if h.get("class") == "host free"]
        assert len(tiles) == 16
        assert len(cube.findall(f".//{SVG}rect[@class='chip']")) == 64
        # A host is a 2x2 tile of chips; the four hosts of a layer cover its 4x4 grid.
        assert {box(t)[2:] for t in tiles} == {(20, 20)}
        assert len({box(t)[:2] for t in tiles}) == 16


def test_sub_and_super_slices_have_borders_per_layer_and_a_link_across_cubes(root):
    cluster = cube_cluster()
    run(
        cluster,
        tpu_jobset("small", "2x2x2", replicas=1),
        tpu_jobset("big", "4x4x8", replicas=1, parallelism=32),
    )
    (big,) = Slice.objects.filter(workload__owner__name="big")

    svg, text = picture(root)

    # Letters in name order: A = JobSet/llm/big, B = JobSet/llm/small.
    found = Counter(borders(svg))
    assert found == Counter(
        {(pool, "A", 4, 4): 4 for pool in big.node_pools} | {(_pool_of_small(), "B", 2, 2): 2}
    )
    (link,) = svg.findall(f".//{SVG}line[@class='link']")
    assert link.get("data-tag") == "A"
    assert big.node_pools == ["cube-b", "cube-c"]  # small took a 2x2x2 of cube-a
    assert "super-slice 4x4x8 over cube-b + cube-c" in text
    # Names are in the legend and the hover text, never drawn in the picture.
    assert {t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "tag"} == {"A", "B"}
    assert text.count(">JobSet/llm/big</a>") == 1
    used = [h for h in hosts(svg) if h.get("class") == "host used"]
    assert len(used) == 34
    title = next(h for h in used if h.get("data-host") == big.hosts[0]).find(f"{SVG}title").text
    assert big.hosts[0] in title
    assert f"slice {big.name} (4x4x8, super-slice over cube-b + cube-c), active" in title
    assert "workload JobSet/llm/big" in title
    assert "pod big-" in title


def _pool_of_small():
    (row,) = Slice.objects.filter(workload__owner__name="small")
    (pool,) = row.node_pools
    return pool


def test_every_lws_group_and_every_slice_of_a_jobset_has_its_own_tag(root):
    cluster = cube_cluster(CUBES[:2])
    run(cluster, tpu_jobset("js", "2x2x2", replicas=2), lws(replicas=3))

    svg, text = picture(root)

    tags = Counter(tag for _, tag, width, height in borders(svg) if (width, height) == (2, 2))
    # A = JobSet/llm/js (one Workload, two slices), B = its LWS (a Workload per group).
    assert tags == {"A s0": 2, "A s1": 2, "B g0": 2, "B g1": 2, "B g2": 2}
    group = next(h for h in hosts(svg) if "B g1" in _host_tags(svg, h))
    assert "LeaderWorkerSet/llm/serve, group 1" in group.find(f"{SVG}title").text


def _host_tags(svg, host):
    """The tags of the slice borders drawn over a host's tile."""
    x, y, _, _ = box(host)
    (cube,) = [cube for cube in groups(svg, "cube") if host in list(cube)]
    return {
        s.get("data-tag")
        for s in slices(cube)
        if box(s)[0] <= x < box(s)[0] + box(s)[2] and box(s)[1] <= y < box(s)[1] + box(s)[3]
    }


def test_v5e_pools_are_drawn_as_their_chip_grids(root):
    cluster = Cluster.objects.create(name="v5e", status=Cluster.Status.RUNNING)
    cluster_services.provision_now(
        cluster, name="multi", machine_type="ct5lp-hightpu-4t", node_count=8, tpu_topology="4x8"
    )
    cluster_services.provision_now(
        cluster, name="single", machine_type="ct5lp-hightpu-8t", node_count=2, tpu_topology="2x4"
    )
    cluster_services.provision_now(cluster, name="gpu", machine_type="g2-standard-24", node_count=1)

    svg, text = picture(root, "v5e")

    assert not groups(svg, "cube")
    pools = {g.get("data-pool"): g for g in groups(svg, "flat")}
    assert set(pools) == {"multi", "single"}
    assert pools["multi"].get("data-grid") == "4x8"
    # One slice of 4x8 chips: 8 hosts of 2x2 chips, 2 across and 4 down.
    (grid,) = pools["multi"].findall(f"{SVG}rect[@class='grid']")
    assert (grid.get("width"), grid.get("height")) == ("40", "80")
    tiles = [box(h) for h in hosts(pools["multi"])]
    assert len({x for x, _, _, _ in tiles}) == 2
    assert len({y for _, y, _, _ in tiles}) == 4
    assert len(pools["multi"].findall(f".//{SVG}rect[@class='chip']")) == 32
    # Each single-host node is its own 2x4 slice.
    grids = pools["single"].findall(f"{SVG}rect[@class='grid']")
    assert [(g.get("width"), g.get("height")) for g in grids] == [("20", "40")] * 2
    assert len(pools["single"].findall(f".//{SVG}rect[@class='chip']")) == 16
    assert "gpu" not in {g.get("data-pool") for g in svg.iter(f"{SVG}g")}


def test_cube_hosts_without_coordinates_are_drawn_as_a_grid_of_host_tiles(root):
    """Real GKE nodes carry no cube coordinates (docs/gke.md): the pool is still drawn."""
    cube_cluster(CUBES[:1])
    Node.objects.update(coordinates=None)

    svg, _ = picture(root)

    assert not groups(svg, "cube")
    (pool,) = groups(svg, "flat")
    (grid,) = pool.findall(f"{SVG}rect[@class='grid']")
    assert (grid.get("width"), grid.get("height")) == ("40", "160")
    assert {box(h)[2:] for h in hosts(pool)} == {(20, 20)}
    assert len({box(h)[:2] for h in hosts(pool)}) == 16


def test_another_teams_workloads_are_drawn_but_not_named(client, db):
    cluster = cube_cluster(CUBES[:2])
    run(cluster, lws(replicas=2))
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    teams.ensure_team("vision", namespaces=["vision"], members=[("bob", "submitter")])
    names = [s.name for s in Slice.objects.all()] + list(Pod.objects.values_list("name", flat=True))

    client.force_login(User.objects.get(username="alice"))
    own, own_text = picture(client)
    client.force_login(User.objects.get(username="bob"))
    other, other_text = picture(client)

    assert {tag for _, tag, _, _ in borders(own)} == {"A g0", "A g1"}
    assert "LeaderWorkerSet/llm/serve" in own_text
    assert all(name in own_text for name in names)
    # Bob sees the same hosts in use and the slice borders, without a name or a tag.
    used = [h for h in hosts(other) if h.get("class") == "host used"]
    assert len(used) == 4
    assert {h.find(f"{SVG}rect").get("class") for h in used} == {"tile hidden"}
    assert [tag for _, tag, _, _ in borders(other)] == [""] * 4
    assert "serve" not in other_text
    assert not any(name in other_text for name in names)
    assert "another team&#x27;s workload" in other_text


def test_activating_and_failed_hosts_are_marked_by_pattern_and_text(root):
    cluster = cube_cluster(CUBES[:1])
    run(cluster, tpu_jobset("js", "2x2x2", replicas=1), seconds=5)
    (row,) = Slice.objects.all()
    assert row.state == Slice.State.ACTIVATING
    Node.objects.filter(name=row.hosts[0]).update(ready=False)

    svg, text = picture(root)

    states = {h.get("data-host"): h for h in hosts(svg)}
    failed, activating = states[row.hosts[0]], states[row.hosts[1]]
    assert failed.get("class") == "host failed"
    assert failed.find(f"{SVG}rect[@class='mark failed']") is not None
    assert "state: failed (node not ready)" in failed.find(f"{SVG}title").text
    assert activating.get("class") == "host activating"
    assert activating.find(f"{SVG}rect[@class='mark activating']") is not None
    assert "state: slice activating" in activating.find(f"{SVG}title").text
    assert "14 hosts free, 0 in use, 1 activating, 1 failed" in text
    # A 2x2x2 slice covers two layers: a dashed border in each.
    assert len([s for s in svg.iter(f"{SVG}g") if s.get("class") == "slice activating"]) == 2

    # The live region's fragment (what live.js fetches on a slice. event) shows it active.
    admission.advance(cluster, at(seconds=5), at(seconds=60))
    fragment = root.get("/clusters/tpu-cluster/tpu/?fragment=tpu").content.decode()
    assert fragment.startswith('<section aria-label="TPU hosts"')
    assert 'data-live="tpu" data-live-on="slice. node_pool. node. workload.pods ' in fragment
    assert 'class="host activating"' not in fragment
    assert fragment.count('class="host used"') == 1


def test_the_picture_costs_the_same_queries_however_many_cubes_slices_and_pods(root):
    cluster = cube_cluster(CUBES[:1])
    run(cluster, tpu_jobset("js", "2x2x2", replicas=1))

    def queries():
        with CaptureQueriesContext(connection) as captured:
            assert root.get("/clusters/tpu-cluster/tpu/").status_code == 200
        return len(captured)

    small = queries()
    for pool in CUBES[1:]:
        cluster_services.provision_now(
            cluster,
            name=pool,
            machine_type="tpu7x-standard-4t",
            node_count=16,
            tpu_topology="4x4x4",
            block="block-0",
        )
    run(cluster, lws(replicas=4), tpu_jobset("big", "4x4x8", replicas=1, parallelism=32))
    assert Slice.objects.count() == 6

    assert queries() == small


def test_workloads_on_one_picture_never_share_a_colour(root):
    cluster = cube_cluster(CUBES[:1])
    # Both names hash to the same palette colour (web.panels.colour): the later one moves on.
    run(
        cluster,
        tpu_jobset("late", "2x2x2", replicas=1),
        tpu_jobset("subslicing", "2x2x2", replicas=1),
    )

    svg, _ = picture(root)

    fills = {
        tag: {h.find(f"{SVG}rect").get("class") for h in hosts(svg) if tag in _host_tags(svg, h)}
        for tag in ("A", "B")
    }
    assert fills == {"A": {"tile c0"}, "B": {"tile c1"}}
