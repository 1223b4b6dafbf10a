"""The kernels of issue 34 (Matérn, rational quadratic, periodic, polynomial, neural network, Scale, Exponentiation)
against independent truth: scikit-learn's kernels (values and their hyperparameter gradients, chain-ruled from
sklearn's log hyperparameters to ours), direct NumPy evaluations of GPML's formulas, and eigenvalues for positive
semi-definiteness; then composition (+, *, OnDims, PerClass, vmap).

Every kernel's values are computed by one compiled program (``jit_call`` over a list of kernels) per input shape.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sklearn.gaussian_process.kernels as skk
from conftest import jit_call

import gpclass as gpc

K = gpc.kernels
RNG = np.random.default_rng(34)
X1 = RNG.normal(size=(12, 3))
X2 = RNG.normal(size=(7, 3))
ARD = np.array([0.6, 1.3, 2.7])


def values(kernels, A, B):
    """(gram(A), gram(A, B), diag(A), the generic pairwise gram(A, B) from ``evaluate``) of every kernel, in one
    compiled program."""
    return jit_call(lambda ks: [(k.gram(A), k.gram(A, B), k.diag(A), K.AbstractKernel.gram(k, A, B)) for k in ks],
                    kernels)


# (ours, scikit-learn's, our parameters in sklearn's hyperparameter order as functions of ours, d sklearn's log
# hyperparameter / d our parameter).  sklearn's theta is log(hyperparameters): for a parameter p of ours equal to
# h(theta), dK/dtheta = dK/dp dp/dtheta; every map below is p = exp(theta) (dp/dtheta = p) except DotProduct's
# offset = sigma_0^2 (dp/dtheta = 2 p).
SKLEARN = {
    "matern12-ard": (K.Matern12(1.7, ARD), skk.ConstantKernel(1.7) * skk.Matern(ARD, nu=0.5)),
    "matern32-iso": (K.Matern32(0.8, 1.4), skk.ConstantKernel(0.8) * skk.Matern(1.4, nu=1.5)),
    "matern32-ard": (K.Matern32(1.7, ARD), skk.ConstantKernel(1.7) * skk.Matern(ARD, nu=1.5)),
    "matern52-ard": (K.Matern52(2.2, ARD), skk.ConstantKernel(2.2) * skk.Matern(ARD, nu=2.5)),
    "matern12-iso": (K.Matern12(0.9, 0.7), skk.ConstantKernel(0.9) * skk.Matern(0.7, nu=0.5)),
    "rq": (K.RationalQuadratic(1.3, 0.9, 0.4), skk.ConstantKernel(1.3) * skk.RationalQuadratic(0.9, 0.4)),
    "periodic": (K.Periodic(1.1, 0.8, 1.9), skk.ConstantKernel(1.1) * skk.ExpSineSquared(0.8, 1.9)),
    "dot-product": (K.Polynomial(1.0, 0.7**2, 1), skk.DotProduct(0.7)),
    "polynomial-3": (K.Polynomial(1.0, 0.7**2, 3), skk.Exponentiation(skk.DotProduct(0.7), 3)),
    "scale": (K.Scale(K.Matern52(1.0, 1.4), 2.5), skk.ConstantKernel(2.5) * skk.Matern(1.4, nu=2.5)),
    "exponentiation": (K.Exponentiation(K.Matern32(1.2, ARD), 2.5),
                       skk.Exponentiation(skk.ConstantKernel(1.2) * skk.Matern(ARD, nu=1.5), 2.5)),
}


def our_log_gradient(name, jac):
    """dK / d(sklearn's theta) from our Jacobian ``jac`` (a kernel-shaped tree of (n, n, *shape) arrays), as an
    (n, n, num_theta) array in sklearn's order."""
    kernel = SKLEARN[name][0]

    def col(dK, p, factor=1.0):  # dK/dp (n, n[, d]) times dp/dtheta = factor * p
        dK, p = np.asarray(dK), np.asarray(p)
        out = dK * (factor * p)
        return out[..., None] if out.ndim == 2 else out

    if name.startswith(("matern", "rq", "periodic")):
        # sklearn orders a kernel's hyperparameters by name: RationalQuadratic's alpha before length_scale.
        fields = {"rq": ("variance", "alpha", "lengthscale"), "periodic": ("variance", "lengthscale", "period")}
        names = fields.get(name, ("variance", "lengthscale"))
        return np.concatenate([col(getattr(jac, f), getattr(kernel, f)) for f in names], axis=-1)
    if name in ("dot-product", "polynomial-3"):
        return col(jac.offset, kernel.offset, factor=2.0)
    if name == "scale":
        return np.concatenate([col(jac.variance, kernel.variance), col(jac.kernel.lengthscale,
                                                                       kernel.kernel.lengthscale)], axis=-1)
    inner, jinner = kernel.kernel, jac.kernel  # exponentiation
    return np.concatenate([col(jinner.variance, inner.variance), col(jinner.lengthscale, inner.lengthscale)], -1)


@pytest.mark.slow
def test_values_and_hyperparameter_gradients_match_scikit_learn():
    names = list(SKLEARN)
    ours = [SKLEARN[n][0] for n in names]
    computed = values(ours, X1, X2)
    jacobians = jit_call(lambda ks: [jax.jacfwd(lambda k: k.gram(X1))(k) for k in ks], ours)
    worst_value, worst_grad = 0.0, 0.0
    for name, (gram, cross, diag, pairwise), jac in zip(names, computed, jacobians):
        sk = SKLEARN[name][1]
        want, want_grad = sk(X1, eval_gradient=True)
        np.testing.assert_allclose(gram, want, rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(cross, sk(X1, X2), rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(pairwise, sk(X1, X2), rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(diag, sk.diag(X1), rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(np.diag(gram), diag, rtol=1e-14, err_msg=name)  # exact for stationary ones
        grad = our_log_gradient(name, jac)
        assert grad.shape == want_grad.shape, (name, grad.shape, want_grad.shape)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12, err_msg=name)
        worst_value = max(worst_value, np.max(np.abs(gram - want)), np.max(np.abs(cross - sk(X1, X2))))
        worst_grad = max(worst_grad, np.max(np.abs(grad - want_grad)))
    print(f"max |ours - sklearn|: values {worst_value:.1e}, log-hyperparameter gradients {worst_grad:.1e}")


def rq_ard(A, B, variance, lengthscale, alpha):
    r2 = np.sum(((A[:, None, :] - B[None, :, :]) / lengthscale) ** 2, axis=-1)
    return variance * (1 + r2 / (2 * alpha)) ** (-alpha)


def nn_gpml(A, B, variance, lengthscale):
    """GPML's covNNone, pair by pair: sf2 asin(x~' P z~ / sqrt((1 + x~' P x~)(1 + z~' P z~))), x~ = [1, x],
    P = I / ell^2."""
    out = np.empty((len(A), len(B)))
    for i, a in enumerate(A):
        for j, b in enumerate(B):
            at, bt = np.concatenate([[1.0], a]), np.concatenate([[1.0], b])
            P = np.eye(len(at)) / lengthscale**2
            out[i, j] = variance * np.arcsin(at @ P @ bt / np.sqrt((1 + at @ P @ at) * (1 + bt @ P @ bt)))
    return out


def polynomial(A, B, variance, offset, degree):
    return variance * (A @ B.T + offset) ** degree


def test_rq_ard_neural_network_and_polynomial_match_numpy_formulas():
    cases = [
        (K.RationalQuadratic(1.3, ARD, 0.7), lambda A, B: rq_ard(A, B, 1.3, ARD, 0.7)),
        (K.NeuralNetwork(1.6, 0.8), lambda A, B: nn_gpml(A, B, 1.6, 0.8)),
        (K.NeuralNetwork(0.5, 3.0), lambda A, B: nn_gpml(A, B, 0.5, 3.0)),
        (K.Polynomial(0.6, 1.5, 2), lambda A, B: polynomial(A, B, 0.6, 1.5, 2)),
        (K.Polynomial(1.2, 0.0, 5), lambda A, B: polynomial(A, B, 1.2, 0.0, 5)),
        (K.Exponentiation(K.Linear(0.5), 3), lambda A, B: (0.5 * A @ B.T) ** 3),  # negative values, integer power
    ]
    computed = values([k for k, _ in cases], X1, X2)
    for (kernel, truth), (gram, cross, diag, pairwise) in zip(cases, computed):
        name = type(kernel).__name__
        np.testing.assert_allclose(gram, truth(X1, X1), rtol=1e-12, atol=1e-14, err_msg=name)
        np.testing.assert_allclose(cross, truth(X1, X2), rtol=1e-12, atol=1e-14, err_msg=name)
        np.testing.assert_allclose(pairwise, truth(X1, X2), rtol=1e-12, atol=1e-14, err_msg=name)
        np.testing.assert_allclose(diag, np.diag(truth(X1, X1)), rtol=1e-12, err_msg=name)
    # Degree 1, offset 0 is Linear.
    np.testing.assert_allclose(jit_call(K.Polynomial(0.7, 0.0, 1).gram, X1, X2), 0.7 * X1 @ X2.T, rtol=1e-14)


def test_neural_network_and_rq_ard_parameter_gradients_match_finite_differences_of_numpy_formulas():
    """The Jacobians of gram(X1, X2) in each parameter against central differences of the NumPy formulas (for
    these sklearn has no counterpart: GPML's covNNone, and the ARD rational quadratic)."""
    cases = {
        "nn": (K.NeuralNetwork(1.6, 0.8), lambda p: nn_gpml(X1, X2, p[0], p[1]), [1.6, 0.8]),
        "rq-ard": (K.RationalQuadratic(1.3, ARD, 0.7), lambda p: rq_ard(X1, X2, p[0], p[1:4], p[4]),
                   [1.3, *ARD, 0.7]),
        "polynomial": (K.Polynomial(0.6, 1.5, 3), lambda p: polynomial(X1, X2, p[0], p[1], 3), [0.6, 1.5]),
    }
    jacobians = jit_call(lambda ks: [jax.jacfwd(lambda k: k.gram(X1, X2))(k) for k in ks],
                         [k for k, _, _ in cases.values()])
    h = 1e-6
    for (name, (kernel, formula, p)), jac in zip(cases.items(), jacobians):
        p = np.asarray(p, float)
        fd = np.stack([(formula(p + h * e) - formula(p - h * e)) / (2 * h) for e in np.eye(len(p))], axis=-1)
        ours = np.concatenate([np.asarray(leaf).reshape(*fd.shape[:2], -1) for leaf in jax.tree.leaves(jac)], -1)
        np.testing.assert_allclose(ours, fd, rtol=1e-7, atol=1e-9 * np.max(np.abs(fd)), err_msg=name)


def test_matern12_repeated_rows_are_exact_in_float64_and_float32():
    """A repeated row's squared distance from the matrix product is a few eps |x|^2 / l^2, not 0; exp(-r) would
    turn it into an error of sqrt(eps): Matérn 1/2 sets distances within their rounding bound to 0, so repeated
    rows and a test input equal to a training input get k = variance exactly (with ARD, in both precisions)."""
    rng = np.random.default_rng(9)
    X = rng.normal(size=(30, 9)) * 3.0 + 5.0
    X[20:] = X[:10]
    ell = rng.uniform(0.5, 3.0, size=9)

    def grams(X, ell):
        k = K.Matern12(2.0, ell)
        return k.gram(X), k.gram(X[:10], X), K.Matern12(2.0, ell[0]).gram(X)

    results = {"float64": jit_call(grams, X, ell)}
    with jax.enable_x64(False):
        results["float32"] = jax.device_get(jit_call(grams, X.astype(np.float32), ell.astype(np.float32)))
    i = np.arange(10)
    for precision, (G, cross, iso) in results.items():
        np.testing.assert_array_equal(G[i, i + 20], 2.0, err_msg=precision)
        np.testing.assert_array_equal(cross[i, i + 20], 2.0, err_msg=precision)
        np.testing.assert_array_equal(cross[i, i], 2.0, err_msg=precision)
        np.testing.assert_array_equal(iso[i, i + 20], 2.0, err_msg=precision)
    # Elsewhere the values are those of the exact differences.
    r = np.sqrt(np.sum(((X[:, None] - X[None]) / ell) ** 2, -1))
    np.testing.assert_allclose(results["float64"][0], 2.0 * np.exp(-r), rtol=1e-12)
    np.testing.assert_allclose(results["float32"][0], 2.0 * np.exp(-r), rtol=2e-4, atol=1e-4)


ALL = {
    "matern12": K.Matern12(1.5, ARD),
    "matern32": K.Matern32(1.5, 0.9),
    "matern52": K.Matern52(1.5, ARD),
    "rq": K.RationalQuadratic(1.0, ARD, 0.3),
    "periodic": K.Periodic(1.0, 0.7, 1.3),
    "polynomial": K.Polynomial(1.0, 0.5, 3),
    "nn": K.NeuralNetwork(2.0, 0.6),
    "scale": K.Scale(K.Matern12(1.0, 0.4), 3.0),
    "exponentiation": K.Exponentiation(K.Matern52(1.0, 2.0), 0.5),
}


def test_gram_matrices_are_positive_semidefinite_with_repeated_rows():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 3))
    X[30:] = X[:10]  # ten repeated rows: rank-deficient Gram matrices
    grams = jit_call(lambda ks: [k.gram(X) for k in ks], list(ALL.values()))
    for name, G in zip(ALL, grams):
        if name == "periodic":  # positive definite for one input dimension (see the next test)
            continue
        G = np.asarray(G)
        np.testing.assert_array_equal(G, G.T, err_msg=name)
        eig = np.linalg.eigvalsh(G)
        assert eig[0] >= -1e-10 * eig[-1], (name, eig[0], eig[-1])
        np.testing.assert_allclose(G[30:, 30:], G[:10, :10], rtol=1e-12, atol=1e-7, err_msg=name)


def test_periodic_is_positive_semidefinite_in_one_dimension_and_as_a_product_over_dimensions():
    """GPML's / scikit-learn's periodic kernel on the Euclidean distance is positive definite for d = 1 only
    (with d = 3 the random Gram matrix above has an eigenvalue of -3.1 against a largest of 13.6, as
    scikit-learn's): on one column, and as a product of one-column kernels, its eigenvalues are >= 0."""
    rng = np.random.default_rng(6)
    X = rng.normal(size=(40, 3))
    X[30:] = X[:10]
    periodic = lambda j: K.OnDims(K.Periodic(1.0, 0.7, 1.3), [j])
    one, product, multi = jit_call(lambda X: (periodic(0).gram(X), (periodic(0) * periodic(1) * periodic(2)).gram(X),
                                              K.Periodic(1.0, 0.7, 1.3).gram(X)), X)
    for G in (one, product):
        eig = np.linalg.eigvalsh(np.asarray(G))
        assert eig[0] >= -1e-10 * eig[-1], (eig[0], eig[-1])
    assert np.linalg.eigvalsh(np.asarray(multi))[0] < -0.1  # the reason for the product


def test_composition_per_class_vmap_and_dims():
    """+, *, OnDims and PerClass against the parts computed alone; vmap over a batch of length scales."""
    a, b = K.Matern32(1.2, ARD), K.Periodic(0.7, 1.1, 2.0)
    rq = [K.RationalQuadratic(1.0, ARD * s, 0.5 + s) for s in (1.0, 2.0, 3.0)]
    scales = np.array([0.5, 1.0, 2.0])

    def run(a, b, rq):
        return (
            (a + b).gram(X1, X2), (a * b).gram(X1, X2), a.gram(X1, X2), b.gram(X1, X2),
            K.OnDims(K.Matern52(1.0, ARD[:2]), [0, 2]).gram(X1, X2), K.Matern52(1.0, ARD[:2]).gram(X1[:, [0, 2]],
                                                                                              X2[:, [0, 2]]),
            K.PerClass(rq).gram(X1), [k.gram(X1) for k in rq], K.PerClass(rq).diag(X1),
            jax.vmap(lambda s: K.Matern12(1.0, s).gram(X1, X2))(jnp.asarray(scales)),
            [K.Matern12(1.0, s).gram(X1, X2) for s in scales],
        )

    add, mul, ka, kb, on_dims, direct, per_class, each, per_class_diag, batched, each_scale = jit_call(run, a, b, rq)
    np.testing.assert_allclose(add, ka + kb, rtol=1e-14)
    np.testing.assert_allclose(mul, ka * kb, rtol=1e-14)
    np.testing.assert_allclose(on_dims, direct, rtol=1e-14)
    np.testing.assert_allclose(per_class, np.stack(each), rtol=1e-14)
    np.testing.assert_allclose(per_class_diag, 1.0)
    np.testing.assert_allclose(batched, np.stack(each_scale), rtol=1e-14)


def test_static_and_run_time_checks():
    X = np.zeros((3, 2))
    with pytest.raises(gpc.GPClassError, match="lengthscale has shape"):
        K.Matern32(1.0, np.ones(3)).gram(X)
    with pytest.raises(gpc.GPClassError, match="alpha must be a scalar"):
        K.RationalQuadratic(1.0, 1.0, np.ones(2)).gram(X)
    with pytest.raises(gpc.GPClassError, match="period must be a scalar"):
        K.Periodic(1.0, 1.0, np.ones(2)).gram(X)
    for degree in (0, 2.5, True, "2"):
        with pytest.raises(gpc.GPClassError, match="degree must be a positive integer"):
            K.Polynomial(degree=degree)
    assert K.Polynomial(degree=3.0).degree == 3
    with pytest.raises(gpc.GPClassError, match="exponent must be a finite number"):
        K.Exponentiation(K.Matern12(), float("nan"))
    # The run-time checks gpc.infer attaches (check_parameters: the same checks, here raised eagerly).
    bad = [(K.RationalQuadratic(alpha=-1.0), "alpha must be finite and > 0"),
           (K.Periodic(period=0.0), "period must be finite and > 0"),
           (K.Polynomial(offset=-0.5), "offset must be finite and >= 0"),
           (K.NeuralNetwork(lengthscale=-1.0), "lengthscale must be finite and > 0"),
           (K.Scale(K.Matern52(), -2.0), "variance must be finite and >= 0"),
           (K.Exponentiation(K.Matern12(lengthscale=0.0), 2.0), "lengthscale must be finite and > 0")]
    for kernel, message in bad:
        with pytest.raises(Exception, match=message):
            kernel.check_parameters()
    for kernel in (K.Polynomial(offset=0.0), K.Scale(K.Matern32(), 0.0), K.RationalQuadratic(alpha=1e-3)):
        kernel.check_parameters()  # boundary values that are allowed
