"""The rollout loop: step a vector of envs with one batched ``compute_actions`` per step.

Everything per step is array code over the env vector (no per-sub-env Python loop), so a
natively vectorised Gymnasium env runs at close to its raw speed.  Data is written into
time-major buffers ``(T, num_envs, ...)`` and, at the end of a fragment, turned into
env-major rows, split into trajectory segments and postprocessed by the policy.

Gymnasium's three autoreset modes are handled:

* ``SAME_STEP`` (hierl's own SyncVectorEnv): the final observation is in
  ``info["final_obs"]`` and the returned one already belongs to the next episode;
* ``NEXT_STEP`` (Gymnasium's default, e.g. ``CartPoleVectorEnv``): the step after a done
  only resets that sub-env; its row is dropped;
* ``DISABLED``: the sampler resets finished sub-envs itself with ``reset_mask``.

Observation filter (e.g. ``MeanStdFilter``): in every mode its statistics count each
observation the policy acts on (or, at the end of a fragment, will act on) exactly once:
the first observation of every episode and every non-final one.  An episode's *final*
observation is normalised (for ``NEW_OBS``, i.e. bootstrapping) but not recorded, as in
the multi-agent sampler and in ES (whose reference records the observations it acts on,
openai/evolution-strategies-starter ``policies.py`` ``rollout``).  A ``DISABLED`` reset
records only the rows it reset (Gymnasium returns the current observation of the others).

Recurrent policies (a non-empty ``get_initial_state()``) get their state carried per
sub-env: it is passed to ``compute_actions`` every step, recorded as it was at the start
of each step (``state_in_0``, ``state_in_1``, ...), and reset to the initial state for a
sub-env whose episode ended.  Their batches are cut into sequences (``seq_lens``, at most
the policy's ``max_seq_len`` steps of one episode each).  Feed-forward policies get
neither the extra columns nor any per-step cost.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array

from hierl.evaluators import env_checks
from hierl.evaluators.env import EnvError
from hierl.evaluators.filters import NoFilter
from hierl.models.networks import ModelConfig
from hierl.models.preprocessors import Preprocessor, to_env_action
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import SampleBatch


@dataclass
class EpisodeRecord:
    """Summary of one finished episode."""

    episode_reward: float
    episode_length: int
    env_index: int
    custom_metrics: dict[str, float] = field(default_factory=dict)


class EpisodeCallbacks:
    """Hooks into the rollout loop; subclass and pass the class as config ``callbacks``.

    ``on_episode_end`` may add numbers to ``episode.custom_metrics``; the trainer reports
    their mean, min and max over the episodes of each iteration as
    ``custom_metrics/<name>_mean`` (and ``_min``, ``_max``).
    """

    def on_episode_end(
        self, *, episode: EpisodeRecord, env_info: dict[str, Any], worker_index: int
    ) -> None:
        """Called once per finished episode with the env's info dict of its last step."""


def _sub_env_info(info: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s entries of a Gymnasium vector-env info dict (``_key`` masks)."""
    out = {}
    for k, v in info.items():
        if k.startswith("_"):
            continue
        mask = info.get("_" + k)
        if mask is None or mask[i]:
            out[k] = v[i] if isinstance(v, np.ndarray) else v
    return out


def batch_obs(space: gym.Space, items: list[Any]) -> Any:
    """Stack single observations into Gymnasium's batched layout for ``space``."""
    if isinstance(space, gym.spaces.Box):
        return np.stack(items)
    return concatenate(space, items, create_empty_array(space, len(items)))


class VectorSampler:
    """Collects trajectory fragments from one vector env with one policy.

    ``rollout_fragment_length`` is the number of steps per sub-env per ``sample()``
    (so a truncate_episodes sample has ``rollout_fragment_length * num_envs`` rows,
    fewer for NEXT_STEP envs by the dropped reset rows).  With
    ``batch_mode="complete_episodes"`` only whole episodes are returned (at least that
    many rows); unfinished ones are carried over to the next call.

    Attributes:
        state: For recurrent policies, the current state of every sub-env (one array of
            ``num_envs`` rows per state tensor); ``[]`` otherwise.
    """

    def __init__(
        self,
        venv: VectorEnv,
        policy: PolicyGraph,
        preprocessor: Preprocessor,
        obs_filter: NoFilter,
        *,
        rollout_fragment_length: int,
        batch_mode: str = "truncate_episodes",
        clip_rewards: float | None = None,
        seed: int | None = None,
        worker_index: int = 0,
        env_id: str = "env",
        callbacks: EpisodeCallbacks | None = None,
    ):
        if batch_mode not in ("truncate_episodes", "complete_episodes"):
            raise ValueError(
                f"batch_mode '{batch_mode}' is invalid; valid: truncate_episodes, complete_episodes"
            )
        self.venv = venv
        self.policy = policy
        self.preprocessor = preprocessor
        self.filter = obs_filter
        self.fragment_length = int(rollout_fragment_length)
        self.batch_mode = batch_mode
        self.clip_rewards = clip_rewards
        self.worker_index = worker_index
        self.env_id = env_id
        self.callbacks = callbacks
        self.num_envs = venv.num_envs
        self.obs_space = venv.single_observation_space
        self.act_space = venv.single_action_space
        self.autoreset_mode = venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        cls = type(policy)
        self._postprocess = (
            cls.postprocess_trajectory is not PolicyGraph.postprocess_trajectory
            or cls.postprocess_trajectories is not PolicyGraph.postprocess_trajectories
        )
        self._eps_counter = itertools.count(worker_index << 40)
        self.completed: list[EpisodeRecord] = []
        self._finished: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._carry: SampleBatch | None = None
        self.steps_sampled = 0
        raw, _ = self._call("reset", seed=seed)
        flat = self.preprocessor.transform(raw)
        env_checks.check_observations(self, raw, None, flat=flat)
        self.obs = self.filter(flat)
        self.eps_id = np.array([next(self._eps_counter) for _ in range(self.num_envs)])
        self.ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self.ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self.pending_reset = np.zeros(self.num_envs, dtype=bool)
        self.initial_state = [np.asarray(s) for s in policy.get_initial_state()]
        self.recurrent = bool(self.initial_state)
        self.max_seq_len = int(getattr(policy, "max_seq_len", 0) or ModelConfig.max_seq_len)
        self.state = [np.repeat(s[None], self.num_envs, axis=0) for s in self.initial_state]

    env_steps = 0
    """Vector steps taken so far (reported by an ``EnvError``)."""

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            out = getattr(self.venv, method)(*args, **kwargs)
        except Exception as e:
            raise EnvError.wrap(
                e,
                env_id=self.env_id,
                worker_index=self.worker_index,
                method=method,
                env_steps=self.env_steps,
            ) from e
        self.env_steps += method == "step"
        return out

    # -- one fragment ------------------------------------------------------------------
    def _collect(self, steps: int) -> SampleBatch:
        """Step all sub-envs ``steps`` times; return the valid rows, env-major."""
        n, shape = self.num_envs, (steps, self.num_envs)
        obs_buf = np.empty(shape + self.obs.shape[1:], dtype=self.obs.dtype)
        new_obs_buf = np.empty_like(obs_buf)
        rew_buf = np.empty(shape, dtype=np.float32)
        term_buf = np.empty(shape, dtype=bool)
        trunc_buf = np.empty(shape, dtype=bool)
        eps_buf = np.empty(shape, dtype=np.int64)
        t_buf = np.empty(shape, dtype=np.int64)
        valid_buf = np.empty(shape, dtype=bool)
        act_buf: np.ndarray | None = None
        extra_bufs: dict[str, np.ndarray] = {}
        state_bufs = [np.empty(shape + s.shape[1:], dtype=s.dtype) for s in self.state]
        for step in range(steps):
            # CRUCIAL: record the observation before stepping; with copy=False vector envs
            # (and the no-copy preprocessor) self.obs may alias the env's own buffer.
            obs_buf[step] = self.obs
            if self.recurrent:
                for buf, s in zip(state_bufs, self.state, strict=True):
                    buf[step] = s
                actions, state_out, extra = self.policy.compute_actions(self.obs, self.state)
            else:
                actions, _, extra = self.policy.compute_actions(self.obs)
            if act_buf is None:
                act_buf = np.empty(shape + actions.shape[1:], dtype=actions.dtype)
                extra_bufs = {
                    k: np.empty(shape + v.shape[1:], dtype=v.dtype) for k, v in extra.items()
                }
            raw, rew, term, trunc, info = self._call("step", to_env_action(self.act_space, actions))
            flat = self.preprocessor.transform(raw)
            env_checks.check_step(self, raw, rew, info, self.env_steps, flat=flat)
            valid = ~self.pending_reset
            done = (term | trunc) & valid
            # CRUCIAL: count each observation once (module docstring): in NEXT_STEP and
            # DISABLED modes the done rows hold final observations, which are not recorded
            # (in SAME_STEP they hold the next episode's first, and the final is in info).
            if done.any() and self.autoreset_mode != AutoresetMode.SAME_STEP:
                next_obs = self.filter(flat, update=~done)
            else:
                next_obs = self.filter(flat)
            new_obs_buf[step] = next_obs
            act_buf[step] = actions
            for k, v in extra.items():
                extra_bufs[k][step] = v
            rew_buf[step] = rew
            term_buf[step] = term
            trunc_buf[step] = trunc
            eps_buf[step] = self.eps_id
            t_buf[step] = self.ep_len
            valid_buf[step] = valid
            self.ep_return += np.where(valid, rew, 0.0)
            self.ep_len += valid
            if done.any():
                idx = np.flatnonzero(done)
                if self.autoreset_mode == AutoresetMode.SAME_STEP:
                    final = batch_obs(self.obs_space, list(info["final_obs"][idx]))
                    new_obs_buf[step, idx] = self.filter(
                        self.preprocessor.transform(final), update=False
                    )
                elif self.autoreset_mode == AutoresetMode.DISABLED:
                    reset_raw, _ = self._call("reset", options={"reset_mask": done})
                    flat = self.preprocessor.transform(reset_raw)
                    env_checks.check_observations(self, reset_raw, None, rows=idx, flat=flat)
                    next_obs = next_obs.copy()
                    # CRUCIAL: record only the reset rows; the others are the current
                    # observations of running episodes, already counted at their step.
                    next_obs[idx] = self.filter(flat[idx])
                self._finish_episodes(idx, info)
            if self.recurrent:
                # A finished episode's successor starts from the initial state; so does the
                # row after a NEXT_STEP reset step (~valid: its output is from the old one).
                self.state = [np.array(s, copy=True) for s in state_out]
                reset = done | ~valid
                if reset.any():
                    for s, init in zip(self.state, self.initial_state, strict=True):
                        s[reset] = init
            if self.autoreset_mode == AutoresetMode.NEXT_STEP:
                self.pending_reset = done
            self.obs = next_obs
        if self.clip_rewards:
            np.clip(rew_buf, -self.clip_rewards, self.clip_rewards, out=rew_buf)
        columns = {
            SampleBatch.OBS: obs_buf,
            SampleBatch.NEW_OBS: new_obs_buf,
            SampleBatch.ACTIONS: act_buf,
            SampleBatch.REWARDS: rew_buf,
            SampleBatch.TERMINATEDS: term_buf,
            SampleBatch.TRUNCATEDS: trunc_buf,
            SampleBatch.EPS_ID: eps_buf,
            SampleBatch.T: t_buf,
            **extra_bufs,
            **{SampleBatch.STATE_IN + str(i): buf for i, buf in enumerate(state_bufs)},
        }
        valid_rows = valid_buf.T.reshape(n * steps)
        all_valid = bool(valid_rows.all())
        out = {}
        for k, v in columns.items():
            flat = v.swapaxes(0, 1).reshape((n * steps, *v.shape[2:]))
            out[k] = flat if all_valid else flat[valid_rows]
        batch = SampleBatch(out)
        self.steps_sampled += batch.count
        return batch

    def _finish_episodes(self, idx: np.ndarray, info: dict[str, Any]) -> None:
        # New episode ids for the finished sub-envs, vectorised (thousands of envs).
        start = next(self._eps_counter)
        self.eps_id[idx] = np.arange(start, start + len(idx))
        self._eps_counter = itertools.count(start + len(idx))
        if self.callbacks is None:
            # Records are built lazily in pop_episodes: no Python object per episode here.
            self._finished.append((self.ep_return[idx].copy(), self.ep_len[idx].copy(), idx.copy()))
        else:
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                info = info.get("final_info", {})
            for i in idx:
                episode = EpisodeRecord(float(self.ep_return[i]), int(self.ep_len[i]), int(i))
                self.callbacks.on_episode_end(
                    episode=episode,
                    env_info=_sub_env_info(info, i),
                    worker_index=self.worker_index,
                )
                self.completed.append(episode)
        self.ep_return[idx] = 0.0
        self.ep_len[idx] = 0

    # -- public ------------------------------------------------------------------------
    def sample(self) -> SampleBatch:
        """Collect and postprocess one batch (see the class docstring for its size)."""
        if self.batch_mode == "truncate_episodes":
            batch = self._collect(self.fragment_length)
            return self._finish(batch)
        target = self.fragment_length * self.num_envs
        done_segments: list[SampleBatch] = []
        count = 0
        while count < target:
            chunk = self._collect(self.fragment_length)
            if self._carry is not None:
                chunk = SampleBatch.concat_samples([self._carry, chunk])
                # CRUCIAL: group each episode's rows (carry first) by a *stable* sort.
                chunk = SampleBatch(
                    {
                        k: v[np.argsort(chunk[SampleBatch.EPS_ID], kind="stable")]
                        for k, v in chunk.items()
                    }
                )
            carry = []
            for seg in chunk.split_by_episode():
                if seg[SampleBatch.TERMINATEDS][-1] or seg[SampleBatch.TRUNCATEDS][-1]:
                    done_segments.append(seg)
                    count += seg.count
                else:
                    carry.append(seg)
            self._carry = SampleBatch.concat_samples(carry) if carry else None
        return self._finish(SampleBatch.concat_samples(done_segments))

    def _finish(self, batch: SampleBatch) -> SampleBatch:
        """Postprocess (if the policy does) and, for recurrent policies, cut sequences."""
        if self._postprocess:
            batch = self.policy.postprocess_trajectories(batch)
        if self.recurrent:
            batch.chop_into_sequences(self.max_seq_len)
        return batch

    def pop_episodes(self) -> list[EpisodeRecord]:
        """Return and forget the episodes finished since the last call."""
        out, self.completed = self.completed, []
        for returns, lengths, envs in self._finished:
            out.extend(
                EpisodeRecord(r, n, i)
                for r, n, i in zip(returns.tolist(), lengths.tolist(), envs.tolist(), strict=True)
            )
        self._finished = []
        return out
