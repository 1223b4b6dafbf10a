"""SVGP's marginals for training in float64, with hand-written reverse modes, in two forms.

In the whitened parametrisation (``_svgp``) q(f_x) = N(A^T mu, k(x, x) - A^T A + A^T S S^T A), A = L^-1 K_zx.

**The A form** (:func:`projected_marginals`, batches of b < 2 m): A by the explicit V = L^-1 (``_inverse_factor``),
B_c = S_c^T A, mean_c = A^T mu_c, var_c = k(x, x) - |a_i|^2 + |b_c,i|^2; six m x m x b products per value and
gradient (A, B, S B, A B^T, V^T A_bar, A_bar A^T), each with a triangular factor or a result of which only the
lower triangle is read, so each skips its zero blocks (``_triangular_products``: 3/4 of the flops at one level of
halving), and none reads an m x m operand transposed (S^T and V^T are formed once: XLA's CPU product of a
transposed left operand took 1.2x as long).  Written by hand rather than left to reverse mode, which neither skips
the blocks nor avoids the transposed reads: the ELBO's value and gradient at m = 500, b = 256 in 0.92x the time.

**The P form** (:func:`whitened_form`, :func:`quadratic_form`, b >= 2 m), with P = L^-T (S S^T - I) L^-1 and
c = L^-T mu (both m x m or m, independent of the batch):

    mean_i = k_i^T c,    var_i = k(x_i, x_i) + k_i^T P k_i,    k_i = K_zx[:, i].

A minibatch of b cases then costs one product P K_zx (2 m^2 b flops) and its reverse mode one more (K_zx G K_zx^T, G
the diagonal of the cotangent of var): 4 m^2 b, against 12 m^2 b for the A form (9 m^2 b from m = 256, its zero
blocks skipped).  P and c cost O(m^3) once per step, all of it matrix products with V = L^-1 (``_inverse_factor``,
which calls LAPACK only on diagonal blocks of at most 24 rows: no multi-threaded OpenBLAS call beside XLA's
products): S S^T and V^T (S S^T - I) V forward, V Q V^T, R S, (S S^T - I) R and V^T Phi V backward (by blocks that
skip its zero triangles), about 17 m^3 flops with the factorisation (the C classes of the softmax share V).
Triangular solves with LAPACK would take about 12 m^3, but measured slower (``benchmarks/README.md``,
``before_after.py``, SVGP workloads: OpenBLAS's threads took the cores from the products around them).

The price is rounding: k^T P k is formed from P, not from L^-1 k, so its error grows with the condition number of
K_zz (about eps m / jitter relative to k(x, x): 7e-8 for m = 300, jitter 1e-6 in float64), where A's triangular
solve is backward stable.  So this form is for float64; float32 keeps A, by LAPACK's triangular solve.  And its
O(m^3) part (about 17 m^3 flops against A's 3.5 m^3) outweighs the saving on the batch for small batches: A is used
for b < 2 m (``SVGP._training_moments``).
"""

import jax
import jax.numpy as jnp
from jax import lax

from ._inverse_factor import cholesky_cotangent, inverse_factor
from ._triangular_products import lower_blocks_of_outer, lower_times, upper_times
from ._types import Array, Float


@jax.custom_vjp
def projected_marginals(K_zz: Float[Array, "m m"], K_zx: Float[Array, "m b"], S: Float[Array, "C m m"],
                        mu: Float[Array, "C m"]) -> tuple[Float[Array, "C b"], Float[Array, "C b"]]:
    """(mean_c, var_c - k(x, x)) = (A^T mu_c, |S_c^T a_i|^2 - |a_i|^2 per column a_i of A = L^-1 K_zx) for each of
    C latent functions (the softmax's classes; C = 1 for one), L L^T = K_zz (already jittered) shared, S_c lower
    triangular (its entries above the diagonal must be zero: some are read, some skipped): the A form of the module
    docstring."""
    return _projected_fwd(K_zz, K_zx, S, mu)[0]


def _projected_fwd(K_zz, K_zx, S, mu):
    V = inverse_factor(K_zz)  # L^-1
    A = lower_times(V, K_zx)
    B = upper_times(_transposed(S), A)  # B_c = S_c^T A
    mean = mu @ A
    var = jnp.sum(B**2, axis=-2) - jnp.sum(A**2, axis=0)
    return (mean, var), (V, S, mu, A, B)


def _projected_bwd(residuals, cotangents):
    """Reverse mode by the six products of the module docstring.  With G_c = diag(var_bar_c), m_c = mean_bar_c:

        A_bar = sum_c (mu_c m_c^T + 2 S_c B_c G_c) - 2 A sum_c G_c,    S_bar_c = 2 A G_c B_c^T,    mu_bar_c = A m_c,
        K_zx_bar = V^T A_bar,    L^T L_bar = -A_bar A^T,    K_zz_bar = sym(V^T Phi(L^T L_bar) V)

    (the last: ``_inverse_factor.cholesky_cotangent``, which reads only the lower triangle of L^T L_bar, as the
    caller's tril reads only that of S_bar)."""
    V, S, mu, A, B = residuals
    mean_bar, var_bar = cotangents
    BG = B * var_bar[:, None, :]  # B_c G_c
    A_bar = (jnp.sum(2.0 * lower_times(S, BG) + mu[:, :, None] * mean_bar[:, None, :], axis=0)
             - 2.0 * A * jnp.sum(var_bar, axis=0))
    S_bar = 2.0 * lower_blocks_of_outer(jnp.broadcast_to(A, BG.shape), BG)
    mu_bar = mean_bar @ A.T
    K_zx_bar = upper_times(_transposed(V), A_bar)
    M = -lower_blocks_of_outer(A_bar, A)  # L^T L_bar
    return cholesky_cotangent(V, M), K_zx_bar, S_bar, mu_bar


projected_marginals.defvjp(_projected_fwd, _projected_bwd)


def _transposed(X):
    """X^T (of the last two axes) formed in memory: the products then read it untransposed (module docstring)."""
    return lax.optimization_barrier(jnp.swapaxes(X, -1, -2))


@jax.custom_vjp
def quadratic_form(P: Float[Array, "m m"], K: Float[Array, "m b"]) -> Float[Array, " b"]:
    """k_i^T P k_i for every column k_i of K, P symmetric: one product P K (module docstring)."""
    return jnp.sum(K * (P @ K), axis=0)


def _quadratic_form_fwd(P, K):
    Y = P @ K
    return jnp.sum(K * Y, axis=0), (K, Y)


def _quadratic_form_bwd(residuals, g):
    """P_bar = K diag(g) K^T (symmetric), K_bar = 2 P K diag(g) = 2 Y diag(g) (P symmetric): one product."""
    K, Y = residuals
    return (K * g) @ K.T, 2.0 * Y * g


quadratic_form.defvjp(_quadratic_form_fwd, _quadratic_form_bwd)


@jax.custom_vjp
def whitened_form(K_zz: Float[Array, "m m"], S: Float[Array, "C m m"], mu: Float[Array, "C m"]):
    """(P, c) with P_c = L^-T (S_c S_c^T - I) L^-1 and c_c = L^-T mu_c for each of C latent functions (the softmax's
    classes; C = 1 for one), L L^T = K_zz (already jittered) shared, S_c lower triangular: one factorisation."""
    return _whitened_form_fwd(K_zz, S, mu)[0]


def _whitened_form_fwd(K_zz, S, mu):
    V = inverse_factor(K_zz)  # L^-1
    sigma = S @ jnp.swapaxes(S, -1, -2) - jnp.eye(S.shape[-1], dtype=S.dtype)  # S_c S_c^T - I
    P = V.T @ sigma @ V
    c = mu @ V  # rows c_c^T = (V^T mu_c)^T
    return (0.5 * (P + jnp.swapaxes(P, -1, -2)), c), (V, S, sigma, mu)


def _whitened_form_bwd(residuals, cotangents):
    """Reverse mode by matrix products.  With V = L^-1, Q_c = sym(P_bar_c), R_c = V Q_c V^T, mu_bar_c = V c_bar_c:

        S_bar_c = 2 R_c S_c,
        L_bar: the derivatives of P and c in L give L^T L_bar = -sum_c (2 (S_c S_c^T - I) R_c + mu_c mu_bar_c^T),
        K_bar = sym(V^T Phi(L^T L_bar) V),  Phi = the lower triangle with the diagonal halved

    (Murray 2016, eq. 10, the Cholesky factorisation's reverse mode; L_bar need not be lower triangular there, as
    only its pairing with the lower-triangular dL matters, and the symmetrisation removes the rest)."""
    V, S, sigma, mu = residuals
    P_bar, c_bar = cotangents
    Q = 0.5 * (P_bar + jnp.swapaxes(P_bar, -1, -2))
    R = V @ Q @ V.T
    S_bar = 2.0 * (R @ S)
    mu_bar = c_bar @ V.T  # rows (V c_bar_c)^T
    M = -2.0 * jnp.sum(sigma @ R, axis=0) - mu.T @ mu_bar  # L^T L_bar
    return cholesky_cotangent(V, M), S_bar, mu_bar


whitened_form.defvjp(_whitened_form_fwd, _whitened_form_bwd)
