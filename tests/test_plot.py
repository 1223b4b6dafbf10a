"""gpclass.plot on tiny inputs: the Axes and their artists, and the numbers behind them against NumPy."""

import sys

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")  # before pyplot: no display in tests

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.contour import ContourSet  # noqa: E402

import gpclass as gpc  # noqa: E402
from gpclass import plot  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def two_blobs(num_classes, n_per_class, seed=0):
    rng = np.random.default_rng(seed)
    centres = 2.0 * np.array([[np.cos(a), np.sin(a)] for a in 2 * np.pi * np.arange(num_classes) / num_classes])
    X = np.concatenate([c + rng.normal(size=(n_per_class, 2)) for c in centres])
    y = np.repeat(np.arange(num_classes), n_per_class)
    return X, (2.0 * y - 1.0 if num_classes == 2 else y)


def numpy_bins(score, hit, bins):
    """Reliability-diagram bins by a loop over bin edges (the last bin closed), empty bins left out."""
    edges = np.linspace(0, 1, bins + 1)
    out = []
    for b in range(bins):
        inside = (score >= edges[b]) & ((score < edges[b + 1]) if b < bins - 1 else (score <= 1))
        if inside.any():
            out.append((score[inside].mean(), hit[inside].mean(), inside.sum()))
    return np.array(out).T


def test_reliability_diagram_plots_numpy_bin_frequencies():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=200) ** 2
    p[:3] = [0.0, 1.0, 0.5]  # the edges of the first, last and a middle bin
    y = np.where(rng.uniform(size=200) < p, 1.0, -1.0)
    ax = plot.reliability_diagram(y, p, bins=7)
    mean, frequency, counts = numpy_bins(p, y > 0, 7)
    diagonal, observed = ax.lines
    np.testing.assert_allclose(diagonal.get_xydata(), [[0, 0], [1, 1]])
    np.testing.assert_allclose(observed.get_xdata(), mean, rtol=1e-12)
    np.testing.assert_allclose(observed.get_ydata(), frequency, rtol=1e-12)
    np.testing.assert_array_equal(plot.calibration_bins(y, p, 7)[2], counts)
    assert counts.sum() == 200

    P = rng.dirichlet(np.ones(3), size=150)  # multi-class: binned by the top class's probability
    labels = rng.integers(0, 3, size=150)
    mean, frequency, counts = numpy_bins(P.max(axis=1), P.argmax(axis=1) == labels, 10)
    ax = plot.reliability_diagram(labels, P)
    np.testing.assert_allclose(ax.lines[1].get_ydata(), frequency, rtol=1e-12)
    np.testing.assert_allclose(ax.lines[1].get_xdata(), mean, rtol=1e-12)
    assert "top class" in ax.get_xlabel()


def test_error_reject_curve_against_rejecting_case_by_case():
    rng = np.random.default_rng(1)
    p = rng.uniform(size=40)
    y = np.where(rng.uniform(size=40) < 0.5 * (1 + (p - 0.5)), 1.0, -1.0)
    rejected, error = plot.error_reject(y, p)
    order = np.argsort(-np.abs(p - 0.5), kind="stable")  # most confident first
    for j in range(40):
        keep = order[: 40 - j]
        assert rejected[j] == pytest.approx(j / 40)
        assert error[j] == pytest.approx(np.mean((p[keep] > 0.5) != (y[keep] > 0)))
    assert error[0] == pytest.approx(float(gpc.metrics.error_rate(y, p)))  # nothing rejected: the error rate
    ax = plot.error_reject_curve(y, p)
    (line,) = ax.lines
    np.testing.assert_allclose(line.get_ydata(), 100 * error)
    figure = plot.calibration_figure(y, p, title="t")
    assert len(figure.axes) == 2 and figure.axes[0].lines and figure.axes[1].lines


@pytest.mark.slow
def test_decision_contours_binary_and_softmax():
    X, y = two_blobs(2, 10)
    kernel = gpc.kernels.SquaredExponential(jnp.asarray(4.0), jnp.asarray(1.5))
    post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Probit(), X, y)
    ax = plot.decision_contours(post, X, y, resolution=15)
    filled, lines = [c for c in ax.collections if isinstance(c, ContourSet)]
    assert filled.filled and not lines.filled
    np.testing.assert_allclose(lines.levels, [0.1, 0.5, 0.9])
    assert len(ax.collections) == 4  # two contour sets, the two classes' scatters
    np.testing.assert_allclose(ax.collections[2].get_offsets(), X[y > 0])

    X, y = two_blobs(3, 6, seed=2)
    post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Softmax(3), X, y)
    ax = plot.decision_contours(post, X, y, resolution=12)
    contours = [c for c in ax.collections if isinstance(c, ContourSet)]
    assert [c.filled for c in contours] == [True, False]
    np.testing.assert_allclose(contours[0].levels, [-0.5, 0.5, 1.5, 2.5])  # one filled region per class
    assert len(ax.collections) == 2 + 3
    with pytest.raises(ValueError, match="X must have shape \\(n, 2\\)"):
        plot.decision_contours(post, np.zeros((3, 3)), y[:3])


@pytest.mark.slow
def test_log_marginal_surface_and_grid():
    X, y = two_blobs(2, 8, seed=3)
    lik = gpc.likelihoods.Probit()
    log_l, log_sf = np.array([-0.5, 0.0, 0.5, 1.0]), np.array([0.0, 1.0, 2.0])
    log_q = plot.log_marginal_surface(gpc.Laplace(), lik, X, y, log_l, log_sf)
    assert log_q.shape == (3, 4) and np.all(np.isfinite(log_q))
    direct = gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(jnp.exp(2 * 1.0), jnp.exp(0.5)), lik, X, y)
    assert log_q[1, 2] == pytest.approx(float(direct.log_marginal), rel=1e-9)
    log_q[0, 0] = np.nan  # a point that did not converge is a gap, not an error
    ax = plot.log_marginal_grid(log_q, log_l, log_sf)
    (contours,) = [c for c in ax.collections if isinstance(c, ContourSet)]
    assert np.all(np.asarray(contours.levels) < np.nanmax(log_q))
    i, j = np.unravel_index(np.nanargmax(log_q), log_q.shape)
    (marker,) = ax.lines
    np.testing.assert_allclose(marker.get_xydata(), [[log_l[j], log_sf[i]]])
    with pytest.raises(ValueError, match="must have shape"):
        plot.log_marginal_grid(log_q.T, log_l, log_sf)
    assert jax.config.jax_enable_x64  # the conftest's float64, unchanged by gpclass.plot


def test_prior_samples_have_the_kernels_covariance():
    """Many samples on five points: their empirical covariance is scikit-learn's Matern(nu=0.5) Gram matrix to
    Monte Carlo accuracy (20000 draws: standard error <= sqrt(2 / 20000) = 0.01 of the variance); the plot draws
    the samples over a band of +-2 prior standard deviations."""
    from sklearn.gaussian_process.kernels import Matern

    x = np.linspace(-1.0, 1.0, 5)
    kernel = gpc.kernels.Matern12(variance=1.0, lengthscale=0.7)
    f = plot.sample_prior(kernel, x, num_samples=20000, seed=1)
    assert f.shape == (5, 20000)
    np.testing.assert_allclose(np.cov(f), Matern(0.7, nu=0.5)(x[:, None]), atol=0.05)
    ax = plot.prior_samples(kernel, x, num_samples=4, seed=1)
    assert len(ax.lines) == 4 and ax.get_title() == "Matern12"
    np.testing.assert_allclose(np.array([line.get_ydata() for line in ax.lines]).T,
                               plot.sample_prior(kernel, x, num_samples=4, seed=1), rtol=1e-12)
    (band,) = ax.collections
    np.testing.assert_allclose(band.get_paths()[0].vertices[:, 1].max(), 2.0)
    ax = plot.prior_samples(gpc.kernels.Periodic(period=1.5))  # a rank-deficient Gram matrix on 200 points
    assert len(ax.lines) == 3 and all(np.all(np.isfinite(line.get_ydata())) for line in ax.lines)
    with pytest.raises(ValueError, match="1-D inputs"):
        plot.prior_samples(gpc.kernels.Matern32(), np.zeros((3, 2)))


@pytest.mark.slow
def test_decision_contours_under_several_kernels():
    X, y = two_blobs(2, 8, seed=4)
    kernels = {"SE": gpc.kernels.SquaredExponential(jnp.asarray(4.0), jnp.asarray(1.5)),
               "Matern 1/2": gpc.kernels.Matern12(jnp.asarray(4.0), jnp.asarray(1.5))}
    figure = plot.decision_contours_by_kernel(gpc.Laplace(), gpc.likelihoods.Probit(), X, y, kernels, resolution=10)
    panels = [ax for ax in figure.axes if ax.get_title()]  # the colour bars have no title
    assert [ax.get_title().split(":")[0] for ax in panels] == ["SE", "Matern 1/2"]
    for ax in panels:
        assert "log q = " in ax.get_title()
        assert len([c for c in ax.collections if isinstance(c, ContourSet)]) == 2


def test_missing_matplotlib_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # import matplotlib.pyplot now fails
    with pytest.raises(ImportError, match="pip install matplotlib"):
        plot.reliability_diagram([1, -1], [0.7, 0.2])
