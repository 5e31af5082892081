"""Shared fixtures: one Ray instance per test session, tiny fake envs.

Fixtures only: what tests import (fake envs, helpers) lives in ``tests/support/``.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

import pytest
import torch

import hierl.evaluators.ray_runtime  # noqa: F401  (Ray's environment, before ray is imported)
from tests.support.benchmarks import import_benchmark
from tests.support.counting_env import CountingEnv

# Ray runs its workers at nice 15, below the driver.  On a quiet machine that is what a
# central-control design wants (the driver's optimizer loop first: Ape-X DQN 30.7k vs
# 28.2k env samples/s at nice 0 in `benchmarks/optimizers.py`), but beside other work at
# nice 0 the workers starve: with two busy loops on 2 cores a Tune trial's setup took 46 s
# instead of ~2 s.  The suite must pass on a loaded machine, so its workers share the CPU
# on equal terms with everything else.
os.environ.setdefault("RAY_worker_niceness", "0")

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_session():
    """Start Ray once for the whole session (≈4 s) and shut it down at the end."""
    import ray
    from ray import cloudpickle

    # Test modules are not importable in Ray workers: ship their classes by value.  Every
    # module under tests/ counts, tests.support's fake envs included; registering the
    # ``tests`` package itself also covers its modules imported later.
    here = os.path.dirname(os.path.abspath(__file__))
    for module in list(sys.modules.values()):
        path = os.path.abspath(getattr(module, "__file__", None) or "/")
        if os.path.commonpath([path, here]) == here:
            cloudpickle.register_pickle_by_value(module)
    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=200 * 1024 * 1024,
            logging_level="ERROR",
            log_to_driver=False,
        )
    yield ray
    ray.shutdown()


@pytest.fixture
def counting_env():
    """The CountingEnv class (pass as ``env`` with an env_config)."""
    return CountingEnv


@pytest.fixture
def learning(tmp_path, monkeypatch) -> ModuleType:
    """``benchmarks/learning.py`` as a module, writing its checkpoints under ``tmp_path``."""
    module = import_benchmark("learning")
    monkeypatch.setattr(module, "RESULTS_DIR", tmp_path / "results")
    return module
