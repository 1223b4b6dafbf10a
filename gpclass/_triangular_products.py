"""Matrix products with a triangular factor or a triangular result, by halving: the blocks that are zero (or that
the caller does not read) are not multiplied (Golub & Van Loan, Matrix Computations, 4th ed., sec. 1.3: block
matrix products).

Each function splits its m x m triangular operand into halves down to blocks of ``PRODUCT_BLOCK`` to
2 ``PRODUCT_BLOCK`` rows and multiplies whole blocks below that: smaller blocks would save flops but run XLA's
products less efficiently.  Leading batch dimensions (``...``) are allowed where the signature shows them.

Users: the Cholesky factorisation's reverse mode (``_inverse_factor.cholesky_cotangent``) and SVGP's marginals in
the A form (``_svgp_moments.projected_marginals``, whose six m x m x b products are all of these kinds).
"""

import jax.numpy as jnp

from ._types import Array, Float

# At m = 500 and 1000, blocks of 64-250 rows took 0.5-0.7x the time of the whole products, 128-255 among the fastest.
PRODUCT_BLOCK = 128


def _halves(m: int) -> int | None:
    """The rows of the first half of an m x m operand, or None below 2 ``PRODUCT_BLOCK`` rows (no split)."""
    return None if m < 2 * PRODUCT_BLOCK else m // 2


def block_lower(top_left, bottom_left, bottom_right):
    """The block lower triangular matrix [[top_left, 0], [bottom_left, bottom_right]] (over the last two axes)."""
    zeros = jnp.zeros(top_left.shape[:-1] + bottom_right.shape[-1:], top_left.dtype)
    return jnp.concatenate([jnp.concatenate([top_left, zeros], axis=-1),
                            jnp.concatenate([bottom_left, bottom_right], axis=-1)], axis=-2)


def lower_times(L: Float[Array, "*c m m"], X: Float[Array, "*c m k"]) -> Float[Array, "*c m k"]:
    """L X for lower triangular L: [L11 X1; L21 X1 + L22 X2], the block above the diagonal skipped (3/4 of the
    flops at one level)."""
    k = _halves(L.shape[-1])
    if k is None:
        return L @ X
    top = lower_times(L[..., :k, :k], X[..., :k, :])
    bottom = L[..., k:, :k] @ X[..., :k, :] + lower_times(L[..., k:, k:], X[..., k:, :])
    return jnp.concatenate([top, bottom], axis=-2)


def upper_times(U: Float[Array, "*c m m"], X: Float[Array, "*c m k"]) -> Float[Array, "*c m k"]:
    """U X for upper triangular U: [U11 X1 + U12 X2; U22 X2], the block below the diagonal skipped."""
    k = _halves(U.shape[-1])
    if k is None:
        return U @ X
    top = upper_times(U[..., :k, :k], X[..., :k, :]) + U[..., :k, k:] @ X[..., k:, :]
    bottom = upper_times(U[..., k:, k:], X[..., k:, :])
    return jnp.concatenate([top, bottom], axis=-2)


def lower_blocks_of_outer(X: Float[Array, "*c m k"], Y: Float[Array, "*c m k"]) -> Float[Array, "*c m m"]:
    """X Y^T on and below the block diagonal, for callers that read only its lower triangle: the blocks above are
    returned as zeros (entries above the diagonal inside the diagonal blocks are computed)."""
    k = _halves(X.shape[-2])
    if k is None:
        return X @ jnp.swapaxes(Y, -1, -2)
    top_left = lower_blocks_of_outer(X[..., :k, :], Y[..., :k, :])
    bottom_left = X[..., k:, :] @ jnp.swapaxes(Y[..., :k, :], -1, -2)
    bottom_right = lower_blocks_of_outer(X[..., k:, :], Y[..., k:, :])
    return block_lower(top_left, bottom_left, bottom_right)


def lower_times_lower(A: Float[Array, "m m"], B: Float[Array, "m m"]) -> Float[Array, "m m"]:
    """A B for lower triangular A and B (the product is lower triangular): 4 of the 8 half-size block products at
    one level."""
    k = _halves(A.shape[0])
    if k is None:
        return A @ B
    bottom_left = A[k:, :k] @ B[:k, :k] + A[k:, k:] @ B[k:, :k]
    return block_lower(lower_times_lower(A[:k, :k], B[:k, :k]), bottom_left, lower_times_lower(A[k:, k:], B[k:, k:]))


def transposed_lower_times_lower(V: Float[Array, "m m"], Y: Float[Array, "m m"]) -> Float[Array, "m m"]:
    """V^T Y for lower triangular V and Y (a full product): the blocks of V^T below and of Y above the diagonal
    are zero, 5 of the 8 half-size block products at one level."""
    k = _halves(V.shape[0])
    if k is None:
        return V.T @ Y
    V11, V21, V22, Y11, Y21, Y22 = V[:k, :k], V[k:, :k], V[k:, k:], Y[:k, :k], Y[k:, :k], Y[k:, k:]
    return jnp.block([[transposed_lower_times_lower(V11, Y11) + V21.T @ Y21, V21.T @ Y22],
                      [V22.T @ Y21, transposed_lower_times_lower(V22, Y22)]])
