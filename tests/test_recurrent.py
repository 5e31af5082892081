"""Recurrent policies: LSTM state through compute_actions, sequences in batches, BPTT in PPO."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from torch import nn

from hierl.algorithms.ppo import PPOConfig, PPOPolicy, PPOTrainer
from hierl.config import ConfigError
from hierl.evaluators import EvaluatorSpec, PolicyEvaluator
from hierl.optimizers.multi_gpu.learner import MultiDeviceLearner
from hierl.sample_batch import SampleBatch as SB
from hierl.torch_policy_graph import TorchPolicyGraph
from tests.support.learning_runs import SEED, LearningRun, train_until
from tests.support.memory_env import QUERY, RepeatCueEnv, make_repeat_cue

pytestmark = pytest.mark.timeout(120)

STATE_KEYS = (SB.STATE_IN + "0", SB.STATE_IN + "1")
LSTM_MODEL = {"hiddens": (16,), "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}


def lstm_config(**overrides) -> PPOConfig:
    return PPOConfig.from_dict({"env": make_repeat_cue, "model": LSTM_MODEL, **overrides})


def lstm_policy(seed: int = 0) -> PPOPolicy:
    torch.manual_seed(seed)
    env = RepeatCueEnv()
    return PPOPolicy(env.observation_space, env.action_space, lstm_config())


def make_evaluator(env=make_repeat_cue, use_lstm=True, **kwargs) -> PolicyEvaluator:
    model = LSTM_MODEL if use_lstm else {"hiddens": (16,)}
    config = PPOConfig.from_dict({"env": env, "model": model})
    kwargs.setdefault("num_envs_per_evaluator", 3)
    kwargs.setdefault("rollout_fragment_length", 11)
    kwargs.setdefault("seed", 0)
    return PolicyEvaluator(
        EvaluatorSpec.of(env, PPOPolicy, config, env_config={"delay": 3}, **kwargs)
    )


def sequence_starts(batch: SB) -> np.ndarray:
    lens = batch[SB.SEQ_LENS]
    return np.cumsum(lens) - lens


# ---------------------------------------------------------------------- acting


def test_single_actions_of_a_recurrent_policy_carry_the_state() -> None:
    ev = make_evaluator()
    with pytest.raises(ValueError, match="recurrent: use compute_single_action_and_state"):
        ev.compute_single_action(QUERY)
    env = RepeatCueEnv(3)
    obs, _ = env.reset(seed=0)
    seen, state, states = [], None, []
    for _ in range(3):
        seen.append(obs)
        action, state = ev.compute_single_action_and_state(obs, state)
        states.append(state)
        obs, *_ = env.step(action)
    # each call continued from the state the previous one returned
    chained = ev.policy.get_initial_state()
    for obs, expected in zip(seen, states, strict=True):
        _, chained, _ = ev.policy.compute_single_action(obs, chained)
        for got, want in zip(chained, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not np.allclose(states[0][0], states[2][0])  # the state did change


def test_compute_actions_takes_and_returns_state_per_row() -> None:
    policy = lstm_policy()
    assert policy.is_recurrent and policy.max_seq_len == 4
    init = policy.get_initial_state()
    assert [s.shape for s in init] == [(8,), (8,)]
    assert all((s == 0).all() for s in init)
    obs = np.tile(QUERY, (5, 1))
    actions, state_out, extra = policy.compute_actions(obs)  # None: initial state
    assert actions.shape == (5,)
    assert [s.shape for s in state_out] == [(5, 8), (5, 8)]
    assert extra[SB.VF_PREDS].shape == (5,)
    # same observation, different state -> different outputs: the state carries information
    other = [np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32) for _ in range(2)]
    _, out_other, extra_other = policy.compute_actions(obs, other)
    assert not np.allclose(extra[SB.ACTION_DIST_INPUTS], extra_other[SB.ACTION_DIST_INPUTS])
    assert not np.allclose(extra[SB.VF_PREDS], extra_other[SB.VF_PREDS])
    assert not np.allclose(state_out[0], out_other[0])
    # the initial state passed explicitly is the same as None
    _, again, extra_again = policy.compute_actions(obs, [np.tile(s, (5, 1)) for s in init])
    np.testing.assert_allclose(extra_again[SB.VF_PREDS], extra[SB.VF_PREDS], rtol=1e-6)
    np.testing.assert_allclose(again[1], state_out[1], rtol=1e-6)
    with pytest.raises(ValueError, match="2 recurrent state tensors, got 1"):
        policy.compute_actions(obs, [other[0]])
    # compute_single_action threads the state through one step
    action, state, _ = policy.compute_single_action(QUERY, init)
    assert np.shape(action) == () and [s.shape for s in state] == [(8,), (8,)]


def test_feed_forward_policy_has_no_state() -> None:
    env = RepeatCueEnv()
    policy = PPOPolicy(env.observation_space, env.action_space, PPOConfig())
    assert not policy.is_recurrent and policy.get_initial_state() == []
    _, state_out, _ = policy.compute_actions(np.zeros((2, 3), dtype=np.float32))
    assert state_out == []


# ---------------------------------------------------------------------- sampling


def assert_state_chain(policy: TorchPolicyGraph, batch: SB) -> None:
    """state_in is 0 at each episode start, else the state after the previous row's step."""
    first = batch[SB.T] == 0
    for key in STATE_KEYS:
        assert (batch[key][first] == 0).all()
    _, state_out, _ = policy.compute_actions(batch[SB.OBS], [batch[k] for k in STATE_KEYS])
    same_episode = batch[SB.EPS_ID][1:] == batch[SB.EPS_ID][:-1]
    assert same_episode.any()
    for key, out in zip(STATE_KEYS, state_out, strict=True):
        np.testing.assert_allclose(batch[key][1:][same_episode], out[:-1][same_episode], atol=1e-6)


def test_sampler_records_state_in_resets_it_and_cuts_sequences() -> None:
    ev = make_evaluator()
    b1, b2 = ev.sample(), ev.sample()
    assert b1.count == 33
    for b in (b1, b2):
        assert_state_chain(ev.policy, b)
        lens = b[SB.SEQ_LENS]
        assert lens.sum() == b.count and lens.max() <= 4 and lens.min() >= 1
        starts = sequence_starts(b)
        ends = starts + lens - 1
        # no sequence crosses an episode (or sub-env) boundary
        assert (b[SB.EPS_ID][starts] == b[SB.EPS_ID][ends]).all()
        assert SB.ADVANTAGES in b
    # the state carries over the fragment boundary: b2's first rows continue b1's episodes
    sampler = ev.sampler
    assert [s.shape for s in sampler.state] == [(3, 8), (3, 8)]
    per_env = 11
    for env in range(3):
        last, nxt = env * per_env + per_env - 1, env * per_env
        if b1[SB.EPS_ID][last] == b2[SB.EPS_ID][nxt] and not b1[SB.TERMINATEDS][last]:
            _, out, _ = ev.policy.compute_actions(
                b1[SB.OBS][last : last + 1], [b1[k][last : last + 1] for k in STATE_KEYS]
            )
            np.testing.assert_allclose(b2[STATE_KEYS[0]][nxt], out[0][0], atol=1e-6)
            assert np.abs(b2[STATE_KEYS[0]][nxt]).sum() > 0


def test_next_step_autoreset_env_resets_state_after_the_dropped_row() -> None:
    def creator(cfg):
        fns = [lambda: RepeatCueEnv(delay=1)] * 2
        return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)

    ev = make_evaluator(env=creator, num_envs_per_evaluator=2, rollout_fragment_length=9)
    batch = ev.sample()
    assert batch.count == 2 * 7  # per env: 3 + reset row + 3 + reset row + 1
    assert list(batch[SB.T][:7]) == [0, 1, 2, 0, 1, 2, 0]
    assert_state_chain(ev.policy, batch)


def test_complete_episodes_mode_keeps_state_rows_aligned() -> None:
    ev = make_evaluator(batch_mode="complete_episodes", rollout_fragment_length=7)
    batch = ev.sample()
    assert batch[SB.TERMINATEDS].sum() == batch.count // 5
    assert_state_chain(ev.policy, batch)
    assert (batch[SB.SEQ_LENS] == 4).sum() + (batch[SB.SEQ_LENS] == 1).sum() == len(
        batch[SB.SEQ_LENS]
    )  # 5-step episodes cut at max_seq_len=4: 4 + 1


def test_feed_forward_sampler_output_is_unchanged() -> None:
    ev = make_evaluator(use_lstm=False)
    batch = ev.sample()
    assert set(batch) == {
        SB.OBS,
        SB.NEW_OBS,
        SB.ACTIONS,
        SB.REWARDS,
        SB.TERMINATEDS,
        SB.TRUNCATEDS,
        SB.EPS_ID,
        SB.T,
        SB.ACTION_LOGP,
        SB.VF_PREDS,
        SB.ACTION_DIST_INPUTS,
        SB.ADVANTAGES,
        SB.VALUE_TARGETS,
    }
    assert ev.sampler.state == [] and not ev.sampler.recurrent


def test_bootstrap_value_uses_the_state_after_the_last_step() -> None:
    ev = make_evaluator(rollout_fragment_length=7)  # 7 steps of 5-step episodes: cut at t=1
    policy = ev.policy
    batch = ev.sampler._collect(7)
    boot = policy.bootstrap_values(batch)
    cut = np.flatnonzero((np.arange(batch.count) % 7 == 6) & ~batch[SB.TERMINATEDS])
    assert len(cut) == 3
    for row in cut:
        state = [batch[k][row : row + 1] for k in STATE_KEYS]
        _, after, _ = policy.compute_actions(batch[SB.OBS][row : row + 1], state)
        expected = policy.value(batch[SB.NEW_OBS][row : row + 1], after)[0]
        assert boot[row] == pytest.approx(expected, abs=1e-6)
        # and it differs from V(new_obs) in the initial state: memory matters
        assert boot[row] != pytest.approx(policy.value(batch[SB.NEW_OBS][row : row + 1])[0])


# ---------------------------------------------------------------------- sequences in the loss


class RunningSum(nn.Module):
    """Fake recurrent model: state = running sum of obs; outputs read it (closed form)."""

    is_recurrent = True
    max_seq_len = 3
    dist_class = TorchPolicyGraph  # unused by model_outputs

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))  # the policy's optimizer needs one

    def get_initial_state(self):
        return [np.zeros(1, dtype=np.float32)]

    def forward(self, obs, state):
        total = state[0][:, None, :] + torch.cumsum(obs, dim=1)  # (N, T, 1)
        self.seen_shape = tuple(obs.shape)
        return total, total[..., 0] * 10, [total[:, -1]]


class SumPolicy(TorchPolicyGraph):
    def loss(self, batch):
        raise NotImplementedError


def test_padded_layout_and_mask_closed_form() -> None:
    # two episodes (ids 1 and 2); episode 1 is cut at max_seq_len=3 -> seq_lens [3, 2, 2]
    batch = SB(
        {
            SB.OBS: np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]], np.float32),
            SB.EPS_ID: np.array([1, 1, 1, 1, 1, 2, 2]),
            SB.STATE_IN + "0": np.array([[100.0], [0], [0], [1000.0], [0], [0], [0]], np.float32),
        }
    ).chop_into_sequences(3)
    np.testing.assert_array_equal(batch[SB.SEQ_LENS], [3, 2, 2])
    model = RunningSum()
    policy = SumPolicy(
        RepeatCueEnv().observation_space, RepeatCueEnv().action_space, PPOConfig(), model
    )
    tensors = policy.to_tensors(batch)
    dist_inputs, values = policy.model_outputs(tensors)
    assert model.seen_shape == (3, 3, 1)  # 3 sequences padded to 3 steps
    # each sequence starts from its first row's state_in; padded steps are dropped
    expected = [101, 103, 106, 1004, 1009, 6, 13]
    np.testing.assert_allclose(dist_inputs[:, 0].numpy(), expected)
    np.testing.assert_allclose(values.numpy(), np.array(expected) * 10)


def step_by_step(policy: PPOPolicy, batch: SB) -> tuple[torch.Tensor, torch.Tensor]:
    """Unroll the model one step at a time per sequence (the reference computation)."""
    dist_rows, value_rows = [], []
    for start, n in zip(sequence_starts(batch), batch[SB.SEQ_LENS], strict=True):
        state = [torch.as_tensor(batch[k][start : start + 1]) for k in STATE_KEYS]
        for row in range(start, start + n):
            obs = torch.as_tensor(batch[SB.OBS][row : row + 1]).unsqueeze(1)
            d, v, state = policy.model(obs, state)
            dist_rows.append(d[:, 0])
            value_rows.append(v[:, 0])
    return torch.cat(dist_rows), torch.cat(value_rows)


def test_recurrent_loss_on_padded_layout_equals_step_by_step_unroll() -> None:
    ev = make_evaluator()
    policy = ev.policy
    batch = ev.sample()
    assert len(set(batch[SB.SEQ_LENS].tolist())) > 1  # padding actually happens
    padded_d, padded_v = policy.model_outputs(policy.to_tensors(batch))
    ref_d, ref_v = step_by_step(policy, batch)
    torch.testing.assert_close(padded_d, ref_d, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(padded_v, ref_v, rtol=1e-5, atol=1e-6)
    # same gradients: BPTT inside each sequence, none through its recorded start state
    grads = []
    for d, v in ((padded_d, padded_v), (ref_d, ref_v)):
        policy.model.zero_grad()
        (d.pow(2).sum() + v.sum()).backward()
        grads.append([p.grad.clone() for p in policy.model.parameters() if p.grad is not None])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # a PPO update runs on the sequence batch and on its sequence-aware minibatches
    stats = policy.learn_on_batch(batch)
    assert np.isfinite(stats["total_loss"])
    for mb in batch.minibatches(8, rng=0):
        assert mb[SB.SEQ_LENS].sum() == mb.count
        assert np.isfinite(policy.learn_on_batch(mb)["total_loss"])


def test_learn_on_batch_without_seq_lens_chops_by_episode() -> None:
    ev = make_evaluator()
    batch = ev.sample()
    del batch[SB.SEQ_LENS]
    assert np.isfinite(ev.policy.learn_on_batch(batch)["total_loss"])
    ff = make_evaluator(use_lstm=False)
    with pytest.raises(ValueError, match="lacks the state columns"):
        ev.policy.bootstrap_values(ff.sample())


def test_get_state_set_state_round_trip() -> None:
    ev = make_evaluator()
    policy = ev.policy
    policy.learn_on_batch(ev.sample())
    state = policy.get_state()
    assert any(k.startswith("lstm.") for k in state["weights"])
    fresh = lstm_policy(seed=123)
    fresh.set_state(state)
    for k, v in fresh.get_weights().items():
        np.testing.assert_array_equal(v, state["weights"][k])
    obs = np.tile(QUERY, (4, 1))
    states = [np.full((4, 8), 0.3, np.float32)] * 2
    a, s_a, e_a = policy.compute_actions(obs, states, explore=False)
    b, s_b, e_b = fresh.compute_actions(obs, states, explore=False)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(e_a[SB.VF_PREDS], e_b[SB.VF_PREDS])
    np.testing.assert_allclose(s_a[0], s_b[0])
    # optimizer moments too: the next update is identical
    batch = ev.sample()
    policy.learn_on_batch(batch.copy())
    fresh.learn_on_batch(batch.copy())
    for k, v in policy.get_weights().items():
        np.testing.assert_allclose(fresh.get_weights()[k], v, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------- optimizers


@pytest.mark.parametrize("optimizer", ["multi_gpu", "allreduce", "auto"])
def test_recurrent_ppo_rejects_row_sharding_optimizers(optimizer: str) -> None:
    message = rf"'{optimizer}' does not support recurrent models \(model.use_lstm=True\); valid"
    with pytest.raises(ConfigError, match=message + " for PPO: local$"):
        PPOTrainer({"env": make_repeat_cue, "model": LSTM_MODEL, "optimizer": optimizer})


def test_multi_device_learner_rejects_recurrent_policy() -> None:
    with pytest.raises(ValueError, match="recurrent"):
        MultiDeviceLearner(lstm_policy())


# ---------------------------------------------------------------------- learning


def mean_return(
    policy: TorchPolicyGraph, episodes: int, delay: int, seed: int, explore: bool
) -> float:
    """Mean return of ``policy`` over ``episodes`` lock-step episodes."""
    envs = [RepeatCueEnv(delay) for _ in range(episodes)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)])
    state = [np.repeat(s[None], episodes, 0) for s in policy.get_initial_state()] or None
    total = 0.0
    for _ in range(delay + 2):  # every episode has exactly delay + 2 steps
        actions, state, _ = policy.compute_actions(obs, state, explore=explore)
        steps = [e.step(a) for e, a in zip(envs, actions, strict=True)]
        obs = np.stack([s[0] for s in steps])
        total += sum(s[1] for s in steps)
    return total / episodes


def train(
    use_lstm: bool, delay: int, threshold: float, timesteps: int
) -> tuple[LearningRun, PPOPolicy]:
    """PPO until the mean return reaches ``threshold`` or ``timesteps``."""
    config = {
        "env": make_repeat_cue,
        "env_config": {"delay": delay},
        "seed": SEED,
        "num_envs_per_evaluator": 8,
        "train_batch_size": 512,
        "sgd_minibatch_size": 128,
        "num_sgd_iter": 8,
        "lr": 3e-3,
        "model": {"hiddens": (32,), "use_lstm": use_lstm, "lstm_cell_size": 32},
    }
    with PPOTrainer(config) as trainer:
        run = train_until(trainer, threshold, timesteps, record_run=use_lstm)
        return run, trainer.get_policy()


@pytest.mark.learning
@pytest.mark.timeout(300)
def test_recurrent_ppo_solves_memory_task_feed_forward_cannot() -> None:
    # Returns are +1 (cue repeated) or -1; a feed-forward policy sees the same query
    # observation for both cues, so its expected return is exactly 0 (chance).
    delay, budget = 5, 20_000
    recurrent, _ = train(use_lstm=True, delay=delay, threshold=0.9, timesteps=budget)
    assert recurrent.reached, recurrent  # the mean of the last 100 episodes
    feed_forward, ff_policy = train(use_lstm=False, delay=delay, threshold=0.5, timesteps=budget)
    assert not feed_forward.reached, feed_forward  # the best of ~40 noisy means stays below
    # its actual expected return is 0: measured over 2000 episodes (std 0.022)
    assert abs(mean_return(ff_policy, 2000, delay, seed=10_000, explore=True)) < 0.15
    assert abs(mean_return(ff_policy, 2000, delay, seed=10_000, explore=False)) < 0.15
