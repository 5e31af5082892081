"""Optional policy capabilities (the Protocols of ``hierl.policy_graph``) and their users."""

from __future__ import annotations

import numpy as np
import pytest

from hierl.algorithms.ddpg import DDPGPolicy
from hierl.algorithms.dqn import DQNPolicy
from hierl.algorithms.es import ESPolicy
from hierl.algorithms.pg import PGPolicy
from hierl.optimizers.apex.samplers import pin_epsilon
from hierl.optimizers.es import ESOptimizer
from hierl.optimizers.replay.optimizer import sample_with_priorities
from hierl.policy_graph import (
    ExplorationScale,
    FlatWeights,
    FrozenActor,
    PolicyGraph,
    TDErrors,
)
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch

CAPABILITIES = (ExplorationScale, FlatWeights, FrozenActor, TDErrors)


@pytest.mark.parametrize(
    ("policy_class", "expected"),
    [
        (DQNPolicy, {ExplorationScale, TDErrors}),
        (DDPGPolicy, {ExplorationScale, TDErrors}),
        (ESPolicy, {FlatWeights, FrozenActor}),
        (PGPolicy, set()),
        (PolicyGraph, set()),
    ],
)
def test_each_policy_has_exactly_its_capabilities(policy_class, expected):
    assert {c for c in CAPABILITIES if issubclass(policy_class, c)} == expected


def test_es_refuses_a_policy_without_flat_weights_and_names_the_protocol():
    reason = ESOptimizer.missing_policy_capability(PGPolicy)
    assert reason == "it does not implement FlatWeights (get_flat_weights, set_flat_weights)"
    assert ESOptimizer.missing_policy_capability(ESPolicy) is None


class FakeEvaluator:
    """Just what the evaluator-side replay helpers use: ``sample``, ``policy``,
    ``foreach_policy``."""

    def __init__(self, policy):
        self.policy = policy

    def sample(self) -> SampleBatch:
        return SampleBatch({"obs": np.zeros((3, 1), np.float32)})

    def foreach_policy(self, fn):
        return [fn(self.policy, DEFAULT_POLICY_ID)]


class FixedTDErrors:
    def compute_td_errors(self, batch):
        return np.array([0.0, 0.5, 2.0])


class RecordedScale:
    def __init__(self):
        self.scale = None

    def set_exploration_scale(self, value):
        self.scale = value


def test_initial_priorities_are_td_errors_plus_the_optimizers_eps():
    batch, priorities = sample_with_priorities(FakeEvaluator(FixedTDErrors()), 0.01)
    assert batch.count == 3
    np.testing.assert_allclose(priorities, [0.01, 0.51, 2.01])
    assert sample_with_priorities(FakeEvaluator(FixedTDErrors()), None)[1] is None  # not asked
    # no TDErrors: None, the rows enter replay at the buffer's max priority
    assert sample_with_priorities(FakeEvaluator(object()), 0.01)[1] is None


def test_apex_ladder_pins_only_policies_with_an_exploration_scale():
    policy = RecordedScale()
    assert pin_epsilon(FakeEvaluator(policy), 0.4) and policy.scale == 0.4
    assert not pin_epsilon(FakeEvaluator(object()), 0.4)
