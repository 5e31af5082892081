"""Multi-node fault tolerance on a local ``ray.cluster_utils.Cluster`` (head + 2 nodes).

The scenario needs its own Ray cluster, and a process can ``ray.init`` only once (the
test session already runs one), so it runs this module as a script in a subprocess and
checks the JSON summary it prints last.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _node_of(ray, evaluator) -> str:
    def node_id(_ev) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    return ray.get(evaluator.apply.remote(node_id), timeout=60)


def _wait_until_dead(ray, node_id: str, timeout_s: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
            return
        time.sleep(0.2)
    raise TimeoutError(f"node {node_id} still alive {timeout_s}s after its removal")


def run_scenario() -> dict:
    """Spread 3 evaluators over 3 nodes, train, remove a node mid-training, train on."""
    import ray
    from ray.cluster_utils import Cluster

    from hierl.algorithms.pg import PGTrainer

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    config = {
        "env": "CartPole-v1",
        "num_evaluators": 3,
        "num_cpus_per_evaluator": 0.5,
        "evaluator_scheduling_strategy": "SPREAD",
        "train_batch_size": 300,
        "rollout_fragment_length": 50,
        "model": {"hiddens": [8, 8]},
        "sample_timeout_s": 60,
        "seed": 0,
    }
    summary: dict = {}
    try:
        with PGTrainer(config) as trainer:
            evaluators = trainer.evaluators
            before = [_node_of(ray, e) for e in evaluators.remote_evaluators]
            trainer.train()
            lost = workers[0]
            lost_id = lost.node_id
            victims = [i + 1 for i, n in enumerate(before) if n == lost_id]
            cluster.remove_node(lost, allow_graceful=False)
            # CRUCIAL: until the cluster has marked the node dead, the scheduler may still
            # place the replacement evaluator there (and it would die with the node too).
            _wait_until_dead(ray, lost_id)
            for _ in range(4):
                result = trainer.train()
            after = [_node_of(ray, e) for e in evaluators.remote_evaluators]
            summary = {
                "nodes_before": before,
                "nodes_after": after,
                "lost_node": lost_id,
                "victims": victims,
                "indices_after": [
                    ray.get(e.ping.remote(), timeout=60) for e in evaluators.remote_evaluators
                ],
                "num_evaluator_restarts": result["num_evaluator_restarts"],
                "failures": [(i, text[:300]) for i, text in evaluators.failures],
                "num_healthy_evaluators": result["num_healthy_evaluators"],
                "training_iteration": result["training_iteration"],
                "timesteps_this_iter": result["timesteps_this_iter"],
            }
    finally:
        ray.shutdown()
        cluster.shutdown()
    return summary


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_losing_a_node_mid_training_recreates_its_evaluators_elsewhere():
    # Its own Ray temp dir: a Cluster writes its address to <temp dir>/ray_current_cluster,
    # where any other process's plain ray.init() (the other pytest worker's CLI runs)
    # would find it and join this test's cluster instead of starting its own.
    ray_tmp = tempfile.mkdtemp(prefix="hierl-cluster-", dir="/tmp")  # short socket paths
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAY_TMPDIR": ray_tmp,
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_COLOR_PREFIX": "0",
    }
    try:
        proc = subprocess.run(
            [sys.executable, __file__],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=200,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    before, after = summary["nodes_before"], summary["nodes_after"]
    assert len(set(before)) == 3  # SPREAD: one evaluator per node
    assert summary["victims"] and len(summary["victims"]) == 1
    assert summary["num_evaluator_restarts"] == 1, summary["failures"]
    assert summary["num_healthy_evaluators"] == 3
    assert summary["indices_after"] == [1, 2, 3]  # recreated with the same worker index
    assert summary["lost_node"] not in after  # the new evaluator runs on a surviving node
    victim = summary["victims"][0] - 1
    assert after[victim] != before[victim]
    assert [a for i, a in enumerate(after) if i != victim] == [
        b for i, b in enumerate(before) if i != victim
    ]
    assert summary["training_iteration"] == 5 and summary["timesteps_this_iter"] >= 300


if __name__ == "__main__":
    print(json.dumps(run_scenario()))
