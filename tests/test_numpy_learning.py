"""Numpy learning (``ModelConfig.numpy_learning``): the mirrored model's backward pass
against torch's autograd, PPO's numpy loss gradients against ``PPOPolicy.loss`` through
autograd (ties and clamp bounds included), whole updates against the torch path, and the
cases that must learn through torch."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hierl.algorithms import ppo_numpy
from hierl.algorithms.ppo import PPOConfig, PPOPolicy
from hierl.evaluators import EvaluatorSpec, PolicyEvaluator
from hierl.models.networks import ModelConfig, make_actor_critic
from hierl.models.numpy_acting import NumpyActor
from hierl.sample_batch import SampleBatch

pytestmark = pytest.mark.timeout(300)


def _box(n: int) -> gym.spaces.Box:
    return gym.spaces.Box(-1.0, 1.0, (n,), np.float32)


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu"])
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("free_log_std", [True, False])
@pytest.mark.parametrize("hiddens", [(64, 64), (8,), ()])
def test_backward_matches_autograd(activation, share, free_log_std, hiddens):
    torch.manual_seed(0)
    cfg = ModelConfig(
        hiddens=hiddens, activation=activation, vf_share_layers=share, free_log_std=free_log_std
    )
    model = make_actor_critic(_box(5), _box(3), cfg)
    actor = NumpyActor.mirror(model)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((32, 5)).astype(np.float32)
    grad_dist = rng.standard_normal((32, 6)).astype(np.float32)
    grad_values = rng.standard_normal(32).astype(np.float32)
    dist_inputs, values, tape = actor.forward_train(obs)
    grads = {id(p): g for p, g in actor.backward(tape, grad_dist, grad_values)}

    t_dist, t_values = model(torch.from_numpy(obs))
    np.testing.assert_allclose(dist_inputs, t_dist.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, t_values.detach().numpy(), rtol=1e-5, atol=1e-6)
    model.zero_grad()
    (
        (t_dist * torch.from_numpy(grad_dist)).sum() + (t_values @ torch.from_numpy(grad_values))
    ).backward()
    params = list(model.parameters())
    assert len(grads) == len(params)  # every parameter, once
    for p in params:
        np.testing.assert_allclose(grads[id(p)], p.grad.numpy(), rtol=1e-4, atol=1e-5)


def _policy(dim: int, **config) -> PPOPolicy:
    return PPOPolicy(_box(3), _box(dim), PPOConfig.from_dict({"model": {"hiddens": [8]}, **config}))


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(2, 40),
    dim=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    clip_param=st.sampled_from([0.05, 0.2]),
    vf_clip_param=st.sampled_from([None, 0.01, 1.0]),
    entropy_coeff=st.sampled_from([0.0, 0.01]),
    normalize=st.booleans(),
    on_policy=st.booleans(),
)
def test_ppo_loss_gradients_match_autograd(
    n, dim, seed, clip_param, vf_clip_param, entropy_coeff, normalize, on_policy
):
    """``gaussian_ppo_loss_grads`` against ``PPOPolicy.loss`` differentiated by torch on
    the same outputs: on-policy rows put the surrogate's two branches at a tie, and
    log-stds beyond [-20, 2] hit the clamp's bounds."""
    config = {
        "clip_param": clip_param,
        "vf_clip_param": vf_clip_param,
        "entropy_coeff": entropy_coeff,
        "normalize_advantages": normalize,
    }
    policy = _policy(dim, **config)
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal((n, dim)).astype(np.float32)
    log_std = rng.uniform(-25.0, 4.0, (n, dim)).astype(np.float32)
    dist_inputs = np.concatenate([mean, log_std], axis=1)
    values = rng.standard_normal(n).astype(np.float32)
    std = np.exp(np.clip(log_std, -20, 2))
    actions = (mean + std * rng.standard_normal((n, dim))).astype(np.float32)  # z ~ N(0, 1)
    logp = (-0.5 * ((actions - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    old_logp = logp if on_policy else logp + rng.normal(0, 0.2, n)
    batch = {
        SampleBatch.ACTIONS: actions,
        SampleBatch.ACTION_LOGP: old_logp.astype(np.float32),
        SampleBatch.ADVANTAGES: rng.standard_normal(n).astype(np.float32),
        SampleBatch.VALUE_TARGETS: rng.standard_normal(n).astype(np.float32),
        SampleBatch.VF_PREDS: (values + rng.normal(0, 0.05, n)).astype(np.float32),
        SampleBatch.ACTION_DIST_INPUTS: (dist_inputs + rng.normal(0, 0.1, (n, 2 * dim))).astype(
            np.float32
        ),
    }
    total, stats, d_dist, d_values = ppo_numpy.gaussian_ppo_loss_grads(
        policy.config, dist_inputs, values, batch
    )

    t_dist = torch.tensor(dist_inputs, requires_grad=True)
    t_values = torch.tensor(values, requires_grad=True)
    policy.model_outputs = lambda _batch: (t_dist, t_values)
    t_total, t_stats = policy.loss({k: torch.from_numpy(v) for k, v in batch.items()})
    t_total.backward()
    assert total == pytest.approx(t_total.item(), rel=1e-4, abs=1e-5)
    for key, value in t_stats.items():
        assert stats[key] == pytest.approx(float(value), rel=1e-4, abs=1e-5), key
    # float32 rounding scales with the largest gradient (std down to e^-25 gives ~1e7)
    expected = t_dist.grad.numpy()
    atol = 1e-6 + 1e-9 * float(np.abs(expected).max())
    np.testing.assert_allclose(d_dist, expected, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(d_values, t_values.grad.numpy(), rtol=1e-4, atol=1e-6)


CONFIGS = [
    {},
    {"vf_clip_param": 0.05, "entropy_coeff": 0.01, "clip_param": 0.05},
    {
        "normalize_advantages": False,
        "model": {"vf_share_layers": True, "activation": "relu", "init_log_std": 1.9},
    },
]


@pytest.fixture(scope="module")
def pendulum_batch() -> SampleBatch:
    config = PPOConfig.from_dict({"model": {"hiddens": [16]}})
    ev = PolicyEvaluator(
        EvaluatorSpec.of(
            "Pendulum-v1",
            PPOPolicy,
            config,
            num_envs_per_evaluator=1,
            rollout_fragment_length=256,
            seed=0,
        )
    )
    return ev.sample()


def _twins(config: dict) -> tuple[PPOPolicy, PPOPolicy]:
    """The same policy twice: learning through numpy, and through torch."""
    model = {"hiddens": [64, 64], **config.get("model", {})}
    base = {**config, "lr": 3e-3}
    space, act = gym.spaces.Box(-8, 8, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32)
    torch.manual_seed(0)
    fast = PPOPolicy(space, act, PPOConfig.from_dict({**base, "model": model}))
    slow = PPOPolicy(
        space, act, PPOConfig.from_dict({**base, "model": {**model, "numpy_learning": False}})
    )
    slow.set_weights(fast.get_weights())
    assert fast._numpy_learner is not None and slow._numpy_learner is None
    return fast, slow


@pytest.mark.parametrize("config", CONFIGS)
def test_updates_equal_the_torch_path(pendulum_batch, config, monkeypatch):
    fast, slow = _twins(config)
    initial = fast.get_weights()
    calls = []
    inner = ppo_numpy.numpy_ppo_grads
    monkeypatch.setattr(
        "hierl.algorithms.ppo.numpy_ppo_grads", lambda *a: calls.append(1) or inner(*a)
    )
    for k in range(8):
        mb = pendulum_batch._take(slice(32 * k, 32 * k + 32))
        got, want = fast.learn_on_batch(mb), slow.learn_on_batch(mb)
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
    assert len(calls) == 8  # the numpy path ran (and only for the fast twin)
    w_fast, w_slow = fast.get_weights(), slow.get_weights()
    for name in w_slow:
        np.testing.assert_allclose(w_fast[name], w_slow[name], rtol=1e-5, atol=1e-6)
    assert any(not np.allclose(w_fast[name], v) for name, v in initial.items())  # it learned


def test_torch_learns_where_numpy_cannot(pendulum_batch, monkeypatch):
    def forbidden(*args):
        raise AssertionError("numpy path taken")

    monkeypatch.setattr("hierl.algorithms.ppo.numpy_ppo_grads", forbidden)
    mb = pendulum_batch._take(slice(0, 32))
    # the adaptive KL penalty
    policy = _twins({"kl_coeff": 0.2})[0]
    assert policy.learn_on_batch(mb)["kl_coeff"] == 0.2
    # a swapped parameter storage (the mirror no longer sees the weights)
    policy = _twins({})[0]
    policy.model.vf_head.bias.data = policy.model.vf_head.bias.data.clone()
    policy.learn_on_batch(mb)

    # a subclass with its own loss; discrete actions; switched off
    class MyPPO(PPOPolicy):
        def loss(self, batch):
            return super().loss(batch)

    config = PPOConfig.from_dict({})
    assert MyPPO(_box(3), _box(1), config)._numpy_learner is None
    assert PPOPolicy(_box(3), gym.spaces.Discrete(2), config)._numpy_learner is None
    off = PPOConfig.from_dict({"model": {"numpy_learning": False}})
    assert PPOPolicy(_box(3), _box(1), off)._numpy_learner is None


def test_non_finite_loss_is_refused_and_leaves_the_weights(pendulum_batch):
    policy = _twins({})[0]
    before = policy.get_weights()
    mb = pendulum_batch._take(slice(0, 32)).copy()
    mb[SampleBatch.VALUE_TARGETS][3] = np.nan
    assert policy.learn_on_batch(mb) == {"num_nonfinite_grads_skipped": 1.0}
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, before[name])
