"""Callbacks: every hook fires the documented number of times in every rollout path; the
``"module:Class"`` form works in remote evaluators and checkpoints; bad names are clear."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from hierl.algorithms.es import ESTrainer
from hierl.algorithms.pg import PGConfig, PGPolicy, PGTrainer
from hierl.algorithms.trainer_base import BaseTrainer
from hierl.checkpoint import CheckpointError
from hierl.config import ConfigError
from hierl.evaluators import (
    EpisodeCallbacks,
    EvaluatorSpec,
    PolicyEvaluator,
    make_multi_agent,
)
from hierl.evaluators.callbacks import resolve_callbacks
from hierl.sample_batch import SampleBatch as SB
from tests.support.counting_env import CountingEnv

LENGTH = 3
"""Episode length of the fake env in these tests."""

EXAMPLE = "examples.custom_metric_callbacks:PoleAngleCallbacks"
"""An importable callbacks class (the example), named as configs name it."""


class Recorder(EpisodeCallbacks):
    """Counts every hook and checks what each one is given."""

    def __init__(self):
        self.calls: Counter = Counter()
        self.started: list[int] = []
        self.ended: list[tuple[int, int, float]] = []
        self.trajectories: list[tuple[str, object, int]] = []

    def on_episode_start(self, *, episode, worker_index):
        self.calls["start"] += 1
        assert episode.episode_length == 0 and episode.episode_reward == 0.0
        episode.user_data["steps"] = 0
        self.started.append(episode.episode_id)

    def on_episode_step(self, *, episode, worker_index):
        self.calls["step"] += 1
        episode.user_data["steps"] += 1
        assert episode.episode_length == episode.user_data["steps"]
        assert episode.last_action is not None

    def on_episode_end(self, *, episode, env_info, worker_index):
        self.calls["end"] += 1
        assert episode.user_data["steps"] == episode.episode_length
        episode.custom_metrics["length"] = episode.episode_length
        episode.custom_metrics["worker"] = worker_index
        self.ended.append((episode.episode_id, episode.episode_length, episode.episode_reward))

    def on_postprocess_trajectory(
        self, *, batch, policy_id, policy, agent_id, other_agent_batches, worker_index
    ):
        self.calls["trajectory"] += 1
        assert len(set(batch[SB.EPS_ID].tolist())) == 1  # one episode's steps
        assert SB.ADVANTAGES in batch  # after the policy's postprocessing
        batch["callback_column"] = np.full(batch.count, worker_index + 7.0, np.float32)
        self.trajectories.append((policy_id, agent_id, batch.count))

    def on_sample_end(self, *, batch, worker_index):
        self.calls["sample"] += 1

    def on_train_result(self, *, trainer, result):
        self.calls["train_result"] += 1
        result["callback_iterations"] = self.calls["train_result"]


class EndOnly(EpisodeCallbacks):
    """Overrides only on_episode_end (no per-step hook): sees the final observation."""

    def on_episode_end(self, *, episode, env_info, worker_index):
        episode.custom_metrics["final_t"] = float(episode.last_observation[0])


def _evaluator(callbacks, *, num_envs=2, fragment=5, batch_mode="truncate_episodes", env=None):
    config = PGConfig.from_dict({"env": CountingEnv, "model": {"hiddens": [8]}})
    spec = EvaluatorSpec.of(
        env or CountingEnv,
        PGPolicy,
        config,
        env_config={"length": LENGTH},
        num_envs_per_evaluator=num_envs,
        rollout_fragment_length=fragment,
        batch_mode=batch_mode,
        seed=0,
        callbacks=callbacks,
    )
    return PolicyEvaluator(spec)


# -- single-agent sampler ----------------------------------------------------------------
def test_each_hook_fires_the_documented_number_of_times():
    ev = _evaluator(Recorder)
    batches = [ev.sample() for _ in range(4)]
    cb = ev.callbacks
    # 2 sub-envs x 4 fragments of 5 steps = 40 steps, episodes of 3 steps: per sub-env 6
    # ended (steps 0-17) and a 7th running; trajectories per sub-env: 2 + 3 + 2 + 2 = 9.
    assert cb.calls == {"start": 14, "step": 40, "end": 12, "trajectory": 18, "sample": 4}
    assert sum(len(b.split_by_episode()) for b in batches) == 18
    assert sorted(n for _, n, _ in cb.ended) == [LENGTH] * 12
    assert {r for *_, r in cb.ended} == {float(LENGTH)}
    # the ids are the batches' eps_id; each ended episode started once
    ended_ids = [i for i, _, _ in cb.ended]
    assert set(ended_ids) <= set(cb.started) and len(set(cb.started)) == 14
    terminated = {int(e) for b in batches for e in b[SB.EPS_ID][b[SB.TERMINATEDS]]}
    assert set(ended_ids) == terminated
    # on_postprocess_trajectory may add a column: every row of the batch has it
    assert all((b["callback_column"] == 7.0).all() for b in batches)
    # custom metrics reach the episode records
    records = ev.get_metrics()
    assert [r.custom_metrics["length"] for r in records] == [LENGTH] * 12


def test_complete_episodes_count_whole_episodes():
    ev = _evaluator(Recorder, fragment=4, batch_mode="complete_episodes")
    batches = [ev.sample() for _ in range(3)]
    cb = ev.callbacks
    ends = sum(int(b[SB.TERMINATEDS].sum()) for b in batches)
    assert cb.calls["end"] == ends and ends >= 3 * 8 // LENGTH
    assert cb.calls["start"] == ends + 2  # one running per sub-env
    assert cb.calls["step"] == ev.sampler.steps_sampled  # carried-over rows included
    assert cb.calls["trajectory"] == ends  # whole episodes only
    assert cb.calls["sample"] == 3


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED])
def test_gymnasium_autoreset_modes(mode):
    def venv(config):
        envs = [lambda: CountingEnv(config) for _ in range(2)]
        return SyncVectorEnv(envs, autoreset_mode=mode)

    ev = _evaluator(Recorder, env=venv, fragment=5)
    batches = [ev.sample() for _ in range(4)]
    cb = ev.callbacks
    ends = sum(int(b[SB.TERMINATEDS].sum()) for b in batches)
    assert cb.calls["end"] == ends
    assert cb.calls["step"] == sum(b.count for b in batches)  # NEXT_STEP: not the resets
    pending = int(ev.sampler.pending_reset.sum())  # NEXT_STEP: ended, reset not yet stepped
    assert cb.calls["start"] == ends + 2 - pending
    assert sorted(n for _, n, _ in cb.ended) == [LENGTH] * ends
    if mode == AutoresetMode.NEXT_STEP:
        assert ends == 2 * 5  # 20 steps per sub-env: 3 per episode + 1 reset step


def test_end_only_callbacks_see_the_final_observation():
    ev = _evaluator(EndOnly)
    assert not ev.sampler.step_hook  # no per-step Python loop
    ev.sample()
    ev.sample()
    records = ev.get_metrics()
    assert len(records) == 2 * 3 and {r.custom_metrics["final_t"] for r in records} == {LENGTH}


def test_no_callbacks_no_episode_objects():
    ev = _evaluator(None)
    ev.sample()
    assert ev.sampler.callbacks is None and ev.sampler.live == {}
    assert len(ev.get_metrics()) == 2 * (5 // LENGTH)


def test_episode_player_runs_the_episode_hooks():
    ev = _evaluator(Recorder)
    player = ev.episode_player()
    played = [player.play(seed=s) for s in range(3)]
    assert ev.callbacks.calls == {"start": 3, "step": 3 * LENGTH, "end": 3}
    assert [p.record.custom_metrics["length"] for p in played] == [LENGTH] * 3
    quiet = ev.episode_player(run_callbacks=False)
    quiet.play(seed=0)
    assert ev.callbacks.calls["end"] == 3


def test_es_rollouts_report_custom_metrics():
    config = {
        "env": CountingEnv,
        "env_config": {"length": LENGTH},
        "episodes_per_batch": 4,
        "noise_size": 2**12,
        "eval_prob": 0.0,
        "model": {"hiddens": [8]},
        "callbacks": Recorder,
    }
    with ESTrainer(config) as trainer:
        result = trainer.train()
    assert result["custom_metrics/length_mean"] == LENGTH
    assert result["callback_iterations"] == 1


# -- multi-agent sampler -------------------------------------------------------------------
def test_multi_agent_hooks():
    ev = _evaluator(Recorder, env=make_multi_agent(CountingEnv))
    batches = [ev.sample() for _ in range(4)]
    cb = ev.callbacks
    # per env copy as single-agent (6 ended, 7 started, 20 steps, 9 trajectories), and
    # one trajectory per agent (2 agents)
    assert cb.calls == {"start": 14, "step": 40, "end": 12, "trajectory": 36, "sample": 4}
    assert {a for _, a, _ in cb.trajectories} == {0, 1}
    assert {r for *_, r in cb.ended} == {2.0 * LENGTH}  # summed over the agents
    for b in batches:
        assert (b.policy_batches["default_policy"]["callback_column"] == 7.0).all()


# -- trainer: results, remote evaluators, checkpoints, errors ------------------------------
def test_on_train_result_adds_a_key_and_custom_metrics_are_reported():
    config = {
        "env": CountingEnv,
        "env_config": {"length": LENGTH},
        "callbacks": Recorder,
        "train_batch_size": 24,
        "num_envs_per_evaluator": 2,
        "model": {"hiddens": [8]},
    }
    with PGTrainer(config) as trainer:
        results = [trainer.train() for _ in range(2)]
    assert [r["callback_iterations"] for r in results] == [1, 2]
    assert results[0]["custom_metrics/length_mean"] == LENGTH
    assert results[0]["custom_metrics/length_max"] == LENGTH
    assert results[0]["custom_metrics/worker_min"] == 0


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_string_callbacks_in_a_remote_evaluator_and_a_checkpoint(ray_session, tmp_path):
    config = {
        "env": "CartPole-v1",
        "callbacks": EXAMPLE,
        "num_evaluators": 1,
        "num_cpus_per_evaluator": 0.5,
        "train_batch_size": 400,
        "model": {"hiddens": [8]},
    }
    with PGTrainer(config) as trainer:
        result = trainer.train()
        path = trainer.save(tmp_path / "ckpt")
    # sampled by the remote evaluator, which imported the module by name
    assert result["num_healthy_evaluators"] == 1
    assert 0 < result["custom_metrics/final_pole_angle_mean"] < 90
    assert "episodes_per_second" in result
    stored = json.loads((path / "checkpoint.json").read_text())["config"]
    assert stored["callbacks"] == EXAMPLE  # the name, never code
    with pytest.raises(CheckpointError, match="--allow-import examples"):
        BaseTrainer.from_checkpoint(path)  # loading imports nothing the user did not allow
    restored = BaseTrainer.from_checkpoint(path, allow_imports=["examples"])
    try:
        assert restored.config.callbacks == EXAMPLE
        again = restored.train()
        assert again["training_iteration"] == 2
        assert "custom_metrics/max_pole_angle_mean" in again and "episodes_per_second" in again
    finally:
        restored.stop()


def test_a_class_is_not_stored_in_checkpoints():
    config = PGConfig.from_dict({"env": CountingEnv, "callbacks": Recorder})
    assert config.to_dict()["callbacks"] is None
    assert resolve_callbacks(EXAMPLE).__name__ == "PoleAngleCallbacks"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("no_such_module_xyz:Callbacks", "cannot import module 'no_such_module_xyz'"),
        ("hierl.evaluators.callbacks:NoSuchClass", "has no attribute 'NoSuchClass'"),
        ("hierl.evaluators.callbacks:Episode", "class Episode, not an EpisodeCallbacks"),
        ("hierl.evaluators.callbacks:overrides", "a function, not an EpisodeCallbacks"),
        ("JustAName", "is not 'module:Class'"),
        (Recorder(), "a Recorder, not an EpisodeCallbacks"),
        (dict, "class dict, not an EpisodeCallbacks"),
    ],
)
def test_bad_callbacks_give_one_clear_error(value, says):
    with pytest.raises(ConfigError) as info:
        PGConfig.from_dict({"env": CountingEnv, "callbacks": value})
    message = str(info.value)
    assert says in message and "config field 'callbacks'" in message
    assert "'module:Class'" in message  # says what is valid
