"""/api/schema/ asked for by several requests at once in a fresh process: every one is answered.

drf-spectacular resolves each extension's dotted `target_class` on first use, without a lock:
two first schema requests at once made one of them answer 500 (api.schema.SchemaView)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Run in a process of its own: the extensions of this one may have been resolved already.
# Each round puts back the dotted paths the extensions started with, so it is a first again.
FIRST_REQUESTS = """
import hashlib, json, sys, threading
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
from drf_spectacular.plumbing import OpenApiGeneratorExtension

setup_test_environment()
registries = {id(c._registry): c._registry for c in OpenApiGeneratorExtension.__subclasses__()}
extensions = [e for registry in registries.values() for e in registry]
unresolved = {e: e.target_class for e in extensions}
sys.setswitchinterval(1e-6)  # switch threads often: the race shows in a few rounds
threads, answers = int(sys.argv[1]), []

def ask(barrier):
    client = Client()
    barrier.wait()
    try:
        response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        answers.append([response.status_code, hashlib.sha256(response.content).hexdigest()])
    except Exception as error:  # the test client re-raises what answered 500
        answers.append([500, repr(error)])

for _ in range(int(sys.argv[2])):
    for extension, target in unresolved.items():
        extension.target_class = target
    barrier = threading.Barrier(threads)
    running = [threading.Thread(target=ask, args=(barrier,)) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
print(json.dumps(answers))
"""


def test_concurrent_first_schema_requests_all_get_the_same_schema(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", FIRST_REQUESTS, "8", "3"],
        cwd=Path(__file__).resolve().parents[2],
        env=os.environ | {"ACCELPLANE_VAR_DIR": str(tmp_path)},  # nothing of it lands in var/
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    assert len(answers) == 24
    assert [a for a in answers if a[0] != 200] == []
    assert len({body for _, body in answers}) == 1
