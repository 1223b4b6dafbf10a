"""ML-II fitting with optax: against scikit-learn's optimiser, under vmap, with priors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import gpclass as gpc
from conftest import toy_data

LOGISTIC = gpc.likelihoods.Logistic()
START = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)


TRACES = []


@eqx.filter_jit
def fit_laplace(kernel, X, y, **kwargs):
    """ML-II Laplace, compiled once per data shape and static option (shared across tests)."""
    TRACES.append(None)
    return gpc.fit(gpc.Laplace(), kernel, LOGISTIC, X, y, **kwargs)


def log_params(kernel):
    return np.array([np.log(kernel.variance), np.log(kernel.lengthscale)])


def test_fit_matches_scikit_learn_ml2(ionosphere_small):
    X, y = ionosphere_small
    result = fit_laplace(gpc.kernels.SquaredExponential(variance=1.0, lengthscale=3.0), X, y)
    sk = GaussianProcessClassifier(
        ConstantKernel(1.0, (1e-6, 1e6)) * RBF(3.0, (1e-6, 1e6)), optimizer="fmin_l_bfgs_b"
    ).fit(X, y)
    assert bool(result.converged)
    assert float(result.objective) == pytest.approx(sk.log_marginal_likelihood_value_, rel=1e-7)
    np.testing.assert_allclose(log_params(result.kernel), sk.kernel_.theta, atol=2e-3)
    # The returned posterior is the one at the fitted hyperparameters.
    assert float(result.posterior.log_marginal) == pytest.approx(float(result.objective), rel=1e-12)
    history = np.asarray(result.history)
    steps = int(result.num_steps)
    assert np.all(np.diff(history[:steps]) >= -1e-9) and np.all(np.isnan(history[steps:]))
    assert history[steps - 1] == pytest.approx(float(result.objective))


def test_vmap_over_64_data_sets_equals_fitting_one_by_one():
    data = [toy_data(n=20, seed=s) for s in range(64)]
    Xs, ys = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    starts = gpc.kernels.SquaredExponential(variance=jnp.linspace(0.5, 2.0, 64), lengthscale=jnp.linspace(0.7, 1.5, 64))
    batched = jax.jit(jax.vmap(lambda k, X, y: gpc.fit(gpc.Laplace(), k, LOGISTIC, X, y)))(starts, Xs, ys)
    for i in range(0, 64, 4):  # every 4th set one by one (the single fits dominate the test's time)
        start = jax.tree.map(lambda leaf: leaf[i], starts)
        single = fit_laplace(start, Xs[i], ys[i])
        assert float(batched.objective[i]) == pytest.approx(float(single.objective), rel=1e-9, abs=1e-9)
        np.testing.assert_allclose(
            [np.log(batched.kernel.variance[i]), np.log(batched.kernel.lengthscale[i])],
            log_params(single.kernel), atol=1e-6,
        )
        assert int(batched.num_steps[i]) == int(single.num_steps)


def test_any_optax_optimiser_reaches_the_same_optimum(ionosphere_small):
    X, y = ionosphere_small
    start = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=3.0)
    lbfgs = fit_laplace(start, X, y)
    adam = fit_laplace(start, X, y, optimizer=optax.adam(0.02), max_steps=2500, gtol=1e-4)
    assert bool(adam.converged)
    assert float(adam.objective) == pytest.approx(float(lbfgs.objective), abs=1e-6)
    np.testing.assert_allclose(log_params(adam.kernel), log_params(lbfgs.kernel), atol=1e-3)


def test_log_prior_moves_the_optimum_to_a_stationary_point_of_the_posterior():
    X, y = toy_data(n=30, seed=6)

    def log_prior(kernel, likelihood):
        return gpc.priors.log_gamma(kernel.lengthscale, 4.0, 8.0)  # pulls the length scale towards 0.4

    plain = fit_laplace(START, X, y)
    with_prior = fit_laplace(START, X, y, log_prior=log_prior)
    assert float(with_prior.kernel.lengthscale) < float(plain.kernel.lengthscale)

    def objective(theta):
        kernel = gpc.kernels.SquaredExponential(variance=np.exp(theta[0]), lengthscale=np.exp(theta[1]))
        return float(gpc.infer(gpc.Laplace(), kernel, LOGISTIC, X, y).log_marginal + log_prior(kernel, LOGISTIC))

    theta = log_params(with_prior.kernel)
    h = 1e-4
    grad = [(objective(theta + h * e) - objective(theta - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(grad, 0.0, atol=1e-4)
    assert float(with_prior.objective) == pytest.approx(objective(theta), rel=1e-9)


def test_gamma_log_density_matches_scipy():
    from scipy import stats

    x = np.array([0.3, 1.7])
    expected = np.sum(stats.gamma.logpdf(x, a=2.5, scale=1 / 1.5))
    assert float(gpc.priors.log_gamma(x, 2.5, 1.5)) == pytest.approx(expected, rel=1e-12)


def test_fit_does_not_recompile_and_rejects_non_positive_parameters():
    """New data and new starting values reuse the compiled fit (the same program as the prior test's plain fit)."""
    fit_laplace(START, *toy_data(n=30, seed=7))
    traced = len(TRACES)
    fit_laplace(gpc.kernels.SquaredExponential(variance=2.0, lengthscale=0.5), *toy_data(n=30, seed=8))
    assert len(TRACES) == traced
    with pytest.raises(Exception, match=r"must lie in \(0, inf\)"):
        fit_laplace(gpc.kernels.SquaredExponential(variance=-1.0), *toy_data(n=30, seed=8))
    assert len(TRACES) == traced


def test_label_flip_rate_is_fitted_in_logit_space():
    """epsilon < 1/2 is mapped to logit(2 epsilon), the kernel's parameters to logs; out-of-range values raise."""
    from gpclass.fit import parameter_transforms

    tree = (START, gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), epsilon=0.2))
    params, _ = eqx.partition(tree, eqx.is_inexact_array)
    to_free, from_free = parameter_transforms(params, tree)
    free = to_free(params)
    assert float(free[1].epsilon) == pytest.approx(np.log(0.4 / 0.6))
    assert float(free[0].variance) == pytest.approx(0.0)
    back = from_free(jax.tree.map(lambda x: x + 50.0, free))  # far out in free space: still inside (0, 1/2)
    assert 0.0 < float(back[1].epsilon) <= 0.5 and float(back[0].variance) > 1e20
    for leaf, want in zip(jax.tree.leaves(from_free(free)), jax.tree.leaves(params)):
        assert float(leaf) == pytest.approx(float(want), rel=1e-12)
    bad = (START, gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), epsilon=0.6))
    bad_params, _ = eqx.partition(bad, eqx.is_inexact_array)
    with pytest.raises(Exception, match=r"must lie in \(0, 0.5\)"):
        parameter_transforms(bad_params, bad)[0](bad_params)
