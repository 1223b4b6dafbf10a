"""Tests run in float64 (enabled here, never inside the library)."""

import collections
import typing

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest

import gpclass as gpc

# The tests' own programs (oracles, gradient and vmapped programs) are compiled with gpc.jit and these options on
# top of gpclass's: LLVM optimisation level 0, the same XLA program and results (1e-14 where compared), a third of
# the compile time.  Library entry points called directly keep the library's options, as a user's calls do.
FAST_COMPILE = {"xla_backend_optimization_level": 0}

# gpc.infer traced into a program of the tests' own (arrays traced, the method and likelihood in the tree structure),
# for tests of a solution rather than of the eager entry point; one object, so test files share its compilations.
fast_infer = gpc.jit(gpc.infer, static_argnames="throw", compiler_options=FAST_COMPILE)


def fast_filter_jit(fun):
    """``gpc.filter_jit(fun)`` (arrays traced, everything else static) compiled with ``FAST_COMPILE`` on top of
    gpclass's options."""
    return gpc.filter_jit(fun, compiler_options=FAST_COMPILE)


def assert_directional_derivatives(value_and_grad, params, *, seed=0, directions=2, h=1e-5, rtol=2e-5, atol=1e-6):
    """The gradient of a compiled ``value_and_grad`` against central differences along random directions."""
    _, grad = value_and_grad(params)
    rng = np.random.default_rng(seed)
    for _ in range(directions):
        u = jax.tree.map(lambda p: rng.normal(size=np.shape(p)), params)
        plus = value_and_grad(jax.tree.map(lambda p, d: p + h * d, params, u))[0]
        minus = value_and_grad(jax.tree.map(lambda p, d: p - h * d, params, u))[0]
        directional = sum(float(jnp.vdot(g, d)) for g, d in zip(jax.tree.leaves(grad), jax.tree.leaves(u)))
        np.testing.assert_allclose(directional, (plus - minus) / (2 * h), rtol=rtol, atol=atol)


def numpy_softmax_laplace(x, variance, lengthscale, Y_rows, w=None):
    """Laplace for sum_i w_i y_i^T log softmax(f_i) in NumPy and SciPy (the oracle of the softmax's soft labels and
    case weights; w = 1 by default), the C classes independent under the SE prior sigma_f^2 exp(-(x - x')^2 / (2 l^2))
    on the one-dimensional inputs x: the mode in the coefficients a, f = K a, by scipy's BFGS with the gradient
    K (w (Y - pi) - a); then log q = Psi(f^) - 1/2 log|I + K W| with the nC x nC matrices (class-major),
    W_i = w_i (diag pi_i - pi_i pi_i^T).  Returns the mode F (n, C) and log q."""
    from scipy import linalg, optimize, special

    n, C = Y_rows.shape
    w = np.ones(n) if w is None else np.asarray(w, np.float64)
    d = x[:, None] - x[None, :]
    K_big = linalg.block_diag(*([variance * np.exp(-0.5 * (d / lengthscale) ** 2)] * C))

    def pieces(a):
        f = K_big @ a
        F = f.reshape(C, n).T
        return f, F, F - special.logsumexp(F, axis=1, keepdims=True)

    def negative_psi(a):
        f, _, log_sm = pieces(a)
        return -(np.sum(w[:, None] * Y_rows * log_sm) - 0.5 * a @ f)

    def gradient(a):
        _, F, _ = pieces(a)
        return -K_big @ ((w[:, None] * (Y_rows - special.softmax(F, axis=1))).T.ravel() - a)

    a = optimize.minimize(negative_psi, np.zeros(n * C), jac=gradient, method="BFGS", options={"gtol": 1e-12}).x
    _, F, _ = pieces(a)
    pi = special.softmax(F, axis=1)
    W_big = np.zeros((n * C, n * C))
    for i in range(n):
        idx = np.arange(C) * n + i
        W_big[np.ix_(idx, idx)] = w[i] * (np.diag(pi[i]) - np.outer(pi[i], pi[i]))
    log_q = -negative_psi(a) - 0.5 * np.linalg.slogdet(np.eye(n * C) + K_big @ W_big)[1]
    return F, log_q


def standardised_subset(name, seed, n=60):
    """n standardised cases of a bundled real data set (a real, small problem)."""
    X, y = gpc.datasets.load(name)
    idx = np.random.default_rng(seed).permutation(len(y))[:n]
    return gpc.datasets.standardize(X[idx]), y[idx]


@pytest.fixture(scope="session")
def ionosphere_small():
    return standardised_subset("ionosphere", 1)


@pytest.fixture(scope="session")
def pima_small():
    return standardised_subset("pima", 2)


def as_float64(x):
    """A hyperparameter as a float64 array (never weakly typed), traced values unchanged.

    jit compiles once per argument type: a Python float (weakly typed), an np.float64 and a traced value
    would each compile the same program again.  Test helpers pass every scalar through this, so tests
    share one compilation per likelihood and data shape.
    """
    return x if isinstance(x, jax.Array) else np.asarray(x, np.float64)


def se_kernel(log_variance, log_lengthscale):
    """The squared-exponential kernel from log hyperparameters (traced values allowed)."""
    return gpc.kernels.SquaredExponential(variance=jnp.exp(log_variance), lengthscale=jnp.exp(log_lengthscale))


class LogMarginal(typing.NamedTuple):
    """log q(y|X) of one method with an SE kernel in log parameters, as functions sharing ONE compiled program.

    ``raw(log_variance, log_lengthscale, lik, X, y)`` is the traceable log marginal likelihood; ``compiled`` is
    the jitted program returning ((value, posterior), (d/d log_variance, d/d log_lengthscale)).  The helpers call
    it with float64 hyperparameters: ``value_and_grad``, ``value`` (gradient discarded, for finite differences)
    and ``posterior`` (the posterior, for tests of the solution itself), so that the posterior, the value and the
    gradient of one likelihood and data shape cost one compilation.
    """

    raw: typing.Callable
    value: typing.Callable
    value_and_grad: typing.Callable
    posterior: typing.Callable
    compiled: typing.Callable


def log_marginal_functions(method) -> LogMarginal:
    """The :class:`LogMarginal` functions of ``method``."""

    def with_posterior(log_variance, log_lengthscale, lik, X, y):
        post = gpc.infer(method, se_kernel(log_variance, log_lengthscale), lik, X, y)
        return post.log_marginal, post

    def raw(log_variance, log_lengthscale, lik, X, y):
        return with_posterior(log_variance, log_lengthscale, lik, X, y)[0]

    compiled = gpc.jit(jax.value_and_grad(with_posterior, argnums=(0, 1), has_aux=True))

    def call(log_variance, log_lengthscale, lik, X, y):
        return compiled(as_float64(log_variance), as_float64(log_lengthscale), lik, X, y)

    def value_and_grad(log_variance, log_lengthscale, lik, X, y):
        (value, _), grad = call(log_variance, log_lengthscale, lik, X, y)
        return value, grad

    def value(log_variance, log_lengthscale, lik, X, y):
        return call(log_variance, log_lengthscale, lik, X, y)[0][0]

    def posterior(log_variance, log_lengthscale, lik, X, y):
        return call(log_variance, log_lengthscale, lik, X, y)[0][1]

    return LogMarginal(raw, value, value_and_grad, posterior, compiled)


@gpc.filter_jit
def jit_call(fn, *args):
    """``fn(*args)`` as one compiled program (arrays traced, everything else static).

    Calling a library function outside jit runs it op by op, compiling every primitive for every new shape;
    tests that call likelihood methods directly go through this instead.
    """
    return fn(*args)


def gram(kernel, X1, X2=None):
    """``kernel.gram(X1, X2)`` as a NumPy array, computed by one compiled program (``jit_call``) per kernel
    structure and shape; an eager call would compile each of the kernel's primitives for every new shape."""
    return np.asarray(jit_call(kernel.gram, X1, X2))


def toy_data(n=30, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + 0.5 * np.sin(3 * X[:, 1]) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def central_difference(fn, x, h=1e-4):
    """Central finite differences of a scalar function of a vector (truncation error O(h^2))."""
    x = np.atleast_1d(np.asarray(x, dtype=float))
    return np.array([(fn(x + h * e) - fn(x - h * e)) / (2 * h) for e in np.eye(len(x))])


def brute_force_log_z(K, lik, y, nodes=60):
    """log int prod_i p(y_i|f_i) N(f|0, K) df by a tensor Gauss-Hermite rule (n <= 3, smooth likelihoods)."""
    n = len(y)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / np.sqrt(2 * np.pi)
    grids = np.meshgrid(*([z] * n), indexing="ij")
    F = np.stack(grids, -1).reshape(-1, n) @ np.linalg.cholesky(K).T
    W = np.prod(np.stack(np.meshgrid(*([w] * n), indexing="ij"), -1).reshape(-1, n), axis=1)
    log_lik = np.asarray(jit_call(lik.log_prob, np.tile(np.asarray(y, np.float64), (len(F), 1)), F)).sum(1)
    return np.log(np.sum(W * np.exp(log_lik)))


def pytest_report_header(config):
    import importlib.metadata as md

    names = ["jax", "jaxlib", "equinox", "optax", "numpy", "scipy", "scikit-learn"]
    return "versions: " + ", ".join(f"{name} {md.version(name)}" for name in names)


def pytest_collection_modifyitems(config, items):
    """Files with more tests first (a stable sort: each file keeps its order, ties stay alphabetical).

    Scheduling for the README's ``-n 2 --dist loadfile``: a free worker takes the next file in collection order, so
    the heavy files that sort last alphabetically (test_sparse, test_variational) finished alone on one worker
    (replayed with one run's ``--durations=0``: 300 s against 285 s for an even split).  The number of tests is a
    fair proxy for a file's time (the same replay: 286 s), except for the files whose one test starts new Python
    processes (the main job, two JAX processes): each costs about as much as a file of 40 tests, and sorted last it
    finished alone on one worker, so it counts as 40.
    """
    tests_per_file = collections.Counter(item.path for item in items)
    for path in list(tests_per_file):
        tests_per_file[path] += PROCESS_STARTING_FILES.get(path.name, 0)
    items.sort(key=lambda item: -tests_per_file[item.path])


# Test files whose test starts new Python processes, and the number of tests each is worth in the schedule above.
PROCESS_STARTING_FILES = {"test_main.py": 40, "test_multiprocess.py": 40}
