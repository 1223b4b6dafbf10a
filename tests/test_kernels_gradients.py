"""Gradients through the kernels of issue 34 where the distance is zero, against central finite differences.

d sqrt(r^2) / d r^2 is infinite at r = 0: a Matérn kernel differentiated naively through sqrt gives NaN on the
diagonal, on repeated rows and at a test input equal to a training input.  Here log q(y|X, theta) of Laplace's
method (logistic likelihood) on 18 inputs with three repeated rows, through each new kernel (ARD where it has
length scales per dimension), is differentiated in its log hyperparameters and in the training inputs, and the
predictive latent mean and variance at test inputs equal to training inputs in those test inputs; each gradient
is compared with central differences of the same compiled program's value along random directions.

Matérn 1/2 is not differentiable in the inputs where two of them coincide (exp(-|x - x'|) has a cusp): there
its input gradients are only required to be finite; its hyperparameter gradients are compared like the others.

The same program runs in float32 with x64 off (``jax.enable_x64(False)``, as tests/test_float32.py does): its
gradients are finite and agree with the float64 finite differences to a float32 tolerance.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE

import gpclass as gpc

K = gpc.kernels
D = 3


def data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(18, D))
    X[15:] = X[[1, 4, 9]]  # three repeated rows
    y = np.where(X[:, 0] + 0.7 * X[:, 1] + 0.5 * rng.normal(size=18) > 0, 1.0, -1.0)
    X_test = np.vstack([X[[2, 4]], rng.normal(size=(1, D))])  # two test inputs equal to training inputs
    return X, y, X_test


# Each kernel from its log hyperparameters t (log variance first); the initial t.
E = jnp.exp
KERNELS = {
    "matern12": (lambda t: K.Matern12(E(t[0]), E(t[1:])), [0.3, -0.5, 0.2, 0.8]),
    "matern32": (lambda t: K.Matern32(E(t[0]), E(t[1:])), [0.5, -0.3, 0.4, 0.9]),
    "matern52": (lambda t: K.Matern52(E(t[0]), E(t[1:])), [0.5, -0.4, 0.1, 1.0]),
    "rq": (lambda t: K.RationalQuadratic(E(t[0]), E(t[1:4]), E(t[4])), [0.4, -0.2, 0.3, 0.7, -0.5]),
    "periodic": (lambda t: K.OnDims(K.Periodic(E(t[0]), E(t[1]), E(t[2])), [0])  # positive definite: one column
                 * K.OnDims(K.Periodic(1.0, E(t[3]), E(t[4])), [1]), [0.5, 0.1, 1.0, -0.2, 1.5]),
    "polynomial": (lambda t: K.Polynomial(E(t[0]), E(t[1]), 2), [-0.5, 0.2]),
    "nn": (lambda t: K.NeuralNetwork(E(t[0]), E(t[1])), [1.0, 0.3]),
    "scale-exp": (lambda t: K.Scale(K.Exponentiation(K.Matern12(1.0, E(t[1:])), 1.5), E(t[0])), [0.4, 0.0, 0.5, 1.2]),
}
CUSP = {"matern12", "scale-exp"}  # not differentiable in the inputs at coincident ones
NAMES = list(KERNELS)


def objectives(name, t, X, y, X_test, w):
    """(log q, w . [predictive latent mean; variance] at X_test), and their gradients: log q's in (t, X),
    the prediction's in X_test."""
    make = KERNELS[name][0]
    lik = gpc.likelihoods.Logistic()

    def log_q(t, X):
        return gpc.infer(gpc.Laplace(), make(t), lik, X, y).log_marginal

    post = gpc.infer(gpc.Laplace(), make(t), lik, X, y)

    def predicted(X_test):
        mean, var = gpc.predict_latent(post, X_test)
        return jnp.dot(w, jnp.concatenate([mean, var]))

    value, grad = jax.value_and_grad(log_q, argnums=(0, 1))(t, X)
    latent, grad_test = jax.value_and_grad(predicted)(X_test)
    return value, latent, grad, grad_test


@gpc.jit(compiler_options=FAST_COMPILE)
def program(thetas, X, y, X_test, w):
    """Every kernel's objectives and gradients (``thetas``: name -> log hyperparameters), one compiled program."""
    return {name: objectives(name, t, X, y, X_test, w) for name, t in thetas.items()}


def run(thetas, X, y, X_test, w):
    return jax.device_get(program(thetas, X, y, X_test, w))


def finite_differences(thetas, X, y, X_test, w, h=1e-5, seed=0):
    """Central differences of the float64 program along random directions, per kernel: {name: {key: (direction,
    difference)}} for key t (the kernel's log hyperparameters), X and X_test.  Each kernel's objectives depend on
    its own t only, so one call moves every kernel's t at once."""
    rng = np.random.default_rng(seed)
    out = {name: {} for name in thetas}
    for key in ("t", "X", "X_test"):
        if key == "t":
            u = {name: rng.normal(size=np.shape(t)) for name, t in thetas.items()}
            at = lambda s: run({n: t + s * u[n] for n, t in thetas.items()}, X, y, X_test, w)
        else:
            u = rng.normal(size=np.shape(X if key == "X" else X_test))
            at = lambda s: run(thetas, X + s * u, y, X_test, w) if key == "X" else run(thetas, X, y, X_test + s * u, w)
        plus, minus = at(h), at(-h)
        index = 1 if key == "X_test" else 0  # the prediction's value, else log q
        for name in thetas:
            out[name][key] = (u[name] if key == "t" else u, (plus[name][index] - minus[name][index]) / (2 * h))
    return out


def directional(result, fd):
    _, _, grad, grad_test = result
    return {"t": np.vdot(grad[0], fd["t"][0]), "X": np.vdot(grad[1], fd["X"][0]),
            "X_test": np.vdot(grad_test, fd["X_test"][0])}


def keys(name):
    return ("t",) if name in CUSP else ("t", "X", "X_test")


@pytest.fixture(scope="module")
def problem():
    X, y, X_test = data()
    w = np.random.default_rng(8).normal(size=2 * len(X_test))
    thetas = {name: np.asarray(t0, np.float64) for name, (_, t0) in KERNELS.items()}
    result = run(thetas, X, y, X_test, w)
    return thetas, (X, y, X_test, w), result, finite_differences(thetas, X, y, X_test, w)


@pytest.mark.slow
def test_gradients_at_zero_distance_match_finite_differences(problem):
    thetas, _, result, fd = problem
    worst = {}
    for name in KERNELS:
        value, _, grad, grad_test = result[name]
        assert np.isfinite(value), name
        for g in (*grad, grad_test):
            assert np.all(np.isfinite(g)), name
        got = directional(result[name], fd[name])
        # Truncation O(h^2) ~ 1e-10, rounding ~ eps |log q| / h ~ 1e-10, against directional derivatives of order 1.
        for key in keys(name):
            np.testing.assert_allclose(got[key], fd[name][key][1], rtol=1e-6, atol=1e-8, err_msg=f"{name}: {key}")
            worst[name, key] = abs(got[key] - fd[name][key][1]) / abs(fd[name][key][1])
    print("float64, max relative deviation from central differences:", f"{max(worst.values()):.1e}")


# float32: the kernels whose profile is special at r = 0 (the Matérns' custom derivatives, Matérn 1/2's rounding
# bound); three programs' compilation, of the nine above.
FLOAT32 = ["matern12", "matern32", "matern52"]


@pytest.mark.slow
def test_float32_gradients_at_zero_distance_match_float64_finite_differences(problem):
    thetas, args, result, fd = problem
    with jax.enable_x64(False):
        as32 = lambda a: np.asarray(a, np.float32)
        single = run({name: as32(thetas[name]) for name in FLOAT32}, *map(as32, args))
    assert jnp.zeros(1).dtype == np.float64  # x64 back on for the rest of the process
    worst = 0.0
    for name in FLOAT32:
        value, _, grad, grad_test = single[name]
        assert value.dtype == np.float32, name
        for g in (*grad, grad_test):
            assert g.dtype == np.float32 and np.all(np.isfinite(g)), name
        np.testing.assert_allclose(value, result[name][0], rtol=1e-5, err_msg=name)
        got = directional(single[name], fd[name])
        _, _, grad64, grad_test64 = result[name]
        norms = {"t": np.linalg.norm(grad64[0]), "X": np.linalg.norm(grad64[1]), "X_test": np.linalg.norm(grad_test64)}
        # Relative to |grad| |u|, the largest a directional derivative can be: float32 rounding of K (eps ~ 1e-7)
        # amplified by Laplace's solves, and the inner Newton's float32 stopping tolerance (observed: <= 1e-6).
        for key in keys(name):
            scale = norms[key] * np.linalg.norm(fd[name][key][0])
            np.testing.assert_allclose(got[key], fd[name][key][1], rtol=0, atol=1e-4 * scale,
                                       err_msg=f"{name}: float32 {key}")
            worst = max(worst, abs(got[key] - fd[name][key][1]) / scale)
    print(f"float32, max deviation from float64 central differences: {worst:.1e} of |grad| |u|")


@gpc.jit(compiler_options=FAST_COMPILE)
def sparse_program(Z, X, y):
    """log q of Laplace under FITC priors with Matérn kernels and its gradient in the inducing inputs Z."""

    def log_q(Z, kernel):
        return gpc.infer(gpc.Laplace(), gpc.Sparse(kernel, Z), gpc.likelihoods.Logistic(), X, y).log_marginal

    kernels = {"matern12": K.Matern12(1.5, jnp.asarray([0.8, 1.2, 2.0])),
               "matern52": K.Matern52(1.5, jnp.asarray([0.8, 1.2, 2.0]))}
    return {name: jax.value_and_grad(log_q)(Z, k) for name, k in kernels.items()}


def test_inducing_input_gradients_where_inducing_inputs_equal_training_inputs():
    """Inducing inputs at training inputs (two of them repeated rows of X): K_fu has zero distances.  Matérn 5/2's
    gradient in Z matches central differences; Matérn 1/2's (a cusp there) is finite."""
    X, y, _ = data()
    Z = np.vstack([X[[1, 3, 5, 9]], np.full((1, D), 0.3)])  # X[1] and X[9] have repeats in X
    result = jax.device_get(sparse_program(Z, X, y))
    for name, (value, grad) in result.items():
        assert np.isfinite(value) and np.all(np.isfinite(grad)), name
    u = np.random.default_rng(3).normal(size=Z.shape)
    h = 1e-5
    fd = (sparse_program(Z + h * u, X, y)["matern52"][0] - sparse_program(Z - h * u, X, y)["matern52"][0]) / (2 * h)
    np.testing.assert_allclose(np.vdot(result["matern52"][1], u), fd, rtol=1e-6)
