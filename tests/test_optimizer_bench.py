"""The optimizer microbenchmark: driver-traffic accounting and an end-to-end CLI run."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from hierl.bench.optimizers import DriverTraffic, payload_bytes
from hierl.cli import main
from hierl.sample_batch import SampleBatch


@dataclasses.dataclass
class _Result:
    grads: list
    count: int


def test_payload_bytes_walks_containers_and_dataclasses():
    a = np.zeros(10, np.float32)
    batch = SampleBatch({"obs": np.zeros((4, 2), np.float64)})
    assert payload_bytes(a) == 40
    assert payload_bytes({"x": [a, (a, "text")], "b": batch}) == 40 * 2 + 64
    assert payload_bytes(_Result([a, a], 3)) == 80
    assert payload_bytes("no arrays") == 0


@pytest.mark.ray
def test_driver_traffic_counts_gets_puts_and_by_value_arguments(ray_session):
    ray = ray_session

    @ray.remote(num_cpus=0)
    class Sink:
        def take(self, x):
            return None

        def give(self):
            return np.zeros(250, np.float32)

    sink = Sink.remote()
    arr = np.ones(1000, np.float64)
    original = ray.get
    with DriverTraffic() as traffic:
        ref = ray.put(arr)  # 8000
        ray.get(sink.take.remote(ref), timeout=60)  # a ref: free
        ray.get(sink.take.remote(arr), timeout=60)  # by value: 8000
        ray.get(sink.give.remote(), timeout=60)  # fetched: 1000
    assert traffic.bytes == 17_000
    assert ray.get is original  # restored on exit
    ray.kill(sink)


def test_cli_bench_optimizers_in_process(tmp_path, capsys):
    code = main(
        [
            "bench",
            "optimizers",
            "--optimizers",
            "local",
            "async",
            "--evaluators",
            "0",
            "--iterations",
            "1",
            "--skip-sgd",
            "--skip-async",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "local" in out and "async" in out
    record = json.loads((tmp_path / "optimizers.json").read_text())
    rows = {r["optimizer"]: r for r in record["figures"]["strategies"]}
    assert set(rows) == {"local", "async"}
    for row in rows.values():
        assert "error" not in row
        assert row["env_samples_per_s"] > 0 and row["updates_per_s"] > 0
        assert row["driver_bytes_per_iter"] == 0  # in-process: nothing crosses Ray
    assert (tmp_path / "optimizers_learner_throughput.png").stat().st_size > 0


def test_cli_bench_rejects_bad_options(capsys):
    assert main(["bench", "optimizers", "--evaluators", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--evaluators" in err[0]
