"""``benchmarks/apex_throughput.py``: the projection's arithmetic; the fake-driven loop runs."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        module = importlib.import_module("apex_throughput")
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(module)  # its fake actors, for Ray workers
        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_projection_arithmetic(bench):
    # 160k frames/s over 256 workers = 625 frames/s each = 12.5 batches/s of 50 frames
    workers, lines = bench.projection(3200.0, 50)
    assert workers == 256
    assert bench.projection(3199.0, 50)[0] == 255
    assert bench.projection(1000.0, 100)[0] == 160  # 625 / 100 = 6.25 batches/s each
    assert "625 frames/s per worker" in lines[0]


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_routing_capacity_routes_batches_from_fake_evaluators(ray_session, bench):
    cap = bench.routing_capacity("PG", num_fake=2, in_flight=2, batch_rows=10, seconds=0.5)
    assert cap["batches_per_s"] > 0
    assert cap["frames_per_s"] == pytest.approx(10 * cap["batches_per_s"])
    assert cap["driver_cores"] > 0
