"""The overview page after `manage.py demo`, and the demo command itself."""

from __future__ import annotations

from html.parser import HTMLParser
from io import StringIO

import pytest
from django.core.management import call_command

from tests.support import row_counts


class _Rows(HTMLParser):
    """The text of every table cell, row by row, as a reader sees the page."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def table_rows(html):
    parser = _Rows()
    parser.feed(html)
    return parser.rows


def row_starting(rows, *cells):
    matches = [row for row in rows if row[: len(cells)] == list(cells)]
    assert len(matches) == 1, f"one row starting {cells} expected in {rows}"
    return matches[0]


@pytest.fixture
def demo(db, tmp_path, monkeypatch):
    # The command writes var/admin-password relative to the working directory.
    monkeypatch.chdir(tmp_path)

    def run():
        call_command("demo", stdout=StringIO())

    run()
    return run


@pytest.fixture
def overview(demo, client):
    response = client.get("/")
    assert response.status_code == 200
    return response.content.decode()


def test_overview_shows_the_demo_cluster(overview):
    assert "demo-gpu-cluster" in overview


def test_overview_lists_the_demo_node_pools_with_their_nodes(overview):
    rows = table_rows(overview)
    assert row_starting(rows, "default-pool", "e2-standard-4")[2] == "1 / 1"
    assert row_starting(rows, "gpupool", "g2-standard-24")[2] == "3 / 3"
    v5e = row_starting(rows, "v5e-serving", "ct5lp-hightpu-8t")
    assert v5e[3] == "2x4"


def test_overview_shows_the_cluster_queue_and_its_gpu_quota(overview):
    assert "ClusterQueue gpu-shared" in overview
    gpu = row_starting(table_rows(overview), "l4", "nvidia.com/gpu")
    used, nominal = gpu[2], gpu[3]
    assert (used, nominal) == ("6", "6")


def test_overview_shows_both_demo_workloads_admitted(overview):
    rows = table_rows(overview)
    assert row_starting(rows, "Deployment/llm/chat-inference")[1] == "Admitted"
    assert row_starting(rows, "Job/llm/sql-finetune")[1] == "Admitted"


def test_running_demo_twice_changes_nothing(demo):
    before = row_counts()

    demo()

    assert row_counts() == before
