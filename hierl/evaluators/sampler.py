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

Callbacks (``hierl.evaluators.callbacks``) cost nothing when unset.  When set, each
sub-env's episode start and end runs its hooks (Python per episode, not per step); only
callbacks that override ``on_episode_step`` get a per-step loop over the sub-envs.  A
NEXT_STEP env's episode starts at the step that resets it.

Recurrent policies (a non-empty ``get_initial_state()``) get their state carried per
sub-env: it is passed to ``compute_actions`` every step, recorded as it was at the start
of each step (``state_in_0``, ``state_in_1``, ...), and reset to the initial state for a
sub-env whose episode ended.  Their batches are cut into sequences (``seq_lens``, at most
the policy's ``max_seq_len`` steps of one episode each).  Feed-forward policies get
neither the extra columns nor any per-step cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import iterate

from hierl.evaluators import env_checks
from hierl.evaluators.env import make_vector_env
from hierl.evaluators.filters import NoFilter
from hierl.evaluators.rollout_core import (
    Actions,
    EpisodeRecord,
    FragmentSampler,
    RolloutSettings,
    act,
    batch_obs,
    game_results,
)
from hierl.models.networks import ModelConfig
from hierl.models.preprocessors import Preprocessor
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch

if TYPE_CHECKING:
    from hierl.evaluators.policy_evaluator import PolicyEvaluator

__all__ = ["EpisodeRecord", "VectorSampler"]  # EpisodeRecord: moved to rollout, still here


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


class _Fragment:
    """The time-major buffers ``(T, num_envs, ...)`` of one fragment."""

    def __init__(self, steps: int, num_envs: int, obs: np.ndarray, state: list[np.ndarray]):
        shape = self.shape = (steps, num_envs)
        self.obs = np.empty(shape + obs.shape[1:], dtype=obs.dtype)
        self.new_obs = np.empty_like(self.obs)
        self.rewards = np.empty(shape, dtype=np.float32)
        self.terminateds = np.empty(shape, dtype=bool)
        self.truncateds = np.empty(shape, dtype=bool)
        self.eps_id = np.empty(shape, dtype=np.int64)
        self.t = np.empty(shape, dtype=np.int64)
        self.valid = np.empty(shape, dtype=bool)
        self.actions: np.ndarray | None = None
        self.extra: dict[str, np.ndarray] = {}
        self.state_in = [np.empty(shape + s.shape[1:], dtype=s.dtype) for s in state]

    def record_inputs(self, step: int, obs: np.ndarray, state: list[np.ndarray]) -> None:
        """What the policy acts on at ``step``."""
        self.obs[step] = obs
        for buf, s in zip(self.state_in, state, strict=True):
            buf[step] = s

    def record_step(
        self,
        step: int,
        acted: Actions,
        new_obs: np.ndarray,
        rewards: np.ndarray,
        terminateds: np.ndarray,
        truncateds: np.ndarray,
        eps_id: np.ndarray,
        t: np.ndarray,
        valid: np.ndarray,
    ) -> None:
        """The policy's outputs and the env's answer at ``step``."""
        if self.actions is None:
            a = acted.actions
            self.actions = np.empty(self.shape + a.shape[1:], dtype=a.dtype)
            self.extra = {
                k: np.empty(self.shape + v.shape[1:], dtype=v.dtype) for k, v in acted.extra.items()
            }
        self.actions[step] = acted.actions
        for k, v in acted.extra.items():
            self.extra[k][step] = v
        self.new_obs[step] = new_obs
        self.rewards[step] = rewards
        self.terminateds[step] = terminateds
        self.truncateds[step] = truncateds
        self.eps_id[step] = eps_id
        self.t[step] = t
        self.valid[step] = valid

    def to_batch(self) -> SampleBatch:
        """The valid rows, env-major (one sub-env's rows contiguous, in time order)."""
        columns = {
            SampleBatch.OBS: self.obs,
            SampleBatch.NEW_OBS: self.new_obs,
            SampleBatch.ACTIONS: self.actions,
            SampleBatch.REWARDS: self.rewards,
            SampleBatch.TERMINATEDS: self.terminateds,
            SampleBatch.TRUNCATEDS: self.truncateds,
            SampleBatch.EPS_ID: self.eps_id,
            SampleBatch.T: self.t,
            **self.extra,
            **{SampleBatch.STATE_IN + str(i): buf for i, buf in enumerate(self.state_in)},
        }
        steps, n = self.shape
        valid_rows = self.valid.T.reshape(n * steps)
        all_valid = bool(valid_rows.all())
        out = {}
        for k, v in columns.items():
            flat = v.swapaxes(0, 1).reshape((n * steps, *v.shape[2:]))
            out[k] = flat if all_valid else flat[valid_rows]
        return SampleBatch(out)


class VectorSampler(FragmentSampler):
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

    resumable = True

    def __init__(
        self,
        venv: VectorEnv,
        policy: PolicyGraph,
        preprocessor: Preprocessor,
        obs_filter: NoFilter,
        settings: RolloutSettings,
    ):
        super().__init__(venv.num_envs, settings)
        self.venv = venv
        self.policy = policy
        self.preprocessor = preprocessor
        self.filter = obs_filter
        self.obs_space = venv.single_observation_space
        self.act_space = venv.single_action_space
        self.autoreset_mode = venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        cls = type(policy)
        self._postprocess = (
            cls.postprocess_trajectory is not PolicyGraph.postprocess_trajectory
            or cls.postprocess_trajectories is not PolicyGraph.postprocess_trajectories
        )
        self._carry: SampleBatch | None = None
        raw, info = self.call_env(venv, "reset", seed=settings.seed)
        flat = self.preprocessor.transform(raw)
        env_checks.check_observations(self, raw, None, flat=flat)
        self.obs = self.filter(flat)
        self.eps_id = self.new_episode_ids(self.num_envs)
        if self.callbacks is not None:
            self._start_episodes(range(self.num_envs), raw, info)
        self.ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self.ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self.pending_reset = np.zeros(self.num_envs, dtype=bool)
        self.initial_state = [np.asarray(s) for s in policy.get_initial_state()]
        self.recurrent = bool(self.initial_state)
        self.max_seq_len = int(getattr(policy, "max_seq_len", 0) or ModelConfig.max_seq_len)
        self.state = [np.repeat(s[None], self.num_envs, axis=0) for s in self.initial_state]

    @classmethod
    def from_evaluator(cls, evaluator: PolicyEvaluator) -> VectorSampler:
        """The evaluator's vector env (its creator's own, or ``num_envs`` copies) and its
        default policy."""
        ev = evaluator
        venv = make_vector_env(ev.env_creator, ev.env_config, ev.num_envs, ev.worker_index)
        return cls(
            venv,
            ev.policy,
            ev.preprocessor,
            ev.filters[DEFAULT_POLICY_ID],
            ev.sampler_settings(),
        )

    # -- one fragment ------------------------------------------------------------------
    def _collect(self, steps: int) -> SampleBatch:
        """Step all sub-envs ``steps`` times; return the valid rows, env-major."""
        fragment = _Fragment(steps, self.num_envs, self.obs, self.state)
        for step in range(steps):
            # CRUCIAL: record the observation before stepping; with copy=False vector envs
            # (and the no-copy preprocessor) self.obs may alias the env's own buffer.
            fragment.record_inputs(step, self.obs, self.state)
            acted = act(self.policy, self.obs, self.act_space, self.state, self.explore)
            raw, rew, term, trunc, info = self.call_env(self.venv, "step", acted.env_actions)
            valid = ~self.pending_reset
            done = (term | trunc) & valid
            next_obs = self._observe(raw, rew, info, done)
            fragment.record_step(
                step, acted, next_obs, rew, term, trunc, self.eps_id, self.ep_len, valid
            )
            self.ep_return += np.where(valid, rew, 0.0)
            self.ep_len += valid
            if self.step_hook:
                self._step_episodes(raw, rew, info, acted.env_actions, valid, done)
            if done.any():
                next_obs = self._end_episodes(done, info, next_obs, fragment.new_obs[step], raw)
            if self.callbacks is not None and not valid.all():  # NEXT_STEP resets
                self._start_episodes(np.flatnonzero(~valid).tolist(), raw, info)
            if self.recurrent:
                # A finished episode's successor starts from the initial state; so does the
                # row after a NEXT_STEP reset step (~valid: its output is from the old one).
                self._carry_state(acted.state_out, done | ~valid)
            if self.autoreset_mode == AutoresetMode.NEXT_STEP:
                self.pending_reset = done
            self.obs = next_obs
        self.clip(fragment.rewards)
        batch = fragment.to_batch()
        self.steps_sampled += batch.count
        return batch

    def _observe(
        self, raw: Any, rewards: np.ndarray, info: dict[str, Any], done: np.ndarray
    ) -> np.ndarray:
        """Preprocess, check and filter the observations one step returned."""
        flat = self.preprocessor.transform(raw)
        env_checks.check_step(self, raw, rewards, info, self.env_steps, flat=flat)
        # CRUCIAL: count each observation once (module docstring): in NEXT_STEP and
        # DISABLED modes the done rows hold final observations, which are not recorded
        # (in SAME_STEP they hold the next episode's first, and the final is in info).
        if done.any() and self.autoreset_mode != AutoresetMode.SAME_STEP:
            return self.filter(flat, update=~done)
        return self.filter(flat)

    def _end_episodes(
        self,
        done: np.ndarray,
        info: dict[str, Any],
        next_obs: np.ndarray,
        new_obs: np.ndarray,
        raw: Any,
    ) -> np.ndarray:
        """Episodes of the ``done`` sub-envs ended: their final observations go into
        ``new_obs`` (this step's NEW_OBS rows), DISABLED envs are reset, the episodes
        end in the core (and, with callbacks, the next ones start unless the env resets
        at the next step); returns the observations to act on next."""
        idx = np.flatnonzero(done)
        step_info, start_raw, start_info = info, raw, info
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            final = batch_obs(self.obs_space, list(info["final_obs"][idx]))
            new_obs[idx] = self.filter(self.preprocessor.transform(final), update=False)
        elif self.autoreset_mode == AutoresetMode.DISABLED:
            reset_raw, start_info = self.call_env(self.venv, "reset", options={"reset_mask": done})
            start_raw = reset_raw
            flat = self.preprocessor.transform(reset_raw)
            env_checks.check_observations(self, reset_raw, None, rows=idx, flat=flat)
            next_obs = next_obs.copy()
            # CRUCIAL: record only the reset rows; the others are the current
            # observations of running episodes, already counted at their step.
            next_obs[idx] = self.filter(flat[idx])
        self.eps_id[idx] = self.new_episode_ids(len(idx))
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            info = info.get("final_info", {})
        returns, lengths, ended = game_results(info, idx, self.ep_return[idx], self.ep_len[idx])
        final_obs = None
        if self.callbacks is not None:
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                final_obs = step_info["final_obs"].__getitem__
            else:
                final_obs = list(iterate(self.venv.observation_space, raw)).__getitem__
        self.end_episodes(returns, lengths, ended, lambda i: _sub_env_info(info, i), final_obs)
        self.ep_return[idx] = 0.0
        self.ep_len[idx] = 0
        if self.callbacks is not None and self.autoreset_mode != AutoresetMode.NEXT_STEP:
            self._start_episodes(ended.tolist(), start_raw, start_info)
        return next_obs

    # -- callbacks (only when set) -------------------------------------------------------
    def _start_episodes(self, rows: Any, raw: Any, info: dict[str, Any]) -> None:
        """Start the callbacks' episodes of sub-envs ``rows`` that have none running (an
        ``EpisodicLife`` life loss goes on in the same one); ``raw``, ``info``: the
        vector env's observations and info that hold their first ones."""
        rows = [i for i in rows if i not in self.live]
        if not rows:
            return
        obs = list(iterate(self.venv.observation_space, raw))
        for i in rows:
            self.start_episode(i, int(self.eps_id[i]), obs[i], _sub_env_info(info, i))

    def _step_episodes(
        self,
        raw: Any,
        rewards: np.ndarray,
        info: dict[str, Any],
        env_actions: Any,
        valid: np.ndarray,
        done: np.ndarray,
    ) -> None:
        """``on_episode_step`` for every sub-env that stepped: a per-step Python loop, run
        only for callbacks that override it."""
        obs = list(iterate(self.venv.observation_space, raw))
        actions = list(iterate(self.venv.action_space, env_actions))
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        for i in np.flatnonzero(valid).tolist():
            if same_step and done[i]:  # the final observation and info of the episode
                o, sub_info = info["final_obs"][i], _sub_env_info(info.get("final_info", {}), i)
            else:
                o, sub_info = obs[i], _sub_env_info(info, i)
            self.step_episode(i, float(rewards[i]), o, sub_info, actions[i])

    def _carry_state(self, state_out: list[np.ndarray], reset: np.ndarray) -> None:
        """The next step's recurrent state: ``state_out``, initial for ``reset`` rows."""
        self.state = [np.array(s, copy=True) for s in state_out]
        if reset.any():
            for s, init in zip(self.state, self.initial_state, strict=True):
                s[reset] = init

    # -- batches -----------------------------------------------------------------------
    def _sample_fragment(self) -> SampleBatch:
        return self._finish(self._collect(self.fragment_length))

    def _sample_episodes(self, min_steps: int) -> SampleBatch:
        done_segments: list[SampleBatch] = []
        count = 0
        while count < min_steps:
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
        if self.raw_batches is not None:
            self.raw_batches.append((DEFAULT_POLICY_ID, SampleBatch(dict(batch))))
        if self._postprocess:
            batch = self.policy.postprocess_trajectories(batch)
        if self.trajectory_hook and batch.count:
            trajectories = batch.split_by_episode()
            for trajectory in trajectories:
                self.postprocessed(trajectory, DEFAULT_POLICY_ID, self.policy)
            batch = SampleBatch.concat_samples(trajectories)
        if self.recurrent:
            batch.chop_into_sequences(self.max_seq_len)
        return batch

    def close(self) -> None:
        """Close the vector env."""
        self.venv.close()
