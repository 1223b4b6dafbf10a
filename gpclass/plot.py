"""Plots users look at: decision contours, log marginal likelihood surfaces, calibration.

matplotlib is imported when a function here draws, not with ``gpclass``
(``pip install matplotlib``, or ``pip install 'gpclass[plot]'``). Every
drawing function takes an optional ``ax`` (a new figure through pyplot if
None) and returns the matplotlib Axes it drew on; :func:`calibration_figure`
returns a ``matplotlib.figure.Figure`` made without pyplot (no global state,
any backend), which is what ``python -m gpclass --csv ... --plot out.png``
saves. The numbers behind the calibration plots are plain NumPy functions
(:func:`calibration_bins`, :func:`error_reject`), usable without matplotlib::

    ax = gpc.plot.decision_contours(posterior, X_train, y_train)   # 2-D inputs
    ax.figure.savefig("contours.png")

Each function's docstring has an example that runs.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

# Underscored names: the public names of this module are exactly its __all__ (tests/test_api.py).
from . import _exceptions
from ._compile import filter_jit as _filter_jit
from ._compile import jit as _jit
from ._fit import fit as _fit
from ._inference import infer as _infer
from ._predict import predict as _predict
from ._status import Status as _Status
from .integrators import MeanField as _MeanField
from .integrators import MonteCarlo as _MonteCarlo
from .kernels import SquaredExponential as _SquaredExponential

__all__ = [
    "calibration_bins",
    "calibration_figure",
    "decision_contours",
    "decision_contours_by_kernel",
    "error_reject",
    "error_reject_curve",
    "log_marginal_grid",
    "log_marginal_surface",
    "prior_samples",
    "reliability_diagram",
    "sample_prior",
]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("gpclass.plot needs matplotlib: pip install matplotlib "
                          "(or pip install 'gpclass[plot]')") from error
    return plt


def _axes(ax):
    return _pyplot().subplots()[1] if ax is None else ax


def _confidence(y, p):
    """Per case: the predicted probability of the predicted class, and whether that class is right.

    Binary (``p`` of shape (m,), p(y = +1), labels with ``y > 0`` positive) or multi-class (``p`` (m, C),
    labels 0..C-1), as in :mod:`gpclass.metrics`."""
    y, p = np.asarray(y), np.asarray(p, np.float64)
    if p.ndim == 1:
        return np.maximum(p, 1.0 - p), (p > 0.5) == (y > 0)
    if p.ndim == 2:
        return p.max(axis=1), np.argmax(p, axis=1) == y
    raise _exceptions.GPClassError(f"p must have shape (m,) or (m, C), got {p.shape}")


def calibration_bins(y, p, bins: int = 10):
    """The numbers of a reliability diagram: ``(mean_predicted, frequency, counts)`` per non-empty bin.

    Binary (``p`` (m,)): the cases are binned by p(y = +1) into ``bins`` equal-width bins of [0, 1]
    (the last bin closed); ``frequency`` is the fraction of each bin's cases with ``y > 0``.
    Multi-class (``p`` (m, C)): binned by the top class's probability (the "top-label" diagram),
    ``frequency`` is the fraction of each bin's cases whose top class is right. A calibrated
    classifier has ``frequency`` ~ ``mean_predicted``.

    Example::

        >>> y, p = np.array([1.0, 1.0, -1.0, 1.0]), np.array([0.9, 0.7, 0.3, 0.1])
        >>> mean, frequency, counts = gpc.plot.calibration_bins(y, p, bins=2)  # bins [0, 1/2), [1/2, 1]
        >>> print(mean.round(3), frequency, counts)
        [0.2 0.8] [0.5 1. ] [2 2]
    """
    y, p = np.asarray(y), np.asarray(p, np.float64)
    if p.ndim == 1:
        score, hit = p, y > 0
    else:
        score, hit = _confidence(y, p)
    index = np.clip(np.floor(score * bins).astype(int), 0, bins - 1)
    counts = np.bincount(index, minlength=bins)
    keep = counts > 0
    mean = np.bincount(index, weights=score, minlength=bins)[keep] / counts[keep]
    frequency = np.bincount(index, weights=hit.astype(np.float64), minlength=bins)[keep] / counts[keep]
    return mean, frequency, counts[keep]


def reliability_diagram(y, p, ax=None, bins: int = 10):
    """Observed frequency against predicted probability per bin (:func:`calibration_bins`), and the diagonal.

    The markers' areas are proportional to the bins' counts. Returns the Axes; ``ax.lines[0]`` is the
    diagonal and ``ax.lines[1]`` the observed frequencies.

    Example::

        >>> import matplotlib.pyplot as plt
        >>> y, p = np.array([1.0, 1.0, -1.0, 1.0]), np.array([0.9, 0.7, 0.3, 0.1])
        >>> ax = gpc.plot.reliability_diagram(y, p, bins=2)
        >>> print(ax.lines[1].get_ydata())  # the observed frequencies of y = +1 per bin
        [0.5 1. ]
        >>> plt.close(ax.figure)
    """
    ax = _axes(ax)
    mean, frequency, counts = calibration_bins(y, p, bins)
    multiclass = np.ndim(p) == 2
    ax.plot([0, 1], [0, 1], ls="--", color="0.6", lw=1, label="calibrated")
    ax.plot(mean, frequency, "-", color="C0", label="observed")
    ax.scatter(mean, frequency, s=20 + 200 * counts / counts.max(), color="C0", zorder=3)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted probability of the top class" if multiclass else "predicted p(y = +1)")
    ax.set_ylabel("fraction correct" if multiclass else "observed fraction y = +1")
    ax.set_title(f"reliability ({len(np.asarray(y))} cases, {bins} bins)")
    ax.legend(loc="upper left")
    return ax


def error_reject(y, p):
    """The error-reject curve: ``(rejected_fraction, error_rate)`` when the least confident cases are rejected.

    For j = 0..m-1 cases rejected (the j with the lowest probability of their predicted class; ties
    in the order given), the error rate of the m - j kept. ``error_rate[0]`` is the plain error rate
    (as :func:`gpclass.metrics.error_rate`); a useful confidence makes the curve fall.

    Example: the one wrong case (p = 0.4 for y = +1) is the least confident, so rejecting it leaves no error::

        >>> y, p = np.array([1.0, -1.0, 1.0, -1.0]), np.array([0.9, 0.2, 0.4, 0.3])
        >>> rejected, error = gpc.plot.error_reject(y, p)
        >>> print(rejected, error)
        [0.   0.25 0.5  0.75] [0.25 0.   0.   0.  ]
    """
    confidence, correct = _confidence(y, p)
    order = np.argsort(-confidence, kind="stable")  # most confident first
    wrong = np.cumsum(~correct[order])  # errors among the k most confident, k = 1..m
    m = len(order)
    kept = np.arange(m, 0, -1)
    return 1.0 - kept / m, wrong[kept - 1] / kept


def error_reject_curve(y, p, ax=None):
    """Plot :func:`error_reject`: test error (%) of the kept cases against the fraction rejected. Returns the Axes.

    Example::

        >>> import matplotlib.pyplot as plt
        >>> y, p = np.array([1.0, -1.0, 1.0, -1.0]), np.array([0.9, 0.2, 0.4, 0.3])
        >>> ax = gpc.plot.error_reject_curve(y, p)
        >>> print(ax.lines[0].get_ydata())  # error (%) after rejecting 0, 1, 2, 3 cases
        [25.  0.  0.  0.]
        >>> plt.close(ax.figure)
    """
    ax = _axes(ax)
    rejected, error = error_reject(y, p)
    ax.plot(rejected, 100 * error, color="C3")
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("fraction rejected (least confident first)")
    ax.set_ylabel("error rate of the rest (%)")
    ax.set_title("error-reject curve")
    return ax


def calibration_figure(y, p, title=None, bins: int = 10):
    """A figure with :func:`reliability_diagram` and :func:`error_reject_curve` side by side (no pyplot).

    Example::

        >>> y, p = np.array([1.0, -1.0, 1.0, -1.0]), np.array([0.9, 0.2, 0.4, 0.3])
        >>> figure = gpc.plot.calibration_figure(y, p, title="four cases")
        >>> [ax.get_title() for ax in figure.axes]
        ['reliability (4 cases, 10 bins)', 'error-reject curve']

    ``figure.savefig("calibration.png")`` saves it.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        _pyplot()  # raises the ImportError that says how to install matplotlib
    figure = Figure(figsize=(10, 4.5), layout="constrained")
    left, right = figure.subplots(1, 2)
    reliability_diagram(y, p, left, bins)
    error_reject_curve(y, p, right)
    if title:
        figure.suptitle(title)
    return figure


def _dtype(posterior):
    return jax.tree.leaves(eqx.filter(posterior, eqx.is_inexact_array))[0].dtype


def decision_contours(posterior, X, y, ax=None, resolution: int = 100, margin: float = 0.1, key=None,
                      num_samples: int = 1000):
    """Predictive probability contours of a posterior on 2-D inputs, with the training cases.

    Binary posteriors: filled contours of p(y = +1 | x) and the lines p = 0.1, 0.5, 0.9 (the decision
    boundary is 0.5); cases with ``y > 0`` as crosses, the others as circles. Softmax posteriors: each
    point coloured by its most probable class, shaded by that class's probability, the lines where the
    top probability is 0.5, 0.7 and 0.9, and the cases coloured by class (labels 0..C-1). Class
    probabilities of a softmax posterior are deterministic (``gpc.integrators.MeanField()``) unless a
    ``key`` is given (Monte Carlo with ``num_samples`` draws, as :func:`gpclass.predict`).

    The grid covers X's range widened by ``margin`` of it on each side, ``resolution`` points a side.
    Returns the Axes; its ``collections`` hold the contour sets and scatters.

    Example::

        >>> import matplotlib.pyplot as plt
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, 2:4], y[:40]  # two inputs, to draw
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> ax = gpc.plot.decision_contours(post, X, y, resolution=20)
        >>> ax.get_legend_handles_labels()[1]
        ['y = +1', 'y = -1']
        >>> plt.close(ax.figure)
    """
    X, y = np.asarray(X), np.asarray(y)
    if X.ndim != 2 or X.shape[1] != 2:
        raise _exceptions.GPClassError(f"decision_contours draws 2-D inputs: X must have shape (n, 2), got {X.shape}")
    ax = _axes(ax)
    lo, hi = X.min(axis=0), X.max(axis=0)
    lo, hi = lo - margin * (hi - lo), hi + margin * (hi - lo)
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], resolution), np.linspace(lo[1], hi[1], resolution))
    grid = jnp.asarray(np.column_stack([g0.ravel(), g1.ravel()]), _dtype(posterior))
    num_classes = getattr(posterior.likelihood, "num_latent", 1)
    if num_classes == 1:
        p = np.asarray(_predict(posterior, grid)).reshape(g0.shape)
        filled = ax.contourf(g0, g1, p, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.6)
        lines = ax.contour(g0, g1, p, levels=[0.1, 0.5, 0.9], colors="k", linewidths=[0.8, 1.6, 0.8])
        ax.clabel(lines, fmt="%.1f", fontsize=8)
        ax.figure.colorbar(filled, ax=ax, label="p(y = +1 | x)")
        pos = y > 0
        ax.scatter(X[pos, 0], X[pos, 1], marker="x", color="C3", label="y = +1")
        ax.scatter(X[~pos, 0], X[~pos, 1], marker="o", facecolors="none", edgecolors="C0", label="y = -1")
    else:
        if key is None:
            p = _predict(posterior, grid, integrator=_MeanField())
        else:
            p = _predict(posterior, grid, key=key, integrator=_MonteCarlo(num_samples))
        p = np.asarray(p).reshape(*g0.shape, num_classes)
        top, cls = p.max(axis=-1), p.argmax(axis=-1)
        colours = [f"C{c % 10}" for c in range(num_classes)]
        from matplotlib.colors import ListedColormap

        ax.contourf(g0, g1, cls, levels=np.arange(num_classes + 1) - 0.5, cmap=ListedColormap(colours), alpha=0.35)
        lines = ax.contour(g0, g1, top, levels=[0.5, 0.7, 0.9], colors="k", linewidths=0.8)
        ax.clabel(lines, fmt="%.1f", fontsize=8)
        for c in range(num_classes):
            ax.scatter(X[y == c, 0], X[y == c, 1], color=colours[c], edgecolors="k", linewidths=0.5,
                       label=f"class {c}")
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    ax.set_xlabel("x1")
    ax.set_ylabel("x2")
    ax.legend(loc="best", fontsize=8)
    return ax


def log_marginal_surface(method, likelihood, X, y, log_l, log_sf):
    """log q(y | X, theta) of a squared-exponential kernel on the grid ``log_l`` x ``log_sf``.

    Returns an array of shape ``(len(log_sf), len(log_l))`` (rows: log sigma_f, columns: log l), as
    :func:`log_marginal_grid` draws it. One ``gpc.jit(jax.vmap(...))`` call over every grid point of
    ``gpc.infer(method, SquaredExponential(exp(2 log_sf), exp(log_l)), likelihood, X, y, throw=False)``;
    a point where the solver did not converge is NaN (a gap in the contours, deliberately: no number
    stands in for one that was not computed). Binary methods (labels -1 / +1) and softmax Laplace.

    Example::

        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> log_l, log_sf = np.linspace(-1.0, 1.0, 3), np.linspace(-1.0, 1.0, 3)
        >>> log_q = gpc.plot.log_marginal_surface(gpc.Laplace(), gpc.likelihoods.Logistic(), X, y, log_l, log_sf)
        >>> log_q.shape, bool(np.all(np.isfinite(log_q)))  # rows: log sigma_f, columns: log l
        ((3, 3), True)

    ``gpc.plot.log_marginal_grid(log_q, log_l, log_sf)`` draws it.
    """
    log_l, log_sf = np.asarray(log_l, np.float64), np.asarray(log_sf, np.float64)
    X = jnp.asarray(X)
    a, b = np.meshgrid(log_l, log_sf)

    def one(a, b, X, y):
        kernel = _SquaredExponential(variance=jnp.exp(2 * b), lengthscale=jnp.exp(a))
        post = _infer(method, kernel, likelihood, X, y, throw=False)
        return post.log_marginal, post.info.status

    values, status = _jit(jax.vmap(one, in_axes=(0, 0, None, None)))(
        jnp.asarray(a.ravel(), X.dtype), jnp.asarray(b.ravel(), X.dtype), X, jnp.asarray(y))
    values = np.where(np.asarray(status) == _Status.CONVERGED, np.asarray(values, np.float64), np.nan)
    return values.reshape(a.shape)


def log_marginal_grid(log_q, log_l, log_sf, ax=None, levels=None):
    """Contours of log q over (log length scale, log signal std), GPML Figures 3.7 / 3.8 style.

    ``log_q`` has shape ``(len(log_sf), len(log_l))`` (e.g. from :func:`log_marginal_surface`; NaN
    points are left blank). ``levels`` default to the maximum minus 0.5, 1, 2, 5, 10, 20, 50, 100, 200
    and 500 nats; the grid maximum is marked with a +. Returns the Axes.

    Example (a made-up surface; :func:`log_marginal_surface` computes a real one)::

        >>> import matplotlib.pyplot as plt
        >>> log_l, log_sf = np.linspace(-2.0, 2.0, 5), np.linspace(-1.0, 1.0, 3)
        >>> log_q = -10.0 - (log_l[None, :] - 1.0) ** 2 - log_sf[:, None] ** 2  # maximum at log l = 1, log sf = 0
        >>> ax = gpc.plot.log_marginal_grid(log_q, log_l, log_sf)
        >>> ax.get_legend_handles_labels()[1]
        ['max log q = -10.00']
        >>> plt.close(ax.figure)
    """
    ax = _axes(ax)
    log_q = np.asarray(log_q, np.float64)
    log_l, log_sf = np.asarray(log_l), np.asarray(log_sf)
    if log_q.shape != (len(log_sf), len(log_l)):
        raise _exceptions.GPClassError(f"log_q must have shape (len(log_sf), len(log_l)) = ({len(log_sf)}, "
                                       f"{len(log_l)}), got {log_q.shape}")
    if not np.any(np.isfinite(log_q)):
        raise _exceptions.GPClassError("log_q has no finite value to draw")
    best = np.nanargmax(log_q)
    top = log_q.flat[best]
    if levels is None:
        levels = top - np.array([500, 200, 100, 50, 20, 10, 5, 2, 1, 0.5])
        levels = levels[levels > np.nanmin(log_q)]
        levels = levels if len(levels) >= 2 else np.linspace(np.nanmin(log_q), top, 8)[:-1]
    lines = ax.contour(log_l, log_sf, log_q, levels=levels, cmap="viridis")
    ax.clabel(lines, fmt="%.1f", fontsize=8)
    i, j = np.unravel_index(best, log_q.shape)
    ax.plot(log_l[j], log_sf[i], "k+", markersize=12, mew=2, label=f"max log q = {top:.2f}")
    ax.set_xlabel("log lengthscale, log l")
    ax.set_ylabel("log magnitude, log sigma_f")
    ax.legend(loc="best", fontsize=8)
    return ax


@_filter_jit
def _gram(kernel, X):
    return kernel.gram(X)


def sample_prior(kernel, x=None, num_samples: int = 3, seed: int = 0, jitter: float = 1e-10):
    """The numbers behind :func:`prior_samples`: ``num_samples`` functions f ~ N(0, K) on the 1-D grid ``x``,
    an (m, num_samples) NumPy array, K = kernel.gram(x[:, None]).

    ``x`` defaults to 200 points on [-3, 3].  Drawn on the host with NumPy (``seed``) from the
    eigendecomposition of K + jitter I, negative eigenvalues of rounding clipped to 0, so kernels with a
    rank-deficient Gram matrix (``Linear``, ``Polynomial``, ``Periodic`` on a long grid) draw too.

    Example::

        >>> x = np.linspace(-1.0, 1.0, 5)
        >>> f = gpc.plot.sample_prior(gpc.kernels.SquaredExponential(), x, num_samples=2)
        >>> f.shape  # one column per function
        (5, 2)
        >>> f = gpc.plot.sample_prior(gpc.kernels.Constant(1.0), x, num_samples=2)
        >>> bool(np.allclose(f, f[0], atol=1e-3))  # a constant kernel's functions are constants (to the jitter)
        True
    """
    x = _grid(x)
    K = np.asarray(_gram(kernel, jnp.asarray(x[:, None], jnp.result_type(float))), np.float64)
    eigenvalues, vectors = np.linalg.eigh(0.5 * (K + K.T) + jitter * np.eye(len(x)))
    root = vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
    return root @ np.random.default_rng(seed).normal(size=(len(x), num_samples))


def _grid(x):
    x = np.linspace(-3.0, 3.0, 200) if x is None else np.asarray(x, np.float64)
    if x.ndim != 1:
        raise _exceptions.GPClassError(f"prior samples are drawn on 1-D inputs: x must have shape (m,), got {x.shape}")
    return x


def prior_samples(kernel, x=None, num_samples: int = 3, seed: int = 0, ax=None):
    """Functions drawn from a kernel's prior on 1-D inputs (:func:`sample_prior`), over a band of +-2 prior
    standard deviations (``kernel.diag``).  Returns the Axes; its ``lines`` are the samples, its title the
    kernel's class.

    Example::

        >>> import matplotlib.pyplot as plt
        >>> ax = gpc.plot.prior_samples(gpc.kernels.Matern12(lengthscale=0.5), np.linspace(-3.0, 3.0, 50))
        >>> len(ax.lines), ax.get_title()
        (3, 'Matern12')
        >>> plt.close(ax.figure)
    """
    x = _grid(x)
    f = sample_prior(kernel, x, num_samples, seed)
    sd = np.sqrt(np.clip(np.asarray(kernel.diag(jnp.asarray(x[:, None], jnp.result_type(float))), np.float64), 0, None))
    ax = _axes(ax)
    ax.fill_between(x, -2 * sd, 2 * sd, color="0.85", label="+-2 prior sd")
    for i in range(num_samples):
        ax.plot(x, f[:, i], lw=1.2)
    ax.set_xlabel("x")
    ax.set_ylabel("f(x)")
    ax.set_title(type(kernel).__name__)
    return ax


def decision_contours_by_kernel(method, likelihood, X, y, kernels: dict, fit: bool = False, resolution: int = 60,
                                figure=None):
    """One data set's decision contours under several kernels, side by side (:func:`decision_contours`).

    ``kernels`` maps a panel title to a kernel (e.g. ``{"SE": SquaredExponential(), "Matern 1/2":
    Matern12()}``).  Each kernel's posterior is ``gpc.infer(method, kernel, likelihood, X, y)``, or with
    ``fit=True`` the posterior at its ML-II hyperparameters (``gpc.fit``, starting from the kernel given);
    the title adds its log marginal likelihood.  Returns a ``matplotlib.figure.Figure`` made without
    pyplot (``figure.savefig(...)``), or draws into ``figure`` if given.

    Example::

        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, 2:4], y[:40]  # two inputs, to draw
        >>> kernels = {"SE": gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0),
        ...            "Matern 1/2": gpc.kernels.Matern12(variance=1.0, lengthscale=1.0)}
        >>> figure = gpc.plot.decision_contours_by_kernel(gpc.Laplace(), gpc.likelihoods.Logistic(), X, y, kernels,
        ...                                                resolution=20)
        >>> [ax.get_title()[:12] for ax in figure.axes if ax.get_title()]
        ['SE: log q = ', 'Matern 1/2: ']

    ``fit=True`` draws each kernel at its ML-II hyperparameters; ``figure.savefig("kernels.png")`` saves it.
    """
    if not kernels:
        raise _exceptions.GPClassError("decision_contours_by_kernel: no kernel to draw")
    if figure is None:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(5.0 * len(kernels), 4.2), layout="constrained")
    axes = figure.subplots(1, len(kernels), squeeze=False)[0]
    for ax, (title, kernel) in zip(axes, kernels.items()):
        if fit:
            posterior = _fit(method, kernel, likelihood, X, y).posterior
        else:
            posterior = _infer(method, kernel, likelihood, X, y)
        decision_contours(posterior, X, y, ax=ax, resolution=resolution)
        ax.set_title(f"{title}: log q = {float(posterior.log_marginal):.2f}")
    return figure
