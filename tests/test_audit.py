"""PBT's audit (tune_runner.trainables.audit): a trial must train with the hyperparameters its config says.

The oracle trainable is driven in this process through the methods Tune calls on an exploit
(save_checkpoint on the donor, reset_config and load_checkpoint on the receiver); the audit
callback is fed trials and results as Tune hands them over. No Ray.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from tune_runner.trainables.audit import AuditError, audit_result, make_callback, mismatches
from tune_runner.trainables.oracle import Oracle, OracleStaleRestore, peak

BASE = {"optimum": {"x": 0.5}, "noise": 0.0, "rate": 0.5, "steps_per_iteration": 1000, "seed": 0}


def test_a_wrong_applied_value_is_named_with_both_values():
    assert mismatches({"lr": 1e-3, "gamma": 0.99}, {"lr": 1e-3, "gamma": 0.99}) == []
    assert mismatches({"lr": 1e-3}, {"lr": 3e-4}) == ["lr: config says 0.001, the trainable uses 0.0003"]
    with pytest.raises(AuditError, match=r"PBT audit failed: clip_param: config says 0.2, the trainable uses 0.3"):
        audit_result({"clip_param": 0.2, "lr": 1e-3}, {"clip_param": 0.3, "lr": 1e-3})
    assert audit_result({"lr": 1e-3, "x": "tanh"}, {"lr": 1e-3}) == {"applied/lr": 1e-3, "requested/lr": 1e-3}


def exploit(donor_cls: type, receiver_cls: type, tmp_path, *, reuse: bool) -> Oracle:
    """A donor at x=0.2 trains two steps and is checkpointed; a trial PBT moved to x=0.8 restores it."""
    donor = donor_cls(config={**BASE, "x": 0.2})
    donor.train(), donor.train()
    donor.save_checkpoint(str(tmp_path))
    if reuse:  # Tune reuses an actor: reset_config, then the restore
        receiver = donor
        assert receiver.reset_config({**BASE, "x": 0.8})
    else:
        receiver = receiver_cls(config={**BASE, "x": 0.8})
    receiver.load_checkpoint(str(tmp_path))
    return receiver


@pytest.mark.parametrize("reuse", [False, True], ids=["new-actor", "reused-actor"])
def test_after_an_exploit_the_oracle_trains_with_its_new_config_and_reports_it(tmp_path, reuse, forbid_ray):
    receiver = exploit(Oracle, Oracle, tmp_path, reuse=reuse)
    result = receiver.train()
    assert result["env_steps"] == 3000  # the donor's state carried over
    assert result["applied/x"] == 0.8 and result["requested/x"] == 0.8
    assert result["peak"] == pytest.approx(peak({**BASE, "x": 0.8}))  # the applied value steered the return
    receiver.stop()


def test_a_restore_that_keeps_the_donors_values_fails_the_trial(tmp_path, forbid_ray):
    receiver = exploit(OracleStaleRestore, OracleStaleRestore, tmp_path, reuse=False)
    with pytest.raises(AuditError, match="x: config says 0.8, the trainable uses 0.2"):
        receiver.step()
    receiver.stop()


def trial(trial_id: str, **config: float) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, config=dict(config))


def test_the_callback_audits_each_result_against_the_config_that_produced_it():
    out = io.StringIO()
    audit = make_callback(out)
    a = trial("a", lr=1e-3)
    audit.on_trial_start(0, [a], a)
    audit.on_trial_result(0, [a], a, {"applied/lr": 1e-3})
    # PBT exploits on the next result: Tune changes the config before the callback sees that result,
    # which was still produced with the old value.
    a.config["lr"] = 5e-4
    audit.on_trial_result(0, [a], a, {"applied/lr": 1e-3})
    audit.on_trial_result(0, [a], a, {"applied/lr": 5e-4})
    audit.on_trial_result(0, [a], a, {"episode_return_mean": 1.0})  # nothing applied: not audited
    assert (audit.exploits, audit.audited, audit.failures) == (1, 3, [])
    assert audit.summary() == "1 exploit(s); audit of 3 results: every applied value matched"
    audit.on_trial_result(0, [a], a, {"applied/lr": 1e-3})  # the donor's lr came back with its checkpoint
    assert audit.failures == ["a: PBT audit failed: lr: config says 0.0005, the trainable uses 0.001"]
    assert "AUDIT  a: PBT audit failed: lr: config says 0.0005" in out.getvalue()
    assert audit.summary() == "1 exploit(s); audit of 4 results: 1 mismatch(es)"
