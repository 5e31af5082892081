"""Logged experience: writing what evaluators sample, reading it back as their input.

``schema`` (the Parquet format), ``writer`` (OutputWriter), ``reader`` (ParquetInput,
RayDataInput, whole logged episodes), ``settings`` (InputSpec / OutputSpec) and
``evaluator`` (OfflineEvaluator).
"""

from hierl.evaluators.offline.reader import ParquetInput, RayDataInput, iter_episodes, list_files
from hierl.evaluators.offline.schema import OfflineDataError, batch_to_table, table_to_batch
from hierl.evaluators.offline.settings import SAMPLER, InputSpec, OutputSpec
from hierl.evaluators.offline.writer import OutputWriter

__all__ = [
    "SAMPLER",
    "InputSpec",
    "OfflineDataError",
    "OutputSpec",
    "OutputWriter",
    "ParquetInput",
    "RayDataInput",
    "batch_to_table",
    "iter_episodes",
    "list_files",
    "table_to_batch",
]
