"""Atari ids, the DeepMind pipeline and image observations.

Shapes, dtypes and the wrapper chain run on an Atari-shaped env with random frames
(``tests/support/atari_env.py``); a smoke test runs real ALE when ale-py is installed.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.ppo import PPOTrainer
from hierl.config import ConfigError
from hierl.evaluators.atari import LIFE_LOSS, frame_stack, wrap_deepmind
from hierl.evaluators.env import EnvContext, resolve_env_creator
from hierl.models import ActorCritic, ModelConfig, NatureCNN
from hierl.sample_batch import SampleBatch
from tests.support import atari_env
from tests.support.atari_env import GAME_RETURN, LIVES, REWARD, FakeAtariEnv

HAS_ALE = importlib.util.find_spec("ale_py") is not None and importlib.util.find_spec("cv2")

SMALL_PPO = {
    "num_envs_per_evaluator": 2,
    "train_batch_size": 64,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 1,
    "seed": 0,
}


@pytest.fixture(autouse=True, scope="module")
def _registered() -> None:
    atari_env.register()


def test_deepmind_pipeline_shapes_lives_and_full_game_return() -> None:
    env = wrap_deepmind(FakeAtariEnv())
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    life_ends, total = 0, 0.0
    for _ in range(1000):
        obs, reward, terminated, _, info = env.step(env.action_space.sample())
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        total += reward
        if terminated and info.get(LIFE_LOSS):
            life_ends += 1
            obs, _ = env.reset()  # the same game goes on
            assert env.unwrapped.lives_left == LIVES - life_ends
        elif terminated:
            break
    assert life_ends == LIVES - 1
    # RecordEpisodeStatistics sits below the episodic-life wrapper: the whole game
    assert info["episode"]["r"] == GAME_RETURN and total <= GAME_RETURN


def test_trainer_batches_stay_uint8_are_clipped_and_report_whole_games() -> None:
    trainer = PPOTrainer({"env": atari_env.ENV_ID, **SMALL_PPO})
    try:
        ev = trainer.local_evaluator
        batch = ev.sample()
        assert batch[SampleBatch.OBS].dtype == np.uint8
        assert batch[SampleBatch.OBS].shape[1:] == (4, 84, 84)
        rewards = batch[SampleBatch.REWARDS]
        assert rewards.max() == 1.0 and set(np.unique(rewards)) <= {0.0, 1.0}  # 3.0 clipped
        # the image model shares its conv torso between policy and value
        assert ev.policy.model.vf_torso is None
        for _ in range(12):
            result = trainer.train()
            if result["episodes_total"]:
                break
        # reported: whole games (3 lives), unclipped; never a single life
        assert result["episode_reward_mean"] == GAME_RETURN
    finally:
        trainer.stop()


def test_preprocessor_pref_none_gives_the_raw_env() -> None:
    env = resolve_env_creator(atari_env.ENV_ID, "none")(EnvContext({}))
    assert env.observation_space.shape == (210, 160, 3)
    with pytest.raises(ConfigError, match="preprocessor_pref 'dm' is invalid; valid: deepmind"):
        resolve_env_creator(atari_env.ENV_ID, "dm")


def test_clip_rewards_zero_turns_the_atari_clipping_off() -> None:
    trainer = PPOTrainer({"env": atari_env.ENV_ID, "clip_rewards": 0, **SMALL_PPO})
    try:
        for _ in range(4):
            rewards = trainer.local_evaluator.sample()[SampleBatch.REWARDS]
            if rewards.max() > 0:
                break
        assert rewards.max() == REWARD
    finally:
        trainer.stop()


@pytest.mark.parametrize(
    "shape",
    [(4, 84, 84), (84, 84, 4), (84, 84)],
    ids=["channel-first", "channel-last", "one-frame"],
)
def test_image_layouts_build_and_act(shape: tuple[int, ...]) -> None:
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    model = ActorCritic(space, gym.spaces.Discrete(6), ModelConfig())
    obs = torch.randint(0, 256, (3, *shape), dtype=torch.uint8)
    logits, values = model(obs)
    assert logits.shape == (3, 6) and values.shape == (3,)
    assert model.pi_torso.chw == ((4, 84, 84) if len(shape) == 3 else (1, 84, 84))


def test_channel_first_and_last_are_the_same_network_on_transposed_frames() -> None:
    first, last = NatureCNN((4, 84, 84)), NatureCNN((84, 84, 4))
    last.load_state_dict(first.state_dict())
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(first(x), last(x.permute(0, 2, 3, 1)))
    # the override reads a shape the rule would misread
    assert NatureCNN((84, 84, 84), channels_first=True).chw == (84, 84, 84)
    assert NatureCNN((84, 84, 84), channels_first=False, conv_filters=[[8, 8, 4]]).chw == (
        84,
        84,
        84,
    )


def test_frame_stack_of_mismatched_frames_names_both_shapes() -> None:
    class Shrinking(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros((84, 84), np.uint8), {}

        def step(self, action):
            return np.zeros((80, 80), np.uint8), 0.0, False, False, {}

    env = frame_stack(Shrinking())
    env.reset()
    with pytest.raises(ValueError, match=r"frame of shape \(80, 80\).*expected shape \(84, 84\)"):
        env.step(0)


def test_missing_ale_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py raises ImportError
    with pytest.raises(ConfigError, match=r"ale-py.*pip install 'hierl\[atari\]'"):
        resolve_env_creator("ALE/NoSuchGame-v5")


def test_missing_mujoco_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    def make(*args, **kwargs):
        raise gym.error.DependencyNotInstalled("No module named 'mujoco'")

    creator = resolve_env_creator("HalfCheetah-v5")
    monkeypatch.setattr(gym, "make", make)
    with pytest.raises(ConfigError, match=r"HalfCheetah-v5.*pip install 'hierl\[mujoco\]'"):
        creator(EnvContext({}))


def test_module_prefixed_ids_import_their_module() -> None:
    env = resolve_env_creator("tests.support.atari_env:" + atari_env.ENV_ID, "none")(EnvContext({}))
    assert isinstance(env.unwrapped, FakeAtariEnv)
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module'"):
        resolve_env_creator("no_such_module:Foo-v0")


@pytest.mark.skipif(not HAS_ALE, reason="needs the atari extra (ale-py, OpenCV)")
def test_real_ale_pong_trains_an_iteration_from_pixels() -> None:
    trainer = PPOTrainer({"env": "ALE/Pong-v5", **SMALL_PPO})
    try:
        env = trainer.local_evaluator.env_creator(EnvContext({}))
        assert env.observation_space.shape == (4, 84, 84)
        assert env.unwrapped.spec.id == "ALE/Pong-v5"
        result = trainer.train()
        assert result["timesteps_total"] >= 64
        batch = trainer.local_evaluator.sample()
        assert batch[SampleBatch.OBS].dtype == np.uint8
    finally:
        trainer.stop()


@pytest.mark.skipif(not HAS_ALE, reason="needs the atari extra (ale-py, OpenCV)")
def test_real_ale_checkpoint_resumes_mid_game_exactly(tmp_path) -> None:
    """save; train 2  ==  restore into a new trainer; train 2, bit for bit: the checkpoint
    holds the emulators (their sticky-action RNG too), the frame stacks and the episode
    statistics, so a long Atari run can be cut into chunks."""
    config = {"env": "ALE/Pong-v5", **SMALL_PPO}
    with PPOTrainer(config) as first:
        first.train()
        path = first.save(tmp_path / "ckpt")
        for _ in range(2):
            first.train()
        expected = first.get_weights()["default_policy"]
    with PPOTrainer(config) as resumed, warnings.catch_warnings():
        warnings.simplefilter("error")  # no "resuming is not exact" warning
        resumed.restore(path)
        for _ in range(2):
            resumed.train()
        weights = resumed.get_weights()["default_policy"]
    for name, value in expected.items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)
