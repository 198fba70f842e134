"""The three seed workflows walked in Chromium as a platform admin would: the cluster and its
node pools made in the forms, the seed's Kueue objects pasted into the YAML form, its
manifests (scenarios/manifests/, as the tutorials ship them) pasted on the Submit page; then
pods becoming ready, training steps and checkpoints, preemption, resume and TPU slice states
are watched on open pages that never reload.

The GPU seed runs on the wall clock (its manifests get `sim.accelplane.dev/` startup and step
time annotations, so a checkpoint comes every few seconds and the page's step, computed at
wall-clock now, moves); the TPU seeds run their simulated clock minutes ahead.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from django.utils import timezone
from playwright.sync_api import expect

from clusters.models import Cluster
from tests.browser.conftest import SimClock, not_reloaded, running, watch_live
from workloads import checkpoints
from workloads.models import KubeObject

pytestmark = pytest.mark.django_db(transaction=True)

MANIFESTS = Path(__file__).resolve().parents[2] / "scenarios" / "manifests"
SLICING_NAMESPACE = "llm-d-pd-disaggregation"


def seed(path, **substitutions):
    text = (MANIFESTS / path).read_text()
    for placeholder, value in substitutions.items():
        text = text.replace(placeholder, value)
    return text


def annotated(text, kind, **annotations):
    """`text` with sim.accelplane.dev annotations on its object of `kind`."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        if doc["kind"] == kind:
            found = doc["metadata"].setdefault("annotations", {})
            found.update(
                {f"sim.accelplane.dev/{k.replace('_', '-')}": v for k, v in annotations.items()}
            )
    return yaml.safe_dump_all(docs, sort_keys=False)


def create_cluster(page, server, name):
    page.goto(f"{server.url}/platform/clusters/new/")
    page.get_by_label("Name").fill(name)
    page.get_by_role("button", name="Create").click()
    expect(page).to_have_url(f"{server.url}/clusters/{name}/")
    return Cluster.objects.get(name=name)


def create_node_pool(page, server, cluster, name, machine_type, nodes, topology=""):
    page.goto(f"{server.url}/clusters/{cluster}/nodepools/new/")
    page.get_by_label("Name").fill(name)
    page.get_by_label("Machine type").select_option(machine_type)
    page.get_by_label("Node count").fill(str(nodes))
    if topology:
        page.get_by_label("TPU topology").select_option(topology)
    page.get_by_role("button", name="Create").click()
    expect(page).to_have_url(f"{server.url}/clusters/{cluster}/")


def apply_kueue_yaml(page, server, cluster, *texts):
    page.goto(f"{server.url}/platform/kueue/yaml/new/?cluster={cluster}")
    page.get_by_label("Manifest").fill("\n---\n".join(texts))
    page.get_by_role("button", name="Create").click()
    expect(page).to_have_url(f"{server.url}/queues/?cluster={cluster}")


def submit(page, server, cluster, namespace, text, kind, name):
    """Paste `text` on the Submit page; it opens the workload's page."""
    page.goto(f"{server.url}/submit/")
    page.get_by_label("Cluster").select_option(cluster)
    page.get_by_label("Namespace").select_option(namespace)
    page.get_by_label("Manifest", exact=True).fill(text)
    page.get_by_role("button", name="Submit", exact=True).click()
    obj = KubeObject.objects.get(cluster__name=cluster, kind=kind, namespace=namespace, name=name)
    expect(page).to_have_url(f"{server.url}/workloads/{obj.pk}/")
    return obj


def open_workload(context, server, obj):
    page = context.new_page()
    page.goto(f"{server.url}/workloads/{obj.pk}/")
    return page


def row(workloads, obj):
    return workloads.locator(f'tr[data-key="{obj.cluster.name}:{obj.key}"]')


def status(page):
    return page.get_by_role("region", name="Status")


def scale(page, replicas):
    page.get_by_label("Replicas").fill(str(replicas))
    page.get_by_role("button", name="Scale", exact=True).click()


def expect_slices(page, state, count):
    """Wait until the TPU map draws `count` slices in `state` (a slice spanning several
    z layers or cubes has a border in each: counted once, by its id)."""
    page.wait_for_function(
        """([state, count]) => new Set(
            [...document.querySelectorAll(`svg.tpu-map g.slice.${state}`)]
                .map(g => g.dataset.slice)).size === count""",
        arg=[state, count],
        timeout=5000,
    )


def shown_int(page, selector):
    return int(page.locator(selector).inner_text())


def test_gpu_mixed_training_and_inference(server, context, log_in, admin, provider_worker):
    log_in(admin)
    forms = context.new_page()
    cluster = create_cluster(forms, server, "llm-cluster")
    provider_worker()
    create_node_pool(forms, server, cluster.name, "gpupool", "g2-standard-24", 3)
    provider_worker()
    workloads_dir = "mix-train-and-inference/workloads"
    apply_kueue_yaml(
        forms,
        server,
        cluster.name,
        *(
            seed(f"{workloads_dir}/{name}.yaml")
            for name in (
                "flavors",
                "default-priorityclass",
                "high-priorityclass",
                "low-priorityclass",
                "cluster-queue",
                "local-queue",
            )
        ),
    )
    workloads = context.new_page()
    workloads.goto(f"{server.url}/workloads/")
    watch_live(workloads)
    clock = SimClock(cluster, timezone.now())

    tgi_text = annotated(
        seed(f"{workloads_dir}/tgi-gemma-2-9b-it-hp.yaml"), "Deployment", startup="2s"
    )
    tgi = submit(
        forms, server, "llm-cluster", "llm", tgi_text, "Deployment", "tgi-gemma-deployment"
    )
    tgi_row = row(workloads, tgi)
    expect(tgi_row.locator(".badge")).to_have_text("Admitted")
    time.sleep(2)
    clock.catch_up()
    expect(running(tgi_row)).to_have_text("1")

    # The fine-tune checkpoints every 10 steps (its CHECKPOINT_SAVE_STEPS): every 5 s here.
    finetune_text = annotated(
        seed(f"{workloads_dir}/fine-tune-l4.yaml", **{"<MODEL_BUCKET>": "model-bucket-demo"}),
        "Job",
        startup="2s",
        step_time="0.5s",
    )
    finetune = submit(
        forms, server, "llm-cluster", "llm", finetune_text, "Job", "finetune-gemma-l4"
    )
    detail = open_workload(context, server, finetune)
    watch_live(detail)
    finetune_row = row(workloads, finetune)
    expect(status(detail)).to_contain_text("0 pods running")
    expect(detail.locator("#training")).to_have_count(0)

    time.sleep(2)
    clock.catch_up()
    expect(status(detail)).to_contain_text("2 pods running")
    expect(running(finetune_row)).to_have_text("2")
    expect(detail.locator("#training")).to_be_visible()
    first_step = shown_int(detail, "#training-step")

    time.sleep(6)  # past the first checkpoint, step 10
    clock.catch_up()
    saved = checkpoints.latest_steps([finetune.pk])[finetune.pk]
    assert saved >= 10
    assert saved % 10 == 0  # the manifest's CHECKPOINT_SAVE_STEPS, not the default 100
    expect(detail.locator("#checkpoint-step")).to_have_text(str(saved))
    assert shown_int(detail, "#training-step") > first_step
    expect(finetune_row).to_contain_text(f"step {saved}")

    # More inference load: the second TGI pod preempts the low-priority fine-tune.
    tgi_page = open_workload(context, server, tgi)
    scale(tgi_page, 2)
    expect(detail.locator("#object-phase")).to_have_text("Suspended")
    expect(status(detail)).to_contain_text("0 pods running")
    expect(status(detail)).to_contain_text("preempted 1 time")
    expect(finetune_row.locator(".badge")).to_have_text("Suspended")
    expect(detail.locator(".timeline li.ev-workloadpreempted")).to_contain_text("tgi-gemma")
    kept = checkpoints.latest_steps([finetune.pk])[finetune.pk]

    # Load drops: the fine-tune is admitted again and resumes from its latest checkpoint.
    scale(tgi_page, 1)
    time.sleep(1)  # Kueue requeues the parked fine-tune a second after the release (beat's tick)
    clock.catch_up()
    expect(detail.locator("#object-phase")).to_have_text("Admitted")
    time.sleep(2)
    clock.catch_up()
    expect(status(detail)).to_contain_text("2 pods running")
    expect(status(detail)).to_contain_text(f"resumed from step {kept}")
    expect(running(finetune_row)).to_have_text("2")
    time.sleep(6)  # past the next checkpoint after the resumed one
    clock.catch_up()
    later = checkpoints.latest_steps([finetune.pk])[finetune.pk]
    assert later > kept
    expect(detail.locator("#checkpoint-step")).to_have_text(str(later))
    expect(finetune_row).to_contain_text(f"step {later}")
    assert not_reloaded(workloads, detail)


def test_tpu_v5e_jetstream_serving(server, context, log_in, admin, provider_worker):
    log_in(admin)
    forms = context.new_page()
    cluster = create_cluster(forms, server, "jetstream-cluster")
    provider_worker()
    create_node_pool(
        forms, server, cluster.name, "tpu-nodepool", "ct5lp-hightpu-8t", 2, topology="2x4"
    )
    provider_worker()
    workloads = context.new_page()
    workloads.goto(f"{server.url}/workloads/")
    watch_live(workloads)

    # No queue label: the Deployment is not queued; the scheduler places its pods at once.
    server_obj = submit(
        forms,
        server,
        "jetstream-cluster",
        "default",
        seed("jetstream/jetstream-pytorch-gemma-7b-it-2x4.yaml"),
        "Deployment",
        "jetstream-pytorch-server",
    )
    clock = SimClock(cluster, timezone.now())
    detail = open_workload(context, server, server_obj)
    tpu_map = context.new_page()
    tpu_map.goto(f"{server.url}/clusters/{cluster.name}/tpu/")
    watch_live(detail, tpu_map)
    placement = detail.get_by_role("region", name="Placement")
    server_row = row(workloads, server_obj)
    expect(status(detail)).to_contain_text("Not managed by Kueue")

    clock.advance(60)  # inside the startup probe's 90 s initial delay
    expect(placement.locator("tbody td", has_text=re.compile("^tpu-nodepool$"))).to_have_count(2)
    expect(placement.locator("tbody td", has_text=re.compile("^no$"))).to_have_count(2)
    expect(status(detail)).to_contain_text("0 pods running")
    expect(tpu_map.locator("svg.tpu-map g.host.used")).to_have_count(2)

    clock.advance(120)
    expect(placement.locator("tbody td", has_text=re.compile("^yes$"))).to_have_count(2)
    expect(status(detail)).to_contain_text("2 pods running")
    expect(running(server_row)).to_have_text("2")
    expect(server_row).to_contain_text("tpu-nodepool")
    assert not_reloaded(workloads, detail, tpu_map)


def test_tpu7x_dynamic_slicing(server, context, log_in, admin, provider_worker):
    log_in(admin)
    forms = context.new_page()
    cluster = create_cluster(forms, server, "tpu-serving-cluster")
    provider_worker()
    # Both cubes land in one block (the form has no block field; the default is block-0).
    for pool in ("tpu7-pool-1", "tpu7-pool-2"):
        create_node_pool(
            forms, server, cluster.name, pool, "tpu7x-standard-4t", 16, topology="4x4x4"
        )
    provider_worker()
    apply_kueue_yaml(
        forms,
        server,
        cluster.name,
        seed("dynamic-slicing/kueue-resources.yaml"),
        seed("dynamic-slicing/workload-priority-class.yaml"),
    )
    workloads = context.new_page()
    workloads.goto(f"{server.url}/workloads/")
    tpu_map = context.new_page()
    tpu_map.goto(f"{server.url}/clusters/{cluster.name}/tpu/")
    watch_live(workloads, tpu_map)
    picture = tpu_map.locator("svg.tpu-map")
    expect(picture.locator("g.cube")).to_have_count(2)

    def submit_seed(file, kind, name):
        text = seed(
            f"dynamic-slicing/{file}",
            **{"${NAMESPACE}": SLICING_NAMESPACE, "MODEL_WEIGHT_BUCKET": "model-weights"},
        )
        return submit(forms, server, cluster.name, SLICING_NAMESPACE, text, kind, name)

    subslicing = submit_seed(
        "kueue-jobset-simple-subslicing.yaml", "JobSet", "kueue-jobset-simple-subslicing"
    )
    clock = SimClock(cluster, timezone.now())
    sub_row = row(workloads, subslicing)
    # The slice controller's admission check: six 2x2x2 slices activate before admission.
    expect_slices(tpu_map, "activating", 6)
    expect(picture.locator("g.host.activating")).to_have_count(12)
    expect(sub_row).to_contain_text("Admitting: 6 slices activating")

    clock.advance(31)
    expect_slices(tpu_map, "activating", 0)
    expect_slices(tpu_map, "active", 6)
    expect(sub_row.locator(".badge")).to_have_text("Admitted")
    clock.advance(60)
    expect(running(sub_row)).to_have_text("12")

    # The medium-priority super-slice over both cubes preempts the sub-slices.
    superslicing = submit_seed(
        "kueue-jobset-simple-superslicing.yaml", "JobSet", "kueue-jobset-simple-superslicing"
    )
    super_row = row(workloads, superslicing)
    expect(sub_row.locator(".badge")).to_have_text("Suspended")
    expect_slices(tpu_map, "activating", 1)
    clock.advance(31)
    expect_slices(tpu_map, "active", 1)
    expect(picture.locator("line.link")).to_have_count(1)  # joined across the two cubes
    clock.advance(60)
    expect(running(super_row)).to_have_text("32")
    expect(running(sub_row)).to_have_text("0")

    # High-priority prefill and decode servers preempt the super-slice; the sub-slices fit
    # again beside them.
    prefill = submit_seed(
        "kueue-lws-prefill-model-streamer.yaml",
        "LeaderWorkerSet",
        "kueue-vllm-prefill-model-streamer",
    )
    decode = submit_seed(
        "kueue-lws-decode-model-streamer.yaml",
        "LeaderWorkerSet",
        "kueue-vllm-decode-model-streamer",
    )
    clock.advance(600)
    expect_slices(tpu_map, "activating", 0)
    expect_slices(tpu_map, "active", 6 + 4 + 4)
    expect(running(row(workloads, prefill))).to_have_text("8")
    expect(running(row(workloads, decode))).to_have_text("8")
    expect(super_row.locator(".badge")).to_have_text("Suspended")
    expect(sub_row.locator(".badge")).to_have_text("Admitted")
    expect(running(sub_row)).to_have_text("12")
    assert not_reloaded(workloads, tpu_map)
