"""SVGP against GPflow: the same data, model, optimiser and number of steps; time per step, compile, test error, ELBO.

    python benchmarks/svgp_vs_gpflow.py            # (n, m, b) = (10^4, 100, 500), (10^5, 300, 1000), (10^5, 500, 256)
    python benchmarks/svgp_vs_gpflow.py --configs 10000,100,500 --steps 300

GPflow is an optional dependency of this script only (``pip install gpflow tensorflow tensorflow-probability
tf-keras``, in the same environment as gpclass: both run in this one process, one after the other).  Without it
the script times gpclass alone.

Data: Breiman's twonorm (20 inputs, Bayes error Phi(-2) = 2.28 %), n training cases and 10,000 test cases.
Model (both libraries): SE kernel (sigma_f^2 = 1, l = sqrt(20)), logistic likelihood (``Bernoulli(invlink=
sigmoid)`` in GPflow), m inducing inputs started at the first m training inputs, whitened full-covariance q(u) at
the prior, inducing inputs and hyperparameters trained, Adam with learning rate 0.01, minibatches of b cases.

* gpclass: ``gpc.fit_svgp(model, X, y, key=..., num_steps=T, batch_size=b)``, the call a user makes.
* GPflow: its documented training loop, ``tf.function`` around ``optimizer.minimize(model.training_loss_closure(
  iter(dataset)), model.trainable_variables)`` with ``dataset = tf.data.Dataset.from_tensor_slices((X, Y))
  .repeat().shuffle(n).batch(b)`` (GPflow's SVGP notebook).

Timing: a first call of ``warmup`` steps (compile plus runs; reported as "first call"), then ``--steps`` steps
timed as one call (gpclass) or loop (GPflow); the per-step time is that call's time over the number of steps.
The two libraries run in turn, ``--repeats`` times, and each reports its median.  float64 in both.  The test error
and the full-data ELBO at the end of the last run (gpclass: ``SVGP.elbo`` on all n cases; GPflow: ``model.elbo``).
"""

import argparse
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # a benchmark is a user's program: float64 is its choice

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

import gpclass as gpc  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine_header, write_results  # noqa: E402

D = 20


def twonorm(n, rng):
    y = rng.choice([-1.0, 1.0], size=n)
    return y[:, None] * (2.0 / np.sqrt(D)) + rng.normal(size=(n, D)), y


def gpclass_run(X, y, X_test, y_test, m, batch, steps, warmup, seed):
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(D)))
    start = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[:m])
    t0 = time.perf_counter()
    jax.block_until_ready(gpc.fit_svgp(start, X, y, key=jax.random.key(seed), num_steps=warmup, batch_size=batch))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fit = jax.block_until_ready(gpc.fit_svgp(start, X, y, key=jax.random.key(seed), num_steps=steps,
                                             batch_size=batch))
    per_step = (time.perf_counter() - t0) / steps
    error = float(np.mean(np.where(np.asarray(gpc.predict(fit.model, X_test)) > 0.5, 1.0, -1.0) != y_test))
    elbo = float(fit.model.elbo(X, y))  # the data as arguments: a closed-over X is a constant XLA folds
    return dict(first_call_s=first, step_ms=1e3 * per_step, test_error=error, elbo=elbo)


def gpflow_run(X, y, X_test, y_test, m, batch, steps, warmup, seed):
    import gpflow
    import tensorflow as tf

    tf.random.set_seed(seed)
    gpflow.config.set_default_float(np.float64)
    Y = (y[:, None] > 0).astype(np.float64)
    model = gpflow.models.SVGP(gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=np.sqrt(D)),
                               gpflow.likelihoods.Bernoulli(invlink=tf.sigmoid), X[:m].copy(), whiten=True,
                               q_diag=False, num_data=len(y))
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).repeat().shuffle(len(y), seed=seed).batch(batch)
    loss = model.training_loss_closure(iter(dataset))
    optimizer = gpflow.keras.tf_keras.optimizers.Adam(0.01)  # GPflow's Keras 2 (tf-keras), as its notebooks use

    @tf.function
    def step():
        optimizer.minimize(loss, model.trainable_variables)

    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    per_step = (time.perf_counter() - t0) / steps
    p = model.predict_y(X_test)[0].numpy()[:, 0]
    error = float(np.mean(np.where(p > 0.5, 1.0, -1.0) != y_test))
    elbo = float(model.elbo((X, Y)).numpy())
    return dict(first_call_s=first, step_ms=1e3 * per_step, test_error=error, elbo=elbo)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["10000,100,500", "100000,300,1000", "100000,500,256"],
                        help="n,m,batch triples")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="svgp_vs_gpflow")
    args = parser.parse_args()
    try:
        import gpflow
        peers = {"gpflow": gpflow.__version__}
    except ImportError:
        peers = {}
    info = {**machine_header("SVGP against GPflow", args), **peers}
    print(f"GPflow {peers['gpflow']}" if peers else "GPflow is not installed: gpclass alone", flush=True)
    rows = []
    for config in args.configs:
        n, m, batch = (int(v) for v in config.split(","))
        rng = np.random.default_rng(args.seed)
        X, y = twonorm(n, rng)
        X_test, y_test = twonorm(10_000, rng)
        runs = {"gpclass": [], **({"gpflow": []} if peers else {})}
        for _ in range(args.repeats):
            runs["gpclass"].append(gpclass_run(X, y, X_test, y_test, m, batch, args.steps, args.warmup, args.seed))
            if peers:
                runs["gpflow"].append(gpflow_run(X, y, X_test, y_test, m, batch, args.steps, args.warmup, args.seed))
        row = dict(n=n, m=m, batch=batch, steps=args.steps, bayes_error=float(stats.norm.cdf(-2.0)))
        for name, results in runs.items():
            row[name] = {**results[-1], "first_call_s": results[0]["first_call_s"],  # the first repeat's: compiles
                         "step_ms": float(np.median([r["step_ms"] for r in results])),
                         "step_ms_runs": [r["step_ms"] for r in results]}
        if peers:
            row["speedup"] = row["gpflow"]["step_ms"] / row["gpclass"]["step_ms"]
        rows.append(row)
        print(f"n = {n}, m = {m}, b = {batch}: " + "; ".join(
            f"{name} {row[name]['step_ms']:.2f} ms/step (first call {row[name]['first_call_s']:.1f} s, test error "
            f"{100 * row[name]['test_error']:.2f} %, ELBO {row[name]['elbo']:.1f})" for name in runs)
            + (f"; gpclass {row['speedup']:.2f}x GPflow's speed" if peers else ""), flush=True)
    write_results(args.out, info, rows)


if __name__ == "__main__":
    main()
