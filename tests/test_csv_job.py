"""The main job on a CSV file: python -m gpclass --csv FILE --target COLUMN.

One subprocess run proves the entry point (binary, held out, report and plot); the rest runs in-process
through ``gpclass.__main__.main(argv)``. Bad files stop before any JAX work, with a message naming the
column and line (SystemExit, status 1); misused options are argparse usage errors (status 2).
"""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

import gpclass as gpc
from gpclass import _csv_job
from gpclass.__main__ import main

PNG = b"\x89PNG\r\n\x1a\n"
REPORT_KEYS = {"gpclass_version", "data", "task", "class_mapping", "positive_class", "model", "evaluation", "runs",
               "summary", "pooled", "plot", "wall_time_s"}
RUN_KEYS = {"fold", "num_train", "num_test", "hyperparameters", "log_marginal_likelihood", "fit", "test", "wall_time_s"}


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def subset(name, n, seed, classes=None):
    X, y = gpc.datasets.load(name)
    idx = np.random.default_rng(seed).permutation(len(y))
    if classes is not None:
        idx = idx[np.isin(y[idx], classes)]
    return X[idx[:n]], y[idx[:n]]


def check_run(run, num_train, num_test):
    assert set(run) == RUN_KEYS
    assert (run["num_train"], run["num_test"]) == (num_train, num_test)
    assert run["fit"]["converged"] and run["fit"]["status"] in ("CONVERGED", "AT_BOUND")
    # The message is the fit's (its gradient test, with the achieved value), not a solver's or a sampler's.
    assert "the gradient test was met" in run["fit"]["message"] and "sample" not in run["fit"]["message"]
    assert f"is {run['fit']['grad_norm']:.2g}," in run["fit"]["message"]
    assert len(run["fit"]["history"]) == run["fit"]["num_steps"] >= 1
    assert run["fit"]["history"][-1] == pytest.approx(run["log_marginal_likelihood"])
    assert np.isfinite(run["log_marginal_likelihood"]) and run["log_marginal_likelihood"] < 0
    assert run["hyperparameters"]["sigma_f"] > 0
    assert np.all(np.asarray(run["hyperparameters"]["lengthscale"]) > 0)
    assert run["wall_time_s"]["fit"] > 0


@pytest.mark.slow
def test_entry_point_binary_string_labels_held_out_with_report_and_plot(tmp_path):
    """Crabs (60 cases, sex as 'no'/'yes'), one row with a '?' left out by --drop-missing, in a new process."""
    X, y = subset("crabs", 61, seed=0)
    rows = [[*x, "yes" if label > 0 else "no"] for x, label in zip(X, y)]
    rows[5][2] = "?"
    path = write_csv(tmp_path / "crabs.csv", ["sp", "fl", "rw", "cl", "cw", "bd", "sex"], rows)
    report, plot = tmp_path / "out.json", tmp_path / "out.png"
    out = subprocess.run([sys.executable, "-m", "gpclass", "--csv", path, "--target", "sex", "--drop-missing",
                          "--report", str(report), "--plot", str(plot), "--no-cache"],
                         capture_output=True, text=True, check=True, timeout=240).stdout
    for expected in ["laplace ML-II on", "42 train / 18 test", "classes: 'no' -> -1, 'yes' -> +1",
                     "left out 1 of 61 rows", "fitted: sigma_f", "stopped: converged", "test error", "information",
                     "plot written to", "report written to"]:
        assert expected in out
    r = json.loads(report.read_text())
    assert set(r) == REPORT_KEYS
    assert r["task"] == "binary" and r["class_mapping"] == {"no": -1, "yes": 1} and r["positive_class"] == "yes"
    counts = {"no": int(np.sum(np.delete(y, 5) < 0)), "yes": int(np.sum(np.delete(y, 5) > 0))}
    assert r["data"] == {"file": path, "target": "sex", "features": ["sp", "fl", "rw", "cl", "cw", "bd"],
                         "num_cases": 60, "num_features": 6, "rows_read": 61, "rows_dropped_missing": 1,
                         "class_counts": counts}
    assert r["model"]["method"] == "laplace" and r["model"]["likelihood"] == "logistic"
    assert r["evaluation"] == {"scheme": "holdout", "test_fraction": 0.3, "seed": 0}
    (run,) = r["runs"]
    check_run(run, 42, 18)
    assert run["fold"] is None
    assert run["test"]["error_rate"] < 0.25  # chance is 0.4 here; Laplace gets 0-10 % on crabs
    assert run["test"]["information_bits"] > 0.2 and run["test"]["mean_negative_log_probability"] < np.log(2)
    assert r["summary"]["error_rate"]["mean"] == run["test"]["error_rate"] == r["pooled"]["error_rate"]
    assert r["pooled"]["num_cases"] == 18
    assert r["wall_time_s"]["total"] >= run["wall_time_s"]["fit"] > 0
    assert plot.read_bytes()[:8] == PNG


@pytest.mark.slow
def test_three_classes_cross_validation_in_process(tmp_path, capsys):
    """Vehicle (bus / car / van, 60 cases): softmax Laplace in 3 folds, per-fold numbers, out-of-fold plot."""
    X, y = subset("vehicle", 60, seed=1, classes=[0, 1, 3])
    names = {0: "bus", 1: "car", 3: "van"}
    path = write_csv(tmp_path / "vehicle.csv", ["kind", *[f"f{i}" for i in range(X.shape[1])]],
                     [[names[label], *x] for x, label in zip(X, y)])
    report, plot = tmp_path / "cv.json", tmp_path / "cv.png"
    main(["--csv", path, "--target", "kind", "--folds", "3", "--seed", "2", "--report", str(report),
          "--plot", str(plot), "--no-cache"])
    out = capsys.readouterr().out
    assert "3-fold CV" in out and "softmax likelihood, 3 classes" in out and "cross-validation: error rate" in out
    assert all(f"fold {i}/3: test error" in out for i in (1, 2, 3))
    r = json.loads(report.read_text())
    assert r["task"] == "multiclass" and r["class_mapping"] == {"bus": 0, "car": 1, "van": 2}
    assert r["model"]["likelihood"] == "softmax" and r["evaluation"] == {"scheme": "kfold", "folds": 3, "seed": 2}
    assert [run["fold"] for run in r["runs"]] == [1, 2, 3]
    for run in r["runs"]:
        check_run(run, 40, 20)
    errors = [run["test"]["error_rate"] for run in r["runs"]]
    chance = 1 - max(r["data"]["class_counts"].values()) / 60
    assert r["summary"]["error_rate"]["per_run"] == errors
    assert r["summary"]["error_rate"]["mean"] == pytest.approx(np.mean(errors))
    assert r["summary"]["error_rate"]["std"] == pytest.approx(np.std(errors, ddof=1))
    assert r["summary"]["error_rate"]["mean"] < chance - 0.15
    assert r["pooled"]["num_cases"] == 60 and r["pooled"]["error_rate"] == pytest.approx(np.mean(errors))
    assert np.mean([run["test"]["information_bits"] for run in r["runs"]]) > 0
    assert plot.read_bytes()[:8] == PNG


@pytest.mark.slow
def test_kernel_option_rational_quadratic_with_ard(tmp_path, capsys):
    """--kernel rq --ard: the rational quadratic with one length scale per feature on a CSV file, its alpha fitted
    and reported, in-process."""
    X, y = subset("pima", 40, seed=3)  # not separable: ML-II with ARD converges (on crabs it runs to a bound)
    path = write_csv(tmp_path / "pima.csv", [*[f"f{i}" for i in range(8)], "diabetes"],
                     [[*x, int(label > 0)] for x, label in zip(X, y)])
    report = tmp_path / "rq.json"
    main(["--csv", path, "--target", "diabetes", "--kernel", "rq", "--ard", "--report", str(report), "--no-cache"])
    out = capsys.readouterr().out
    assert "rational_quadratic kernel, ARD" in out and "alpha = 1" in out and ", alpha = " in out.split("fitted")[1]
    r = json.loads(report.read_text())
    assert r["model"]["kernel"] == "rational_quadratic" and r["model"]["ard"] is True
    assert r["model"]["initial"] == {"sigma_f": 1.0, "lengthscale": pytest.approx(np.sqrt(8)), "alpha": 1.0}
    (run,) = r["runs"]
    check_run(run, 28, 12)
    assert len(run["hyperparameters"]["lengthscale"]) == 8 and run["hyperparameters"]["alpha"] > 0


@pytest.mark.slow
def test_main_job_takes_kernel_and_ard(capsys):
    """The bundled-data job with --kernel matern52 --ard: one fitted length scale per feature, reported as an array,
    in-process (the fit starts from every length scale sqrt(d) = sqrt(34) on ionosphere)."""
    main(["--dataset", "ionosphere", "--n-train", "40", "--kernel", "matern52", "--ard", "--no-cache"])
    out = capsys.readouterr().out
    assert "for every input (ARD)" in out and "test error:" in out
    fitted = out.split("fitted: ")[1].split("lengthscale = ")[1]
    assert fitted.startswith("[") and len(fitted.split("]")[0].split()) >= 34 - 1


def test_kernel_option_builds_each_kernel_for_both_jobs():
    """--kernel NAME (parsed for the bundled-data job too, which builds its kernel with the same make_kernel):
    each choice's class, starting values and ARD shape, without fitting."""
    from gpclass.__main__ import _parse

    classes = {"se": gpc.kernels.SquaredExponential, "matern12": gpc.kernels.Matern12,
               "matern32": gpc.kernels.Matern32, "matern52": gpc.kernels.Matern52,
               "rq": gpc.kernels.RationalQuadratic, "nn": gpc.kernels.NeuralNetwork}
    assert _parse([]).kernel == "se"
    for name, cls in classes.items():
        assert _parse(["--kernel", name]).kernel == name
        for ard in (False, True) if name != "nn" else (False,):
            k = _csv_job.make_kernel(name, 4, ard, np.float64)
            assert type(k) is cls and float(k.variance) == 1.0
            np.testing.assert_array_equal(k.lengthscale, np.full(4, 2.0) if ard else 2.0)
            assert name != "rq" or float(k.alpha) == 1.0


def bad(tmp_path, text):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    return str(path)


GOOD = "a,b,label\n1,2,x\n3,4,y\n5,6,x\n7,8,y\n"


@pytest.mark.parametrize("text, argv, message", [
    (GOOD, ["--target", "class"], r"no column 'class' in .*; its columns are: a, b, label \(--target names"),
    ("a,b,label\n1,2,x\n3,oops,y\n5,zz,x\n7,8,y\n", ["--target", "label"],
     r"column 'b' is not numeric: 'oops' on line 3 .*\(2 such values\)"),
    ("a,b,label\n1,2,x\n3,4,x\n5,6,x\n", ["--target", "label"], "has one class only \\('x', 3 rows\\)"),
    ("", ["--target", "label"], "is empty: the first row must be a header"),
    ("\n\n", ["--target", "label"], "is empty: the first row must be a header"),
    ("1,2,0\n3,4,1\n5,6,0\n", ["--target", "label"], "is all numbers .*a header row naming the columns is required"),
    ("a,b,label\n", ["--target", "label"], "has a header but no data rows"),
    ("a,b,label\n1,,x\n3,4,y\n5,NA,x\n7,8,y\n", ["--target", "label"],
     "column 'b' has a missing value on line 2 \\(2 rows in all have one\\); --drop-missing"),
    ("a,b,label\n1,2,x\n3,4\n", ["--target", "label"], "line 3 of .* has 2 fields, the header has 3: check the "
     "delimiter"),
    ("a,b,label\n1,inf,x\n3,4,y\n", ["--target", "label"], "column 'b' has the non-finite value 'inf' on line 2 .*: "
     "fix that value or remove the row"),
    (GOOD, ["--target", "label", "--features", "a,c"], "no column 'c'"),
    (GOOD, ["--target", "label", "--features", "a,label"], "the target 'label' cannot also be a feature: leave it out"),
    (GOOD, ["--target", "label", "--features", "a,b,a"], "--features names 'a' twice: list each column once"),
    ("a,a,label\n1,2,x\n", ["--target", "label"], "names 'a' twice: give each column its own name"),
    ("a,b,label\n1,2,x\n3,4,y\n5,6,z\n7,8,x\n8,9,y\n9,0,z\n", ["--target", "label", "--method", "ep"],
     "3 classes: multi-class classification is softmax Laplace only"),
    ("a,label\n" + "".join(f"{i},{i}\n" for i in range(10)), ["--target", "label"], "10 distinct values in 10 rows"),
    (GOOD, ["--target", "label", "--test-fraction", "0.9"], "leaves 4 test and 0 training cases; .*: choose another "
     "--test-fraction"),
])
def test_bad_files_stop_with_a_message_naming_the_problem(tmp_path, text, argv, message):
    with pytest.raises(SystemExit, match=message) as error:
        main(["--csv", bad(tmp_path, text), *argv, "--no-cache"])
    # One line on stderr, exit status 1, naming the program as its usage errors do (main's prog: "gpclass").
    assert str(error.value).startswith("gpclass: error: ")


def test_a_missing_file_and_a_class_missing_from_a_training_fold(tmp_path):
    with pytest.raises(SystemExit, match="cannot read .*nothing.csv: No such file"):
        main(["--csv", str(tmp_path / "nothing.csv"), "--target", "y"])
    text = "a,label\n" + "".join(f"{i},{'x' if i else 'y'}\n" for i in range(8))  # one 'y': the fold testing it
    with pytest.raises(SystemExit, match="fold \\d's training cases have no case of class 'y'"):
        main(["--csv", bad(tmp_path, text), "--target", "label", "--folds", "8"])


@pytest.mark.parametrize("argv, message", [
    (["--target", "y"], "--target needs --csv FILE"),
    (["--method", "ep"], "--method needs --csv FILE"),
    (["--csv", "f.csv"], "--csv needs --target COLUMN"),
    (["--csv", "f.csv", "--target", "y", "--dataset", "pima"], "--dataset and --n-train choose a bundled data set"),
    (["--csv", "f.csv", "--target", "y", "--method", "jj", "--likelihood", "probit"], "needs --likelihood logistic"),
    (["--csv", "f.csv", "--target", "y", "--folds", "1"], "--folds must be at least 2"),
    (["--csv", "f.csv", "--target", "y", "--kernel", "nn", "--ard"], "--kernel nn (GPML's covNNone) has one length"),
    (["--kernel", "matern"], "argument --kernel: invalid choice"),
    (["--csv", "f.csv", "--target", "y", "--folds", "3", "--test-fraction", "0.2"], "not allowed with argument"),
])
def test_misused_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as error:
        main(argv)
    assert error.value.code == 2 and message in capsys.readouterr().err


def test_reading_labels_quotes_and_byte_order_mark(tmp_path):
    path = tmp_path / "quoted.csv"
    path.write_text('\ufeff"x, first",y,label\n"1.5",2,1.0\n3,4,0\n\n5,6,1\n7,8,-2\n9,1, -2 \n', encoding="utf-8")
    table = _csv_job.read_csv(str(path), "label", features=["y", "x, first"])
    assert table.columns == ["x, first", "y", "label"] and table.features == ["y", "x, first"]
    np.testing.assert_array_equal(table.X, [[2, 1.5], [4, 3], [6, 5], [8, 7], [1, 9]])
    names, codes = _csv_job.class_codes(table)
    assert names == ["-2", "0", "1.0"]  # numeric labels sort as numbers; "1.0" and "1" are one class
    np.testing.assert_array_equal(codes, [2, 1, 2, 0, 0])
    names, codes = _csv_job.class_codes(table._replace(labels=["b", "a", "b", "a", "a"]))
    assert names == ["a", "b"] and codes.tolist() == [1.0, -1.0, 1.0, -1.0, -1.0]  # the second class is +1


def test_report_json_is_strict():
    """An infinite metric (a certain, wrong prediction) is written as null: JSON has no infinity."""
    from gpclass._csv_job import _finite_or_none
    report = {"test": {"information_bits": float("-inf"), "error_rate": 0.5}, "history": [1.0, float("nan")]}
    assert json.loads(json.dumps(_finite_or_none(report), allow_nan=False)) == {
        "test": {"information_bits": None, "error_rate": 0.5}, "history": [1.0, None]}


def test_output_paths_are_checked_before_fitting_and_never_overwrite_the_data(tmp_path, capsys, monkeypatch):
    """--report equal to --csv used to overwrite the data with JSON and exit 0; a missing directory or a plot named
    out.csv failed after the whole fit with a traceback.  Each is now a usage error (status 2) before any fit,
    and the data file is untouched."""
    data = write_csv(tmp_path / "d.csv", ["a", "label"], [[i, i % 2] for i in range(10)])
    before = (tmp_path / "d.csv").read_bytes()
    monkeypatch.setattr(_csv_job, "run", lambda *a: pytest.fail("fitted before checking the output paths"))
    (tmp_path / "sub").mkdir()
    cases = [
        (["--report", data], "is the input file"),
        (["--report", str(tmp_path / "." / "d.csv")], "is the input file"),
        (["--plot", data], "is the input file"),
        (["--report", str(tmp_path / "missing" / "r.json")], "does not exist"),
        (["--report", str(tmp_path / "sub")], "is a directory"),
        (["--plot", str(tmp_path / "out.csv")], "file extension must name an image format"),
        (["--report", str(tmp_path / "same.png"), "--plot", str(tmp_path / "same.png")], "name the same file"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as error:
            main(["--csv", data, "--target", "label", *extra])
        assert error.value.code == 2 and message in capsys.readouterr().err, extra
    assert (tmp_path / "d.csv").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv", "sub"]
