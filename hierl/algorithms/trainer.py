"""Trainer: config + evaluators + a named optimizer + ``train()``.

Each ``train()`` is one short logical iteration under central control, returning a flat
result dict (assembled by ``hierl.algorithms.metrics``), so a trainer nests anywhere:
as a Ray actor in another algorithm, a step of a self-play loop, or a Ray Tune trial.  A
new algorithm is a PolicyGraph plus a Trainer subclass naming its config class
(``TrainerConfig`` or a subclass), policy class and
the optimizers it supports:

    class MyTrainer(Trainer):
        name = "MY_ALGO"
        config_class = TrainerConfig
        policy_class = MyPolicy
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from hierl.algorithms import metrics, multi_agent
from hierl.algorithms import off_policy_estimation as ope
from hierl.algorithms.evaluation import Evaluation, evaluates_at
from hierl.algorithms.resources import evaluator_groups, optimizer_groups
from hierl.algorithms.serving import maybe_push
from hierl.algorithms.trainer_base import BaseTrainer
from hierl.algorithms.trainer_config import ACTING_OVERRIDES, TrainerConfig
from hierl.checkpoint import CheckpointError
from hierl.config import ConfigError
from hierl.evaluators import EvaluatorSet, EvaluatorSpec, atari, env_state
from hierl.evaluators.callbacks import make_callbacks
from hierl.evaluators.ray_runtime import ActorGroup
from hierl.evaluators.wire import space_to_json
from hierl.export import ExportedPolicy, export_policy
from hierl.optimizers import PolicyOptimizer, get_optimizer_class
from hierl.policy_graph import LearnerStats, PolicyGraph, Weights
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from hierl.utils import seed_everything

MULTI_AGENT = (
    "supports_multi_agent",
    "multi-agent training (config field 'policies' or a MultiAgentEnv)",
)
RECURRENT = ("supports_recurrent", "recurrent models (model.use_lstm=True)")
"""Optimizer capabilities a config may need: (PolicyOptimizer class flag, description)."""


def _use_driver_cpus(num_cpus: float) -> None:
    """Give torch as many intra-op threads as CPUs the trainer reserves for itself.

    The driver's CPUs are part of the trainer's resource request (e.g. its Tune bundle);
    more threads than that oversubscribe the machine, and for small networks even two
    threads are slower than one.
    """
    import torch

    threads = max(1, int(num_cpus))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


class Trainer(BaseTrainer):
    """Base class of all algorithms.

    Args:
        config: the algorithm's config dataclass, or a dict validated into it.
        env: shorthand for ``config["env"]``.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[TrainerConfig]] = TrainerConfig
    policy_class: ClassVar[type[PolicyGraph]]

    def __init__(self, config: TrainerConfig | Mapping[str, Any] | None = None, env: Any = None):
        # validates the config (``validate_config``), then fails fast if the cluster can
        # never hold the evaluators and optimizer actors (``check_resources``)
        super().__init__(config, env)
        optimizer_name = self.config.optimizer
        _use_driver_cpus(self.config.num_cpus_for_driver)
        seed_everything(self.config.seed)
        self.evaluators = self._make_evaluators()
        if self.local_evaluator.multi_agent:  # also a MultiAgentEnv without `policies`
            try:
                self._check_optimizer_supports(optimizer_name, MULTI_AGENT)
            except ConfigError:
                self.evaluators.stop()
                raise
        self.optimizer = self._make_optimizer(optimizer_name)
        self.evaluation = self._make_evaluation()
        self.callbacks = make_callbacks(self.config.callbacks)  # on_train_result
        self._ope_episodes = self._load_ope_episodes()
        self.episode_stats = metrics.EpisodeStats(self.config.metrics_smoothing_episodes)

    # -- construction hooks ------------------------------------------------------------
    @classmethod
    def actor_groups(cls, config: TrainerConfig) -> list[ActorGroup]:
        """The driver, the remote evaluators (training and evaluation) and the actors the
        config's optimizer starts."""
        opt_class = get_optimizer_class(config.optimizer)
        return [
            *super().actor_groups(config),
            *evaluator_groups(config),
            *optimizer_groups(opt_class, config),
        ]

    def validate_config(self, config: TrainerConfig) -> TrainerConfig:
        """The config's optimizer (one the algorithm supports: checked by the config) must
        have the capabilities the config needs and train its policy classes."""
        if config.policies:
            self._check_optimizer_supports(config.optimizer, MULTI_AGENT)
        if config.model.use_lstm:
            self._check_optimizer_supports(config.optimizer, RECURRENT)
        self._check_optimizer_trains_policies(config.optimizer, config)
        return config

    def _check_optimizer_supports(self, name: str, feature: tuple[str, str]) -> None:
        """ConfigError unless optimizer ``name`` has the capability ``(flag, description)``."""
        flag, what = feature
        if getattr(get_optimizer_class(name), flag, False):
            return
        supported = self.config_class.optimizer_choices()
        ok = [n for n in supported if getattr(get_optimizer_class(n), flag, False)]
        raise ConfigError(
            f"config field 'optimizer' = '{name}' does not support {what}; valid for "
            f"{self.name or type(self).__name__}: {', '.join(ok) or 'none'}"
        )

    def rollout_fragment_length(self) -> int:
        """The configured fragment length, or the optimizer's ``train_batch_size`` split
        over all sub-envs."""
        return self.config.fragment_for(self.config.optimizer_config.train_batch_size)

    def _make_evaluators(self) -> EvaluatorSet:
        """The local evaluator and ``num_evaluators`` remote ones, all from one spec."""
        cfg = self.config
        return EvaluatorSet(
            self._evaluator_spec(), num_evaluators=cfg.num_evaluators, **self._set_options()
        )

    def _make_evaluation(self) -> Evaluation | None:
        """The evaluation evaluators (``evaluation_interval`` > 0), else None."""
        cfg = self.config
        if not cfg.evaluation_interval:
            return None
        return Evaluation(
            self._evaluator_spec(),
            num_episodes=cfg.evaluation_num_episodes,
            interval=cfg.evaluation_interval,
            attach_latest=cfg.always_attach_evaluation_results,
            explore=cfg.evaluation_explore,
            num_evaluators=cfg.evaluation_num_evaluators,
            **self._set_options(),
        )

    def _load_ope_episodes(self) -> list[SampleBatch]:
        """The whole logged episodes off-policy estimation averages over (read once)."""
        cfg = self.config
        if not cfg.off_policy_estimation:
            return []
        return ope.load_episodes(
            cfg.input_spec().logged_files(),
            cfg.off_policy_estimation_max_rows,
            cfg.input_skip_bad_files,
            cfg.input_mix or cfg.input,
        )

    def off_policy_estimates(self) -> dict[str, float]:
        """Each configured estimator's figures for the current policy, flat."""
        cfg = self.config
        policy = self.get_policy()
        return ope.result_metrics(
            cfg.off_policy_estimation, self._ope_episodes, policy.compute_log_likelihoods, cfg.gamma
        )

    def _evaluator_spec(self) -> EvaluatorSpec:
        """The spec every training evaluator is built from: the config's sampling
        settings with the fragment length and the reward clipping resolved."""
        cfg = self.config
        clip = cfg.clip_rewards
        if clip is None:
            clip = atari.default_clip_rewards(cfg.env, cfg.preprocessor_pref)
        sampling = dataclasses.replace(
            cfg.sampling_settings(),
            rollout_fragment_length=self.rollout_fragment_length(),
            clip_rewards=clip,
        )
        return EvaluatorSpec(
            cfg.env,
            self.policy_class,
            cfg,
            env_config=cfg.env_config,
            sampling=sampling,
            seed=cfg.seed,
            policies=multi_agent.resolve_policy_specs(cfg, self.policy_class),
            input=cfg.input_spec(),
            output=cfg.output_spec(),
        )

    def _set_options(self) -> dict[str, Any]:
        """The ``EvaluatorSet`` settings besides the spec and the number of evaluators."""
        cfg = self.config
        return dict(
            num_cpus_per_evaluator=cfg.num_cpus_per_evaluator,
            num_gpus_per_evaluator=cfg.num_gpus_per_evaluator,
            ray_address=cfg.ray_address,
            get_timeout_s=cfg.sample_timeout_s,
            # "DEFAULT" passes nothing: an explicit strategy would escape a Tune
            # trial's placement group.
            actor_options=(
                {"scheduling_strategy": "SPREAD"}
                if cfg.evaluator_scheduling_strategy == "SPREAD"
                else None
            ),
            recreate_failed_evaluators=cfg.recreate_failed_evaluators,
            max_evaluator_restarts=cfg.max_evaluator_restarts,
            fail_fast=cfg.fail_fast_on_evaluator_failure,
        )

    def _make_optimizer(self, name: str) -> PolicyOptimizer:
        """Build the config's optimizer through its ``create`` (the one construction path,
        ``auto`` included); optimizers it builds in turn (``auto``'s candidates) get the
        algorithm's defaults for them under the settings it passes."""

        def factory(other: str, settings: Mapping[str, Any]) -> PolicyOptimizer:
            config = self.config.optimizer_config_for(other, settings)
            return get_optimizer_class(other).create(self.evaluators, config, factory)

        opt_class = get_optimizer_class(name)
        return opt_class.create(self.evaluators, self.config.optimizer_config, factory)

    def _check_optimizer_trains_policies(self, name: str, config: TrainerConfig) -> None:
        """ConfigError unless optimizer ``name`` can train every policy class of ``config``
        (``PolicyOptimizer.missing_policy_capability``), listing the ones that can."""
        classes = [self.policy_class]  # also every agent of a MultiAgentEnv without policies
        if config.policies:
            classes = [
                multi_agent.policy_classes(config, pid)[0] or self.policy_class
                for pid in config.policies
            ]

        def missing(opt: str, policy_class: type, opt_config: Any) -> str | None:
            return get_optimizer_class(opt).missing_policy_capability(policy_class, opt_config)

        for policy_class in dict.fromkeys(classes):
            why = missing(name, policy_class, config.optimizer_config)
            if why is None:
                continue
            ok = []
            for other in self.config_class.optimizer_choices():
                try:
                    if missing(other, policy_class, config.optimizer_config_for(other)) is None:
                        ok.append(other)
                except ConfigError:  # its defaults do not fit this config: not listed
                    pass
            raise ConfigError(
                f"config field 'optimizer' = '{name}' cannot train policy class "
                f"{policy_class.__name__}: {why}; optimizers of "
                f"{self.name or type(self).__name__} that can: {', '.join(ok) or 'none'}"
            )

    def result_extras(self) -> dict[str, Any]:
        """Keys an algorithm adds to every result (before the callbacks and the logs see
        it); none by default."""
        return {}

    def after_optimizer_step(self, learner_stats: LearnerStats) -> None:
        """Hook for per-iteration policy utilities (e.g. PPO's adaptive KL coefficient);
        ``learner_stats`` is what that ``optimizer.step()`` returned (per policy id)."""

    # -- training ----------------------------------------------------------------------
    @property
    def local_evaluator(self):
        """The driver's PolicyEvaluator."""
        return self.evaluators.local_evaluator

    def get_policy(self, policy_id: str | None = None) -> PolicyGraph:
        """The driver's policy graph ``policy_id`` (None: the single-agent default)."""
        if policy_id is None:
            return self.local_evaluator.policy
        policy_map = self.local_evaluator.policy_map
        if policy_id not in policy_map:
            raise ValueError(f"unknown policy id {policy_id!r}; valid: {sorted(policy_map)}")
        return policy_map[policy_id]

    @property
    def episodes_total(self) -> int:
        """Episodes finished in all training iterations."""
        return self.episode_stats.episodes_total

    @property
    def timesteps_total(self) -> int:
        """Env steps sampled in all training iterations."""
        return self.optimizer.num_steps_sampled

    def train(self) -> dict[str, Any]:
        """Run one iteration; return the flat result dict (``hierl.algorithms.metrics``)."""
        start = time.perf_counter()
        steps_before = self.optimizer.num_steps_sampled
        learner_stats = self._optimizer_steps(steps_before)
        if self.config.observation_filter != "NoFilter":
            self.evaluators.sync_filters()
        episodes = self.optimizer.collect_episodes()
        result: dict[str, Any] = self.episode_stats.add(episodes)
        steps = self.optimizer.num_steps_sampled - steps_before
        result.update(timesteps_this_iter=steps, timesteps_total=self.optimizer.num_steps_sampled)
        # counted before evaluation: time_this_iter_s is the training time
        result.update(metrics.count_iteration(self, start))
        elapsed = result["time_this_iter_s"]
        result.update(metrics.sampling_metrics(self.optimizer, self.evaluators, steps, elapsed))
        result.update(metrics.optimizer_metrics(self.optimizer, result))
        result.update(self.episode_stats.episode_metrics(episodes))
        if self.evaluation is not None:
            result.update(self.evaluation.metrics(self.iteration, self.local_evaluator))
        if self._ope_episodes and evaluates_at(self.iteration, self.config.evaluation_interval):
            result.update(self.off_policy_estimates())
        result.update(metrics.learner_metrics(learner_stats, self.local_evaluator.multi_agent))
        result.update(self.result_extras())
        maybe_push(self, result)  # serve_deployment: new weights to a serving app
        if self.callbacks is not None:
            self.callbacks.on_train_result(trainer=self, result=result)
        return metrics.finish_iteration(self, result)

    def _optimizer_steps(self, steps_before: int) -> LearnerStats:
        """Optimizer steps until ``timesteps_per_iteration`` env steps were sampled since
        ``steps_before`` (at least one); their learner stats, averaged."""
        step_stats = []
        while True:
            stats = self.optimizer.step()
            self.after_optimizer_step(stats)
            if stats:
                step_stats.append(stats)
            sampled = self.optimizer.num_steps_sampled - steps_before
            if sampled >= self.config.timesteps_per_iteration:
                break
        return metrics.mean_stats(step_stats)

    # -- acting ------------------------------------------------------------------------
    def compute_single_action(
        self, obs: Any, explore: bool = False, policy_id: str = DEFAULT_POLICY_ID
    ) -> Any:
        """The action of policy ``policy_id`` for one raw env observation, in the env's
        action format."""
        return self.local_evaluator.compute_single_action(obs, explore=explore, policy_id=policy_id)

    def compute_single_action_and_state(
        self,
        obs: Any,
        state: list[np.ndarray] | None = None,
        explore: bool = False,
        policy_id: str = DEFAULT_POLICY_ID,
    ) -> tuple[Any, list[np.ndarray]]:
        """``(action, state_out)`` of a (recurrent) policy; pass ``state_out`` to the next
        call and None at an episode's first step."""
        return self.local_evaluator.compute_single_action_and_state(obs, state, explore, policy_id)

    def export_policy(
        self,
        directory: str | Path,
        format: Literal["torchscript", "onnx"] = "torchscript",
        policy_id: str = DEFAULT_POLICY_ID,
    ) -> ExportedPolicy:
        """Write policy ``policy_id`` as a self-contained TorchScript (``policy.pt``) or
        ONNX (``policy.onnx``) model plus ``policy.json``, for serving without hierl.

        The model takes raw env observations (batched) and returns ``(actions,
        action_dist_inputs, vf_preds)``, recurrent ones also their state: the
        preprocessing, the observation filter's current statistics and the greedy action
        are folded in, so its actions equal ``compute_single_action(obs, explore=False)``
        (see ``hierl.export`` for the inputs, outputs and how to load it).

        Raises:
            ExportError: an unknown format, a policy that is not a TorchPolicyGraph, an
                observation or action space that cannot be exported, or onnx /
                onnxruntime missing (``pip install 'hierl[export]'``).
            ValueError: an unknown ``policy_id``.
        """
        policy = self.get_policy(policy_id)
        return export_policy(
            policy,
            directory,
            format,
            normalization=self.local_evaluator.filters[policy_id].normalization(),
            metadata={
                "algorithm": self.name,
                "iteration": self.iteration,
                "policy_id": policy_id,
                "observation_space": space_to_json(policy.observation_space),
                "action_space": space_to_json(policy.action_space),
            },
        )

    def get_weights(self) -> dict[str, Weights]:
        """Weights of the driver's policies."""
        return self.local_evaluator.get_weights()

    def set_weights(self, weights: Mapping[str, Weights]) -> None:
        """Load weights into the driver's policies and broadcast them."""
        self.local_evaluator.set_weights(weights)
        self.optimizer.push_local_weights()
        self._forget_evaluation()

    def get_filters(self) -> dict[str, dict[str, Any]]:
        """The total statistics of the driver's observation filters, by policy id: what
        the weights were trained under (their inputs are the filtered observations)."""
        return self.local_evaluator.get_filters(flush_after=False)

    def set_filters(self, states: Mapping[str, dict[str, Any]]) -> None:
        """Replace the driver's filter statistics by ``states`` (of ``get_filters``) and
        broadcast them, so that weights copied from another trainer compute its function."""
        self.local_evaluator.sync_filters(states)
        self.evaluators.push_filters()
        self._forget_evaluation()

    def _forget_evaluation(self) -> None:
        """The latest evaluation measured weights or filters now replaced: not carried."""
        if self.evaluation is not None:
            self.evaluation.forget()

    # -- checkpoints -------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Everything ``restore`` needs, as arrays and JSON scalars.

        ``rng`` holds the driver's Python / numpy / torch generator states; the local
        evaluator's state includes its rollout position (see ``PolicyEvaluator.save``);
        ``inputs`` the remote evaluators' positions in logged data.
        """
        episodes = self.episode_stats.get_state()
        return {
            "rng": env_state.get_rng_state(),
            "evaluator": self.local_evaluator.save(),
            "inputs": self.evaluators.input_states(),
            "optimizer": self.optimizer.save(),
            "counters": {
                "iteration": self.iteration,
                "time_total_s": self.time_total_s,
                "episodes_total": episodes["episodes_total"],
            },
            "episodes": episodes["episodes"],
            "policy_rewards": episodes["policy_rewards"],
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``; broadcasts weights and filters to remote evaluators."""
        try:
            self.local_evaluator.restore(state["evaluator"])
            self.optimizer.restore(state["optimizer"])
        except ValueError as e:
            raise CheckpointError(f"checkpoint does not fit this {self.name} trainer: {e}") from e
        self.evaluators.set_input_states(state.get("inputs", {}))
        counters = state["counters"]
        self.iteration = int(counters["iteration"])
        self.time_total_s = float(counters["time_total_s"])
        self.episode_stats.set_state(
            counters["episodes_total"], state["episodes"], state.get("policy_rewards", {})
        )
        self.optimizer.push_local_weights(self.optimizer.global_vars())
        self.evaluators.push_filters()
        self._forget_evaluation()  # the checkpoint's evaluation is not carried either
        if state.get("rng") is not None:
            env_state.set_rng_state(state["rng"])  # last: nothing above may draw from it

    @classmethod
    def acting_checkpoint(
        cls, config: dict[str, Any], state: Mapping[str, Any]
    ) -> tuple[type[BaseTrainer], dict[str, Any], Mapping[str, Any]]:
        """This trainer acts for its own checkpoint, with ``ACTING_OVERRIDES`` (only the
        local evaluator, the env as input, no output; see ``BaseTrainer.for_acting``)."""
        return cls, {**config, **ACTING_OVERRIDES}, state

    @classmethod
    def config_from_checkpoint(
        cls, config: dict[str, Any], overrides: dict[str, Any], checkpoint_dir: str | Path
    ) -> dict[str, Any]:
        """The stored config; policy classes and mapping functions must be passed again."""
        multi_agent.pop_code_descriptions(config, overrides, checkpoint_dir)
        return super().config_from_checkpoint(config, overrides, checkpoint_dir)

    def stop(self) -> None:
        """Release the optimizer and all evaluator actors."""
        self.optimizer.stop()
        self.evaluators.stop()
        if self.evaluation is not None:
            self.evaluation.stop()
        super().stop()
