"""Live training progress for the command line.

On a terminal, ``TrainingProgress`` redraws a small ``rich`` panel after every
iteration: iteration, timesteps, episode return (min/max), episode length, throughput,
time, and one bar per stop condition.  Where an iteration finished no training episode
(offline algorithms: BC, MARWIL, CQL), the latest evaluation episodes' return is shown.
When stdout is not a terminal (CI logs, pipes) it prints one plain line per iteration
instead, and in quiet mode it prints nothing.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any


def format_number(value: Any, fmt: str = ".1f") -> str:
    """Format a number (``"d"``: rounded integer, ``"auto"``: integers as such, else ``.1f``).

    Missing and NaN values are written ``n/a``.
    """
    if value is None:
        return "n/a"
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if fmt == "d" or (fmt == "auto" and value.is_integer() and abs(value) < 1e15):
        return str(round(value))
    if fmt == "auto":
        return f"{value:.4g}" if abs(value) < 1e-2 else f"{value:.1f}"
    return format(value, fmt)


def format_target(value: float) -> str:
    """A stop target without a pointless ``.0`` (``475``, ``0.5``, ``1000000``)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def stop_fraction(value: Any, target: float) -> float:
    """How far ``value`` is towards ``target``, clipped to [0, 1] (0 for NaN/missing)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0.0
    if math.isnan(value):
        return 0.0
    if value >= target:
        return 1.0
    if target <= 0:
        return 0.0
    return min(1.0, max(0.0, value / target))


EVAL_PREFIX = "evaluation/"
"""Result keys of the evaluation run (``evaluation_interval``)."""


def episode_stats(result: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """``(label, stats)``: the training episodes' return and length when the iteration
    finished episodes, else the evaluation episodes' (offline algorithms such as BC,
    MARWIL and CQL play none while training): ``stats`` has ``episode_reward_mean``,
    ``_min``, ``_max`` and ``episode_len_mean``; ``label`` is ``"reward"`` or ``"eval
    reward"``."""
    if _is_number(result.get("episode_reward_mean")) or not _is_number(
        result.get(f"{EVAL_PREFIX}episode_reward_mean")
    ):
        return "reward", result
    keys = ("episode_reward_mean", "episode_reward_min", "episode_reward_max", "episode_len_mean")
    return "eval reward", {k: result.get(f"{EVAL_PREFIX}{k}") for k in keys}


def _is_number(value: Any) -> bool:
    try:
        return not math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def format_line(result: Mapping[str, Any]) -> str:
    """One plain progress line, e.g. ``iter 12 | t=6144 | reward 87.3 (min 12.0, ...``
    (``eval reward`` when only the evaluation episodes have a return)."""
    label, stats = episode_stats(result)
    return (
        f"iter {result.get('training_iteration', '?')} | "
        f"t={result.get('timesteps_total', '?')} | "
        f"{label} {format_number(stats.get('episode_reward_mean'))} "
        f"(min {format_number(stats.get('episode_reward_min'))}, "
        f"max {format_number(stats.get('episode_reward_max'))}) | "
        f"len {format_number(stats.get('episode_len_mean'))} | "
        f"{format_number(result.get('sample_throughput'), '.0f')} steps/s | "
        f"{format_number(result.get('time_total_s'))}s"
    )


class TrainingProgress:
    """Per-iteration progress display; use as a context manager around the training loop.

    Args:
        stop: the stop conditions ``{result_key: target}`` (one bar each).
        title: shown above the live panel (e.g. ``"PPO on CartPole-v1"``).
        quiet: print nothing per iteration.
        live: force the rich live panel on or off; default: on when stdout is a terminal.
    """

    def __init__(
        self,
        stop: Mapping[str, float],
        title: str = "",
        quiet: bool = False,
        live: bool | None = None,
    ):
        self.stop_conditions = dict(stop)
        self.title = title
        self.quiet = quiet
        if live is None:
            live = not quiet and _stdout_is_terminal()
        self.use_live = bool(live) and not quiet
        self._live: Any = None
        self._last: Mapping[str, Any] | None = None
        self._last_evaluation: dict[str, Any] = {}

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> TrainingProgress:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Start the live panel (no-op in plain or quiet mode)."""
        if self.use_live and self._live is None:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self.renderable(None),
                console=Console(),
                refresh_per_second=4,
                transient=False,
            )
            self._live.start()

    def close(self) -> None:
        """Stop the live panel, leaving its last frame on screen."""
        if self._live is not None:
            live, self._live = self._live, None
            live.update(self.renderable(self._last), refresh=True)
            live.stop()

    # -- updates -----------------------------------------------------------------------
    def update(self, result: Mapping[str, Any]) -> None:
        """Show one iteration's result (with the latest evaluation's, if it had none)."""
        evaluation = {k: v for k, v in result.items() if k.startswith(EVAL_PREFIX)}
        if evaluation:
            self._last_evaluation = evaluation
        else:
            result = {**result, **self._last_evaluation}
        self._last = result
        if self.quiet:
            return
        if self._live is not None:
            self._live.update(self.renderable(result), refresh=True)
        else:
            print(format_line(result), flush=True)

    @property
    def last(self) -> Mapping[str, Any]:
        """The latest result shown, with the latest evaluation's keys carried over
        (empty before the first)."""
        return self._last or {}

    def log(self, message: str) -> None:
        """Print a message (above the live panel when it is running); silent when quiet."""
        if self.quiet:
            return
        if self._live is not None:
            self._live.console.print(message, markup=False, highlight=False)
        else:
            print(message, flush=True)

    # -- rendering ---------------------------------------------------------------------
    def renderable(self, result: Mapping[str, Any] | None) -> Any:
        """The rich renderable of the live panel for ``result`` (None: no result yet)."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        r: Mapping[str, Any] = result or {}
        stats = Table.grid(padding=(0, 2))
        stats.add_column(style="bold")
        stats.add_column()
        stats.add_row("iteration", format_number(r.get("training_iteration"), "d"))
        stats.add_row("timesteps", format_number(r.get("timesteps_total"), "d"))
        label, episodes = episode_stats(r)
        prefix = EVAL_PREFIX if label != "reward" else ""
        reward = format_number(episodes.get("episode_reward_mean"))
        low = format_number(episodes.get("episode_reward_min"))
        high = format_number(episodes.get("episode_reward_max"))
        stats.add_row(f"{prefix}episode_reward_mean", f"{reward}  (min {low}, max {high})")
        stats.add_row(f"{prefix}episode_len_mean", format_number(episodes.get("episode_len_mean")))
        stats.add_row("steps/s", format_number(r.get("sample_throughput"), ".0f"))
        stats.add_row("time", f"{format_number(r.get('time_total_s'))}s")

        bars = Table.grid(padding=(0, 2))
        bars.add_column(style="bold")
        bars.add_column(width=30)
        bars.add_column(justify="right")
        for key, target in self.stop_conditions.items():
            value = r.get(key)
            frac = stop_fraction(value, target)
            bars.add_row(
                Text(f"{key} >= {format_target(target)}"),
                ProgressBar(total=1.0, completed=frac, width=30),
                f"{format_number(value, 'auto')} ({frac:.0%})",
            )
        parts: list[Any] = []
        if self.title:
            parts.append(Text(self.title, style="bold"))
        parts += [stats, "stop when any reaches its target:", bars]
        return Group(*parts)


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
