"""The CSV job with --ordinal: ordered classes fitted with one gpc.likelihoods.Ordinal(K) model.

End to end in-process (``gpclass.__main__.main(argv)``) on a small temporary CSV file: text labels in the order of
--order, and the same file with numbers (whose numeric order differs from their text order) give one model; the
report's cutpoints and metrics against the scikit-learn estimator fitted on the same standardised training cases
with the same settings (noise held at 1, cutpoints from the class frequencies, ML-II of the kernel and the
cutpoints; the estimator pads and masks, the job does not); bad orders stop before any fit with a message.
"""

import csv
import json

import numpy as np
import pytest

import gpclass as gpc
from gpclass.__main__ import main
from gpclass.sklearn import GaussianProcessClassifier

NAMES = np.array(["low", "mid", "high"])
NUMBERS = np.array(["2", "10", "33"])  # as text "10" < "2" < "33": the numeric order is needed


@pytest.fixture(scope="module")
def data():
    """40 cases in 2-D, three ordered classes from a smooth latent function plus noise."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-2.0, 2.0, size=(40, 2))
    y = np.digitize(1.5 * np.sin(1.5 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=40), [-0.7, 0.7])
    return X, y


def write_csv(path, X, labels):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["a", "b", "level"])
        writer.writerows([[*x, label] for x, label in zip(X, labels)])
    return str(path)


@pytest.mark.slow
def test_ordinal_job_end_to_end(tmp_path, capsys, data):
    X, y = data
    text = write_csv(tmp_path / "text.csv", X, NAMES[y])
    report = tmp_path / "r.json"
    main(["--csv", text, "--target", "level", "--ordinal", "--order", "low,mid,high", "--report", str(report),
          "--no-cache", "--no-progress"])
    out = capsys.readouterr().out
    for expected in ["ordinal likelihood (probit link), 3 ordered classes",
                     "classes, lowest first: 'low' -> 0, 'mid' -> 1, 'high' -> 2", "28 train / 12 test",
                     "; cutpoints = [", "(noise 1, held)", "accuracy: ",
                     "mean absolute rank error: ", "report written to"]:
        assert expected in out
    r = json.loads(report.read_text())
    assert r["task"] == "ordinal" and r["class_mapping"] == {"low": 0, "mid": 1, "high": 2}
    assert r["positive_class"] is None and r["model"]["likelihood"] == "ordinal"
    assert r["data"]["class_counts"] == {name: int(np.sum(y == k)) for k, name in enumerate(NAMES)}
    (run,) = r["runs"]
    assert run["fit"]["converged"] and run["hyperparameters"]["noise"] == 1.0
    cuts = np.array(run["hyperparameters"]["cutpoints"])
    assert cuts.shape == (2,) and cuts[0] < cuts[1]
    test = run["test"]
    assert test["accuracy"] == pytest.approx(1.0 - test["error_rate"])
    # every wrong class is at least one rank off, at most two
    assert test["error_rate"] <= test["mean_absolute_rank_error"] <= 2 * test["error_rate"]
    assert test["accuracy"] > 0.6 and test["information_bits"] > 0  # chance (the largest class) about 0.4
    for key in ("accuracy", "mean_absolute_rank_error"):
        assert r["summary"][key]["mean"] == test[key] == r["pooled"][key]

    # The same fit by the estimator: the held-out split of the job (its seed's permutation), standardised with the
    # training statistics, Laplace ML-II with the noise held at 1.
    perm = np.random.default_rng(0).permutation(40)
    train, held_out = perm[12:], perm[:12]
    X_train, X_test = gpc.datasets.standardize(X[train], X[held_out])
    clf = GaussianProcessClassifier(likelihood="ordinal").fit(X_train, y[train])
    np.testing.assert_allclose(cuts, clf.likelihood_.cutpoints, rtol=1e-6)
    np.testing.assert_allclose(run["log_marginal_likelihood"], clf.log_marginal_likelihood_value_, rtol=1e-9)
    predicted = clf.predict(X_test)
    assert test["accuracy"] == np.mean(predicted == y[held_out])
    assert test["mean_absolute_rank_error"] == pytest.approx(np.mean(np.abs(predicted - y[held_out])), abs=1e-12)

    # Numbers are ordered as numbers (no --order): the same model, the same numbers.
    numbers = write_csv(tmp_path / "numbers.csv", X, NUMBERS[y])
    report2 = tmp_path / "r2.json"
    main(["--csv", numbers, "--target", "level", "--ordinal", "--report", str(report2), "--no-cache",
          "--no-progress"])
    assert "'2' -> 0, '10' -> 1, '33' -> 2" in capsys.readouterr().out
    r2 = json.loads(report2.read_text())
    assert r2["class_mapping"] == {"2": 0, "10": 1, "33": 2}
    assert r2["runs"][0]["hyperparameters"] == run["hyperparameters"] and r2["runs"][0]["test"] == test

    # --ordinal logit: the cumulative logit, as the estimator's likelihood="ordinal_logit".
    report3 = tmp_path / "r3.json"
    main(["--csv", numbers, "--target", "level", "--ordinal", "logit", "--report", str(report3), "--no-cache",
          "--no-progress"])
    assert "ordinal likelihood (logit link), 3 ordered classes" in capsys.readouterr().out
    r3 = json.loads(report3.read_text())
    assert r3["model"]["likelihood"] == "ordinal_logit"
    logit = GaussianProcessClassifier(likelihood="ordinal_logit").fit(X_train, y[train])
    np.testing.assert_allclose(r3["runs"][0]["hyperparameters"]["cutpoints"], logit.likelihood_.cutpoints, rtol=1e-6)
    np.testing.assert_allclose(r3["runs"][0]["log_marginal_likelihood"], logit.log_marginal_likelihood_value_,
                               rtol=1e-9)


@pytest.mark.parametrize("labels, argv, message", [
    (NAMES, [], r"holds values that are not numbers \('high', 'low', 'mid'\), whose order cannot be guessed; "
                r"give it with --order"),
    (NAMES, ["--order", "low,high"], r"holds 'mid', which --order does not list"),
    (NAMES, ["--order", "low,mid,high,extreme"], r"--order lists 'extreme', which no row of the target column"),
    (NAMES, ["--order", "low,mid,low,high"], r"--order names 'low' twice"),
    (np.array(["x", "x", "x"]), ["--order", "x"], r"has one class only \('x'"),
])
def test_bad_orders_stop_with_a_message(tmp_path, data, labels, argv, message):
    X, y = data
    path = write_csv(tmp_path / "d.csv", X, labels[y % len(labels)])
    with pytest.raises(SystemExit, match=message) as error:
        main(["--csv", path, "--target", "level", "--ordinal", *argv, "--no-cache"])
    assert str(error.value).startswith("gpclass: error: ")  # the program's name, as in its usage errors


@pytest.mark.parametrize("argv, message", [
    (["--csv", "f.csv", "--target", "y", "--order", "a,b"], "--order gives the order of ordinal classes; it needs "
                                                            "--ordinal"),
    (["--csv", "f.csv", "--target", "y", "--ordinal", "--method", "jj"], "--ordinal takes --method laplace, ep or kl"),
    (["--ordinal"], "--ordinal needs --csv FILE"),
])
def test_misused_ordinal_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as error:
        main(argv)
    assert error.value.code == 2 and message in capsys.readouterr().err
