"""What an evaluator reads (``InputSpec``) and writes (``OutputSpec``), as typed values.

The trainer builds them from its config fields ``input``, ``input_mix``,
``input_shuffle_window``, ``input_skip_bad_files``, ``postprocess_inputs``,
``input_external`` and ``output``, ``output_postprocessed``, ``output_max_file_size``,
``output_compression`` (documented there); the
``EvaluatorSpec`` carries them to every evaluator.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from hierl.config import ConfigError
from hierl.evaluators.external.settings import EXTERNAL, ExternalInputConfig
from hierl.evaluators.offline.writer import DEFAULT_MAX_FILE_SIZE, Compression

SAMPLER = "sampler"
"""The input name of the live simulator (the evaluator's own rollout loop)."""


def path_strings(value: Any) -> Any:
    """``value`` with paths (``os.PathLike``, alone or in a list / tuple) as strings;
    anything else unchanged."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [path_strings(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """Sources of ``sample()`` and how offline sources are read."""

    sources: Mapping[str, float]
    """Source -> probability of drawing each ``sample()`` from it; a source is
    ``"sampler"``, a path / glob (a list of files is one source), or the key of a
    Ray Data dataset in ``datasets``."""
    files: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Source -> its list of files, where the source is a list of files."""
    datasets: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Source -> a ``ray.data.Dataset``."""
    num_shards: int = 0
    """Remote evaluators splitting the files (evaluator ``i`` reads every ``n``-th)."""
    shuffle_window: int = 10_000
    skip_bad_files: bool = False
    postprocess: bool = False
    external: ExternalInputConfig | None = None
    """The servers' settings when the source is ``"external"`` (PolicyClients drive the
    episodes; ``hierl.evaluators.external``)."""
    sample_timeout_s: float = 600.0
    """How long an external input's ``sample()`` waits for finished episodes."""

    def logged_files(self) -> tuple[str, ...]:
        """Every path / glob / file of the file sources (not datasets or the sampler)."""
        out: list[str] = []
        for source in self.sources:
            if source in self.files:
                out.extend(self.files[source])
            elif source not in (SAMPLER, EXTERNAL) and source not in self.datasets:
                out.append(source)
        return tuple(out)

    @property
    def offline(self) -> bool:
        """Whether any source is logged data (not only the sampler)."""
        return any(s not in (SAMPLER, EXTERNAL) for s in self.sources)

    @property
    def is_external(self) -> bool:
        """Whether PolicyClients drive the episodes (``input: "external"``)."""
        return EXTERNAL in self.sources

    @classmethod
    def from_config(cls, config: Any) -> InputSpec | None:
        """The InputSpec of a trainer config's ``input`` / ``input_mix`` (None: the
        sampler only), with its ``input_shuffle_window``, ``input_skip_bad_files``,
        ``postprocess_inputs``, ``input_external``, ``sample_timeout_s`` and
        ``num_evaluators`` (the shards); ConfigError naming the bad value otherwise."""
        mix = config.input_mix or {}
        if mix and config.input != SAMPLER:
            raise ConfigError(
                f"config fields 'input' = {config.input!r} and 'input_mix' are both set; give "
                "the sources once, in input_mix (e.g. {'sampler': 0.5, DIR: 0.5})"
            )
        if config.input is None:
            raise ConfigError(
                "config field 'input' is None (a checkpoint of a run that read a Ray "
                "dataset stores no dataset): pass input again"
            )
        sources, files, datasets = _parse_sources(
            list(mix.items()) if mix else [(config.input, 1.0)]
        )
        if sum(sources.values()) <= 0:
            raise ConfigError(f"config field 'input_mix' = {mix!r} has no positive probability")
        if list(sources) == [SAMPLER]:
            return None
        if EXTERNAL in sources and len(sources) > 1:
            raise ConfigError(
                f"config field 'input_mix' = {mix!r} mixes 'external' with other sources; "
                "external episodes are the only input of their evaluators"
            )
        return cls(
            sources,
            files=files,
            datasets=datasets,
            num_shards=config.num_evaluators,
            shuffle_window=config.input_shuffle_window,
            skip_bad_files=config.input_skip_bad_files,
            postprocess=config.postprocess_inputs,
            external=config.input_external if EXTERNAL in sources else None,
            sample_timeout_s=config.sample_timeout_s,
        )


def _parse_sources(
    pairs: list[tuple[Any, Any]],
) -> tuple[dict[str, float], dict[str, tuple[str, ...]], dict[str, Any]]:
    """``(source, probability)`` pairs as ``(sources, files, datasets)`` of an InputSpec."""
    sources: dict[str, float] = {}
    files: dict[str, tuple[str, ...]] = {}
    datasets: dict[str, Any] = {}
    for source, prob in pairs:
        if not isinstance(prob, (int, float)) or isinstance(prob, bool) or prob < 0:
            raise ConfigError(
                f"config field 'input_mix' gives source {source!r} the probability "
                f"{prob!r}; probabilities are numbers >= 0"
            )
        if isinstance(source, str):
            name = source
        elif isinstance(source, (list, tuple)) and all(isinstance(f, str) for f in source):
            name = f"files:{source[0] if source else ''}+{len(source)}"
            files[name] = tuple(source)
        elif type(source).__module__.startswith("ray.data"):
            name = f"dataset:{len(datasets)}"
            datasets[name] = source
        else:
            raise ConfigError(
                f"config field 'input' = {source!r} is not valid; valid: 'sampler', "
                "'external', a directory, glob or file of logged data, a list of files, "
                "or a ray.data.Dataset"
            )
        sources[name] = float(prob)
    return sources, files, datasets


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """Where and how each evaluator writes the batches it samples."""

    path: str
    postprocessed: bool = True
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    compression: Compression = "zstd"
