#!/usr/bin/env bash
# Screenshots of the web UI for the README, from the demo data, in about three minutes.
#
# Runs `make run`'s steps (migrate, demo, collectstatic, web + worker + beat) with a fresh
# database in a scratch directory on a spare port, then has Playwright drive Debian's headless
# Chromium (apt-get install chromium; nothing downloads a browser) through the demo:
#   1. the GPU seed workflow in the browser: scale the inference Deployment to 3 (the fine-tune
#      is preempted), then back to 1 (it resumes from its checkpoint);
#   2. the TPU slicing workflow over the REST API: a cluster with three tpu7x cubes, its Kueue
#      objects, sub-slice, sub-block and super-slice JobSets.
# Needs `make install` first. PORT and CHROMIUM override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PORT=${PORT:-8765}
CHROMIUM=${CHROMIUM:-/usr/lib/chromium/chromium}
SCRATCH=$(mktemp -d)
RUN=
trap 'if [ -n "$RUN" ]; then kill -- "-$RUN" 2>/dev/null; wait "$RUN" || true; fi; rm -rf "$SCRATCH"' EXIT
mkdir -p "$REPO/var"
# DEBUG as `make run` has it; the keys are generated into the scratch var/.
export PYTHONPATH=$REPO ACCELPLANE_VAR_DIR=$SCRATCH/var ACCELPLANE_PORT=$PORT DEBUG=true
unset SECRET_KEY ACCELPLANE_ENCRYPTION_KEY DATABASE_URL REDIS_URL
PYTHON=$REPO/.venv/bin/python

cd "$SCRATCH"  # the demo writes var/admin-password here
"$PYTHON" "$REPO/manage.py" migrate --noinput -v 0
"$PYTHON" "$REPO/manage.py" demo > demo.log
"$PYTHON" "$REPO/manage.py" collectstatic --noinput -v 0
# Its own process group: stopping it stops the web server, worker and beat it started.
setsid "$PYTHON" -m controlplane.run > "$REPO/var/screenshots.log" 2>&1 &
RUN=$!
for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$PORT/login/" >/dev/null && break; sleep 0.5; done
curl -sf "http://127.0.0.1:$PORT/login/" >/dev/null || { echo "no server; see var/screenshots.log"; exit 1; }

BASE=http://127.0.0.1:$PORT PASSWORD=$(cat var/admin-password) OUT=$REPO/docs/screenshots \
  CHROMIUM=$CHROMIUM "$PYTHON" - <<'PY'
import os
import time

from playwright.sync_api import expect, sync_playwright

BASE, OUT = os.environ["BASE"], os.environ["OUT"]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-dev-shm-usage", "--hide-scrollbars"]
CUBE = {"machine_type": "tpu7x-standard-4t", "node_count": 16, "tpu_topology": "4x4x4",
        "block": "block-0"}
TPU_QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: tpu7x-topology}
spec:
  levels:
  - nodeLabel: cloud.google.com/gce-topology-block
  - nodeLabel: cloud.google.com/gke-tpu-partition-4x4x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x4x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x2-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x1-id
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: tpu7x}
spec:
  nodeLabels: {cloud.google.com/gke-tpu-accelerator: tpu7x}
  topologyName: tpu7x-topology
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: tpu-slices}
spec: {controllerName: accelerator.gke.io/slice}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: tpu-shared}
spec:
  namespaceSelector: {}
  admissionChecksStrategy: {admissionChecks: [{name: tpu-slices}]}
  resourceGroups:
  - coveredResources: [google.com/tpu]
    flavors:
    - name: tpu7x
      resources: [{name: google.com/tpu, nominalQuota: "192"}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: tpu, namespace: llm}
spec: {clusterQueue: tpu-shared}
"""


def jobset(name, shape, parallelism, replicas=1):
    return f"""\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: {name}, namespace: llm, labels: {{kueue.x-k8s.io/queue-name: tpu}}}}
spec:
  replicatedJobs:
  - name: workers
    replicas: {replicas}
    template:
      spec:
        parallelism: {parallelism}
        template:
          metadata:
            annotations: {{cloud.google.com/gke-tpu-slice-topology: "{shape}"}}
          spec:
            nodeSelector: {{cloud.google.com/gke-tpu-accelerator: tpu7x}}
            containers:
            - name: jax
              image: ghcr.io/example/jax:1.0
              resources: {{limits: {{google.com/tpu: "4"}}}}
"""


def wait(what, check, timeout=240):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(1)


with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=os.environ["CHROMIUM"], args=ARGS)
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.goto(f"{BASE}/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(os.environ["PASSWORD"])
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    api = context.request

    def call(method, path, data=None, content_type="application/json"):
        csrf = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
        headers = {"X-CSRFToken": csrf, "Content-Type": content_type}
        response = api.fetch(f"{BASE}/api/v1/{path}", method=method, headers=headers, data=data)
        assert response.ok, f"{method} {path}: {response.status} {response.text()}"
        return response.json()

    def workload(name):
        return next(o for o in call("GET", "workloads?limit=1000")["results"] if o["name"] == name)

    def checkpoint_step():
        steps = [c["step"] for c in call("GET", f"workloads/{finetune['id']}/checkpoints")]
        return max(steps, default=0)

    # 1. The GPU seed workflow, clicked through.
    finetune, inference = workload("sql-finetune"), workload("chat-inference")
    wait("the fine-tune's first checkpoint", lambda: checkpoint_step() >= 10)
    time.sleep(20)  # a few steps past it: the preemption costs steps
    for replicas in (3, 1):
        page.goto(f"{BASE}/workloads/{inference['id']}/")
        page.get_by_label("Replicas").fill(str(replicas))
        page.get_by_role("button", name="Scale").click()
        if replicas == 3:
            page.goto(f"{BASE}/queues/")
            expect(page.locator("#live-status")).to_have_text("live")
            page.screenshot(path=f"{OUT}/queues.png", full_page=True)
            time.sleep(8)  # the fine-tune waits, suspended, while inference serves

    # 2. The TPU slicing workflow, over the REST API.
    call("POST", "clusters", {"name": "tpu-cluster", "location": "us-central1"})
    cluster = next(c for c in call("GET", "clusters")["results"] if c["name"] == "tpu-cluster")
    wait("tpu-cluster", lambda: call("GET", f"clusters/{cluster['id']}")["status"] == "RUNNING")
    for pool in ("cube-a", "cube-b", "cube-c"):
        call("POST", f"clusters/{cluster['id']}/nodepools", {"name": pool, **CUBE})
    wait("the cubes", lambda: all(p["status"] == "RUNNING" for p in
                                  call("GET", f"clusters/{cluster['id']}/nodepools")))
    yaml = "application/yaml"
    call("POST", "workloads?cluster=tpu-cluster&namespace=llm", TPU_QUEUES, yaml)
    for text in (jobset("prefill", "2x2x2", 2, replicas=2), jobset("decode", "2x2x4", 4),
                 jobset("pretrain", "4x4x8", 32)):
        call("POST", "workloads?cluster=tpu-cluster&namespace=llm", text, yaml)
    page.goto(f"{BASE}/clusters/tpu-cluster/tpu/")
    expect(page.locator("svg.tpu-map g.cube")).to_have_count(3)
    expect(page.locator("svg.tpu-map g.host.activating")).to_have_count(0, timeout=60_000)
    page.screenshot(path=f"{OUT}/tpu-map.png", full_page=True)

    page.goto(f"{BASE}/workloads/{finetune['id']}/")
    expect(page.locator("[data-feed] li.ev-workloadresumed")).to_have_count(1)
    page.screenshot(path=f"{OUT}/workload-detail.png", full_page=True)
    page.goto(f"{BASE}/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.screenshot(path=f"{OUT}/overview.png", full_page=True)
    browser.close()
PY
echo "screenshots written to docs/screenshots/"
