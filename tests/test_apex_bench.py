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


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_a_tuned_files_rates_are_counted_from_the_first_update(ray_session, bench, tmp_path):
    path = tmp_path / "cartpole-apex.yaml"
    path.write_text(
        "cartpole-apex:\n"
        "  run: APEX\n"
        "  env: CartPole-v1\n"
        "  config:\n"
        "    num_evaluators: 1\n"
        "    num_cpus_per_evaluator: 0\n"
        "    model: {hiddens: [16]}\n"
        "    evaluation_interval: 5\n"  # switched off for the measurement
        "    optimizer_config:\n"
        "      {num_replay_shards: 1, num_cpus_per_replay_shard: 0, buffer_size: 5000,\n"
        "       learning_starts: 500, train_batch_size: 32, min_step_time_s: 0.25}\n"
    )
    run = bench.tuned_throughput(str(path), seconds=4.0)
    assert run["experiment"] == "cartpole-apex" and run["replay_batch_rows"] == 32
    assert run["env_steps_per_s"] > 0 and run["learner_updates_per_s"] > 0
    assert 0 < run["learner_busy_frac"] <= 1
    # every update replays one 32-row batch: the replay ratio is updates x rows / steps
    assert run["rows_replayed_per_step_sampled"] == pytest.approx(
        32 * run["learner_updates_per_s"] / run["env_steps_per_s"]
    )
    assert run["env_steps_total"] > 500
