"""The PolicyGraph contract: the only place that holds an algorithm's numerics.

RLlib (Liang et al., ICML 2018, §3.1 and Fig. 5), https://arxiv.org/abs/1712.09381:
a policy graph defines ``act`` (compute_actions), ``postprocess``
(postprocess_trajectory) and ``loss`` (through compute_gradients / learn_on_batch),
plus weights/state access and utility methods called by name.

How the rest of hierl drives a policy graph:

    policy = MyPolicy(observation_space, action_space, config)
    # on an evaluator, once per environment step (batched over the vector of envs):
    actions, state_out, extra = policy.compute_actions(obs_batch, state_batches)
    # at the end of each trajectory segment:
    batch = policy.postprocess_trajectory(segment)
    # in a policy optimizer:
    stats = policy.learn_on_batch(batch)                 # or, split in two:
    grads, stats = policy.compute_gradients(batch)
    policy.apply_gradients(grads)
    # between steps:
    policy.set_weights(weights); policy.on_global_var_update(GlobalVars(timestep=t))
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from hierl.sample_batch import SampleBatch

Weights = dict[str, np.ndarray]
"""Policy weights: parameter name → numpy array.  Names are stable across processes."""

LearnerStats = dict[str, dict[str, float]]
"""Learner statistics per policy: policy id → ``{stat name: value}`` (one policy's as
``learn_on_batch`` returns them).  ``PolicyOptimizer.step()`` returns them so; the
Trainer flattens them into its result's ``learner/...`` keys."""


@dataclasses.dataclass(frozen=True)
class GlobalVars:
    """Global counters the driver pushes to every policy replica between optimizer steps.

    Optimizers build one from their own counters and pass it down through
    ``EvaluatorSet.sync_weights`` / ``set_global_vars`` →
    ``PolicyEvaluator.set_global_vars`` → ``PolicyGraph.on_global_var_update``; the
    evaluator set keeps the last one for evaluators it recreates.
    """

    timestep: int
    """Env steps sampled so far by the whole trainer (the optimizer's
    ``num_steps_sampled``).  Policies keep it as ``global_timestep`` and drive their
    schedules from it: the learning-rate schedule (``TorchPolicyGraph``), DQN's epsilon
    schedule, DDPG's uniform-random warm-up (``random_timesteps``)."""


NONFINITE_GRADS_SKIPPED = "num_nonfinite_grads_skipped"
"""Learner stat, one name in every update path: the updates refused because the loss or
a gradient (after clipping) was NaN or inf.  Such an update leaves the weights, the
optimizer moments and any loss state (MARWIL's ``c^2``) as they were, and training goes
on.  Every update reports it (0 or 1); ``UpdateStats`` sums it where the other
stats are averaged."""


class UpdateStats:
    """Learner stats accumulated over updates: each stat's mean over the updates that
    were applied, and ``NONFINITE_GRADS_SKIPPED`` summed over all of them (a skipped
    update reports nothing else).  The one way every optimizer and the trainer combine
    the stats of several updates."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._latest: dict[str, Any] = {}
        self.applied = 0
        """Updates applied so far."""
        self.skipped = 0
        """Updates refused for a non-finite loss or gradient."""

    def add(self, stats: Mapping[str, Any]) -> None:
        """Record one update's stats (as ``learn_on_batch`` returns them)."""
        if stats.get(NONFINITE_GRADS_SKIPPED):
            self.skipped += int(stats[NONFINITE_GRADS_SKIPPED])
            return
        self.applied += 1
        for key, value in stats.items():
            if key == NONFINITE_GRADS_SKIPPED:
                continue
            if isinstance(value, (int, float, np.number)):
                self._sums[key] = self._sums.get(key, 0.0) + float(value)
            else:  # not a number (a name, a list): the latest one
                self._latest[key] = value

    def result(self) -> dict[str, Any]:
        """The means over the applied updates (the latest value of a stat that is not a
        number), plus the skip count."""
        means = {k: v / max(self.applied, 1) for k, v in self._sums.items()}
        return {**means, **self._latest, NONFINITE_GRADS_SKIPPED: float(self.skipped)}


@dataclasses.dataclass
class LearnResult:
    """What one update on a replayed batch returns (see ``learn_on_replay_batch``)."""

    stats: dict[str, float]
    """Learner statistics, as ``learn_on_batch`` returns them."""
    td_error: np.ndarray | None = None
    """Per-row TD error of the batch before the update (new replay priorities), or None."""


class PolicyGraph(abc.ABC):
    """Abstract policy: act, postprocess, loss; weights and state.

    Subclasses implement the four abstract methods; everything else has a working
    default.  Gradient-based optimizers (allreduce, async, sharded_ps) additionally
    need ``compute_gradients`` and ``apply_gradients``.  Optional capabilities that some
    optimizers use are the Protocols below (``ExplorationScale``, ``FlatWeights``,
    ``TDErrors``): a policy has one by implementing its methods.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.global_timestep = 0

    @abc.abstractmethod
    def compute_actions(
        self,
        obs_batch: np.ndarray,
        state_batches: list[np.ndarray] | None = None,
        explore: bool = True,
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """Return ``(actions, state_out, extra)`` for a batch of (preprocessed) observations.

        ``extra`` holds per-step outputs stored in the sample batch, keyed by
        SampleBatch column names (e.g. ACTION_LOGP, VF_PREDS).
        """

    def postprocess_trajectory(
        self,
        batch: SampleBatch,
        other_agent_batches: Mapping[str, SampleBatch] | None = None,
    ) -> SampleBatch:
        """Postprocess one trajectory segment (advantages, n-step returns...); default: as is.

        ``batch`` holds consecutive steps of ONE episode of one agent; it ends either
        in a terminal step, a truncated step, or mid-episode (fragment cut).  Its last
        row's NEW_OBS is the observation to bootstrap from when not terminated.
        """
        return batch

    def postprocess_trajectories(self, batch: SampleBatch) -> SampleBatch:
        """Postprocess a batch of several segments (runs of equal EPS_ID), e.g. a fragment.

        The evaluator calls this once per sample.  The default splits the batch and
        calls ``postprocess_trajectory`` per segment; override it to vectorise across
        segments (what PPO does for GAE over thousands of vectorised envs).
        """
        segments = batch.split_by_episode()
        return SampleBatch.concat_samples([self.postprocess_trajectory(s) for s in segments])

    @abc.abstractmethod
    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """One gradient step on ``batch``; returns learner statistics.

        A step whose loss or gradients are not finite must not be applied: return
        ``{NONFINITE_GRADS_SKIPPED: 1.0}`` instead, with the policy left as it was
        (``TorchPolicyGraph`` does, through ``step_if_finite``)."""

    def device_rows(self, batch: SampleBatch) -> Any:
        """``batch`` loaded where this policy learns, for minibatch SGD epochs to take
        minibatches of (``rows.take(positions)``, each passed to ``learn_on_batch``), or
        None: then the epochs slice the SampleBatch itself.  The default is None; a policy
        on an accelerator loads the batch into device memory once (TorchPolicyGraph)."""
        return None

    def learn_on_replay_batch(self, batch: SampleBatch) -> LearnResult:
        """One update on a replayed batch; value-based policies return TD errors too.

        Replay optimizers call this instead of ``learn_on_batch``.  The batch carries
        ``PRIO_WEIGHTS`` (importance weights, all 1 for uniform replay) and
        ``BATCH_INDEXES``.  Override it to weight the loss and return ``td_error`` so
        prioritized replay can update priorities; the default ignores both.
        """
        return LearnResult(self.learn_on_batch(batch))

    def learning_rate(self, timestep: int) -> float:
        """The step size of this policy's gradient updates at env step ``timestep``.

        Optional: an optimizer that runs the update for the policy elsewhere
        (``sharded_ps``: Adam on parameter-server shards) reads it each step.
        """
        raise NotImplementedError

    def compute_gradients(
        self, batch: SampleBatch, clip: bool = True
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Return ``(gradients, stats)`` for ``batch`` without applying them.

        With ``clip=False`` the raw gradients are returned (an allreduce averages them
        first and clips the average in ``apply_gradients(..., clip=True)``).
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement compute_gradients")

    def apply_gradients(self, gradients: list[np.ndarray], clip: bool = False) -> dict[str, float]:
        """Apply gradients produced by ``compute_gradients`` (possibly on another replica).

        ``clip=True`` clips their global norm first (the policy's ``grad_clip``).
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement apply_gradients")

    def gradient_names(self) -> list[str]:
        """Names (``get_weights`` keys) of the weights ``compute_gradients`` returns, in order."""
        raise NotImplementedError(f"{type(self).__name__} does not implement gradient_names")

    @abc.abstractmethod
    def get_weights(self) -> Weights:
        """Return the model weights as a dict of numpy arrays with stable names."""

    @abc.abstractmethod
    def set_weights(self, weights: Weights) -> None:
        """Load weights produced by ``get_weights`` (of a compatible policy)."""

    def get_state(self) -> dict[str, Any]:
        """Everything needed to resume: weights plus optimizer state and counters.

        The result is a tree of dicts/lists whose leaves are numpy arrays or JSON
        scalars (it is checkpointed without pickle).
        """
        return {"weights": self.get_weights(), "global_timestep": self.global_timestep}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state produced by ``get_state``."""
        self.set_weights(state["weights"])
        self.global_timestep = int(state.get("global_timestep", 0))

    def get_initial_state(self) -> list[np.ndarray]:
        """Initial recurrent state for one agent (empty list for feed-forward policies)."""
        return []

    def on_global_var_update(self, global_vars: GlobalVars) -> None:
        """Called with the global counters before each round of sampling."""
        self.global_timestep = int(global_vars.timestep)

    def compute_single_action(
        self, obs: np.ndarray, state: list[np.ndarray] | None = None, explore: bool = False
    ) -> tuple[Any, list[np.ndarray], dict[str, np.ndarray]]:
        """Act for one preprocessed observation; returns ``(action, state_out, extra)``."""
        state_batches = [np.asarray(s)[None] for s in state] if state else None
        actions, state_out, extra = self.compute_actions(
            np.asarray(obs)[None], state_batches, explore=explore
        )
        return (
            actions[0],
            [s[0] for s in state_out],
            {k: v[0] for k, v in extra.items()},
        )


# -- optional capabilities: a policy graph has one by implementing its methods ------------
@runtime_checkable
class ExplorationScale(Protocol):
    """Exploration that can be pinned to a scale: DQN's epsilon (the probability of a
    random action), DDPG's multiplier of its Gaussian exploration noise.

    Called by Ape-X (``hierl.optimizers.apex.samplers.pin_epsilon``): each sampling
    evaluator's policies are pinned to that evaluator's rung of the epsilon ladder.
    Policies without it keep exploring their own way (no ladder).
    """

    def set_exploration_scale(self, value: float | None) -> None:
        """Pin exploration to ``value``; None releases it (DQN: back to its epsilon
        schedule; DDPG: back to the unscaled noise).  Raises ValueError for a value out
        of the policy's range."""
        ...


@runtime_checkable
class FlatWeights(Protocol):
    """The trainable parameters as one flat float32 vector, in a fixed order.

    Required by the ``es`` optimizer (``hierl.optimizers.es``): the driver reads θ with
    ``get_flat_weights`` and writes the updated θ back; evaluators load each perturbed
    ``θ ± σε`` with ``set_flat_weights`` before playing an episode.
    """

    def get_flat_weights(self) -> np.ndarray:
        """The parameters as a 1-D float32 array (a copy)."""
        ...

    def set_flat_weights(self, flat: np.ndarray) -> None:
        """Load a vector shaped like ``get_flat_weights()``'s."""
        ...


@runtime_checkable
class FrozenActor(Protocol):
    """A fast path for loops that play one env one observation at a time with weights
    that do not change during an episode (``EpisodePlayer``: ES's perturbed episodes,
    ``hierl rollout``), where the generic ``act`` step (``compute_actions``, then
    ``to_env_action``) costs a sizeable part of a MuJoCo step.

    Used by ``hierl.evaluators.rollout_core.EpisodePlayer`` once per episode; policies
    without it (or whose ``frozen_actor`` returns None) are played through ``act``.
    """

    def frozen_actor(self, explore: bool | None = None) -> Callable[[np.ndarray], Any] | None:
        """A function from a batch of ONE preprocessed (filtered) observation to that
        row's env action, bit for bit
        ``to_env_action(self.action_space, self.compute_actions(obs, explore=explore)[0])[0]``
        (``explore`` None: the policy's default), for a feed-forward policy; valid until
        the weights change.  None where the policy has no such path (e.g. for some
        action spaces): the caller then uses ``compute_actions``."""
        ...


@runtime_checkable
class TDErrors(Protocol):
    """Per-row TD errors of a freshly sampled batch, for initial replay priorities.

    Called on the evaluators by the replay optimizers (``replay`` with
    ``worker_side_prioritization``, ``apex`` by default), which add their own
    ``prioritized_replay_eps``: priority = ``|TD error| + eps``.  Without it, new rows
    enter replay at the buffer's maximum priority.
    """

    def compute_td_errors(self, batch: SampleBatch) -> np.ndarray:
        """``|TD error|`` of each row of ``batch`` (shape ``(batch.count,)``), without
        any eps; ``batch`` (possibly compressed) is left as it is."""
        ...
