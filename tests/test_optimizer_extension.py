"""Adding an optimizer touches its own module only.

A toy strategy defined and registered here, outside ``hierl.optimizers``, trains PG
(an algorithm subclass that lists it), reserves the actor it starts through the
``actor_groups`` hook and is refused before any actor starts when the cluster can never
hold that actor: the trainer, the resource check and the registry need no edit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import ray

from hierl.algorithms.pg import PGConfig, PGTrainer
from hierl.algorithms.resources import trainer_bundles
from hierl.config import ConfigError
from hierl.evaluators.ray_runtime import ActorGroup
from hierl.optimizers import LocalOptimizer, get_optimizer_class, register_optimizer, registry
from hierl.optimizers.sgd import SGDConfig

TIMEOUT_S = 60


@ray.remote(num_cpus=0)
class RowCounter:
    """The toy strategy's own actor: counts the rows it was told about."""

    def __init__(self) -> None:
        self.rows = 0

    def add(self, rows: int) -> int:
        self.rows += rows
        return self.rows


@dataclasses.dataclass
class CountingConfig(SGDConfig):
    """``local``'s settings plus the CPU share of the counter actor."""

    num_cpus_per_counter: float = 0.25
    """CPUs the counter actor reserves."""


class CountingOptimizer(LocalOptimizer):
    """``local`` that also reports every trained row to a counter actor it starts."""

    name = "counting_local"
    config_class = CountingConfig

    @classmethod
    def actor_groups(cls, config: CountingConfig, num_evaluators: int) -> list[ActorGroup]:
        return [
            ActorGroup(
                "row counter",
                1,
                {"CPU": config.num_cpus_per_counter},
                "",
                {"CPU": "num_cpus_per_counter"},
            )
        ]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # inside the trainer's placement group when it runs as a Tune trial
        self.counter = RowCounter.options(num_cpus=self.config.num_cpus_per_counter).remote()

    def step(self) -> dict[str, float]:
        before = self.num_steps_trained
        stats = super().step()
        self.counted = ray.get(
            self.counter.add.remote(self.num_steps_trained - before), timeout=TIMEOUT_S
        )
        return stats

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "rows_counted": getattr(self, "counted", 0)}

    def stop(self) -> None:
        ray.kill(self.counter)


@pytest.fixture(autouse=True, scope="module")
def registered():
    """Registered for this module's tests only (``auto`` would otherwise compare it too)."""
    register_optimizer(CountingOptimizer)
    yield
    registry._OPTIMIZERS.pop(CountingOptimizer.name)


@dataclasses.dataclass
class CountingPGConfig(PGConfig):
    """PG that also lists the toy strategy, with its defaults for it."""

    supported_optimizers = (*PGConfig.supported_optimizers, "counting_local")
    optimizer_defaults = {
        **PGConfig.optimizer_defaults,
        "counting_local": PGConfig.optimizer_defaults["local"],
    }


class CountingPGTrainer(PGTrainer):
    name = "COUNTING_PG"
    config_class = CountingPGConfig


CONFIG = {
    "env": "CartPole-v1",
    "num_evaluators": 1,
    "num_cpus_per_evaluator": 0.25,
    "num_envs_per_evaluator": 2,
    "train_batch_size": 200,
    "model": {"hiddens": [8]},
    "seed": 3,
}


def test_the_toy_strategy_is_registered_with_its_own_settings():
    assert get_optimizer_class("counting_local") is CountingOptimizer
    config = CountingPGConfig.from_dict({**CONFIG, "optimizer": "counting_local"})
    assert isinstance(config.optimizer_config, CountingConfig)
    assert config.optimizer_config.train_batch_size == 200  # a flat alias of its setting
    with pytest.raises(ConfigError, match="did you mean 'num_cpus_per_counter'"):
        CountingPGConfig.from_dict(
            {**CONFIG, "optimizer": "counting_local", "num_cpus_per_countr": 0}
        )


def test_its_actor_is_reserved_through_the_hook():
    config = {**CONFIG, "optimizer": "counting_local"}
    assert trainer_bundles(CountingPGTrainer, config) == [
        {"CPU": 1.0},
        {"CPU": 0.25},
        {"CPU": 0.25},
    ]
    free = {**config, "optimizer_config": {"num_cpus_per_counter": 0}}
    assert trainer_bundles(CountingPGTrainer, free) == [{"CPU": 1.0}, {"CPU": 0.25}]


@pytest.mark.ray
def test_an_actor_that_can_never_fit_is_refused_naming_its_setting(ray_session):
    config = {**CONFIG, "optimizer": "counting_local", "num_cpus_per_counter": 64}
    with pytest.raises(ConfigError, match=r"row counter.*optimizer_config\.num_cpus_per_counter"):
        CountingPGTrainer(config)


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_pg_trains_with_it_exactly_as_with_local(ray_session):
    """The toy is ``local`` plus bookkeeping: same seed, same weights after 3 iterations."""

    def train(optimizer: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        with CountingPGTrainer({**CONFIG, "optimizer": optimizer}) as trainer:
            for _ in range(3):
                result = trainer.train()
            return trainer.get_weights()["default_policy"], result

    toy, result = train("counting_local")
    local, _ = train("local")
    assert result["rows_counted"] == result["num_steps_trained"] >= 3 * 200
    for name, value in local.items():
        np.testing.assert_array_equal(toy[name], value, err_msg=name)
