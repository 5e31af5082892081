"""The benchmark results page (``benchmarks/results.md``): the throughput records of
``benchmarks/records/*.json`` and the learning records."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .markdown import code, shift_headings, table
from .paths import CURVES, RECORDS, RESULTS, ROOT
from .records import (
    BLOCK,
    Record,
    commit_cell,
    machine_cell,
    record_extras,
    record_markdown,
    summary_table,
)


def results_page(all_records: list[Record]) -> str:
    """The benchmark results page: the optimizer, sampling and serving records
    (``throughput_section``), a table of every learning record, then
    ``benchmarks/RESULTS.md`` as written (each block followed by its notes and
    figures), then the records that have a directory under ``benchmarks/curves/`` but no
    block."""
    page = "benchmarks/results.md"
    out = [
        "# Benchmark results\n",
        "Generated from the benchmark records: `benchmarks/records/*.json` (the optimizer, "
        "sampling and serving benchmarks), `benchmarks/curves/*/summary.json` (what "
        "ran, its commit, the machine), `benchmarks/RESULTS.md` (the table each benchmark "
        "script writes, with its command, and the notes written beside them) and the "
        "figures and notes in `benchmarks/curves/`. How each benchmark is run and "
        "reproduced: [benchmarks](index.md).\n",
        throughput_section(),
        "## Learning results at a glance\n",
        summary_table([r for r in all_records if r.summary.get("runs")]),
    ]
    by_name = {r.name: r for r in all_records}
    if RESULTS.exists():

        def with_extras(m: re.Match[str]) -> str:
            return m["body"].strip() + "\n\n" + record_extras(by_name[m["name"]], page)

        text = BLOCK.sub(with_extras, RESULTS.read_text())
        text = re.sub(r"^# .*\n", "", text, count=1).strip()
        out += ["## `benchmarks/RESULTS.md`\n", shift_headings(text, 3)]
    rest = [r for r in all_records if not r.block and r.name != "nesting-overhead"]
    if rest:
        out.append("## Other records in `benchmarks/curves/`\n")
        out += [record_markdown(r, page) for r in rest]
    nesting = CURVES / "nesting-overhead" / "nesting_overhead.json"
    if nesting.exists():
        out.append(json_record_markdown(nesting))
    return "\n".join(out) + "\n"


def json_record_markdown(path: Path, title: str | None = None) -> str:
    """A benchmark's JSON record (``hierl.bench.report.write_record``'s fields) as
    Markdown: its provenance (``record_provenance``) and its figures
    (``FIGURE_TABLES[benchmark]``, else ``generic_figures``)."""
    data = json.loads(path.read_text())
    benchmark = data.get("benchmark", path.stem)
    render = FIGURE_TABLES.get(benchmark, generic_figures)
    heading = title or path.parent.name
    return "\n".join(
        [f"### {heading}\n", record_provenance(data, path), render(data.get("figures") or {})]
    )


def record_provenance(data: dict[str, Any], path: Path) -> str:
    """Where a JSON record's figures come from: its file, command (the record's own,
    else the ``python benchmarks/<benchmark>.py ...`` that ``RESULTS.md`` names), commit,
    machine, date, config and the machine's load while it ran."""
    command = data.get("command") or ""
    if not command:
        script = f"benchmarks/{data.get('benchmark', path.stem)}.py"
        text = RESULTS.read_text() if RESULTS.exists() else ""
        found = re.search(rf"`(python {re.escape(script)}[^`]*)`", text)
        command = found.group(1) if found else ""
    shown = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    facts = [
        f"Record: `{shown}`.",
        f"Command (from the repository root): {code(command) if command else '-'}.",
        f"Commit: {commit_cell(data)}.",
        f"Machine: {machine_cell(data)}.",
        f"Date: {data.get('date', '?')}.",
        f"Config: {code(data.get('config', {}))}.",
    ]
    load = load_sentence(data)
    return "\n".join(f"- {f}" for f in ([load] if load else []) + facts) + "\n"


def load_sentence(data: dict[str, Any]) -> str:
    """ "Measured at load X on N cores ...": the record's load averages before and after
    the run, and, on a busy machine, that these are not quiet-machine figures."""
    loads = data.get("load_averages") or {}
    before, after = loads.get("before"), loads.get("after")
    if not before and not after:
        return ""
    cores = (data.get("machine") or {}).get("nproc") or "?"
    peak = max(x[0] for x in (before, after) if x)

    def avg(x: list[float] | None) -> str:
        return " / ".join(f"{v:.2f}" for v in x) if x else "?"

    text = (
        f"**Measured at load {peak:.2f} on {cores} cores** (the higher 1-minute load "
        f"average; 1 / 5 / 15-minute: {avg(before)} before the run, {avg(after)} after)"
    )
    if isinstance(cores, int) and peak > 0.25 * cores:
        text += (
            ": other processes were using the machine, so these are not quiet-machine "
            "figures; compare the ratios, measured in the same run, rather than the rates"
        )
    return text + "."


def generic_figures(figures: dict[str, Any]) -> str:
    """Figures as Markdown: scalars in one table, each list of measurements in its own."""

    def rows_of_dicts(value: Any) -> bool:
        return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)

    out = [
        table(
            ["figure", "value"], [[k, code(v)] for k, v in figures.items() if not rows_of_dicts(v)]
        )
    ]
    for key, values in figures.items():
        if rows_of_dicts(values):
            header = list(values[0])
            rows = [[_number(v.get(h)) for h in header] for v in values]
            out += [f"`{key}`:\n", table(header, rows)]
    return "\n".join(out)


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "-"


SAMPLING_GROUPS = {
    "pendulum": ("Pendulum-v1, 64 sub-envs, in process", "raw"),
    "cartpole_vec": ("CartPole-v1 make_vec, 1024 sub-envs, in process", "raw"),
    "pendulum_procs": (
        "Pendulum-v1: raw loop in 1 vs 2 plain processes (machine ceiling)",
        "1 process",
    ),
    "cartpole_vec_procs": ("CartPole-v1 make_vec: raw loop in 1 vs 2 plain processes", "1 process"),
    "pendulum_remote": ("Pendulum-v1: remote evaluators (Ray actors)", "1 remote"),
    "cartpole_vec_remote": ("CartPole-v1 make_vec: remote evaluators (Ray actors)", "1 remote"),
}
"""``benchmarks/sampling.py``'s measurement groups: title and the baseline candidate
their ratios are against (measured in the same rounds)."""


def sampling_figures(figures: dict[str, Any]) -> str:
    """``benchmarks/sampling.py``: per group, actions/s (median over rounds) of each
    candidate, its ratio to the group's baseline, and the background load."""
    rows = []
    for key, (title, base) in SAMPLING_GROUPS.items():
        group = figures.get(key)
        if not group:
            continue
        med = group["median_actions_per_s"]
        background = (group.get("cpu_cores_rounds") or {}).get("outside")
        for name, value in med.items():
            rows.append(
                [
                    title,
                    name,
                    f"{value:,.0f}",
                    f"{_ratio(value, med.get(base))} of {base}",
                    f"{background:.2f}" if background is not None else "-",
                ]
            )
    header = ["measurement", "candidate", "actions/s", "ratio (same run)", "other processes' cores"]
    targets = figures.get("targets") or {}
    notes = ", ".join(f"{k} >= {v:g}" for k, v in targets.items())
    return table(header, rows) + (f"\nTargets: {notes}.\n" if notes else "")


def optimizer_figures(figures: dict[str, Any]) -> str:
    """``hierl bench optimizers``: the strategy table (ratios against ``local``), the
    async overhead and the Table-3 SGD throughput (ratios against pure torch)."""
    out = []
    strategies = figures.get("strategies") or []
    ok = {r["optimizer"]: r for r in strategies if "error" not in r}
    base = ok.get("local", {}).get("learner_samples_per_s")
    rows = [
        [f"`{r['optimizer']}`", "failed: " + r["error"], "", "", "", "", ""]
        if "error" in r
        else [
            f"`{r['optimizer']}`",
            f"{r['env_samples_per_s']:,.0f}",
            f"{r['learner_samples_per_s']:,.0f}",
            _ratio(r["learner_samples_per_s"], base),
            f"{r['updates_per_s']:,.1f}",
            f"{r['driver_bytes_per_iter'] / 1024:,.1f}",
            f"{r['wall_s']:.1f}",
        ]
        for r in strategies
    ]
    if rows:
        header = [
            "strategy",
            "env samples/s",
            "learner samples/s",
            "learner samples/s vs `local`",
            "updates/s",
            "driver KiB / iteration",
            "timed seconds",
        ]
        out += ["Strategies (same trainer, same run):\n", table(header, rows)]
    sgd = figures.get("sgd")
    if sgd:
        rows = [
            [name, f"{value:,.0f}", f"{sgd['ratio_to_pure_torch'][name]:.3f}x"]
            for name, value in sgd["samples_per_s"].items()
        ]
        out += [
            f"SGD throughput, Humanoid-sized PPO update ({sgd['rows']:,} rows, "
            f"{sgd['minibatch']:,}-row minibatches, {sgd['num_sgd_iter']} epochs; target: "
            f"`multi_gpu`, 1 tower >= 0.9x pure torch, "
            f"{'met' if sgd.get('target_met') else 'not met'}):\n",
            table(["learner", "samples/s", "vs pure torch (same run)"], rows),
        ]
    overhead = figures.get("async_overhead")
    if overhead:
        out += [
            "`async` driver overhead per gradient (1 evaluator; target <= 2 actor round trips, "
            f"{'met' if overhead.get('target_met') else 'not met'}):\n",
            table(
                ["figure", "value"],
                [[k, _number(v)] for k, v in overhead.items() if k != "target_met"],
            ),
        ]
    return "\n".join(out)


def serve_figures(figures: dict[str, Any]) -> str:
    """``benchmarks/serve.py``: every measurement, and dynamic batching's gain over
    unbatched serving at the same concurrency (same run)."""
    rows = [
        [
            r["model"],
            r["mode"],
            r["obs"],
            r["clients"],
            f"{r['requests_per_s']:,.0f}",
            f"{r['observations_per_s']:,.0f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
        ]
        for r in figures.get("rows") or []
    ]
    header = [
        "model",
        "mode",
        "obs / request",
        "clients",
        "requests/s",
        "obs/s",
        "p50 ms",
        "p99 ms",
    ]
    gains = figures.get("batching_gain") or {}
    gain_rows = [[m, f"{g:.2f}x", "met" if g >= 3.0 else "not met"] for m, g in gains.items()]
    return "\n".join(
        [
            table(header, rows),
            "Dynamic batching against unbatched serving, requests/s at the highest "
            "concurrency (same run; target >= 3x):\n",
            table(["model", "batched / unbatched", "target"], gain_rows),
        ]
    )


FIGURE_TABLES = {
    "optimizers": optimizer_figures,
    "sampling": sampling_figures,
    "sampling_quick": sampling_figures,
    "serve": serve_figures,
}
"""The benchmark scripts whose figures have their own tables (by the record's
``benchmark``); others show ``generic_figures``."""


def throughput_records() -> list[Path]:
    """The committed records of the optimizer, sampling and serving benchmarks
    (``benchmarks/records/*.json``, each written by its script's ``--record``)."""
    return sorted(RECORDS.glob("*.json")) if RECORDS.exists() else []


def throughput_section() -> str:
    """The results page's section of ``benchmarks/records/``: one subsection per record."""
    paths = throughput_records()
    if not paths:
        return ""
    out = [
        "## Optimizer, sampling and serving benchmarks\n",
        "Generated from `benchmarks/records/*.json`, which each script writes with "
        "`--record` (run the command shown, from the repository root, to reproduce a "
        "record). Each record states the machine's load while it ran: on a shared machine "
        "the rates are not quiet-machine figures, while the ratios compare candidates "
        "measured in the same run.\n",
    ]
    for path in paths:
        data = json.loads(path.read_text())
        benchmark = data.get("benchmark", path.stem)
        what = RECORD_SCRIPTS.get(benchmark, f"`benchmarks/{benchmark}.py`")
        out.append(json_record_markdown(path, f"{path.stem}: {what}"))
    return "\n".join(out)


RECORD_SCRIPTS = {
    "optimizers": "policy optimizers (`benchmarks/optimizers.py`, `hierl bench optimizers`)",
    "sampling": "sampling throughput (`benchmarks/sampling.py`)",
    "sampling_quick": "sampling throughput (`benchmarks/sampling.py --quick`)",
    "serve": "serving latency and throughput (`benchmarks/serve.py`)",
}
"""What each benchmark measures, for the headings."""


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
