"""Trial actors on the local Ray we start take the idle workers Ray started with it (issue 16: a trial's first
iteration within about a second of being scheduled; bench/search_e2e.py measures the seconds).

Ray Tune gives every trial actor a runtime env of environment variables, and a worker with a runtime env is
never an idle one. tune_runner.cluster.session leaves it out while the workers already inherited every one of
those variables with the same value, and keeps it when one changed after Ray started.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.e2e


def _one_trial(tmp_path, name):
    from ray import tune

    def report(config):  # defined here: pickled by value, as workers cannot import this test module
        import ray
        from ray import tune

        tune.report({"runtime_env": dict(ray.get_runtime_context().runtime_env), "pid": os.getpid(),
                     "pl_disable_fork": os.environ.get("PL_DISABLE_FORK"),
                     "aws_key": os.environ.get("AWS_ACCESS_KEY_ID")})

    tuner = tune.Tuner(report, run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), verbose=0))
    return tuner.fit()[0].metrics


def test_a_trial_actor_runs_without_a_runtime_env_and_still_sees_tunes_variables(ray_session, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    first = _one_trial(tmp_path, "inherited")
    assert first["runtime_env"] == {}, first["runtime_env"]  # so an idle worker can take it
    assert first["pl_disable_fork"] == "1"  # what Tune's runtime env would have set: inherited instead
    # A variable Tune copies from the driver, set after Ray started: the workers lack it, so Tune's own runtime
    # env comes back and the trial sees the driver's value.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "set-after-ray-init")
    second = _one_trial(tmp_path, "changed")
    assert second["aws_key"] == "set-after-ray-init"
    assert second["runtime_env"].get("env_vars", {}).get("AWS_ACCESS_KEY_ID") == "set-after-ray-init"
