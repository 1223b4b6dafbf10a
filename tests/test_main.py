"""The README's main job runs end to end and prints what it found."""

from gpclass.__main__ import main


def test_main_job_prints_fit_and_held_out_metrics(capsys):
    main(["--dataset", "crabs", "--n-train", "60", "--likelihood", "probit"])
    out = capsys.readouterr().out
    for expected in ["fit step", "fitted: sigma_f", "log marginal likelihood", "stopped: converged", "test error",
                     "information", "wall time"]:
        assert expected in out
