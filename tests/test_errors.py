"""Entry points called at the top level return their checks and raise them in Python: programs without host
callbacks, which JAX's persistent compilation cache can store; under a user's transformation they raise from
the program.  Both ways give the same error."""

import re
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.flatten_util
import numpy as np
import pytest
from conftest import toy_data

import gpclass as gpc
from gpclass._errors import entry_point
from gpclass._validation import Checks

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
    gpc.enable_compilation_cache(sys.argv[1])  # JAX's threshold of 1 s compile time left as it is
    jax.jit(lambda x: x * 2)(1.0)  # not gpclass's: stored only above JAX's threshold, as before
    X = np.linspace(-1.0, 1.0, 11)[:, None]
    y = np.where(X[:, 0] > 0.1, 1.0, -1.0)
    kernel = gpc.kernels.SquaredExponential(np.float32(1.0), np.float32(0.5))
    post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
    print(len(hits), repr(float(post.log_marginal)))
    """
)


def test_compilation_cache_is_reused_by_a_new_process(tmp_path):
    """The user's path: enable the cache, run, and a second process loads the program instead of compiling it.
    gpclass's program compiles in well under JAX's threshold of 1 s, which used to keep it out of the cache."""
    run = lambda: subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                                 check=True, timeout=120).stdout.split()
    hits_first, value_first = run()
    stored = sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("jit_"))
    assert hits_first == "0" and stored and not any(name.startswith("jit__lambda") for name in stored)
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
    assert "every sample and its log p(y|f) is finite" in mcmc
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
    # Without the values (a fit's error raised from the program; FitResult keeps no gtol) the sentence still reads.
    assert "log hyperparameters is at most gtol, with every" in gpc.Status.CONVERGED.describe("fit")


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
    from gpclass._validation import check_binary_labels, check_class_labels

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


# --- Every error names the argument, the value and the remedy (issue 38, item 7): each check's own small program
# (a direct call of an entry point that runs the checks alone), or a host check; nothing here compiles a solver.


def _checked(checks_of):
    """An entry point that runs ``checks_of(checks, *args)`` and returns nothing else: a direct call raises the
    first failed check with its place, as gpc.infer and gpc.fit do."""

    @entry_point
    def run(*args):
        checks = Checks()
        checks_of(checks, *args)
        return checks.attach(np.zeros(()))

    return run


def _parameter_checks(checks, kernel, likelihood):
    kernel.parameter_checks(checks)
    likelihood.parameter_checks(checks)


PARAMETERS = _checked(_parameter_checks)


def _raised_now(kernel, likelihood):
    checks = Checks()
    _parameter_checks(checks, kernel, likelihood)
    checks.raise_now()


def test_a_parameter_error_names_the_parameter_its_value_and_a_constructor_call_that_works():
    K, L = gpc.kernels, gpc.likelihoods
    ordinal = L.Ordinal(3)
    cases = [
        (K.SquaredExponential(np.float64(-1.0), np.float64(1.0)), LIK,
         r"SquaredExponential: variance must be finite and >= 0 \(got variance = -1\); pass a non-negative number, "
         r"e.g. (SquaredExponential\(variance=1.0\))\."),
        (K.SquaredExponential(1.0, np.array([1.0, 0.0])), LIK,
         r"lengthscale must be finite and > 0 \(the first: lengthscale\[1\] = 0\); pass positive numbers, e.g. "
         r"(SquaredExponential\(lengthscale=1.0\)) \(to make an input irrelevant"),
        (K.Scale(K.Linear(), np.nan), LIK, r"Scale: variance .* \(got variance = nan\); .* e.g. "
         r"(Scale\(kernel, variance=1.0\))\."),
        (K.Periodic(period=-2.0), LIK, r"period must be finite and > 0 \(got period = -2\); pass a positive number, "
         r"e.g. (Periodic\(period=1.0\))\."),
        (gpc.Sparse(KERNEL, np.array([[0.0], [np.nan]])), LIK, r"Sparse: the inducing inputs Z contain NaN or infinite "
         r"values \(the first: Z\[1, 0\] = nan\); check Z \(e.g. choose it among the rows of X: "
         r"gpc.Sparse.from_data\(kernel, X, m, key=...\)\)"),  # (k-means++ on X: finite; not run, it compiles)
        (KERNEL, L.Ordinal.from_parameters(3, 0.0, np.array([-1.0])), r"Ordinal: the cutpoints must be strictly "
         r"increasing and finite \(the first bad gap: cutpoints\[j \+ 1\] - cutpoints\[j\] = -1 at "
         r"j = 0\); pass finite, strictly increasing cutpoints, e.g. "
         r"(gpc.likelihoods.Ordinal\(3, cutpoints=\[-0.5, 0.5\]\))"),
        (KERNEL, eqx.tree_at(lambda lik: lik.noise, ordinal, np.float64(-2.0)), r"Ordinal: noise \(sigma\) must be > 0 "
         r"and finite \(got noise = -2\); pass a positive number, e.g. (gpc.likelihoods.Ordinal\(3, noise=1.0\))\."),
        (KERNEL, eqx.tree_at(lambda lik: lik.epsilon, L.LabelNoise(L.Probit()), np.float64(0.6)), r"LabelNoise: "
         r"epsilon, the label-flip rate, must lie in \[0, 1/2\) \(got epsilon = 0.6\): .*; pass e.g. "
         r"(gpc.likelihoods.LabelNoise\(base, epsilon=0.05\))\."),
        (KERNEL, eqx.tree_at(lambda lik: lik.noise, L.Preference(), np.float64(0.0)), r"Preference: noise \(sigma\) "
         r"must be > 0 and finite \(got noise = 0\); pass a positive number, e.g. "
         r"(gpc.likelihoods.Preference\(noise=1.0\))\."),
    ]
    names = {"gpc": gpc, "kernel": K.Linear(), "base": L.Probit(), **{name: getattr(K, name) for name in K.__all__}}
    for i, (kernel, likelihood, message) in enumerate(cases):
        with pytest.raises(gpc.GPClassError, match=message) as caught:
            # The first through a program (an entry point called directly), the others evaluated in Python
            # (Checks.raise_now: the same text and place, nothing to compile).
            PARAMETERS(kernel, likelihood) if i == 0 else _raised_now(kernel, likelihood)
        # The remedy holds: the quoted call builds a parameter that passes the same checks.
        example = re.search(message, str(caught.value)).groups()
        if not example:
            continue
        built = eval(example[0], names)
        _raised_now(*((built, LIK) if isinstance(built, (K.AbstractKernel, gpc.Sparse)) else (KERNEL, built)))
    # Raised from inside a user's jit: the same text without the value (static).
    with pytest.raises(Exception, match=r"variance must be finite and >= 0; pass a non-negative number") as caught:
        jax.block_until_ready(jax.jit(lambda v: PARAMETERS(K.SquaredExponential(v, 1.0), LIK))(-1.0))
    assert "got variance" not in str(caught.value)


def _start(checks, kernel, likelihood, bounds):
    """gpc.fit's checks of its starting point (``_fit.fit``): each hyperparameter fittable and inside the box."""

    from gpclass._fit_parameters import check_start_in_box, coordinate_box, parameter_transforms, trainable_spec

    tree = (kernel, likelihood)
    spec = trainable_spec(tree, None)
    params, _ = eqx.partition(tree, spec)
    to_free, _ = parameter_transforms(params, tree)
    z0, _ = jax.flatten_util.ravel_pytree(to_free(params, checks))
    lo, hi = coordinate_box(params, tree, spec, bounds, z0.dtype, checks)
    check_start_in_box(params, z0, lo, hi, bounds, checks)


def test_a_bad_starting_point_of_fit_names_the_hyperparameter_by_its_path_and_its_value():
    start = _checked(_start)
    K, L = gpc.kernels, gpc.likelihoods
    bounds = (1e-8, 1e8)
    cases = [
        (K.SquaredExponential(0.0, 1.0), LIK, r"fit: kernel.variance must be > 0 to be fitted in log space \(got "
         r"kernel.variance = 0\); start from a value > 0, e.g. 1.0, or hold it fixed with trainable\."),
        (K.SquaredExponential(1.0, 1.0) + K.White(1e9), LIK, r"fit: the starting kernel.k2.variance lies outside "
         r"bounds=\(1e-08, 100000000.0\) \(got kernel.k2.variance = 1000000000\); start inside the bounds or widen"),
        (K.SquaredExponential(1.0, np.array([1.0, 1e-9])), LIK, r"the starting kernel.lengthscale lies outside .* "
         r"\(the first: kernel.lengthscale\[1\] = 1e-09\)"),
        (KERNEL, L.LabelNoise(L.Probit(), 0.0), r"fit: likelihood.epsilon must be in \(0, 0.5\) to be fitted as the "
         r"log-odds of theta / 0.5 \(got likelihood.epsilon = 0\); start from a value in \(0, 0.5\)"),
    ]
    for kernel, likelihood, message in cases:
        with pytest.raises(gpc.GPClassError, match=message):
            start(kernel, likelihood, bounds)


def _weights(checks, y, mask, weights):
    from gpclass._inference._infer import apply_mask

    apply_mask(gpc.Laplace(), LIK, y, mask, checks, weights)


def test_mask_and_weight_errors_name_the_first_bad_weight_and_the_remedy():
    weights = _checked(_weights)
    labels = np.asarray(y, float)
    with pytest.raises(gpc.GPClassError, match=r"weights must be finite and >= 0 \(the first that is not: "
                       r"weights\[2\] = -1\) .*; to leave a case out give it weight 0\."):
        weights(labels, None, np.array([1.0, 1.0, -1.0, np.nan, 1.0, 1.0, 1.0]))
    with pytest.raises(gpc.GPClassError, match=r"every case has weight 0 .*; give at least one case a positive weight"):
        weights(labels, None, np.zeros(len(y)))
    with pytest.raises(gpc.GPClassError, match=r"mask: every case is left out .*; keep at least one case "
                       r"\(mask True\)"):
        weights(labels, np.zeros(len(y), bool), None)


def test_host_checks_name_the_first_bad_entry():
    """Label checks on the host (gpc.fit_svgp's) say what the program's checks say, with the place."""
    L = gpc.likelihoods
    for call, message in [
        (lambda: LIK.host_labels(np.array([1.0, 0.0, -1.0]), np.float64), r"mix the codings .*\(the first -1 at "
         r"y\[2\]\); use one coding"),
        (lambda: L.Ordinal(3).host_labels(np.array([0.0, np.nan]), np.float64), r"ordinal labels y contain NaN \(the "
         r"first at y\[1\]\); .*drop those cases"),
        (lambda: L.SoftLabels(LIK).host_labels(np.array([0.2, 1.5]), np.float64), r"soft labels y must be "
         r"probabilities in \[0, 1\] \(of the class \+1\) \(the first that is not: y\[1\] = 1.5\)\. For more than two "
         r"classes pass rows of class probabilities, shape \(n, C\), to gpc.likelihoods.Softmax\(C\)"),
    ]:
        with pytest.raises(gpc.GPClassError, match=message):
            call()


def test_shape_and_structure_errors_say_what_to_pass():
    K = gpc.kernels
    post = gpc.infer(gpc.Laplace(), KERNEL, LIK, X, y)  # the program of the tests above
    with pytest.raises(gpc.GPClassError, match=rf"X_test has 1 input dimensions but the training inputs have "
                       rf"{X.shape[1]}: pass test inputs with the same {X.shape[1]} columns"):
        gpc.predict(post, X[:, :1])
    with pytest.raises(gpc.GPClassError, match=r"dims \(0, 5\) do not select columns of inputs with 2 dimensions: "
                       r"dims must be a non-empty sequence of column indices in -2..1"):
        K.OnDims(K.SquaredExponential(), (0, 5)).gram(np.zeros((3, 2)))
    with pytest.raises(gpc.GPClassError, match=r"got 2 \(SquaredExponential, Matern32\): stack kernels of one "
                       r"structure"):
        K.PerClass([K.SquaredExponential(), K.Matern32()])
    with pytest.raises(gpc.GPClassError, match=r"parameters differ in shape, \[\(\(\), \(\)\), \(\(\), \(2,\)\)\]"):
        K.PerClass([K.SquaredExponential(), K.SquaredExponential(lengthscale=np.ones(2))])
    with pytest.raises(gpc.GPClassError, match=r"X has 4 rows but y has 3 entries: pass the labels of the same rows"):
        gpc.datasets.train_test_split(np.ones((4, 1)), np.ones(3), n_train=2, seed=0)
    with pytest.raises(gpc.GPClassError, match=r"the first that is not: y\[1\] = nan\); drop or impute"):
        gpc.datasets.equal_length_bins([0.0, np.nan, 1.0], 3)
    with pytest.raises(gpc.GPClassError, match=r"got lower=2.0, upper=1.0: pass a range with upper > lower"):
        gpc.datasets.equal_length_bins([0.0, 1.0], 3, lower=2.0, upper=1.0)


def test_a_softmax_prediction_from_an_indefinite_covariance_names_a_remedy_that_works():
    softmax = gpc.likelihoods.Softmax(2)
    mean = np.zeros((1, 2))
    cov = np.array([[[1.0, 2.0], [2.0, 1.0]]])  # not positive definite
    with pytest.raises(Exception, match=r"not positive definite .* use integrator=gpc.integrators.MeanField\(\)"):
        jax.block_until_ready(softmax.monte_carlo_probability(mean, cov, jax.random.key(0), 4))
    p = gpc.integrators.MeanField().classes(softmax, mean, cov, None)
    assert np.all(np.isfinite(p)) and float(np.sum(p)) == pytest.approx(1.0)
