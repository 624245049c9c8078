"""Tests of render_junit.py: JUnit XML and CSV."""

import csv
import io

from router_latency.runfile import load_run
from router_latency.render_junit import requests_csv
from conftest import make_run


def test_requests_csv_has_a_line_per_request(tmp_path):
    path = make_run(tmp_path / "run.json", passes={1: (10, 20, 30, 100), 4: (12, 25, 40, 300)},
                    decisions=["a,b", 'say "x"'], errors={"timeout": 1})
    rows = list(csv.reader(io.StringIO(requests_csv(load_run(path).passes).decode())))
    assert rows[0] == ["pass", "id", "start_ms", "latency_ms", "status", "decision", "error"]
    assert len(rows) == 1 + 2 * 101
    assert rows[1] == ["sequential", "0", "", "10", "200", "a,b", ""]
    assert rows[2][5] == 'say "x"'
    assert rows[101] == ["sequential", "100", "", "10", "500", "", "timeout"]
    assert rows[102][:2] == ["c4", "0"]
