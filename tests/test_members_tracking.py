"""A population trial's members in MLflow (a run each, under its trial's run) and in the live view (counts per
trial), driven by oracle population trials stepped in this process with the population searcher (no Ray)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from tests.test_population import prepared
from tune_runner.spec import reserved
from tune_runner.spec.seed_keys import member_seed, members_of
from tune_runner.trainables.members import Board
from tune_runner.trainables.oracle import OraclePopulation

FIXED = {"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"], "steps_per_iteration": 1000}


def drive(searcher, callbacks, *, trials: int, fail: str | None = None) -> dict[str, list[dict]]:
    """Tune's part: ask for trials, step each to its end, hand every result to the searcher and `callbacks` as
    Tune would; trial `fail` errors after its third report. trial id -> its results."""
    board = Board()
    searcher._board = board
    ran: dict[str, list[dict]] = {}
    for n in range(trials):
        trial_id = f"trial{n}"
        config = searcher.suggest(trial_id)
        if not isinstance(config, dict):
            break
        full = {**FIXED, reserved.MEMBERS_KEY: searcher.size, **config}
        trial = SimpleNamespace(trial_id=trial_id, config=full, last_result={}, status="RUNNING", error_file=None,
                                error_msg="RuntimeError: out of memory")
        population = OraclePopulation(full, trial_id=trial_id)
        population.members.board = board
        for callback in callbacks:
            callback.on_trial_start(0, [trial], trial)
        results = ran[trial_id] = []
        while True:
            result = {**population.step(), "training_iteration": len(results) + 1, "config": full}
            results.append(result)
            trial.last_result = result
            for callback in callbacks:
                callback.on_trial_result(0, [trial], trial, result)
            if trial_id == fail and len(results) == 3:
                searcher.on_trial_complete(trial_id, None, error=True)
                for callback in callbacks:
                    callback.on_trial_error(0, [trial], trial)
                break
            if result.get("done"):
                searcher.on_trial_complete(trial_id, result)
                for callback in callbacks:
                    callback.on_trial_complete(0, [trial], trial)
                break
            searcher.on_trial_result(trial_id, result)
    return ran


def population_search(tmp_path, **top):
    """A prepared oracle population search (random, asha over members, refill) and its spec."""
    prep = prepared(tmp_path, scheduler={"name": "asha", "grace_period": 1000, "reduction_factor": 2},
                    searcher={"name": "random", "seed": 1}, **top)
    prep.searcher.set_search_properties("episode_return_mean", "max", {})
    return prep.searcher, prep.spec


def tracking(tmp_path, spec, **kwargs):
    """An MlflowTracking as the runner makes it, on a fresh SQLite store under a parent run; (callback, client)."""
    from tune_runner.tracking.callback import MlflowTracking, client, experiment_id

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow = client(uri)
    exp_id = experiment_id(mlflow, "members", uri)
    parent = mlflow.create_run(exp_id).info.run_id
    callback = MlflowTracking(uri=uri, experiment_id=exp_id, parent_run_id=parent,
                              logged_keys=tuple(spec.fixed) + spec.searched, ending=spec.ending, **kwargs)
    return callback, mlflow


def member_rows(results: list[dict]) -> dict[str, list[tuple[int, dict]]]:
    """member id -> (its slot, its row) for each report that carried it."""
    rows: dict[str, list[tuple[int, dict]]] = {}
    for result in results:
        for slot, row in members_of(result).items():
            rows.setdefault(row["id"], []).append((slot, row))
    return rows


def history(mlflow, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in mlflow.get_metric_history(run_id, key))


def test_each_member_gets_a_run_under_its_trial_with_its_config_curve_and_ending(tmp_path):
    searcher, spec = population_search(tmp_path, num_samples=10)
    callback, mlflow = tracking(tmp_path, spec, flush_every_s=3600.0)
    ran = drive(searcher, [callback], trials=5)
    callback.on_experiment_end([])
    assert set(callback.member_runs) == set(searcher.members) and len(searcher.members) == 10
    for trial_id, results in ran.items():
        trial_run = mlflow.get_run(callback.runs[trial_id])
        assert not any(k.startswith("member_") for k in trial_run.data.metrics)  # in the members' runs, once
        assert {"episode_return_mean", "members_alive", "members_refilled"} <= set(trial_run.data.metrics)
        assert "lr" not in trial_run.data.params and trial_run.data.params["x"] == str(results[0]["config"]["x"])
        assert trial_run.data.tags["tune_rl.status"] == "terminated"  # it ended itself, its members one by one
        for member, rows in member_rows(results).items():
            run = mlflow.get_run(callback.member_runs[member])
            slot = rows[0][0]
            assert run.info.run_name == member
            assert run.data.tags["mlflow.parentRunId"] == trial_run.info.run_id
            assert run.data.tags["tune_rl.member_id"] == member and run.data.tags["tune_rl.trial_id"] == trial_id
            assert run.data.tags["tune_rl.search_run_id"] == callback.parent_run_id
            # the trial's params, the member's own values and seed
            assert run.data.params == {**trial_run.data.params, "lr": str(rows[0][1]["config"]["lr"]),
                                       "seed": str(member_seed(results[0]["config"], slot))}
            assert history(mlflow, run.info.run_id, "episode_return_mean") == [
                (row["env_steps"], pytest.approx(row["episode_return_mean"])) for _, row in rows]
            assert history(mlflow, run.info.run_id, "training_iteration") == [  # its own reports, counted
                (row["env_steps"], n) for n, (_, row) in enumerate(rows, start=1)]
            ending = searcher.members[member].ending
            assert run.info.status == "FINISHED"
            assert run.data.tags["tune_rl.status"] == ("stopped_early" if ending == "stopped_early" else "terminated")
    endings = [r.ending for r in searcher.members.values()]
    assert "stopped_early" in endings and "done" in endings  # both kinds of ending were checked


def test_members_are_sent_in_one_batch_a_run_per_flush(tmp_path):
    searcher, spec = population_search(tmp_path, num_samples=6, refill=False, **{reserved.MEMBERS_KEY: 3})
    callback, mlflow = tracking(tmp_path, spec, flush_every_s=3600.0)
    calls: list[tuple[str, int]] = []
    log_batch = mlflow.log_batch

    def counted(run_id, metrics=(), params=(), tags=()):
        if metrics:
            calls.append((run_id, len(metrics)))
        return log_batch(run_id, metrics=metrics, params=params, tags=tags)

    callback._client = SimpleNamespace(create_run=mlflow.create_run, log_batch=counted, set_tag=mlflow.set_tag,
                                       set_terminated=mlflow.set_terminated)
    ran = drive(searcher, [callback], trials=2)
    callback.on_experiment_end([])
    runs = [*callback.runs.values(), *callback.member_runs.values()]
    assert len(ran) == 2 and len(runs) == 2 + 6
    assert sorted(run for run, _ in calls) == sorted(runs)  # not flushed before: each run's metrics in one call


def test_an_errored_trial_fails_its_live_members_and_a_resumed_search_logs_on_in_their_runs(tmp_path):
    from tune_runner.tracking.callback import MlflowTracking, children
    from tune_runner.tracking.uri import member_runs

    searcher, spec = population_search(tmp_path, num_samples=4, refill=False)
    callback, mlflow = tracking(tmp_path, spec)
    drive(searcher, [callback], trials=1, fail="trial0")
    callback.on_experiment_end([])
    errored = {m for m, record in searcher.members.items() if record.ending == "errored"}
    assert errored and errored != set(callback.member_runs)  # some had ended before, at asha's first rung
    for member, run_id in callback.member_runs.items():
        run = mlflow.get_run(run_id)
        if member in errored:
            assert run.info.status == "FAILED" and run.data.tags["tune_rl.status"] == "errored"
            assert run.data.tags["tune_rl.error"] == "RuntimeError: out of memory"
        else:
            assert run.info.status == "FINISHED" and run.data.tags["tune_rl.status"] == "stopped_early"
    exp_id = mlflow.get_run(callback.parent_run_id).info.experiment_id
    # what a resume reads back: the trials under the parent (no member among them), the members by their tag
    assert children(mlflow, exp_id, callback.parent_run_id) == callback.runs
    again = MlflowTracking(uri=callback.uri, experiment_id=exp_id, parent_run_id=callback.parent_run_id,
                           logged_keys=callback.logged_keys, ending=spec.ending)
    again.continue_members(member_runs(mlflow, exp_id, callback.parent_run_id))
    assert again.member_runs == callback.member_runs and again.unsettled == {}  # every one ended: none to settle


def test_a_population_trials_run_ends_terminated_whatever_its_best_member_did(tmp_path):
    """Its last result is its best member's (here one the scheduler stopped at 1,000 of 6,000 steps); the trial
    ended itself, once its last member had ended: that member's run says stopped_early, the trial's does not."""
    _, spec = population_search(tmp_path, num_samples=2, refill=False)
    callback, mlflow = tracking(tmp_path, spec)
    trial = SimpleNamespace(trial_id="t", config={**FIXED, "x": 0.5, reserved.MEMBERS_KEY: 2}, last_result={})
    report = {"env_steps": 1000, "episode_return_mean": 1.0, "members_alive": 1, "member_0/id": "t-0",
              "member_0/config/lr": 0.1, "member_0/env_steps": 1000, "member_0/episode_return_mean": 1.0}
    final = {"env_steps": 1000, "episode_return_mean": 1.0, "members_alive": 0, "done": True}
    callback.on_trial_start(0, [trial], trial)
    for result in (report, final):
        trial.last_result = result
        callback.on_trial_result(0, [trial], trial, result)
    callback.on_trial_complete(0, [trial], trial)
    callback.on_experiment_end([])
    assert mlflow.get_run(callback.member_runs["t-0"]).data.tags["tune_rl.status"] == "stopped_early"
    assert mlflow.get_run(callback.runs["t"]).data.tags["tune_rl.status"] == "terminated"


def test_a_resumed_member_logs_into_its_run_not_a_new_one(tmp_path):
    _, spec = population_search(tmp_path, num_samples=2, refill=False)
    callback, mlflow = tracking(tmp_path, spec)
    trial = SimpleNamespace(trial_id="t", config={**FIXED, "x": 0.5, reserved.MEMBERS_KEY: 2})
    first = {"env_steps": 1000, "episode_return_mean": 1.0, "member_0/id": "t-0", "member_0/config/lr": 0.1,
             "member_0/env_steps": 1000, "member_0/episode_return_mean": 1.0}
    callback.on_trial_start(0, [trial], trial)
    callback.on_trial_result(0, [trial], trial, first)
    callback.on_experiment_end([])
    from tune_runner.tracking.callback import MlflowTracking

    again = MlflowTracking(uri=callback.uri, experiment_id=callback.experiment_id,  # as the runner makes it
                           parent_run_id=callback.parent_run_id, logged_keys=callback.logged_keys, ending=spec.ending)
    again.runs.update(callback.runs)
    again.member_runs.update(callback.member_runs)
    later = {**first, "env_steps": 2000, "member_0/env_steps": 2000, "member_0/episode_return_mean": 2.0}
    again.on_trial_result(0, [trial], trial, later)
    again.on_experiment_end([])
    runs = mlflow.search_runs([callback.experiment_id], filter_string="tags.`tune_rl.member_id` = 't-0'")
    assert [r.info.run_id for r in runs] == [callback.member_runs["t-0"]]
    assert history(mlflow, callback.member_runs["t-0"], "episode_return_mean") == [(1000, 1.0), (2000, 2.0)]


def test_a_member_live_at_the_interruption_that_never_comes_back_is_ended_with_its_trial(tmp_path):
    """Interrupted with members t-0 and t-1 live: on resume the trial went back to a checkpoint that held t-0 alone,
    and the board gave t-1's slot to t-2. t-1's run is ended with its trial, as its last logged metrics say."""
    from tune_runner.tracking.callback import MlflowTracking
    from tune_runner.tracking.uri import member_runs

    _, spec = population_search(tmp_path, num_samples=3, refill=False)
    callback, mlflow = tracking(tmp_path, spec)
    trial = SimpleNamespace(trial_id="t", config={**FIXED, "x": 0.5, reserved.MEMBERS_KEY: 2}, last_result={})

    def report(steps, **members):
        out = {"env_steps": steps, "episode_return_mean": 1.0}
        for slot, member in enumerate(members):
            out.update({f"member_{slot}/id": member, f"member_{slot}/config/lr": 0.1,
                        f"member_{slot}/env_steps": members[member], f"member_{slot}/episode_return_mean": 1.0})
        return out

    callback.on_trial_start(0, [trial], trial)
    callback.on_trial_result(0, [trial], trial, report(2000, **{"t-0": 2000, "t-1": 1000}))
    trial.status = "RUNNING"
    callback.on_experiment_end([trial])  # interrupted: the trial is not finished, nothing settled
    assert {mlflow.get_run(r).info.status for r in callback.member_runs.values()} == {"RUNNING"}

    again = MlflowTracking(uri=callback.uri, experiment_id=callback.experiment_id,
                           parent_run_id=callback.parent_run_id, logged_keys=callback.logged_keys, ending=spec.ending)
    again.runs.update(callback.runs)
    again.continue_members(member_runs(mlflow, callback.experiment_id, callback.parent_run_id))
    assert again.unsettled == {"t-0": "t", "t-1": "t"}
    again.on_trial_result(0, [trial], trial, report(2000, **{"t-0": 2000, "t-2": 1000}))
    assert again.unsettled == {"t-1": "t"}  # t-0 came back to its slot
    final = {"env_steps": 6000, "episode_return_mean": 1.0, "members_alive": 0, "done": True}
    again.on_trial_result(0, [trial], trial, final)
    again.on_trial_complete(0, [trial], trial)
    trial.status = "TERMINATED"
    again.on_experiment_end([trial])
    lost = mlflow.get_run(again.member_runs["t-1"])
    assert lost.info.status == "FINISHED" and lost.data.tags["tune_rl.status"] == "stopped_early"  # 1,000 of 6,000
    assert "resumed" in lost.data.tags["tune_rl.note"]
    assert {mlflow.get_run(r).info.status for r in again.member_runs.values()} == {"FINISHED"}




@pytest.mark.parametrize("scope", ["last", "max", "avg-last-3", "avg-last-5"])
def test_best_from_mlflow_picks_the_member_the_folder_picks(tmp_path, scope):
    """`tune-rl best runs:/<parent>` of a population search reads the members' runs as the search's trials, as
    `tune-rl best <folder>` reads the folder's population trials as their members (results.members.expand)."""
    from tune_runner.results import tracked
    from tune_runner.results.analysis import best_trial
    from tune_runner.results.members import expand
    from tune_runner.results.trials import Results, TrialRecord
    from tune_runner.tracking import parent

    searcher, spec = population_search(tmp_path, num_samples=10)
    callback, mlflow = tracking(tmp_path, spec)
    exp_id = callback.experiment_id
    callback.parent_run_id = parent.open_run(mlflow, exp_id, spec, name="pop", exp_path=tmp_path / "pop")
    ran = drive(searcher, [callback], trials=5)
    callback.on_experiment_end([])
    records = [TrialRecord(trial_id=t, status="TERMINATED", config=dict(results[0]["config"]),
                           last_result=results[-1], metric_analysis={}, path=str(tmp_path / t))
               for t, results in ran.items()]
    folder = expand(Results(tmp_path / "pop", records, dict(ran)))
    logged = tracked.read(f"runs:/{callback.parent_run_id}", uri=callback.uri)
    assert sorted(t.trial_id for t in logged.results.trials) == sorted(t.trial_id for t in folder.trials)
    picked = [best_trial(found, metric=spec.metric, mode=spec.mode, scope=scope)
              for found in (folder, logged.results)]
    assert picked[0].trial_id == picked[1].trial_id
    assert picked[0].value == pytest.approx(picked[1].value)
    keys = ("lr", "x", "seed")  # the member's own values and seed, its trial's x
    assert {k: picked[1].config[k] for k in keys} == {k: picked[0].config[k] for k in keys}


def test_a_members_run_given_as_the_search_names_the_search(tmp_path):
    from tune_runner.errors import UserError
    from tune_runner.results import tracked

    searcher, spec = population_search(tmp_path, num_samples=2, refill=False)
    callback, _ = tracking(tmp_path, spec)
    drive(searcher, [callback], trials=1)
    callback.on_experiment_end([])
    member, run_id = next(iter(callback.member_runs.items()))
    with pytest.raises(UserError, match=f"the run of member {member} of trial trial0, not a search's parent run; "
                                        f"give its search: runs:/{callback.parent_run_id}"):
        tracked.read(f"runs:/{run_id}", uri=callback.uri)


def test_the_dashboards_view_of_a_population_search_lists_its_members_with_their_values(tmp_path):
    """A trial's run holds only the values its members share (x here, not lr): the view of the search's configs
    is its members' runs, each with every searched value."""
    from tune_runner.tracking import parent
    from tune_runner.tracking.dashboard_link import view_of

    searcher, spec = population_search(tmp_path, num_samples=6)
    callback, mlflow = tracking(tmp_path, spec)
    callback.parent_run_id = parent.open_run(mlflow, callback.experiment_id, spec, name="pop",
                                             exp_path=tmp_path / "pop")
    drive(searcher, [callback], trials=3)
    callback.on_experiment_end([])
    view = view_of(mlflow.get_run(callback.parent_run_id))
    shown = mlflow.search_runs([callback.experiment_id], filter_string=view["searchFilter"])
    assert sorted(r.info.run_id for r in shown) == sorted(callback.member_runs.values())
    assert all({"lr", "x"} <= set(r.data.params) for r in shown)
    assert view["selectedColumns"] == ["metrics.`episode_return_mean`", "params.`lr`", "params.`x`"]


def live(spec, **kwargs):
    """The live view as the runner makes it; (view, its output)."""
    from tune_runner.tuning.progress import LiveView

    out = io.StringIO()
    return LiveView(searched=spec.searched, budget=spec.budget_env_steps, metric=spec.metric, mode=spec.mode,
                    ending=spec.ending, out=out, **kwargs), out


def test_a_population_trials_rows_count_its_members_alive_stopped_solved_and_refilled(tmp_path):
    searcher, spec = population_search(tmp_path, num_samples=10)
    view, out = live(spec, heartbeat_s=3600.0)
    ran = drive(searcher, [view], trials=5)
    lines = out.getvalue().splitlines()
    first = next(line for line in lines if " started " in line)
    assert first.endswith(f"x={first.split('x=')[1].split()[0]}  4 members") and "lr=" not in first
    for trial_id, results in ran.items():
        mine = [r for r in searcher.members.values() if r.trial == trial_id]
        stopped = sum(r.ending == "stopped_early" for r in mine)
        done = sum(r.ending == "done" for r in mine)
        counts = ", ".join(f"{n} {word}" for n, word in ((stopped, "stopped"), (done, "done"),
                                                          (results[-1]["members_refilled"], "refilled")) if n)
        end = next(line for line in lines if f"{trial_id} done " in line)
        assert end.endswith(f"members 0/4 alive, {counts}"), (end, counts)
    assert stopped or done
    rows = [line for line in lines if " 25% " in line or " 50% " in line or " 75% " in line]
    assert rows and all("  members " in line and "/4 alive" in line for line in rows)


def test_a_solved_member_is_counted_as_solved_and_the_heartbeat_sums_the_members(tmp_path):
    searcher, spec = population_search(tmp_path, num_samples=8, stop_at=50.0)
    view, out = live(spec, heartbeat_s=0.0)
    drive(searcher, [view], trials=1)
    solved = sum(r.ending == "solved" for r in searcher.members.values())
    assert solved and f"{solved} solved" in out.getvalue().splitlines()[-1]
    trials = [SimpleNamespace(trial_id="trial0", status="TERMINATED", last_result={})]
    view.on_step_end(0, trials)
    assert "1 terminated; members 0 alive, " in out.getvalue().splitlines()[-1]
    assert f"{solved} solved" in out.getvalue().splitlines()[-1]


def test_the_header_counts_a_population_searchs_configs_not_trials(tmp_path):
    from tune_runner.tuning.console import header

    _, spec = population_search(tmp_path, num_samples=10)
    texts = []
    for changes in ({}, {"refill": False, "seeds_per_trial": 2}):  # seeds: as ppo's, which takes them
        out = io.StringIO()
        header(spec.with_overrides(**changes), "pop", out)
        texts.append(out.getvalue())
    assert "oracle on CartPole-v1, 10 configs, 4 per trial x 6,000 env steps," in texts[0]
    assert "10 configs of 2 seeds (iqm), 4 per trial (no refill) x 6,000 env steps" in texts[1]
