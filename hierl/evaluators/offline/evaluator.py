"""OfflineEvaluator: a PolicyEvaluator whose ``sample()`` reads logged experience.

The RLlib paper's OfflineEvaluator (arXiv appendix E.1): the optimizers see an
evaluator like any other, so ``local``, ``multi_gpu``, ``replay`` and the rest train from
a dataset unchanged.  Each ``sample()`` draws its source by the probabilities of
``InputSpec.sources`` (``input_mix``): the live simulator (``"sampler"``), Parquet files
(``ParquetInput``) or a Ray Data dataset
(``RayDataInput``), and returns
``rollout_fragment_length * num_envs`` rows.  Rows read from data are counted as
sampled steps; they carry no episode metrics (evaluation measures the policy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierl.config import ConfigError
from hierl.evaluators.offline.reader import ParquetInput, RayDataInput, list_files
from hierl.evaluators.offline.schema import OfflineDataError, check_obs_shape
from hierl.evaluators.offline.settings import SAMPLER, InputSpec
from hierl.evaluators.policy_evaluator import PolicyEvaluator, locked
from hierl.evaluators.spec import EvaluatorSpec
from hierl.postprocessing import N_STEP_DISCOUNTS
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch


def file_share(files: list, worker_index: int, num_shards: int) -> list:
    """The files evaluator ``worker_index`` reads: every ``num_shards``-th from its own
    offset (all of them for the local evaluator or a single reader); with fewer files than
    evaluators, one file each, round robin."""
    if worker_index == 0 or num_shards <= 1:
        return list(files)
    if len(files) < num_shards:
        return [files[(worker_index - 1) % len(files)]]
    return list(files[worker_index - 1 :: num_shards])


class OfflineEvaluator(PolicyEvaluator):
    """A PolicyEvaluator reading ``spec.input`` (see the module docstring).

    Raises:
        ConfigError: multi-agent policies (logged multi-agent data is written by policy but
            not read back for training yet).
        OfflineDataError: an input that is missing, empty, corrupt, or whose observations
            do not fit the policy.
    """

    def __init__(
        self, spec: EvaluatorSpec, *, worker_index: int = 0, num_threads: int | None = None
    ):
        super().__init__(spec, worker_index=worker_index, num_threads=num_threads)
        settings: InputSpec = spec.input
        if self.multi_agent:
            raise ConfigError(
                "config field 'input' reads single-agent data; multi-agent training from "
                "logged data is not supported (use input 'sampler')"
            )
        self.batch_size = (
            spec.sampling.rollout_fragment_length * spec.sampling.num_envs_per_evaluator
        )
        self.sources = list(settings.sources)
        self.probs = np.asarray([settings.sources[s] for s in self.sources], dtype=np.float64)
        self.probs /= self.probs.sum()
        self._rng = np.random.default_rng(self.seed)
        self.readers: dict[str, Any] = {}
        for source in self.sources:
            if source == SAMPLER:
                continue
            self.readers[source] = self._make_reader(source, settings)

    def _make_reader(self, source: str, settings: InputSpec) -> Any:
        postprocess = self.policy.postprocess_trajectories if settings.postprocess else None
        if source in settings.datasets:
            return RayDataInput(
                settings.datasets[source],
                self.batch_size,
                shuffle_window=settings.shuffle_window,
                seed=self.seed,
                postprocess=postprocess,
            )
        files = list_files(list(settings.files.get(source, (source,))))
        prep = self.preprocessors[DEFAULT_POLICY_ID]

        def check(meta: dict[str, Any], where: str) -> None:
            check_obs_shape(meta, prep.shape, self.policy.observation_space, where)
            if settings.postprocess and N_STEP_DISCOUNTS in meta["columns"]:
                raise OfflineDataError(
                    f"{where} holds n-step transitions (logged after n-step "
                    "postprocessing); postprocess_inputs True would sum their rewards "
                    "again: read it with postprocess_inputs False, or log raw rows with "
                    "output_postprocessed False"
                )

        return ParquetInput(
            file_share(files, self.worker_index, settings.num_shards),
            self.batch_size,
            shuffle_window=settings.shuffle_window,
            seed=self.seed,
            skip_bad_files=settings.skip_bad_files,
            check=check,
            postprocess=postprocess,
        )

    def stop(self) -> None:
        """Close the readers (a Ray dataset's iteration ends while Ray is up), then
        what every evaluator stops."""
        for reader in self.readers.values():
            close = getattr(reader, "close", None)
            if close is not None:
                close()
        super().stop()

    def _sample_now(self) -> SampleBatch:
        source = self.sources[int(self._rng.choice(len(self.sources), p=self.probs))]
        if source == SAMPLER:
            return self.sample_env()
        return self.readers[source].next()

    @locked
    def input_state(self) -> dict[str, Any]:
        """Each reader's position and the source generator's state (JSON scalars)."""
        return {
            "rng": self._rng.bit_generator.state,
            "readers": {s: r.get_state() for s, r in self.readers.items()},
        }

    @locked
    def set_input_state(self, state: dict[str, Any] | None) -> None:
        """Inverse of ``input_state``: the readers continue from those positions (None:
        they stay where they are)."""
        if state is None:
            return
        self._rng.bit_generator.state = state["rng"]
        for source, reader_state in state["readers"].items():
            if source in self.readers:
                self.readers[source].set_state(reader_state)

    @locked
    def save(self) -> dict[str, Any]:
        """``PolicyEvaluator.save`` plus ``input_state`` (the lock is reentrant)."""
        return {**super().save(), "input": self.input_state()}

    @locked
    def restore(self, state: dict[str, Any]) -> None:
        """Inverse of ``save``."""
        super().restore(state)
        self.set_input_state(state.get("input"))
