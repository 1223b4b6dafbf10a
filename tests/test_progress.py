"""Progress reports (progress=): opt-in host callbacks whose values are the fits' own records, thinned by step
count in the program and by wall time on the host, working under jit and vmap; the default program has none.
EM-EP's printed report is checked in tests/test_em_ep.py, on the fit its other tests check (one compilation)."""

import io
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import standardised_subset

import gpclass as gpc

Progress = gpc.Progress

X, y = standardised_subset("crabs", 0, n=30)
X2, y2 = standardised_subset("crabs", 1, n=30)
KERNEL = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(1.5))
LIK = gpc.likelihoods.Logistic()


def has_host_callback(lowered) -> bool:  # as tests/test_errors.py
    return "callback" in lowered.as_text()


@pytest.mark.slow
def test_fit_reports_its_history_and_is_silent_by_default(capsys):
    assert not has_host_callback(gpc.fit.lower(gpc.Laplace(), KERNEL, LIK, X, y))
    assert not has_host_callback(gpc.fit_em_ep.lower(gpc.EP(), KERNEL, gpc.likelihoods.Probit(), X, y,
                                                     adapt_epsilon=False))
    assert has_host_callback(gpc.fit.lower(gpc.Laplace(), KERNEL, LIK, X, y, progress=True))
    quiet = gpc.fit(gpc.Laplace(), KERNEL, LIK, X, y)
    assert capsys.readouterr() == ("", "")
    seen = []
    result = gpc.fit(gpc.Laplace(), KERNEL, LIK, X, y, progress=seen.append)
    steps = [info["step"] for info in seen]
    n = int(result.num_steps)
    assert n > 5 and steps == list(range(n + 1))  # the start, then every step
    np.testing.assert_array_equal([info["objective"] for info in seen[1:]], np.asarray(result.history)[:n])
    assert [info["done"] for info in seen] == [False] * n + [True]
    assert seen[-1]["status"] == int(result.status) and seen[-1]["grad_norm"] == float(result.grad_norm)
    assert all(info["task"] == "fit" and info["num_steps"] == 100 for info in seen)
    # Reporting changes nothing: the same result, bit for bit.
    for a, b in zip(jax.tree.leaves(quiet), jax.tree.leaves(result)):
        np.testing.assert_array_equal(a, b)
    assert capsys.readouterr() == ("", "")


@pytest.mark.slow
def test_thinned_reports_under_jit_and_vmap():
    """Under vmap each problem reports its own steps (no index: matched by value); every=3 is obeyed per problem,
    and a problem that has stopped stops reporting while the other goes on."""
    seen = []
    fits = gpc.jit(jax.vmap(lambda X, y: gpc.fit(gpc.Laplace(), KERNEL, LIK, X, y,
                                                  progress=Progress(seen.append, every=3))))(np.stack([X, X2]),
                                                                                            np.stack([y, y2]))
    fits = jax.device_get(fits)
    expected = []
    for b in range(2):
        n = int(fits.num_steps[b])
        expected += [(i, float(fits.history[b, i - 1])) for i in range(1, n + 1) if i == 1 or i % 3 == 0 or i == n]
    reported = [(info["step"], info["objective"]) for info in seen if info["step"] > 0]
    assert sorted(reported) == sorted(expected)
    assert sum(info["step"] == 0 for info in seen) == 2 and sum(info["done"] for info in seen) == 2
    assert int(fits.num_steps[0]) != int(fits.num_steps[1])  # the problems stop at different steps


def test_printer_throttles_by_wall_time_and_prints_starts_and_ends():
    out = io.StringIO()
    printer = Progress(every=None, seconds=3600.0, file=out)
    for step in range(6):
        printer.receive(dict(task="fit", step=step, num_steps=5, objective=-1.0 / (step + 1), done=step == 5,
                             status=0 if step == 5 else -1))
    lines = out.getvalue().splitlines()
    assert [line.split()[2] for line in lines] == ["0/5", "1/5", "5/5"]
    assert lines[-1].endswith("(done: CONVERGED)") and "objective -1.66666667e-01" in lines[-1]
    every_line = Progress(seconds=0.0, file=out)
    assert every_line.seconds == 0.0 and Progress(print).seconds == 0.0 and Progress().seconds == 0.5


def test_svgp_reports_its_elbo_record(capsys):
    seen = []
    fit = gpc.fit_svgp(gpc.SVGP.at_prior(KERNEL, LIK, X[:5]), X, y, key=jax.random.key(0), num_steps=7,
                       batch_size=10, progress=Progress(seen.append, every=3))
    assert [info["step"] for info in seen] == [1, 3, 6, 7] and seen[-1]["done"]
    np.testing.assert_array_equal([info["elbo"] for info in seen], np.asarray(fit.elbo)[[0, 2, 5, 6]])
    gpc.fit_svgp(gpc.SVGP.at_prior(KERNEL, LIK, X[:5]), X, y, key=jax.random.key(0), num_steps=3, batch_size=10)
    assert capsys.readouterr() == ("", "")


@pytest.mark.slow
def test_samplers_report_per_run():
    seen = []
    progress = Progress(seen.append, every=5)
    ais = gpc.AIS(num_temperatures=20, num_runs=2, progress=progress)
    post = gpc.infer(ais, KERNEL, gpc.likelihoods.Probit(), X, y, key=jax.random.key(0))
    assert sorted(info["step"] for info in seen) == sorted([1, 5, 10, 15, 20] * 2)
    finals = sorted(info["log_weight"] for info in seen if info["done"])
    np.testing.assert_allclose(finals, np.sort(np.asarray(post.log_weights)), rtol=0, atol=0)
    # MCMC reports through the same function; here only its program is checked (tracing, no compilation).
    for report in (None, progress):
        mcmc = gpc.MCMC(num_samples=6, num_warmup=4, num_chains=3, progress=report)
        lowered = gpc.infer.lower(mcmc, KERNEL, gpc.likelihoods.Probit(), X, y, key=jax.random.key(1))
        assert has_host_callback(lowered) == (report is not None)


@pytest.mark.slow
def test_float64_values_reach_the_host_whole_under_the_x64_context_manager():
    """With x64 enabled by ``jax.enable_x64`` (as the main job does), float64 callback arguments were rounded to
    float32 on the host (the main job printed objectives 1e-6 off); they now travel as their bits."""
    script = """
import jax, jax.numpy as jnp
import gpclass as gpc
got = []
with jax.enable_x64(True):
    X, y = gpc.datasets.load("crabs")
    kernel = gpc.kernels.SquaredExponential(jnp.asarray(1.0), jnp.asarray(2.0))
    fit = gpc.fit(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), jnp.asarray(X[::10]), y[::10], max_steps=2,
                  throw=False, progress=got.append)
    print(repr(got[1]["objective"]), repr(float(fit.history[0])))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    reported, history = out.stdout.split()
    assert reported == history
