"""The block products that skip triangular zero blocks (``gpclass/_triangular_products.py``) against NumPy's whole
products of the same matrices."""

import jax
import numpy as np
import pytest

from gpclass._triangular_products import (
    PRODUCT_BLOCK,
    lower_blocks_of_outer,
    lower_times,
    lower_times_lower,
    transposed_lower_times_lower,
    upper_times,
)

# One block (no split), an uneven split (128 + 129 rows) and two levels (600 = 4 x 150).
SIZES = (2 * PRODUCT_BLOCK - 1, 2 * PRODUCT_BLOCK + 1, 600)


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.max(np.abs(want)))


@pytest.mark.parametrize("m", SIZES)
def test_products_with_a_triangular_factor(m):
    """L X and U X for lower and upper triangular factors, with a leading batch axis of two, to 1e-13 relative
    (the skipped blocks are zero, so only the order of the sums differs)."""
    rng = np.random.default_rng(m)
    T, X = rng.normal(size=(2, m, m)), rng.normal(size=(2, m, 37))
    close(jax.jit(lower_times)(np.tril(T), X), np.tril(T) @ X)
    close(jax.jit(upper_times)(np.triu(T), X), np.triu(T) @ X)


@pytest.mark.parametrize("m", SIZES)
def test_lower_blocks_of_an_outer_product(m):
    """X Y^T is exact on and below the diagonal; above it the result is either the product's entry (inside a
    diagonal block) or zero (a skipped block)."""
    rng = np.random.default_rng(m)
    X, Y = rng.normal(size=(2, m, 37)), rng.normal(size=(2, m, 37))
    got, want = np.asarray(jax.jit(lower_blocks_of_outer)(X, Y)), X @ np.swapaxes(Y, -1, -2)
    close(np.tril(got), np.tril(want))
    above = np.triu(np.ones((m, m), bool), 1)
    assert np.all((np.abs(got - want) <= 1e-13 * np.max(np.abs(want)))[:, above] | (got[:, above] == 0))
    if m > 2 * PRODUCT_BLOCK:  # the block above the first split is skipped
        assert np.all(got[:, : m // 2, m // 2:] == 0)


@pytest.mark.parametrize("m", SIZES)
def test_products_of_two_triangular_factors(m):
    """A B (both lower triangular: a lower triangular product) and V^T Y (both lower triangular: a full product)."""
    rng = np.random.default_rng(m)
    A, B = np.tril(rng.normal(size=(m, m))), np.tril(rng.normal(size=(m, m)))
    close(jax.jit(lower_times_lower)(A, B), A @ B)
    close(jax.jit(transposed_lower_times_lower)(A, B), A.T @ B)
