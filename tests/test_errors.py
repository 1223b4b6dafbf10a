"""Entry points called at the top level return their checks and raise them in Python: programs without host
callbacks, which JAX's persistent compilation cache can store; under a user's transformation they raise from
the program.  Both ways give the same error."""

import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from conftest import toy_data

import gpclass as gpc

X, y = toy_data(n=7, seed=5)
KERNEL = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(1.0))
LIK = gpc.likelihoods.Logistic()


def has_host_callback(lowered) -> bool:
    return "callback" in lowered.as_text()


def test_top_level_programs_have_no_host_callback():
    post = gpc.infer(gpc.Laplace(), KERNEL, LIK, X, y)
    programs = {
        "infer": gpc.infer.lower(gpc.Laplace(), KERNEL, LIK, X, y),
        "infer EP": gpc.infer.lower(gpc.EP(), KERNEL, gpc.likelihoods.Probit(), X, y),
        "predict": gpc.predict.lower(post, X),
        "predict_latent": gpc.predict_latent.lower(post, X),
        "variational_bound": gpc.variational_bound.lower(post, y),
        "fit": gpc.fit.lower(gpc.Laplace(), KERNEL, LIK, X, y, throw=True),
    }
    assert [name for name, lowered in programs.items() if has_host_callback(lowered)] == []
    # The same entry point traced inside a user's jit checks with eqx.branched_error_if: a callback.
    assert has_host_callback(jax.jit(lambda X: gpc.infer(gpc.Laplace(), KERNEL, LIK, X, y).log_marginal).lower(X))


def bad_x():
    X_bad = X.copy()
    X_bad[2, 1] = np.inf
    return X_bad


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda X: gpc.infer(gpc.Laplace(), KERNEL, LIK, X, y).log_marginal, "X contains NaN or infinite values"),
        (lambda X: gpc.infer(gpc.Laplace(max_steps=1), KERNEL, LIK, X, y).log_marginal,
         r"Laplace did not converge \(MAX_STEPS\)"),
    ],
    ids=["input check", "status check"],
)
def test_same_error_at_top_level_and_under_jit(call, message):
    x = bad_x() if "NaN" in message else X
    with pytest.raises(gpc.GPClassError, match=message):
        call(x)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(jax.jit(call)(x))


def test_first_failing_check_is_raised_and_throw_false_returns_the_status():
    # Two checks fail (X not finite, labels not binary): the first made is raised, as by eqx.branched_error_if.
    with pytest.raises(gpc.GPClassError, match="X contains NaN"):
        gpc.infer(gpc.Laplace(), KERNEL, LIK, bad_x(), np.full(len(y), 3.0))
    post = gpc.infer(gpc.Laplace(max_steps=1), KERNEL, LIK, X, y, throw=False)
    assert gpc.Status(int(post.info.status)) == gpc.Status.MAX_STEPS


CHILD = textwrap.dedent(
    """
    import sys
    import jax
    import numpy as np
    import gpclass as gpc
    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **_: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # the user's choice: store every program
    gpc.enable_compilation_cache(sys.argv[1])
    X = np.linspace(-1.0, 1.0, 11)[:, None]
    y = np.where(X[:, 0] > 0.1, 1.0, -1.0)
    kernel = gpc.kernels.SquaredExponential(np.float32(1.0), np.float32(0.5))
    post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
    print(len(hits), repr(float(post.log_marginal)))
    """
)


@pytest.mark.slow
def test_compilation_cache_is_reused_by_a_new_process(tmp_path):
    """The user's path: enable the cache, run, and a second process loads the program instead of compiling it."""
    run = lambda: subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                                 check=True, timeout=120).stdout.split()
    hits_first, value_first = run()
    assert hits_first == "0" and any(tmp_path.iterdir())
    hits_second, value_second = run()
    assert int(hits_second) >= 1 and value_second == value_first


ON_ERROR_CHILD = textwrap.dedent(
    """
    import numpy as np
    import gpclass as gpc
    X = np.linspace(-1.0, 1.0, 8)[:, None]
    y = np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 0.5])  # 0.5 is not a label
    try:
        post = gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Logistic(), X, y)
        print("result", float(post.log_marginal))
    except gpc.GPClassError as error:
        print("raised", type(error).__name__)
    """
)


@pytest.mark.parametrize("on_error, expected", [("raise", ["raised", "GPClassError"]), ("nan", ["result", "nan"])])
def test_eqx_on_error_holds_for_a_top_level_call(on_error, expected):
    """Equinox's EQX_ON_ERROR decides what a failed check does at every entry point: a top-level gpc.infer used
    to raise from Python whatever it said."""
    import os

    env = {**os.environ, "EQX_ON_ERROR": on_error}
    out = subprocess.run([sys.executable, "-c", ON_ERROR_CHILD], capture_output=True, text=True, check=True,
                         timeout=120, env=env).stdout.split()
    assert out == expected


def test_a_status_names_what_applies_to_what_ran():
    """A fit's status states the fit's gradient test and its achieved value; an inner solver's its own test; a
    sampler's the finiteness of its samples: none carries another kind's definition (issue 38, item 7)."""
    fit = gpc.Status.CONVERGED.describe("fit", grad_norm=3.2e-7, gtol=1e-5)
    assert fit.startswith("converged") and "projected gradient" in fit and "3.2e-07" in fit and "gtol = 1e-05" in fit
    laplace = gpc.Status.CONVERGED.describe(gpc.Laplace())
    assert "Newton step" in laplace and "residual_tol" in laplace
    ep = gpc.Status.CONVERGED.describe("EP")
    assert "sweeps" in ep and "log Z_EP" in ep
    mcmc = gpc.Status.CONVERGED.describe("MCMC")
    assert "every sample is finite" in mcmc
    texts = {"fit": fit, "Laplace": laplace, "EP": ep, "MCMC": mcmc}
    foreign = {"fit": ("Newton", "sweep", "sample"), "Laplace": ("gtol", "sweep", "sample"),
               "EP": ("gtol", "Newton", "sample"), "MCMC": ("gtol", "Newton", "sweep")}
    assert {who: [word for word in words if word in texts[who]] for who, words in foreign.items()} == {
        who: [] for who in foreign}
    assert all(word not in gpc.Status.CONVERGED.message for word in ("gtol", "Newton", "sweep", "sample"))
    # The remedy for the status at hand, with the setting's name.
    assert "raise max_steps" in gpc.Status.MAX_STEPS.describe("fit", grad_norm=0.5).lower()
    assert "(0.5) was still above gtol" in gpc.Status.MAX_STEPS.describe("fit", grad_norm=0.5)
    assert "gpc.KL(max_steps=...)" in gpc.Status.MAX_STEPS.describe("KL")
    assert "ELBO estimate is not finite" in gpc.Status.FAILED.describe("fit_svgp")
    assert gpc.Status.STALLED.describe(None) == gpc.Status.STALLED.message


def test_a_failed_solve_names_the_method_its_test_and_the_remedy():
    with pytest.raises(gpc.GPClassError) as caught:
        gpc.infer(gpc.Laplace(max_steps=1), KERNEL, LIK, X, y)
    text = str(caught.value)
    assert text.startswith("Laplace did not converge (MAX_STEPS)")
    assert "the full Newton step changes f" in text and "gpc.Laplace(max_steps=...)" in text and "throw=False" in text
    assert "sample" not in text and "gtol" not in text


def test_a_returned_check_names_the_first_offending_entry_and_its_value():
    """Called directly, an entry point's value checks say where the input fails (index and value) and what to
    do; under a transformation the same check raises from the program without the place (static text)."""
    from gpclass._errors import entry_point
    from gpclass._validation import Checks, check_binary_labels, check_class_labels

    @entry_point
    def labels(y, classes):
        checks = Checks()
        out = check_class_labels(y, y.shape[0], 3, np.float64, checks, soft=True) if classes else \
            check_binary_labels(y, y.shape[0], np.float64, checks)
        return checks.attach(out)

    cases = [
        (np.array([1.0, -1.0, 0.5, 2.0]), False, r"binary labels y must be in .*\(the first that is not: y\[2\] = 0.5\)"
         r"\. For more than two classes use gpc.likelihoods.Softmax\(C\)"),
        (np.array([1.0, 0.0, -1.0, 1.0]), False, r"mix the codings .*\(the first -1 at y\[2\]\); use one coding"),
        (np.array([0, 1, 2, 5, 1]), True, r"multi-class labels y must lie in 0..2 for Softmax\(3\) \(the first "
         r"outside: y\[3\] = 5\): number the classes 0..2"),
        (np.array([0.0, 1.0, 1.5]), True, r"y must be whole numbers 0..2; got a fraction \(the first: y\[2\] = 1.5\)"),
        (np.array([[1.0, 0.0, 0.0], [0.2, 0.2, 0.2]]), True, r"soft labels y must sum to one .*\(row 1 sums to 0.6\); "
         r"normalise the rows"),
    ]
    for y_bad, classes, message in cases:
        with pytest.raises(gpc.GPClassError, match=message):
            labels(y_bad, classes)
    # Inside the user's jit the check raises from the program: the same message without its place.
    with pytest.raises(Exception, match=r"must lie in 0..2 for Softmax\(3\): number the classes") as caught:
        jax.block_until_ready(jax.jit(lambda y: labels(y, True))(np.array([0, 1, 2, 5, 1])))
    assert "the first" not in str(caught.value).split("must lie in")[1].split("\n")[0]


@pytest.mark.parametrize("y_bad, message", [
    (np.ones((7, 1)), r"y must have shape \(7,\) to match X, one label per case; got shape \(7, 1\): flatten them"),
    (np.ones(5), r"got shape \(5,\): pass the labels of the same cases as X \(X has 7 rows\)"),
], ids=["column", "length"])
def test_a_shape_error_names_the_argument_its_shape_and_the_remedy(y_bad, message):
    with pytest.raises(gpc.GPClassError, match=message):
        gpc.infer(gpc.Laplace(), KERNEL, LIK, X, y_bad)
    with pytest.raises(gpc.GPClassError, match=r"X must have shape \(n, d\).*got shape \(7,\): use X\[:, None\]"):
        gpc.infer(gpc.Laplace(), KERNEL, LIK, X[:, 0], y)
