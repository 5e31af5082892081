"""Acting through numpy views of the model (hierl.models.numpy_acting): the same function
as the torch forward pass and distributions, tracking the weights as they change."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from hierl.algorithms.ppo import PPOConfig, PPOPolicy
from hierl.models import ActorCritic, DiagGaussian, ModelConfig
from hierl.models.networks import make_actor_critic
from hierl.models.numpy_acting import NumpyActor, _categorical_act, _gaussian_act
from hierl.sample_batch import SampleBatch as SB

pytestmark = pytest.mark.timeout(60)

OBS = spaces.Box(-np.inf, np.inf, (7,), np.float32)
BOX = spaces.Box(-1.0, 1.0, (3,), np.float32)
DISCRETE = spaces.Discrete(4)
FORWARD_TOL = {"rtol": 1e-4, "atol": 1e-4}
"""numpy's float32 forward pass against torch's. Both are float32, but torch's vectorised
exp/expm1 (ELU, SiLU, tanh) and matmul blocking differ from numpy's by CPU: 2.3e-5 on an
O(1) ELU output on a 2-core AVX-512 Xeon, where 1e-5 / 1e-6 failed. A wrong layer,
activation, bias or head is off by 1e-2 or more."""


def perturbed_model(action_space, seed: int = 0, **model) -> ActorCritic:
    """A model whose biases and log-std are not zero (as they are at initialisation)."""
    torch.manual_seed(seed)
    net = make_actor_critic(OBS, action_space, ModelConfig(**model))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return net


def torch_outputs(net: ActorCritic, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        dist_inputs, values = net(torch.as_tensor(obs))
    return dist_inputs.numpy(), values.numpy()


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu"])
@pytest.mark.parametrize("action_space", [BOX, DISCRETE], ids=["box", "discrete"])
@pytest.mark.parametrize(
    "model",
    [{}, {"vf_share_layers": True}, {"free_log_std": False}, {"hiddens": (5, 6, 7)}],
    ids=["separate", "shared", "predicted-log-std", "three-layers"],
)
def test_forward_equals_the_torch_model(activation, action_space, model) -> None:
    net = perturbed_model(action_space, activation=activation, **model)
    actor = NumpyActor.mirror(net)
    assert actor is not None
    obs = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32)
    dist_inputs, values = actor.forward(obs)
    want_inputs, want_values = torch_outputs(net, obs)
    assert dist_inputs.dtype == values.dtype == np.float32
    np.testing.assert_allclose(dist_inputs, want_inputs, **FORWARD_TOL)
    np.testing.assert_allclose(values, want_values, **FORWARD_TOL)


@pytest.mark.parametrize("action_space", [BOX, DISCRETE], ids=["box", "discrete"])
@pytest.mark.parametrize("explore", [True, False])
def test_logp_is_the_torch_distributions_log_probability(action_space, explore) -> None:
    net = perturbed_model(action_space)
    actor = NumpyActor.mirror(net)
    obs = np.random.default_rng(1).normal(size=(6, 7)).astype(np.float32)
    np.random.seed(0)
    actions, logp, _values, dist_inputs = actor.act(obs, explore)
    dist = net.dist_class(torch.as_tensor(dist_inputs))
    want = dist.logp(torch.as_tensor(actions)).numpy()
    np.testing.assert_allclose(logp, want, rtol=1e-5, atol=1e-5)
    if not explore:
        np.testing.assert_array_equal(actions, dist.deterministic_sample().numpy())
    assert logp.dtype == np.float32
    assert actions.dtype == (np.float32 if action_space is BOX else np.int64)


def test_categorical_samples_follow_the_probabilities() -> None:
    logits = np.log(np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32))
    np.random.seed(3)  # 40,000 draws, within 4 standard errors
    actions, logp = _categorical_act(np.repeat(logits, 40_000, axis=0), True)
    freq = np.bincount(actions, minlength=4) / len(actions)
    p = np.exp(logits[0])
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(p * (1 - p) / len(actions)).max())
    np.testing.assert_allclose(logp, logits[0][actions], rtol=1e-5)


def test_gaussian_samples_have_the_mean_and_std() -> None:
    mean, log_std = np.array([0.5, -2.0]), np.array([0.0, math.log(0.25)])
    inputs = np.tile(np.concatenate([mean, log_std]).astype(np.float32), (40_000, 1))
    np.random.seed(4)
    actions, _ = _gaussian_act(inputs, True)
    tol = 4 * np.exp(log_std) / np.sqrt(len(actions))
    np.testing.assert_allclose(actions.mean(0), mean, atol=tol.max())
    np.testing.assert_allclose(actions.std(0), np.exp(log_std), rtol=0.02)


def test_log_std_is_clamped_as_in_torch() -> None:
    inputs = np.array([[0.0, 0.0, 50.0, -50.0]], dtype=np.float32)
    _, logp = _gaussian_act(inputs, False)
    want = DiagGaussian(torch.as_tensor(inputs)).logp(torch.zeros(1, 2)).numpy()
    np.testing.assert_allclose(logp, want, rtol=1e-6)


def ppo_policy(**model) -> PPOPolicy:
    torch.manual_seed(0)
    config = PPOConfig.from_dict({"env": "CartPole-v1", "model": model, "lr": 0.01})
    return PPOPolicy(OBS, BOX, config)


def test_policy_acts_through_numpy_and_follows_every_weight_change() -> None:
    policy = ppo_policy()
    twin = ppo_policy(numpy_acting=False)
    obs = np.random.default_rng(2).normal(size=(64, 7)).astype(np.float32)

    def assert_same_outputs() -> None:
        _, _, ours = policy.compute_actions(obs, explore=False)
        _, _, theirs = twin.compute_actions(obs, explore=False)
        for key in (SB.ACTION_DIST_INPUTS, SB.VF_PREDS, SB.ACTION_LOGP):
            np.testing.assert_allclose(ours[key], theirs[key], **FORWARD_TOL)

    assert_same_outputs()
    # an optimizer step (in place), then set_weights (load_state_dict copies in place)
    batch = SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: np.zeros((64, 3), np.float32),
            SB.ACTION_LOGP: np.zeros(64, np.float32),
            SB.ACTION_DIST_INPUTS: np.zeros((64, 6), np.float32),
            SB.VF_PREDS: np.zeros(64, np.float32),
            SB.ADVANTAGES: np.ones(64, np.float32),
            SB.VALUE_TARGETS: np.ones(64, np.float32),
        }
    )
    before = policy.compute_actions(obs[:1], explore=False)[2][SB.VF_PREDS]
    policy.learn_on_batch(batch)
    assert policy.compute_actions(obs[:1], explore=False)[2][SB.VF_PREDS] != before
    twin.set_weights(policy.get_weights())
    assert_same_outputs()
    policy.set_weights(ppo_policy(hiddens=(64, 64)).get_weights())
    twin.set_weights(policy.get_weights())
    assert_same_outputs()


def test_swapped_parameter_storage_falls_back_to_torch() -> None:
    policy = ppo_policy()
    obs = np.ones((1, 7), np.float32)
    weight = policy.model.pi_head.weight
    weight.data = torch.zeros_like(weight)  # new storage: the numpy view is stale
    dist_inputs = policy.compute_actions(obs, explore=False)[2][SB.ACTION_DIST_INPUTS]
    want, _ = torch_outputs(policy.model, obs)
    np.testing.assert_allclose(dist_inputs, want, rtol=1e-6)
    assert np.all(dist_inputs[:, :3] == policy.model.pi_head.bias.detach().numpy())


def test_seeded_numpy_acting_is_reproducible() -> None:
    policy = ppo_policy()
    obs = np.ones((2, 7), np.float32)
    np.random.seed(7)
    first = policy.compute_actions(obs)[0]
    np.random.seed(7)
    np.testing.assert_array_equal(policy.compute_actions(obs)[0], first)


def test_models_it_cannot_reproduce_are_not_mirrored() -> None:
    image = spaces.Box(0, 255, (16, 16, 3), np.uint8)
    cnn = make_actor_critic(image, DISCRETE, ModelConfig(conv_filters=((4, 4, 2),)))
    lstm = make_actor_critic(OBS, DISCRETE, ModelConfig(use_lstm=True))
    multi = make_actor_critic(OBS, spaces.MultiDiscrete([2, 3]), ModelConfig())

    class Subclass(ActorCritic):
        pass

    sub = Subclass(OBS, DISCRETE, ModelConfig())
    for net in (cnn, lstm, multi, sub):
        assert NumpyActor.mirror(net) is None
    assert ppo_policy(numpy_acting=False)._numpy_actor is None
