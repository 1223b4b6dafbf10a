"""Writes benchmarks/README.md from benchmarks/results/*.json, so that no number in it is typed by hand.

    python benchmarks/make_readme.py            # rewrite benchmarks/README.md
    python benchmarks/make_readme.py --check    # exit status 1 when README.md is not what the JSON gives

Every benchmark script writes ``results/<name>.json`` through ``harness.write_results``: the machine (versions,
cores, CPU, load, BLAS environment, gpclass commit), the time it ``finished`` and the script's own results (a few
older files hold the results alone).  The README gets a summary table of headline ratios (``HEADLINES``), then one
section per script: its title and how to run it (the script's module docstring, not repeated here), what it measures
(``SECTIONS``: prose without numbers) and the tables of its results.  A ``Group`` gathers the files of a script that
measure the same thing: the newest by ``finished`` is the current figure, the others are listed as earlier runs (a
group whose files are pieces of one study shows every file).  Each group has a renderer that turns a file's results
into Markdown rows; files no renderer claims get ``generic``, a table of their scalars, so that every results file
appears.  ``readme_text()`` returns the text without writing it (``tests/test_benchmarks_readme.py``).  The notes
typed by hand before this file existed are in ``HISTORY.md``.
"""

import argparse
import ast
import functools
import itertools
import json
import math
import re
import statistics
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
HISTORY = HERE / "HISTORY.md"
NOT_BENCHMARKS = {"harness", "make_readme"}
MAX_ROWS = 12
MAX_COLUMNS = 9
MISSING = object()


# --------------------------------------------------------------------------------------------------------------------
# Results files
# --------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One results file: its name (the file's stem), results, and where and when it was measured ("" if unknown)."""

    name: str
    results: object
    finished: str = ""
    commit: str = ""
    machine: dict = field(default_factory=dict)

    @property
    def file(self) -> str:
        return f"{self.name}.json"

    @property
    def recency(self) -> tuple[str, str]:
        """Sort key, newest last: the time it finished (files without one first), then the name."""
        return self.finished, self.name


def load_run(path: Path) -> Run:
    """A results file as ``harness.write_results`` writes it, or (older files) the script's results alone."""
    record = json.loads(path.read_text())
    if isinstance(record, dict) and "machine" in record and "results" in record:
        machine = record["machine"] if isinstance(record["machine"], dict) else {}
        return Run(path.stem, record["results"], str(record.get("finished") or ""), str(machine.get("commit") or ""),
                   machine)
    source = record.get("source", {}) if isinstance(record, dict) else {}
    dirty = " + uncommitted changes" if source.get("gpclass_uncommitted_changes") else ""
    commit = source.get("git_head", "") + dirty
    return Run(path.stem, record, commit=commit)


def load_runs(directory: Path = RESULTS) -> list[Run]:
    return [load_run(path) for path in sorted(directory.glob("*.json"))]


def newest_first(runs: list[Run]) -> list[Run]:
    return sorted(runs, key=lambda run: run.recency, reverse=True)


def script_of(name: str, scripts: list[str]) -> str | None:
    """The script that wrote results file ``name``: the longest script name it starts with."""
    owners = [s for s in scripts if name == s or name.startswith(s + "_")]
    return max(owners, key=len) if owners else None


# --------------------------------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------------------------------

def is_scalar(x) -> bool:
    return x is None or isinstance(x, (bool, int, float, str))


def number(x, digits: int = 4) -> str:
    """A value as a table cell: floats to ``digits`` significant digits, short lists joined, the rest elided."""
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "n/a"
        return f"{x:.{digits}g}"
    if isinstance(x, str):
        return x
    if isinstance(x, list) and len(x) <= 4 and all(is_scalar(v) and not isinstance(v, str) for v in x):
        return ", ".join(number(v, 3) for v in x)
    return "…"


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def duration(seconds) -> str:
    """Seconds in us, ms or s."""
    if not finite(seconds):
        return "n/a"
    if seconds < 0:
        return "-" + duration(-seconds)
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 100.0:
        return f"{seconds:.2f} s"
    return f"{seconds:.0f} s"


def millis(ms) -> str:
    return duration(ms / 1e3) if finite(ms) else "n/a"


def times(ratio) -> str:
    return f"{ratio:.2f}x" if finite(ratio) else "n/a"


def percent(fraction) -> str:
    return f"{100 * fraction:.2f} %" if finite(fraction) else "n/a"


def megabytes(mb) -> str:
    return f"{mb:.0f} MB" if finite(mb) else "n/a"


def fixed(digits: int) -> Callable[[object], str]:
    return lambda x: f"{x:.{digits}f}" if finite(x) else number(x)


def median(values) -> float:
    return statistics.median(values) if values else math.nan


def mean(values) -> float:
    values = [v for v in values if finite(v)]
    return statistics.fmean(values) if values else math.nan


def cell(x) -> str:
    text = x if isinstance(x, str) else number(x)
    return text.replace("|", "\\|").replace("\n", " ")


def table(headers: list[str], rows: list) -> list[str]:
    """A Markdown table."""
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]


def lookup(record, path: str):
    """``record["a"]["b"]`` for path ``"a.b"``; MISSING where a key is absent."""
    for key in path.split("."):
        if not isinstance(record, dict) or key not in record:
            return MISSING
        record = record[key]
    return record


Column = tuple[str, str, Callable[[object], str]]


def records(items: list[dict], columns: list[Column]) -> list[str]:
    """A table of dicts, one row each: (header, key path, format) per column; an absent key is an empty cell."""
    rows = [[formatted(lookup(item, key), fmt) for _, key, fmt in columns] for item in items]
    return table([header for header, _, _ in columns], rows)


def formatted(value, fmt: Callable[[object], str]) -> str:
    """``fmt(value)``; an empty cell for an absent key, "n/a" for a null value."""
    return "" if value is MISSING else "n/a" if value is None else fmt(value)


def labelled(mapping: dict, label: str = "name") -> list[dict]:
    """{key: dict} as a list of dicts with the key under ``label``."""
    return [{label: key, **value} for key, value in mapping.items() if isinstance(value, dict)]


# --------------------------------------------------------------------------------------------------------------------
# The fallback renderer: every scalar, truncated
# --------------------------------------------------------------------------------------------------------------------

def flat_fields(record: dict, prefix: str = "") -> dict:
    """A record's scalars (nested dicts' too, as ``a.b``) and short numeric lists."""
    out = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_fields(value, name + "."))
        elif is_scalar(value) or number(value) != "…":
            out[name] = value
    return out


def record_table(items: list[dict], labels: list[str] | None = None) -> list[str]:
    rows = [flat_fields(item) for item in items]
    keys = list(dict.fromkeys(key for row in rows for key in row))
    shown = keys[:MAX_COLUMNS - (labels is not None)]
    lines = table(([""] if labels is not None else []) + shown,
                  [([labels[i]] if labels is not None else []) + [row.get(key, "") for key in shown]
                   for i, row in enumerate(rows[:MAX_ROWS])])
    notes = []
    if len(rows) > MAX_ROWS:
        notes.append(f"{len(rows) - MAX_ROWS} more rows")
    if len(keys) > len(shown):
        notes.append(f"{len(keys) - len(shown)} more columns")
    return lines + ([f"({' and '.join(notes)} in the JSON)"] if notes else [])


def is_records(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def is_keyed_records(value) -> bool:
    return (isinstance(value, dict) and len(value) >= 2 and all(isinstance(v, dict) for v in value.values())
            and all(any(is_scalar(x) for x in v.values()) for v in value.values()))


def collect(value, path: str, tables: list, scalars: list) -> None:
    """Walks a results structure: lists and maps of records become tables, other scalars a key/value list."""
    if is_records(value):
        tables.append((path, record_table(value)))
    elif is_keyed_records(value):
        tables.append((path, record_table(list(value.values()), [str(k) for k in value])))
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "arguments":
                collect(item, f"{path}.{key}" if path else str(key), tables, scalars)
    elif is_scalar(value) or number(value) != "…":
        scalars.append((path, value))


def generic(run: Run) -> list[str]:
    """Any results: their tables (at most three) and scalars, each truncated, with a pointer to the file."""
    tables, scalars = [], []
    collect(run.results, "", tables, scalars)
    lines = []
    if scalars:
        lines += table(["quantity", "value"], scalars[:MAX_ROWS])
        if len(scalars) > MAX_ROWS:
            lines.append(f"({len(scalars) - MAX_ROWS} more values in the JSON)")
    for path, rows in tables[:3]:
        lines += ([""] if lines else []) + ([f"`{path}`:", ""] if path else []) + rows
    if len(tables) > 3:
        lines += ["", f"({len(tables) - 3} more tables in the JSON)"]
    return lines or ["(no scalar results: see the JSON)"]


# --------------------------------------------------------------------------------------------------------------------
# Renderers of particular results
# --------------------------------------------------------------------------------------------------------------------

def laplace_vs_sklearn(run: Run) -> list[str]:
    return records(run.results, [("section", "section", str), ("quantity", "quantity", str), ("value", "value", str)])


def laplace_vs_sklearn_ratios(run: Run) -> list[str]:
    """The summary lines with the two libraries' times and their ratios."""
    keep = ("RATIO", "gpclass value+grad", "sklearn lml+grad", "gpclass vmap(fit) total", "sklearn loop total",
            "gpclass fit", "sklearn fit")
    return records([r for r in run.results if r["quantity"].startswith(keep)],
                   [("section", "section", str), ("quantity", "quantity", str), ("value", "value", str)])


def laplace_vs_sklearn_value(run: Run, section: str, quantity: str) -> str | None:
    """The value of one summary line (section prefix, quantity prefix) of a laplace_vs_sklearn results file."""
    for row in run.results:
        if row["section"].startswith(section) and row["quantity"].startswith(quantity):
            return row["value"]
    return None


def laplace_vs_sklearn_brief(run: Run) -> str:
    sections = list(dict.fromkeys(row["section"] for row in run.results))
    ratio = laplace_vs_sklearn_value(run, sections[0], "RATIO")
    return f"{sections[0]}: scikit-learn / gpclass per evaluation {ratio}" if ratio else ", ".join(sections)


def matern_vs_sklearn(run: Run) -> list[str]:
    return records(run.results, [
        ("data", "data", str), ("n train", "n_train", number), ("d", "d", number),
        ("log q relative difference", "rel_diff", lambda x: f"{x:.1e}"), ("gpclass status", "status_gpclass", str),
        ("test error gpclass", "test_error_gpclass", percent), ("scikit-learn", "test_error_sklearn", percent),
        ("fit gpclass", "fit_gpclass", duration), ("fit scikit-learn", "fit_sklearn", duration),
        ("scikit-learn / gpclass", "ratio_sklearn_over_gpclass", times),
        ("gpclass compile", "compile_gpclass", duration)])


def gpml_ep(run: Run) -> list[str]:
    rows = []
    for n, configs in run.results.items():
        gpml = configs["gpml"]
        rows.append([n, "GPML infEP", fixed(6)(gpml["log_z"]), "", duration(median(gpml["seconds"])), ""])
        rows += [[n, name, fixed(6)(c["log_z"]), number(c.get("sweeps")), duration(c["seconds"]),
                  times(c["ratio_gpml_over_gpclass"])] for name, c in configs.items() if name != "gpml"]
    return table(["n", "run", "log Z", "sweeps", "time per evaluation", "GPML / gpclass"], rows)


def gpml_ep_ratio(run: Run, n: str) -> str | None:
    configs = run.results.get(n) if isinstance(run.results, dict) else None
    gpclass = [c for name, c in (configs or {}).items() if name != "gpml"]
    return times(gpclass[0]["ratio_gpml_over_gpclass"]) if gpclass else None


def gpml_ep_brief(run: Run) -> str:
    return "; ".join(f"n = {n}: GPML / gpclass {gpml_ep_ratio(run, n)}" for n in run.results)


def gpml_sparse(run: Run) -> list[str]:
    return records(labelled(run.results, "approximation"), [
        ("approximation", "approximation", str), ("n", "n", number), ("m", "m", number),
        ("log Z - GPML's", "log_z_diff", lambda x: f"{x:.1e}"),
        ("gradient - GPML's", "grad_diff", lambda g: f"{max(abs(v) for v in g):.1e}"),
        ("dZ relative", "dz_max_relative_diff", lambda x: f"{x:.1e}"), ("gpclass steps", "gpclass.steps", number),
        ("gpclass", "gpclass.seconds", duration), ("GPML", "gpml.seconds", lambda s: duration(median(s))),
        ("GPML / gpclass", "ratio_gpml_over_gpclass", times)])


def sparse_accuracy(run: Run) -> list[str]:
    return records(list(run.results.values()), [
        ("data", "dataset", str), ("n", "n", number), ("m", "m", number), ("method", "method", str),
        ("fitted here", "fitted", number), ("test error", "error", percent), ("Bayes error", "bayes_error", percent),
        ("first call", "first_s", duration), ("second call", "second_s", duration), ("steps", "steps", number),
        ("status", "status", str), ("peak memory", "max_rss_mb", megabytes)])


def sparse_scaling(run: Run) -> list[str]:
    """Seconds per value and gradient, one row per (method, m), one column per n."""
    sizes = sorted({row["n"] for row in run.results})
    cells: dict[tuple, dict] = {}
    for row in run.results:
        cells.setdefault((row["method"], row.get("m")), {})[row["n"]] = duration(row["seconds"])
    rows = [[method, number(m) if m else ""] + [by_n.get(n, "") for n in sizes] for (method, m), by_n in cells.items()]
    return table(["method", "m"] + [f"n = {n}" for n in sizes], rows)


def sparse_ep_sweeps(run: Run) -> list[str]:
    return records(list(run.results.values()), [
        ("n", "n", number), ("sweeps", "sweeps", number), ("status", "status", str),
        ("last site change", "max_change", lambda x: f"{x:.1e}"), ("log Z", "log_z", fixed(2)),
        ("time", "seconds", duration), ("test error", "error", percent), ("peak memory", "max_rss_mb", megabytes)])


def usps10_sparse(run: Run) -> list[str]:
    return records(labelled(run.results, "model"), [
        ("model", "model", str), ("n", "n", number), ("m", "m", number), ("log q", "log_marginal", fixed(2)),
        ("Newton steps", "newton_steps", number), ("status", "status", str), ("test error", "error", percent),
        ("information (bits)", "information_bits", fixed(3)), ("first call", "first_s", duration),
        ("second call", "second_s", duration), ("peak memory", "max_rss_mb", megabytes)])


def ep_timing(run: Run) -> list[str]:
    return records(run.results, [
        ("n", "n", number), ("method", "method", str), ("inner iterations", "iters", number),
        ("compile", "compile", duration), ("run (median)", "run", duration), ("run (min)", "run_min", duration),
        ("run / one Cholesky", "choleskys", fixed(1)), ("log q", "log_z", fixed(4))])


def ep_timing_brief(run: Run) -> str:
    return "; ".join(f"{r['method']} n = {r['n']}: {duration(r['run'])}" for r in run.results)


def svgp(run: Run) -> list[str]:
    return records(labelled(run.results, "run"), [
        ("run", "run", str), ("n", "n", number), ("m", "m", number), ("batch", "batch", number),
        ("epochs", "epochs", number), ("test error", "error", percent), ("Bayes error", "bayes_error", percent),
        ("fit", "fit_s", duration), ("per step", "step_ms", millis), ("compile", "compile_s", duration),
        ("peak memory", "max_rss_mb", megabytes)])


def svgp_scaling_m(run: Run) -> list[str]:
    return records(run.results, [("m", "m", number), ("batch", "batch", number), ("per step", "step_ms", millis)])


SVGP_RUNS = r"svgp_vs_gpflow(_m500)?(_s\d+[a-z]?)?"  # this version's runs: all three sizes, or m = 500 alone


def svgp_vs_gpflow(run: Run) -> list[str]:
    return records(run.results, [
        ("n", "n", number), ("m", "m", number), ("batch", "batch", number), ("steps", "steps", number),
        ("per step gpclass", "gpclass.step_ms", millis), ("GPflow", "gpflow.step_ms", millis),
        ("GPflow / gpclass", "speedup", times), ("first call gpclass", "gpclass.first_call_s", duration),
        ("GPflow", "gpflow.first_call_s", duration), ("test error gpclass", "gpclass.test_error", percent),
        ("GPflow", "gpflow.test_error", percent), ("ELBO gpclass", "gpclass.elbo", fixed(1)),
        ("GPflow", "gpflow.elbo", fixed(1))])


def svgp_vs_gpflow_brief(run: Run) -> str:
    return "; ".join(f"n = {r['n']}, m = {r['m']}: GPflow / gpclass {times(r['speedup'])}" for r in run.results)


def svgp_memmap(run: Run) -> list[str]:
    return records(run.results, [
        ("n", "n", number), ("m", "m", number), ("batch", "batch", number), ("steps", "steps", number),
        ("file", "file_gb", lambda x: f"{x:.1f} GB"), ("per step", "step_ms", millis),
        ("an epoch", "epoch_s", duration),
        ("first call", "first_call_s", duration), ("peak resident", "memory_mb.VmHWM", megabytes),
        ("anonymous", "memory_mb.RssAnon", megabytes), ("file-backed", "memory_mb.RssFile", megabytes),
        ("test error", "test_error", percent), ("Bayes error", "bayes_error", percent)])


def svgp_processes(run: Run) -> list[str]:
    return records(run.results, [
        ("processes", "processes", number), ("loop", "loop", str), ("per step", "step_ms", millis),
        ("speedup", "speedup", times), ("efficiency", "efficiency", percent), ("ELBO", "elbo", fixed(3))])


def many_fits(run: Run) -> list[str]:
    return records(labelled(run.results, "configuration"), [
        ("configuration", "configuration", str), ("devices", "devices", number), ("run", "run", duration),
        ("compile", "compile", duration), ("scikit-learn / gpclass", "ratio_sklearn_over_gpclass", times),
        ("largest log q difference", "max_lml_diff_vs_sklearn", lambda x: f"{x:.1e}")])


def many_fits_best(run: Run) -> str:
    best = max((c for c in run.results.values() if "ratio_sklearn_over_gpclass" in c),
               key=lambda c: c["ratio_sklearn_over_gpclass"])
    name = next(k for k, c in run.results.items() if c is best)
    return f"{times(best['ratio_sklearn_over_gpclass'])} ({name})"


def restarts(run: Run) -> list[str]:
    return records(run.results, [
        ("n", "n", number), ("starts", "starts", number), ("one after another", "serial", duration),
        ("vmapped", "vmapped", duration), ("loop of estimators", "loop", duration),
        ("scikit-learn", "sklearn", duration),
        ("best log q (gpclass)", "serial_best", fixed(6)), ("scikit-learn", "sklearn_best", fixed(6))])


def ep_schedules(run: Run) -> list[str]:
    rows = []
    for data, result in run.results.items():
        seq, par = result["sequential"], result["parallel"]
        rows.append([data] + [x for s in (seq, par) for x in (
            f"{s['converged']}/{s['points']}", f"{number(s['median_sweeps'])} / {s['max_sweeps']}",
            duration(s["run_s"]))] + [f"{result['max_log_z_diff']:.1e}", f"{result['max_grad_diff']:.1e}"])
    return table(["data", "sequential: converged", "sweeps (median / max)", "time for the grid",
                  "parallel: converged", "sweeps (median / max)", "time for the grid", "largest log Z difference",
                  "largest gradient difference"], rows)


def ep_anderson_grid(run: Run) -> list[str]:
    rows = [[problem, f"{r['converged']['anderson']} / {r['converged']['plain']}",
             f"{r['sweeps']['anderson']} / {r['sweeps']['plain']}", len(r["differences"])]
            for problem, r in run.results.items()]
    return table(["likelihood, schedule", "converged (Anderson / plain)", "total sweeps (Anderson / plain)",
                  "problems that differ"], rows)


def compile_options(run: Run) -> list[str]:
    configs = list(next(iter(run.results.values()))["compile_cpu"])
    rows = [[method, r["n_run"]] + [duration(r["compile_cpu"][c]) for c in configs]
            + [duration(r["run_median"][c]) for c in configs] for method, r in run.results.items()]
    return table(["method", "n (run)"] + [f"compile CPU: {c}" for c in configs] + [f"run: {c}" for c in configs], rows)


def lapack_threads(run: Run) -> list[str]:
    loads = [key for key in run.results if key.endswith("_busy")]
    workloads = list(dict.fromkeys(w for key in loads for w in run.results[key]))
    rows = [[w] + [x for key in loads for x in (
        duration(run.results[key].get(w, {}).get("default_s")),
        duration(run.results[key].get(w, {}).get("one_s")))] for w in workloads]
    headers = [h for key in loads for h in (f"{key.split('_')[0]} busy: default threads", "one thread")]
    return [f"Default BLAS threads: {run.results.get('default_threads')}.", ""] + table(["workload"] + headers, rows)


def memory(run: Run) -> list[str]:
    rows = []
    for name, r in run.results.items():
        temps = {limit: m["temp"] for limit, m in r["max_steps"].items()}
        rows.append([name, r["n"], megabytes(max(temps.values()) / 2**20), fixed(2)(r["temp_in_matrices"]),
                     "yes" if len(set(temps.values())) == 1 else "no: " + ", ".join(map(str, temps.values()))])
    return table(["method / n", "n", "temporary memory", "in n x n float64 matrices",
                  "same for every iteration limit"], rows)


def float32_laplace_grid(run: Run) -> list[str]:
    return records(labelled(run.results["summary"], "status"), [
        ("status", "status", str), ("problems", "count", number),
        ("largest residual", "residual_max", lambda x: f"{x:.1e}"),
        ("test mean difference (relative): min", "relative_test_mean_difference_min", lambda x: f"{x:.1e}"),
        ("max", "relative_test_mean_difference_max", lambda x: f"{x:.1e}")])


def before_after(run: Run) -> list[str]:
    return [f"Before: `{run.results['before']}`; after: this file's commit.", ""] + records(run.results["rows"], [
        ("workload", "workload", str), ("before", "before_run", duration), ("after", "after_run", duration),
        ("after / before", "ratio", times), ("compile before", "before_compile", duration),
        ("after", "after_compile", duration), ("log q relative difference", "log_q_relative_difference",
                                               lambda x: f"{x:.1e}")])


def before_after_brief(run: Run) -> str:
    ratios = [r["ratio"] for r in run.results["rows"]]
    return (f"against `{run.results['before']}`, {len(ratios)} workloads, after / before "
            f"{times(min(ratios))} to {times(max(ratios))}")


def code_metrics(run: Run) -> list[str]:
    before, after = run.results["before_metrics"], run.results["after_metrics"]

    def show(value):
        return f"{value['lines']} lines ({value['name']})" if isinstance(value, dict) else number(value)

    return table(["metric", f"before (`{run.results['before']}`)", "after"],
                 [[key, show(before[key]), show(after.get(key))] for key in before])


def code_metrics_combined(runs: list[Run]) -> list[str]:
    """One row per metric: the commit before, then each file's tree after its change."""
    befores = {run.results["before"] for run in runs}
    before = runs[0].results["before_metrics"] if len(befores) == 1 else None
    if before is None:
        raise ValueError("files compare with different commits")

    def show(value):
        return f"{value['lines']} lines ({value['name']})" if isinstance(value, dict) else number(value)

    return table(["metric", f"before (`{befores.pop()}`)"] + [f"after (`{run.name}`)" for run in runs],
                 [[key, show(before[key])] + [show(run.results["after_metrics"].get(key)) for run in runs]
                  for key in before])


def first_fit(run: Run) -> list[str]:
    reference = run.results.get("sklearn", {}).get("fit_median")
    return records(labelled(run.results, "configuration"), [
        ("configuration", "configuration", str), ("first fit (median)", "fit_median", duration),
        ("over scikit-learn's", "fit_median", lambda t: times(t / reference) if reference else "n/a"),
        ("whole process (median)", "process_median", duration), ("fit (min)", "fit_min", duration),
        ("processes", "runs", lambda runs: str(len(runs)))])


def first_fit_ratio(run: Run) -> str | None:
    if "sklearn" not in run.results:
        return None
    sklearn = run.results["sklearn"]["fit_median"]
    warm = run.results.get("gpclass, warm cache", {}).get("fit_median")
    return (f"{times(run.results['gpclass']['fit_median'] / sklearn)}"
            + (f" (warm compilation cache {times(warm / sklearn)})" if warm else ""))


def first_fit_brief(run: Run) -> str:
    ratio = first_fit_ratio(run)
    if ratio:
        return f"gpclass / scikit-learn {ratio}"
    return "; ".join(f"{k}: {duration(v['fit_median'])}" for k, v in run.results.items())


def first_fit_drivers(run: Run) -> list[str]:
    return records(labelled(run.results, "configuration"), [
        ("configuration", "configuration", str), ("first fit (median)", "fit_median", duration),
        ("second fit, same shape (median)", "second_median", duration),
        ("processes", "runs", lambda runs: str(len(runs)))])


def first_fit_drivers_brief(run: Run) -> str:
    return "; ".join(f"{k}: {duration(v['fit_median'])} then {duration(v['second_median'])}"
                     for k, v in run.results.items())


def float32_fit_grid(run: Run) -> list[str]:
    return records(run.results["rows"], [
        ("problem", "data", str), ("scikit-learn log q (float64)", "sklearn_log_q", number),
        ("float32 status", "status", str), ("grad_norm", "grad_norm", number), ("log q gap", "log_q_gap", number),
        ("status without the rule", "status_without_rule", str),
        ("log q gap without", "log_q_gap_without_rule", number)])


def float32_fit_grid_brief(run: Run) -> str:
    summary = run.results["summary"]
    return (f"CONVERGED {summary['status'].get('CONVERGED', 0)} of {len(run.results['rows'])} "
            f"(without the rule {summary['status_without_rule'].get('CONVERGED', 0)})")


def float32_jj_grid(run: Run) -> list[str]:
    solves = records(run.results["solves"], [
        ("data", "data", str), ("sigma_f^2", "variance", number), ("float32 status", "status", str),
        ("steps", "steps", str), ("float32 log Z'", "log_z", number), ("float64 status", "float64_status", str),
        ("float64 log Z'", "float64_log_z", number), ("gap", "gap", number)])
    fits = [dict(data=row["data"], n=row["n"], **{f"{p}_{k}": v for p in ("float32", "float64")
                                                   for k, v in row[p].items()}) for row in run.results["fits"]]
    return solves + [""] + records(fits, [
        ("ML-II", "data", str), ("n", "n", str), ("float32 status", "float32_status", str),
        ("float32 first fit", "float32_seconds", duration), ("float32 log q", "float32_log_q", number),
        ("float64 status", "float64_status", str), ("float64 first fit", "float64_seconds", duration),
        ("float64 log q", "float64_log_q", number)])


def float32_jj_grid_brief(run: Run) -> str:
    statuses = [row["status"] for row in run.results["solves"]]
    return f"float32 solves: CONVERGED {statuses.count('CONVERGED')}, IMPRECISE {statuses.count('IMPRECISE')} of " \
           f"{len(statuses)}"


def kuss_rasmussen_table1(run: Run) -> list[str]:
    rows = []
    for data, result in run.results["results"].items():
        for method, s in result["summary"].items():
            published = (result.get("published") or {}).get(method) or {}
            rows.append([data, method, f"{s['folds']} / {result['folds_total']}",
                         f"{s['error']:.2f} ± {s['error_se']:.2f}", number(published.get("error")),
                         f"{s['info']:.3f} ± {s['info_se']:.3f}", number(published.get("info")),
                         number(s["norm_m"]), number(published.get("norm_m")),
                         f"{s['fits_not_converged']} / {s['inner_not_converged']}"])
    return table(["data", "method", "folds", "error (%)", "K&R", "information (bits)", "K&R", "|m|", "K&R",
                  "not converged (fit / inner)"], rows)


def chu_ghahramani_ordinal(run: Run) -> list[str]:
    rows = []
    for case, result in run.results["results"].items():
        for method, s in result["summary"].items():
            rows.append([case, method, s["splits"], f"{s['zero_one']:.2f} ± {s['zero_one_std']:.2f}",
                         f"{s['abs_error']:.3f} ± {s['abs_error_std']:.3f}", fixed(2)(s["log_marginal"]),
                         number(s["fits_not_converged"])])
    return table(["data, bins", "method", "splits", "zero-one error (%, ± sd)", "absolute error (± sd)",
                  "log q (mean)", "fits not converged"], rows)


def chu_ghahramani_brief(run: Run) -> str:
    return "; ".join(f"{case} {method} zero-one {s['zero_one']:.1f} %" for case, result in
                     run.results["results"].items() for method, s in result["summary"].items())


def preference_synthetic(run: Run) -> list[str]:
    sizes = list(dict.fromkeys((r["n"], r["m"]) for r in run.results))
    rows = []
    for n, m in sizes:
        group = [r for r in run.results if (r["n"], r["m"]) == (n, m)]
        rows.append([f"{n} items, {m} comparisons", len(group)]
                    + [fixed(3)(mean([r[k]["spearman"] for r in group])) for k in ("ep", "laplace", "mcmc", "botorch")]
                    + [fixed(3)(mean([r[k]["accuracy"] for r in group])) for k in ("ep", "laplace", "mcmc", "botorch")]
                    + [fixed(3)(mean([r[k]["vs_mcmc"] for r in group])) for k in ("ep", "laplace")]
                    + [duration(median([r[k]["seconds"] for r in group[1:]])) for k in ("ep", "laplace", "botorch")])
    return table(["problem", "problems", "rank correlation EP", "Laplace", "MCMC", "BoTorch", "pair accuracy EP",
                  "Laplace", "MCMC", "BoTorch", "EP - MCMC (mean abs)", "Laplace - MCMC", "time EP", "Laplace",
                  "BoTorch"], rows)


def usps35_grid(run: Run) -> list[str]:
    return records(labelled(run.results["results"], "method"), [
        ("method", "method", str), ("points", "summary.points", number),
        ("not converged", "summary.not_converged", number),
        ("max log q", "summary.max.log_marginal", fixed(2)),
        ("at (log l, log sf)", "summary.max", lambda x: f"({x['log_l']:.2f}, {x['log_sf']:.2f})"),
        ("refined", "summary.max_refined", lambda x: f"({x['log_l']:.2f}, {x['log_sf']:.2f}): {x['log_marginal']:.2f}"),
        ("test errors there", "summary.max.errors", number), ("fewest errors", "summary.min_errors", number),
        ("GPML", "published", lambda p: ", ".join(f"{k} {number(v)}" for k, v in p.items())),
        ("compile", "compile_time", duration), ("run", "run_time", duration)])


def variational(run: Run) -> list[str]:
    """Whichever sections of variational.py the file holds."""
    parts = {"crabs": variational_crabs, "toy": lambda r: table(["quantity", "value"], list(r.items())),
             "table": variational_table, "jensen": variational_points, "joint": variational_joint}
    lines = []
    for key, value in run.results.items():
        lines += ([""] if lines else []) + [f"Section `{key}`:", ""] + parts.get(key, generic_value)(value)
    return lines


def generic_value(value) -> list[str]:
    return generic(Run("", value))


def variational_crabs(splits: list[dict]) -> list[str]:
    rows = [[name, len(splits), fixed(2)(mean([s[f"errors_{key}"] for s in splits])),
             fixed(3)(mean([s[f"info_{key}"] for s in splits]))]
            for name, key in (("JJ lower bound", "lower"), ("JJ upper bound", "upper"), ("Laplace", "laplace"))]
    return table(["predictions of", "splits", "test errors of 120 (mean)", "information (bits, mean)"], rows)


def variational_table(rows_in: list[dict]) -> list[str]:
    rows = [[r["dataset"], method, fixed(3)(r["log_z_at_laplace_fit"].get(method.split(" ")[0])),
             fixed(3)(f["objective"]), percent(f["error"]), fixed(3)(f["info"])]
            for r in rows_in for method, f in r["fitted"].items()]
    return table(["data", "method", "log Z at Laplace's fit", "own objective at own fit", "test error",
                  "information (bits)"], rows)


def variational_points(points: dict) -> list[str]:
    return records(labelled(points, "maximum of"), [
        ("maximum of", "maximum of", str), ("log l", "log_l", number), ("log sf", "log_sf", number),
        ("value", "value", fixed(3)), ("information there (bits)", "info", fixed(4))])


def variational_joint(runs: dict) -> list[str]:
    return records(labelled(runs, "optimisation"), [
        ("optimisation", "optimisation", str), ("log Z", "log_z", fixed(6)), ("steps", "steps", number),
        ("largest gradient", "max_grad", lambda x: f"{x:.1e}"), ("time", "seconds", duration),
        ("test errors", "errors", number)])


def softmax_laplace(run: Run) -> list[str]:
    """Whichever sections of softmax_laplace.py the file holds."""
    parts = {"timing": softmax_timing, "uci": softmax_uci, "usps10": softmax_usps10}
    lines = []
    for key, value in run.results.items():
        if key != "arguments":
            lines += ([""] if lines else []) + [f"Section `{key}`:", ""] + parts.get(key, generic_value)(value)
    return lines


def softmax_timing(rows: list[dict]) -> list[str]:
    return records(rows, [
        ("n", "n", number), ("C", "C", number), ("Newton steps", "newton_steps", number),
        ("value and gradient", "run_value_and_grad_s", duration), ("compile", "compile_value_and_grad_s", duration),
        ("value alone", "run_forward_s", duration), ("C Choleskys (vmapped)", "chol_10_vmapped_s", duration),
        ("value and gradient / C Choleskys", "ratio_value_and_grad_to_10_chol", fixed(1))])


def softmax_uci(datasets: dict) -> list[str]:
    rows = [dict(data=f"{data} (C = {d['C']}, {d['n_train']} / {d['n_test']})", model=model, **r)
            for data, d in datasets.items() for model, r in d["rows"].items()]
    return records(rows, [("data (train / test)", "data", str), ("model", "model", str),
                          ("test error", "error", percent), ("information (bits)", "info", fixed(3)),
                          ("log q", "log_marginal", fixed(2)), ("steps", "steps", number), ("fit", "fit_s", duration)])


def softmax_usps10(result: dict) -> list[str]:
    rows = [dict(point=name, **result[name]) for name in ("grid_max", "ml2") if name in result]
    return [f"{result['n_train']} training and {result['n_test']} test images.", ""] + records(rows, [
        ("point", "point", str), ("log l", "log_l", fixed(2)), ("log sf", "log_sf", fixed(2)),
        ("log q", "log_marginal", fixed(2)), ("test error (Monte Carlo)", "test_error_mc", percent),
        ("information (bits)", "info_mc", fixed(3))])


def ionosphere_ais(run: Run) -> list[str]:
    lines = []
    if "timing" in run.results:
        lines += table(["transition", "compile", "run"], [[k, duration(v["compile_s"]), duration(v["run_s"])]
                                                          for k, v in run.results["timing"].items()]) + [""]
    if "grid" in run.results:
        summary = run.results["grid"]["summary"]
        lines += table(["grid summary", "value"], [[k, number(v)] for k, v in summary.items() if k != "argmax"])
        lines += [""] + records(labelled(summary["argmax"], "maximum of"), [
            ("maximum of", "maximum of", str), ("log l", "log_l", fixed(2)), ("log sigma", "log_sigma", fixed(2)),
            ("log Z", "value", fixed(2))]) + [""]
    if "marginals" in run.results:
        marginals = run.results["marginals"]
        lines += records(labelled(marginals["rows"], "latent f of the most skewed case"), [
            ("latent f of the most skewed case", "latent f of the most skewed case", str), ("mean", "mean", fixed(3)),
            ("variance", "var", fixed(3)), ("skewness", "skewness", fixed(3))])
        lines += [""] + table(["log Z", "value"], list(marginals["log_z"].items()))
    return lines


def kim_ghahramani_cv(run: Run) -> list[str]:
    rows = run.results["cv"] if isinstance(run.results, dict) else run.results
    keys = list(dict.fromkeys((r["dataset"], r["method"]) for r in rows))
    out = []
    for data, method in keys:
        folds = [r for r in rows if (r["dataset"], r["method"]) == (data, method)]
        out.append([data, method, len(folds), percent(mean([r["error"] for r in folds])),
                    fixed(2)(mean([r["log_evidence"] for r in folds])),
                    duration(median([r["seconds"] for r in folds]))])
    return table(["data", "method", "folds", "error (mean)", "log evidence (mean)", "time per fold (median)"], out)


def kim_ghahramani_synthetic(run: Run) -> list[str]:
    out = []
    for section, rows in run.results.items():
        for model in dict.fromkeys(r["model"] for r in rows):
            seeds = [r for r in rows if r["model"] == model]
            out.append([section, model, len(seeds), fixed(2)(mean([r["log_evidence"] for r in seeds])),
                        percent(mean([r["error"] for r in seeds])), number(median([r["em_steps"] for r in seeds]))])
    return table(["section", "model", "seeds", "log evidence (mean)", "test error (mean)", "EM steps (median)"], out)


def kuss_rasmussen_multiclass(run: Run) -> list[str]:
    """Per data set and method: log q minus the AIS log Z of its own likelihood over the grid, and test numbers."""
    grid = run.results["grid"]
    truth = {(r["dataset"], r["method"].split(" ")[1], r["log_variance"], r["lengthscale"]): r
             for r in grid if r["method"].startswith("ais")}
    rows = []
    for data, method in dict.fromkeys((r["dataset"], r["method"]) for r in grid):
        points = [r for r in grid if (r["dataset"], r["method"]) == (data, method)]
        likelihood = "probit" if method.endswith("probit") else "softmax"
        gaps = [r["log_q"] - truth[(data, likelihood, r["log_variance"], r["lengthscale"])]["log_q"] for r in points
                if (data, likelihood, r["log_variance"], r["lengthscale"]) in truth]
        gap = ["(truth)", "", "", ""] if method.startswith("ais") else ["no AIS here", "", "", ""] if not gaps else [
            f"{mean(gaps):+.2f}", f"{min(gaps):+.2f}", f"{max(gaps):+.2f}",
            fixed(2)(mean([truth[(data, likelihood, r["log_variance"], r["lengthscale"])]["log_q_se"]
                           for r in points]))]
        rows.append([data, method, len(points)] + gap + [fixed(3)(mean([r[k] for r in points]))
                                                         for k in ("error", "info_bits", "nlp")])
    lines = table(["data", "method", "grid points", "log q - AIS log Z: mean", "min", "max", "AIS se (mean)",
                   "error (mean)", "information (bits)", "nlp"], rows)
    if run.results.get("ml2"):
        lines += ["", "ML-II from the grid's middle:", ""] + records(run.results["ml2"], [
            ("data", "dataset", str), ("method", "method", str), ("sigma_f^2", "fitted_variance", number),
            ("l", "fitted_lengthscale", number), ("log q", "log_q", fixed(2)), ("test error", "error", fixed(3)),
            ("information (bits)", "info_bits", fixed(3)), ("nlp", "nlp", fixed(3)), ("status", "status", str)])
    return lines


def quadrature_cost(run: Run) -> list[str]:
    parts = {part: [r for r in run.results if r["part"] == part] for part in ("rule", "svgp", "vfe_kl")}
    if not parts["rule"]:  # --vfe-only
        return records(parts["vfe_kl"], VFE_KL_COLUMNS)
    return records(parts["rule"], [
        ("likelihood", "likelihood", str), ("rule", "rule", str), ("n", "n", number), ("value", "value_ms", millis),
        ("first and second derivatives", "derivatives_ms", millis),
        ("worst relative error", "max_rel_error", lambda x: f"{x:.1e}")]) + [""] + records(parts["svgp"], [
            ("SVGP with rule", "rule", str), ("n", "n", number), ("m", "m", number), ("batch", "batch", number),
            ("steps", "steps", number), ("per step", "step_ms", millis),
            ("marginal stds (quantiles)", "std_quantiles", number)]) + [""] + records(parts["vfe_kl"], VFE_KL_COLUMNS)


VFE_KL_COLUMNS = [
    ("value and gradient of", "run", str), ("n", "n", number), ("m", "m", number), ("time", "seconds", duration),
    ("compile", "compile_s", duration), ("steps", "steps", number), ("log q", "log_q", fixed(4)),
    ("over FITC-EP's time", "over_fitc_ep", times)]


# --------------------------------------------------------------------------------------------------------------------
# What each script measures, and how its results files group
# --------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Group:
    """Results files of one script that measure the same thing (their stems match ``pattern``)."""

    pattern: str
    title: str = ""
    render: Callable[[Run], list[str]] = generic
    brief: Callable[[Run], str] | None = None  # one line per earlier run
    every: bool = False  # pieces of one study: every file is shown, none is an earlier run
    combine: Callable[[list[Run]], list[str]] | None = None  # every file in one table (with ``every``)


@dataclass(frozen=True)
class Section:
    script: str
    about: str
    groups: tuple[Group, ...] = (Group(".*"),)


SECTIONS = (
    Section("laplace_vs_sklearn", (
        "Both libraries in one process, calls interleaved. Section 1/2 is one log marginal likelihood and gradient "
        "(with one Cholesky of the same size as the unit of cost), 3 a full ML-II fit from the same start, 4 many "
        "small fits in one `vmap` against scikit-learn's loop, P where gpclass's time goes."), (
        Group(r"laplace_vs_sklearn", "Every section", laplace_vs_sklearn, laplace_vs_sklearn_brief),
        Group(r"laplace_vs_sklearn_n1000.*", "One size (n = 1000), no fit: times and ratios",
              laplace_vs_sklearn_ratios, laplace_vs_sklearn_brief),
        Group(r"laplace_vs_sklearn_small.*", "Small sizes: times and ratios", laplace_vs_sklearn_ratios,
              laplace_vs_sklearn_brief))),
    Section("matern_vs_sklearn", (
        "Both estimators get the same scikit-learn kernel; the fitted objectives must agree, and the test errors, fit "
        "times and gpclass's compile time are reported."), (Group(".*", render=matern_vs_sklearn),)),
    Section("gpml_ep", (
        "Time per evaluation at gpclass's default tolerance and at GPML's looser one, and how far the values and "
        "gradients differ."), (Group(".*", render=gpml_ep, brief=gpml_ep_brief),)),
    Section("gpml_sparse", (
        "FITC, VFE and the interpolation between them under Laplace, and FITC under EP: the differences of the value "
        "and of the gradients (hyperparameters and inducing inputs) from GPML's, and the time per evaluation."),
        (Group(".*", render=gpml_sparse),)),
    Section("svgp_vs_gpflow", (
        "Each library called as its users call it, in one process; GPflow is an optional dependency of this script "
        "only."), (
        Group(SVGP_RUNS, "This version", svgp_vs_gpflow, svgp_vs_gpflow_brief),
        Group(r"svgp_vs_gpflow_before_.*", "An earlier commit", svgp_vs_gpflow, svgp_vs_gpflow_brief),
        Group(r"svgp_vs_gpflow_quadrature", "With the cheaper quadrature of `quadrature_cost.py`", svgp_vs_gpflow,
              svgp_vs_gpflow_brief))),
    Section("first_fit", (
        "Each measurement is a new Python process: gpclass without the persistent compilation cache, with an empty "
        "one and with a warm one, against scikit-learn. With `--floor`, two minimal programs written for this one "
        "model: the whole fit (Newton's iterations and optax's L-BFGS) in one `jax.jit` program, and only its value "
        "and gradient compiled, driven by SciPy's L-BFGS-B on the host: what any JAX implementation pays in a new "
        "process. With `--before`, this tree's first fit against an earlier commit's. With `--drivers`, `gpc.fit` "
        "called directly (the host loop up to 512 cases) against `gpc.jit(gpc.fit)` (one program): the first fit and "
        "a later fit of the same shape."), (
        Group(r"first_fit_n138.*", "Against scikit-learn, 138 cases", first_fit, first_fit_brief),
        Group(r"first_fit_n300.*", "Against scikit-learn, 300 cases", first_fit, first_fit_brief),
        Group(r"first_fit_n\d+.*", "Against scikit-learn, other sizes", first_fit, first_fit_brief),
        Group(r"first_fit_before_.*", "Against earlier commits", first_fit, first_fit_brief),
        Group(r"first_fit_drivers.*", "gpc.fit's drivers: host loop (direct call) and one program (`gpc.jit`)",
              first_fit_drivers, first_fit_drivers_brief))),
    Section("many_fits", (
        "Each configuration runs in a new process with its own number of host devices; the fitted log marginal "
        "likelihoods are compared with scikit-learn's."), (
        Group(r"many_fits(_s18)?", "64 data sets", many_fits, many_fits_best),
        Group(r"many_fits_256.*", "256 data sets", many_fits, many_fits_best))),
    Section("restarts", (
        "Also a loop of single-start estimators and scikit-learn's own restarts; the best log marginal likelihood of "
        "each is reported beside the times."), (Group(".*", render=restarts),)),
    Section("ep_timing", (
        "One evaluation is the value and gradient from cold (zero sites, f = 0); reported with its inner iterations "
        "and in units of one Cholesky of the same size."), (
        Group(r"ep_timing(_n\d+)?", "Laplace and EP", ep_timing, ep_timing_brief),
        Group(r"ep_timing_schedules.*", "EP's two schedules", ep_timing, ep_timing_brief))),
    Section("ep_schedules", (
        "Per data set: how many grid points each schedule converged at, its sweeps and time for the grid, and how far "
        "the two fixed points differ."), (Group(".*", render=ep_schedules),)),
    Section("ep_anderson_grid", (
        "Extreme hyperparameters, label noise and a step likelihood: convergence and total sweeps with and without "
        "Anderson acceleration, and the problems where the two differ."), (Group(".*", render=ep_anderson_grid),)),
    Section("compile_options", (
        "The same program compiled both ways (and with a candidate option set): compile CPU time and median run "
        "time."), (Group(".*", render=compile_options),)),
    Section("lapack_threads", (
        "Single kernels and whole evaluations, each with the default threads and with one, quiet and beside busy "
        "processes."), (Group(".*", render=lapack_threads),)),
    Section("memory", (
        "Temporary memory in units of one n x n matrix, and whether it grows with the iteration limit (it must not: "
        "gradients are implicit)."), (Group(".*", render=memory),)),
    Section("quadrature_cost", (
        "The rules alone, SVGP's time per step, and VFE-KL's evaluation beside FITC-EP's; the cheap rule is a bound on "
        "what a faster accurate rule could gain, not a proposal."), (Group(".*", render=quadrature_cost),)),
    Section("sparse", (
        "FITC-EP, VFE-KL and FITC-Laplace: test error against the Bayes error, time and memory as n grows (fitted at "
        "the smaller sizes, the fit reused beyond); and one evaluation's time against n and m."), (
        Group(r"sparse_twonorm_ringnorm|sparse_laplace_1e5_twonorm_ringnorm", "Accuracy and time", sparse_accuracy),
        Group(r"sparse_.*_1e6_twonorm_ringnorm", "At a million cases (hyperparameters fitted at the smallest n)",
              sparse_accuracy, every=True),
        Group(r"sparse_scaling", "One value and gradient against n and m", sparse_scaling))),
    Section("sparse_ep_sweeps", (
        "Per n: sweeps, status, the last change of the sites, time, memory and test error."),
        (Group(".*", render=sparse_ep_sweeps),)),
    Section("svgp", (
        "Also natural-gradient steps for q(v) against Adam, and the time per step against the number of inducing "
        "inputs."), (
        Group(r"svgp_(twonorm_ringnorm|large)", "Accuracy and time", svgp, every=True),
        Group(r"svgp_natural_.*", "Natural-gradient steps of each size (none: Adam on q(v) too)", svgp, every=True),
        Group(r"svgp_scaling_m", "Time per step against m", svgp_scaling_m))),
    Section("svgp_memmap", (
        "Time per step, the process's memory and the test error, without a memory limit and under a limit smaller "
        "than the file."), (Group(".*", render=svgp_memmap, every=True),)),
    Section("svgp_processes", (
        "The processes share this machine's cores, so the efficiency says what the coordination costs, not what a "
        "cluster would gain."), (Group(".*", render=svgp_processes),)),
    Section("usps10_sparse", (
        "Both tested on the same images: log q, Newton steps, test error, information, time and memory."),
        (Group(".*", render=usps10_sparse),)),
    Section("softmax_laplace", (
        "Each file holds one section: time per evaluation against C Choleskys, the Newton solver's conjugate-gradient "
        "products, Vehicle and Satellite against scikit-learn's one-vs-rest classifier, the USPS ten-digit grid's "
        "maximum and ML-II fit."), (Group(".*", render=softmax_laplace, every=True),)),
    Section("kuss_rasmussen_table1", (
        "Test error, information and the norm of the posterior mean, averaged over the folds, beside the published "
        "values (K&R)."), (
        Group(r"kuss_rasmussen_table1", "The table", kuss_rasmussen_table1),
        Group(r"kuss_rasmussen_table1_.*", "Reruns of one data set or one method", kuss_rasmussen_table1,
              every=True))),
    Section("kuss_rasmussen_multiclass", (
        "Each method against annealed importance sampling for its own likelihood over a grid of hyperparameters, "
        "then ML-II from the grid's middle."), (Group(".*", render=kuss_rasmussen_multiclass, every=True),)),
    Section("ionosphere_ais", (
        "The grid's summary (how far EP and Laplace are from AIS, where each is largest), the samplers' cost, and the "
        "most skewed latent marginal."), (
        Group(r"ionosphere_ais_\d+x\d+_T\d+", "Grid and timing", ionosphere_ais),
        Group(r"ionosphere_ais_marginals", "Marginals", ionosphere_ais))),
    Section("usps35_grid", (
        "Per method: the grid's maximum of the log marginal likelihood (and its sub-grid estimate) beside GPML's, the "
        "test errors, and the time for the whole grid."), (Group(".*", render=usps35_grid, every=True),)),
    Section("variational", (
        "Each file holds some of the sections: the crabs experiment and toy problem, the joint against the nested "
        "optimisation, every method on three data sets, and the Jensen bound at EP's posterior."),
        (Group(".*", render=variational, every=True),)),
    Section("kim_ghahramani", (
        "The synthetic problems over several seeds, and cross-validation beside direct ML-II of the EP evidence."), (
        Group(r"kim_ghahramani_circle_ard", "Synthetic problems", kim_ghahramani_synthetic),
        Group(r"kim_ghahramani_cv.*", "Cross-validation", kim_ghahramani_cv, every=True))),
    Section("chu_ghahramani_ordinal", (
        "Zero-one and absolute error over the published partitions, and how many fits did not converge."), (
        Group(r"chu_ghahramani_ordinal", "Pyrimidines and Machine CPU", chu_ghahramani_ordinal),
        Group(r"chu_ghahramani_ordinal_boston.*", "Boston", chu_ghahramani_ordinal, chu_ghahramani_brief),
        Group(r"chu_ghahramani_ordinal_pyrimidines_.*", "Laplace on Pyrimidines: variants of the fit",
              chu_ghahramani_ordinal, chu_ghahramani_brief))),
    Section("chu_ghahramani_laplace_check", "It prints its results (a log) and writes no JSON."),
    Section("preference_synthetic", (
        "Rank correlation with the true utility and accuracy on new pairs, the distance of EP's and Laplace's "
        "predictions from MCMC's, and the time of each."), (Group(".*", render=preference_synthetic),)),
    Section("float32_fit_grid", (
        "How each float32 fit stops, with and without the rule that a line search without progress where the L-BFGS "
        "model predicts no resolvable gain is convergence, and its log q against scikit-learn's float64 optimum."), (
        Group(r"float32_fit_grid.*", "12 problems", float32_fit_grid, float32_fit_grid_brief),)),
    Section("float32_jj_grid", (
        "How each float32 solve of the Jaakkola-Jordan bound stops, its log Z' against float64's, and the first "
        "float32 and float64 ML-II fits with the bound."), (
        Group(r"float32_jj_grid.*", "Three data sets, five signal variances", float32_jj_grid,
              float32_jj_grid_brief),)),
    Section("float32_laplace_grid", (
        "Problems counted by the float32 status the mode's residual check gives, with the residuals and the test "
        "means' distance from float64's."), (
        Group(r"float32_laplace_grid", "With the residual check", float32_laplace_grid),
        Group(r"float32_laplace_grid_before_.*", "Before the residual check", float32_laplace_grid))),
    Section("before_after", (
        "Run and compile time and the agreement of the values; each file is one change's record."),
        (Group(".*", render=before_after, brief=before_after_brief),)),
    Section("code_metrics", "Each file compares one change's tree with an earlier commit.",
            (Group(".*", render=code_metrics, every=True, combine=code_metrics_combined),)),
    Section("merge_fold_logs", "A helper, not a measurement."),
    Section("support_table", "It prints a Markdown table and writes no JSON."),
)


# --------------------------------------------------------------------------------------------------------------------
# Headlines
# --------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Headline:
    """One row of the summary: the newest file of ``script`` matching ``pattern`` that ``value`` gives a figure for."""

    label: str
    script: str
    pattern: str
    value: Callable[[Run], str | None]


def matern_ratios(run: Run) -> str:
    ratios = [r["ratio_sklearn_over_gpclass"] for r in run.results]
    return f"{times(min(ratios))} to {times(max(ratios))} over {len(ratios)} data sets"


def quadrature_vfe_kl(run: Run, n: int) -> str | None:
    row = next((r for r in run.results if r.get("part") == "vfe_kl" and r.get("run") == "VFE-KL" and r["n"] == n),
               None)
    return f"{times(row['over_fitc_ep'])} (n = {row['n']}, m = {row['m']})" if row else None


def svgp_speedup(run: Run, n: int, m: int) -> str | None:
    row = next((r for r in run.results if r["n"] == n and r["m"] == m), None)
    return f"{times(row['speedup'])} (batch {row['batch']})" if row else None


def memmap_step(run: Run) -> str:
    row = run.results[0]
    return f"{millis(row['step_ms'])} per step, peak resident {megabytes(row['memory_mb']['VmHWM'])} (n = {row['n']})"


def sparse_gpml_ratio(run: Run, approximation: str) -> str | None:
    row = run.results.get(approximation)
    return f"{times(row['ratio_gpml_over_gpclass'])} (n = {row['n']}, m = {row['m']})" if row else None


# laplace_vs_sklearn's runs with its default settings (not the ones that tried a float32 start or another
# XLA optimisation level)
LAPLACE_VS_SKLEARN_STANDARD = r"laplace_vs_sklearn(_n1000(_s18(_\d)?)?)?"

HEADLINES = (
    Headline("Laplace, one evaluation at n = 1000: scikit-learn's time / gpclass's", "laplace_vs_sklearn",
             LAPLACE_VS_SKLEARN_STANDARD,
             lambda run: laplace_vs_sklearn_value(run, "1/2 n=1000", "RATIO sklearn/gpclass per evaluation")),
    Headline("Laplace ML-II fit at n = 1000: scikit-learn / gpclass", "laplace_vs_sklearn",
             LAPLACE_VS_SKLEARN_STANDARD,
             lambda run: laplace_vs_sklearn_value(run, "3 fit n=1000", "RATIO")),
    Headline("256 small Laplace fits: scikit-learn's loop / one gpclass `vmap`", "laplace_vs_sklearn",
             r"laplace_vs_sklearn.*",
             lambda run: laplace_vs_sklearn_value(run, "4 256x", "RATIO sklearn loop / gpclass vmap")),
    Headline("Matérn 5/2 ML-II fit: scikit-learn / gpclass", "matern_vs_sklearn", ".*", matern_ratios),
    Headline("Many small fits: scikit-learn's loop / gpclass (best configuration)", "many_fits", r"many_fits_256.*",
             many_fits_best),
    Headline("EP at n = 600: GPML's `infEP` / gpclass (default tolerance)", "gpml_ep", ".*",
             lambda run: gpml_ep_ratio(run, "600")),
    Headline("EP at n = 1000: GPML's `infEP` / gpclass (default tolerance)", "gpml_ep", ".*",
             lambda run: gpml_ep_ratio(run, "1000")),
    Headline("FITC-EP: GPML's `apxSparse` / gpclass", "gpml_sparse", ".*",
             lambda run: sparse_gpml_ratio(run, "EP FITC")),
    Headline("SVGP step, n = 10^4, m = 100: GPflow / gpclass", "svgp_vs_gpflow", SVGP_RUNS,
             lambda run: svgp_speedup(run, 10_000, 100)),
    Headline("SVGP step, n = 10^5, m = 300: GPflow / gpclass", "svgp_vs_gpflow", SVGP_RUNS,
             lambda run: svgp_speedup(run, 100_000, 300)),
    Headline("SVGP step, n = 10^5, m = 500: GPflow / gpclass", "svgp_vs_gpflow", SVGP_RUNS,
             lambda run: svgp_speedup(run, 100_000, 500)),
    Headline("First ML-II fit in a new process, 138 cases: gpclass / scikit-learn", "first_fit",
             r"first_fit_n138.*", first_fit_ratio),
    Headline("First ML-II fit in a new process, 300 cases: gpclass / scikit-learn", "first_fit",
             r"first_fit_n300.*", first_fit_ratio),
    Headline("VFE-KL / FITC-EP, one value and gradient, n = 10^5", "quadrature_cost", ".*",
             lambda run: quadrature_vfe_kl(run, 100_000)),
    Headline("VFE-KL / FITC-EP, one value and gradient, n = 10^6", "quadrature_cost", ".*",
             lambda run: quadrature_vfe_kl(run, 1_000_000)),
    Headline("SVGP on a memory-mapped training set", "svgp_memmap", r"svgp_memmap", memmap_step),
)


# --------------------------------------------------------------------------------------------------------------------
# The README
# --------------------------------------------------------------------------------------------------------------------

INTRO = """\
# Benchmarks

<!-- Generated by benchmarks/make_readme.py from benchmarks/results/*.json: do not edit; run
     python benchmarks/make_readme.py -->

Each script in `benchmarks/` runs one experiment (against scikit-learn, GPflow, the GPML toolbox, BoTorch or a
published table, or on gpclass's own costs) and writes `benchmarks/results/<name>.json` with the machine (cores, CPU,
load, BLAS environment, versions), the time it finished and the gpclass commit; most also leave a `.log` beside it.
Run one from the repository's root, for example

```bash
python benchmarks/laplace_vs_sklearn.py --quick
```

(`python benchmarks/<script>.py --help` lists a script's options; the full runs take minutes to hours, see each
section). What they share (timing with compilation apart, calls interleaved so that every contender sees the same
machine load) is `benchmarks/harness.py`.

**This file is generated: do not edit it; run `python benchmarks/make_readme.py`** after adding or replacing a results
file. Every number below comes from a results file named beside it, with that file's date and commit; where several
files measure the same thing the newest is shown and the others are listed as earlier runs. The notes typed by hand
before this file was generated, with the analyses of those runs, are kept in [HISTORY.md](HISTORY.md).
"""


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def history_anchors() -> dict[str, str]:
    """Script name -> anchor of its section in HISTORY.md."""
    if not HISTORY.exists():
        return {}
    headings = [line[3:] for line in HISTORY.read_text().splitlines() if line.startswith("## `")]
    return {m.group(1): anchor(h) for h in headings if (m := re.match(r"`(\w+)\.py`", h))}


@functools.lru_cache(maxsize=None)
def script_docstring(script: str) -> str:
    """A script's module docstring (parsed alone: the string literal that opens the file, after comments)."""
    path = HERE / f"{script}.py"
    opening = re.match(r'(?:\s*#[^\n]*\n|\s*\n)*\s*[rR]?("""|\'\'\')(.*?)\1', path.read_text(), re.DOTALL) \
        if path.exists() else None
    return (ast.get_docstring(ast.parse(opening.group(0).strip())) or "") if opening else ""


def title_and_commands(doc: str) -> tuple[str, list[str]]:
    """A module docstring's first paragraph and its example command lines (``python benchmarks/...``)."""
    lines = doc.splitlines()
    paragraph = " ".join(line.strip() for line in itertools.takewhile(str.strip, lines))
    commands = [line.strip() for line in lines
                if line.strip().startswith(("python benchmarks/", "env ")) and "benchmarks/" in line]
    return paragraph, commands


def wrap(text: str) -> list[str]:
    """Prose as lines of at most 120 characters."""
    return textwrap.wrap(text, 120, break_long_words=False, break_on_hyphens=False)


def provenance(run: Run) -> str:
    """Where and when a file was measured, as one line."""
    parts = [f"`{run.file}`"]
    parts.append(f"finished {run.finished}" if run.finished else "date not recorded")
    parts.append(f"commit `{run.commit}`" if run.commit else "commit not recorded")
    m = run.machine
    if m:
        parts.append(f"{m.get('cores', '?')} cores ({m.get('cpu', '?')}), jax {m.get('jax', '?')}, "
                     f"load average {number(m.get('load_average'), 3)}")
        if m.get("environment"):
            parts.append("environment " + ", ".join(f"`{k}={v}`" for k, v in m["environment"].items()))
    return " · ".join(parts)


def rendered(render: Callable[[Run], list[str]], run: Run) -> list[str]:
    """``render(run)``; where the file's structure is not what the renderer expects, ``generic(run)`` with a note."""
    name = getattr(render, "__name__", "renderer")
    try:
        lines = render(run)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, StopIteration) as error:
        lines = [f"(`{name}` cannot read this file: {type(error).__name__} {error}; its scalars:)", ""] + generic(run)
    if render is not generic and data_rows(lines) == 0:
        lines = [f"(`{name}` cannot read this file: it found no rows; its scalars:)", ""] + generic(run)
    while lines and not lines[-1]:
        lines = lines[:-1]
    return lines


def data_rows(lines: list[str]) -> int:
    """The number of table rows below the headers in rendered lines."""
    return sum(line.startswith("|") for line in lines) - 2 * sum(line.startswith("|---") for line in lines)


def single_table(lines: list[str]) -> bool:
    return len(lines) >= 2 and all(line.startswith("|") for line in lines)


def merged(runs: list[Run], outputs: list[list[str]]) -> list[str] | None:
    """One table with a ``file`` column, when every file rendered as one table with the same header; else None."""
    if not all(single_table(out) and out[:2] == outputs[0][:2] for out in outputs):
        return None
    lines = [f"- {provenance(run)}" for run in runs] + ["", "| file " + outputs[0][0], "|---" + outputs[0][1]]
    return lines + [f"| `{run.name}` " + row for run, out in zip(runs, outputs) for row in out[2:]]


def combined_lines(group: Group, runs: list[Run]) -> list[str] | None:
    """``group.combine(runs)`` under the files' provenance, or None (no combiner, or it cannot read the files)."""
    try:
        table_lines = group.combine(runs) if group.combine else None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, StopIteration):
        return None
    return [f"- {provenance(run)}" for run in runs] + [""] + table_lines if table_lines else None


def group_lines(group: Group, runs: list[Run], titled: bool) -> list[str]:
    """A group's current figure (every file, for pieces of one study) and the list of its earlier runs."""
    lines = [f"### {group.title or 'Results'}", ""] if titled else []
    if group.every:
        runs = sorted(runs, key=lambda r: r.name)
        combined = combined_lines(group, runs)
        if combined:
            return lines + combined + [""]
        outputs = [rendered(group.render, run) for run in runs]
        combined = merged(runs, outputs) if len(runs) > 1 else None
        if combined:
            return lines + combined + [""]
        for run, out in zip(runs, outputs):
            lines += [provenance(run), "", *out, ""]
        return lines
    current, *earlier = newest_first(runs)
    lines += [provenance(current), "", *rendered(group.render, current), ""]
    if earlier:
        lines += ["Earlier runs (their numbers are in the JSON):", ""]
        lines += [f"- `{r.file}`, {r.finished or 'date not recorded'}, commit `{r.commit or 'not recorded'}`"
                  + (f": {brief_of(group, r)}" if group.brief else "") for r in earlier] + [""]
    return lines


def brief_of(group: Group, run: Run) -> str:
    try:
        return group.brief(run)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, StopIteration):
        return "(no summary: see the JSON)"


def assign(section: Section, runs: list[Run]) -> list[tuple[Group, list[Run]]]:
    """The section's groups with their files; files no group claims go to a generic group."""
    claimed: dict[Group, list[Run]] = {group: [] for group in section.groups}
    rest = []
    for run in runs:
        group = next((g for g in section.groups if re.fullmatch(g.pattern, run.name)), None)
        (claimed[group] if group else rest).append(run)
    pairs = [(group, members) for group, members in claimed.items() if members]
    return pairs + ([(Group(".*", "Other results files", every=True), rest)] if rest else [])


def section_link(script: str) -> str:
    return f"#{anchor(f'`{script}.py`')}"


def section_lines(section: Section, runs: list[Run], history: dict[str, str]) -> list[str]:
    title, commands = title_and_commands(script_docstring(section.script))
    notes = f"Notes on earlier runs: [HISTORY.md](HISTORY.md#{history[section.script]})." if section.script in \
        history else ""
    prose = " ".join(part for part in (f"**{title}**" if title else "", section.about, notes) if part)
    lines = [f"## `{section.script}.py`", ""] + ([*wrap(prose), ""] if prose else [])
    if commands:
        lines += ["```bash", *commands, "```", ""]
    groups = assign(section, runs)
    for group, members in groups:
        lines += group_lines(group, members, titled=len(groups) > 1 or bool(group.title))
    return lines


def headline_value(headline: Headline, run: Run) -> str | None:
    try:
        return headline.value(run)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, StopIteration):
        return None


def headline_rows(by_script: dict[str, list[Run]]) -> list[list[str]]:
    rows = []
    for h in HEADLINES:
        candidates = [r for r in newest_first(by_script.get(h.script, [])) if re.fullmatch(h.pattern, r.name)]
        found = next(((run, value) for run in candidates if (value := headline_value(h, run))), None)
        if found:
            run, value = found
            rows.append([h.label, value, f"[`{run.file}`]({section_link(h.script)}), "
                                         f"{run.finished or 'date not recorded'}, `{run.commit or 'commit n/a'}`"])
    return rows


def sections_with_runs(runs: list[Run]) -> tuple[list[Section], dict[str, list[Run]]]:
    """Every benchmark script's section (scripts not in SECTIONS get an empty one) and its results files."""
    scripts = sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_BENCHMARKS)
    sections = [s for s in SECTIONS if s.script in scripts]
    sections += [Section(name, "") for name in scripts if name not in {s.script for s in sections}]
    by_script: dict[str, list[Run]] = {}
    for run in runs:
        by_script.setdefault(script_of(run.name, scripts) or "", []).append(run)
    return sections, by_script


def readme_text(runs: list[Run] | None = None) -> str:
    """The README for the results files in benchmarks/results (or ``runs``)."""
    runs = load_runs() if runs is None else runs
    sections, by_script = sections_with_runs(runs)
    history = history_anchors()
    lines = [INTRO, "## Summary", ""]
    lines += wrap("The headline figures, each from the newest results file that measures it. A row names the "
                  "ratio it gives: \"scikit-learn / gpclass\" above 1 means gpclass took less time.") + [""]
    lines += table(["comparison", "figure", "source"], headline_rows(by_script)) + [""]
    lines += wrap("Scripts: " + ", ".join(f"[`{s.script}.py`]({section_link(s.script)})" for s in sections)
                  + ".") + [""]
    for section in sections:
        lines += section_lines(section, by_script.get(section.script, []), history)
    if by_script.get(""):
        lines += ["## Other results files", "", "Results files whose name matches no script.", ""]
        lines += group_lines(Group(".*", every=True), by_script[""], titled=False)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when README.md differs, write nothing")
    args = parser.parse_args()
    text = readme_text()
    if args.check:
        same = README.exists() and README.read_text() == text
        print("benchmarks/README.md is "
              + ("up to date" if same else "out of date: run python benchmarks/make_readme.py"))
        return 0 if same else 1
    README.write_text(text)
    print(f"wrote {README} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
