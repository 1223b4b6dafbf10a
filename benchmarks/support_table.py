"""Which method runs with which likelihood and prior: every combination tried on a tiny problem.

    python benchmarks/support_table.py            # prints the Markdown table of docs/guide.md's "Methods" section

Each cell is what ``gpc.infer`` does with that method, likelihood and prior on six cases: "yes" when it returns
a posterior with a finite log marginal likelihood (MCMC: finite samples), "no" when it refuses with a
``gpc.GPClassError`` (the message is printed below the table), "FAIL" for anything else (a bug).  The table in
docs/guide.md is this script's output, so it says what the code does, not what was meant.
"""

import sys

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import gpclass as gpc  # noqa: E402

L = gpc.likelihoods
X = np.linspace(-1.0, 1.0, 6)[:, None]
BINARY = np.array([1, -1, 1, 1, -1, -1])
KERNEL = gpc.kernels.SquaredExponential(1.0, 0.7)
LIKELIHOODS = {
    "Logistic": (L.Logistic(), BINARY),
    "Probit": (L.Probit(), BINARY),
    "LabelNoise(Heaviside)": (L.LabelNoise(L.Heaviside(), 0.1), BINARY),
    "SoftLabels(Probit)": (L.SoftLabels(L.Probit()), np.array([0.9, 0.2, 1.0, 0.6, 0.0, 0.3])),
    "Ordinal(3)": (L.Ordinal(3), np.array([0, 1, 2, 2, 1, 0])),
    "Ordinal(3, logit)": (L.Ordinal(3, link="logit"), np.array([0, 1, 2, 2, 1, 0])),
    "Preference": (L.Preference(1.0), np.array([[0, 1], [2, 1], [3, 5], [4, 0]])),
    "Softmax(3)": (L.Softmax(3), np.array([0, 1, 2, 2, 1, 0])),
}
if hasattr(L, "MultinomialProbit"):
    LIKELIHOODS["MultinomialProbit(3)"] = (L.MultinomialProbit(3), np.array([0, 1, 2, 2, 1, 0]))
METHODS = {
    "Laplace": gpc.Laplace(), "EP": gpc.EP(), "KL": gpc.KL(), "JJ lower": gpc.JaakkolaJordan(),
    "JJ upper": gpc.JaakkolaJordanUpper(), "MCMC": gpc.MCMC(num_samples=20, num_warmup=10, num_chains=1),
    "AIS": gpc.AIS(num_temperatures=5, num_runs=2),
}
PRIORS = {"dense": KERNEL, "FITC": gpc.Sparse(KERNEL, X[::2], approximation="fitc"),
          "VFE": gpc.Sparse(KERNEL, X[::2], approximation="vfe")}


def cell(method, prior, likelihood, y):
    try:
        post = gpc.infer(method, prior, likelihood, X, y, key=jax.random.key(0), throw=False)
        # MCMC estimates no log marginal likelihood (NaN by design): its samples must be finite instead.
        inner = getattr(post, "differences", post)  # Preference: the posterior of the utility differences
        value = inner.samples if isinstance(method, gpc.MCMC) else post.log_marginal
        ok = bool(np.all(np.isfinite(np.asarray(value))))
        return ("yes" if ok else "FAIL"), None if ok else "non-finite result"
    except gpc.GPClassError as e:
        return "no", str(e).split("\n")[0]
    except Exception as e:  # noqa: BLE001 - a bug to report, not to hide
        return "FAIL", f"{type(e).__name__}: {e}"


def main():
    messages = {}
    print("| likelihood | " + " | ".join(METHODS) + " |")
    print("|---" * (len(METHODS) + 1) + "|")
    for lik_name, (likelihood, y) in LIKELIHOODS.items():
        cells = []
        for method_name, method in METHODS.items():
            marks = []
            for prior_name, prior in PRIORS.items():
                mark, message = cell(method, prior, likelihood, y)
                if message:
                    messages[(lik_name, method_name, prior_name)] = message
                marks.append((prior_name, mark))
            dense = dict(marks)["dense"]
            sparse = [p for p, m in marks[1:] if m == "yes"]
            text = dense + (f" ({', '.join(sparse)})" if sparse and dense == "yes" else "")
            text = text if all(m != "FAIL" for _, m in marks) else text + " FAIL"
            cells.append(text)
        print(f"| `{lik_name}` | " + " | ".join(cells) + " |", flush=True)
    print()
    for (lik_name, method_name, prior_name), message in messages.items():
        print(f"{lik_name} / {method_name} / {prior_name}: {message[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
