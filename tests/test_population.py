"""Population trials (configs_per_trial, issue 43) without Ray: a refilled slot starts over as a fresh learner of
its new config would; a trial reports each member as a config; the population searcher asks its searcher for B
configs a trial, sharing the trial-level values, tells it each member's results, judges members with the space's
scheduler as that scheduler judges trials, and refills until num_samples configs have started. Bad input is
refused before launch."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from tests.test_bad_inputs import assert_one_line_error
from tune_runner.algos import DQN, PPO, DQNConfig, PPOConfig
from tune_runner.spec import reserved
from tune_runner.spec.seed_keys import members_of
from tune_runner.trainables.members import Board, Members
from tune_runner.trainables.oracle import OraclePopulation

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def weights_of(learner, seed: int) -> dict:
    weights = learner.get_weights()
    return {(net, key): value[seed] if learner.num_seeds > 1 else value
            for net in weights for key, value in weights[net].items() if net in learner.networks}


def largest_difference(a: dict, b: dict) -> float:
    return max(float(np.abs(a[key] - b[key]).max()) for key in a)


@pytest.mark.parametrize(("cls", "config"), [
    (PPO, PPOConfig(train_batch_size=256, minibatch_size=64, num_epochs=2, num_envs_per_env_runner=4, num_seeds=3,
                    population={"lr": [1e-3, 2e-3, 3e-3], "gamma": [0.99, 0.98, 0.97], "lambda_": [0.9, 0.95, 1.0]})),
    (DQN, DQNConfig(train_batch_size=32, num_envs_per_env_runner=2, num_steps_sampled_before_learning_starts=64,
                    n_step=3, fcnet_hiddens=(64, 64), num_seeds=3,
                    population={"lr": [1e-3, 2e-3, 3e-3], "gamma": [0.99, 0.98, 0.97]})),
], ids=["ppo", "dqn"])
def test_a_refilled_seed_starts_over_and_trains_as_a_fresh_learner_of_its_new_values(cls, config):
    together = cls(config, env_id="Acrobot-v1" if cls is PPO else "CartPole-v1")
    env_id = together.env_id
    for _ in range(2):
        together.train_iteration()
    stopped = weights_of(together, 1)
    others = weights_of(together, 0)
    together.replace_member(1, {"lr": 5e-4, "gamma": 0.9})
    fresh = cls(together.config.member(1), env_id=env_id)
    assert largest_difference(weights_of(together, 1), weights_of(fresh, 0)) == 0.0  # a fresh start, exactly
    assert largest_difference(weights_of(together, 1), stopped) > 1e-3  # not the stopped member's weights
    assert int(together.seed_env_steps[1]) == 0 and int(together.seed_env_steps[0]) > 0
    assert largest_difference(weights_of(together, 0), others) == 0.0  # the others go on untouched
    for _ in range(3):
        together.train_iteration()
        fresh.train_iteration()
    assert largest_difference(weights_of(together, 1), weights_of(fresh, 0)) < 1e-5  # trains on exactly as alone
    assert together.config.member(1).lr == 5e-4 and together.config.member(1).gamma == 0.9
    with pytest.raises(ValueError, match="not a setting of this learner's population"):
        together.replace_member(0, {"clip_param": 0.1})


def oracle_config(members: list[dict], *, size: int, seeds: int = 1) -> dict:
    return {"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"], "x": 0.5, "steps_per_iteration": 1000,
            reserved.MEMBERS_KEY: size, reserved.SEEDS_KEY: seeds,
            reserved.MEMBER_LIST_KEY: {"members": members, "metric": "episode_return_mean", "mode": "max"}}


def test_a_trial_reports_each_member_as_a_config_and_the_best_under_the_plain_names():
    from tune_runner.trainables.oracle import peak

    members = [{"id": "t-0", "values": {"lr": 1e-2}}, {"id": "t-1", "values": {"lr": 1e-3}}]
    population = OraclePopulation(oracle_config(members, size=3), trial_id="t")
    result = population.step()
    slots = members_of(result)
    assert sorted(slots) == [0, 1]  # slot 2 was never filled: it idles, unreported
    assert slots[1]["id"] == "t-1" and slots[1]["config"] == {"lr": 1e-3}
    assert slots[1]["peak"] == pytest.approx(peak({"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"],
                                                     "x": 0.5, "lr": 1e-3}))
    assert result["episode_return_mean"] == slots[1]["episode_return_mean"] > slots[0]["episode_return_mean"]
    assert result["members_alive"] == 2


def test_k_seeds_of_a_member_are_summed_up_by_the_aggregate():
    members = Members(oracle_config([{"id": "a", "values": {}}, {"id": "b", "values": {}}], size=2, seeds=3))
    seeds = {f"seed_{i}/episode_return_mean": float(v) for i, v in enumerate([1, 2, 30, 10, 20, 30])}
    result = members.result(seeds)
    assert result["member_0/episode_return_mean"] == pytest.approx(6.5)  # the iqm of 3 values: (a + 4b + c) / 6
    assert result["member_1/episode_return_mean"] == pytest.approx(20.0)
    assert result["episode_return_mean"] == pytest.approx(20.0)  # the best member's


def prepared(tmp_path, **top):
    """An oracle search spec with configs_per_trial, prepared (no Ray)."""
    from tune_runner.spec.experiment import load_spec
    from tune_runner.tuning.preflight import prepare

    raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 6000},
           "searcher": {"name": "optuna", "seed": 3}, "num_samples": 8, reserved.MEMBERS_KEY: 4,
           "fixed": {"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"], "steps_per_iteration": 1000},
           "space": {"lr": {"loguniform": [1e-5, 1e-1]}, "x": {"uniform": [0.0, 1.0]}}, **top}
    path = tmp_path / "pop.yaml"
    path.write_text(yaml.safe_dump(raw))
    return prepare(load_spec(str(path)))


def run_in_process(searcher, *, trials: int, concurrent: int = 1) -> dict[str, OraclePopulation]:
    """Tune's part, in this process: ask for trials, step each to its end (one at a time), report every result."""
    board = Board()
    searcher._board = board  # what Ray would hold as an actor
    ran: dict[str, OraclePopulation] = {}
    for n in range(trials):
        trial_id = f"trial{n}"
        config = searcher.suggest(trial_id)
        if not isinstance(config, dict):
            break
        fixed = {"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"], "steps_per_iteration": 1000,
                 reserved.MEMBERS_KEY: searcher.size}
        population = OraclePopulation({**fixed, **config}, trial_id=trial_id)
        population.members.board = board
        ran[trial_id] = population
        iteration = 0
        while True:
            result = population.step()
            iteration += 1
            result["training_iteration"] = iteration
            result["config"] = {**fixed, **config}
            if result.get("done"):
                searcher.on_trial_complete(trial_id, result)
                break
            searcher.on_trial_result(trial_id, result)
    return ran


def test_optuna_holds_one_completed_trial_per_member_with_its_values_and_result(tmp_path):
    import optuna

    searcher = prepared(tmp_path, refill=False).searcher
    searcher.set_search_properties("episode_return_mean", "max", {})
    ran = run_in_process(searcher, trials=2)
    study = searcher.source.searcher._ot_study
    completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(ran) == 2 and len(completed) == 8
    for trial_id, population in ran.items():
        xs = {t.params["x"] for t in completed if t.number // 4 == int(trial_id[-1])}
        assert len(xs) == 1  # the trial-level value, shared by its 4 members
        assert xs == {population.runs[0]["config"]["x"]}
    by_lr = {round(t.params["lr"], 12): t.value for t in completed}
    for population in ran.values():
        for run in population.runs:  # each member's own values and its own last result
            assert by_lr[round(run["config"]["lr"], 12)] == pytest.approx(run["level"])
    assert len({round(lr, 12) for lr in by_lr}) == 8


def test_refill_starts_exactly_num_samples_configs_and_a_refilled_slot_starts_over(tmp_path):
    searcher = prepared(tmp_path, scheduler={"name": "asha", "grace_period": 1000, "reduction_factor": 2},
                        num_samples=10, searcher={"name": "random", "seed": 1}).searcher
    searcher.set_search_properties("episode_return_mean", "max", {})
    ran = run_in_process(searcher, trials=5)
    assert searcher.started == 10 and len(searcher.members) == 10
    endings = searcher.endings()
    assert endings.get("stopped_early", 0) >= 1 and "running" not in endings
    assert len(ran) <= 3  # the first trial's slots took the refills
    first = next(iter(ran.values()))
    assert first.members.refilled >= 1
    refilled = [r for r in searcher.members.values() if r.trial == "trial0" and int(r.id.split("-")[1]) >= 4]
    assert refilled and all(r.last.get("env_steps", 0) <= 6000 for r in refilled)
    # a refilled member's env steps start from 0: its first result is its first iteration's
    assert min(r.last["env_steps"] for r in refilled) >= 1000
    # the trial's compute counts every seed of every member it trained, the refilled-away ones too
    last = first.members.last
    assert last["batch_env_steps"] == first.members.reports * 1000 * first.members.size
    assert last["batch_env_steps"] >= sum(r.last["env_steps"] for r in searcher.members.values() if r.trial == "trial0")


def test_asha_over_members_stops_what_asha_over_trials_stops_with_the_same_results(tmp_path):
    from ray.tune.schedulers import ASHAScheduler

    from tune_runner.searchers.population import MemberTrial

    searcher = prepared(tmp_path, scheduler={"name": "asha", "grace_period": 1000, "reduction_factor": 2},
                        num_samples=8, refill=False, searcher={"name": "random", "seed": 5}).searcher
    seen: list[tuple[str, dict]] = []
    judge = searcher._judge

    def recording(record):
        seen.append((record.id, dict(record.last)))
        return judge(record)

    searcher._judge = recording
    searcher.set_search_properties("episode_return_mean", "max", {})
    run_in_process(searcher, trials=2)
    alone = ASHAScheduler(time_attr="env_steps", max_t=6000, grace_period=1000, reduction_factor=2,
                          metric="episode_return_mean", mode="max")
    stopped = set()
    for member, _ in seen:
        alone.on_trial_add(None, MemberTrial(member)) if member not in alone._trial_info and member not in stopped \
            else None
    for member, result in seen:
        if member in stopped or result["env_steps"] >= 6000:
            continue
        if alone.on_trial_result(None, MemberTrial(member), result) == "STOP":
            stopped.add(member)
    ours = {r.id for r in searcher.members.values() if r.ending == "stopped_early"}
    assert ours == stopped and ours


def test_hyperband_judges_members_as_asynchronous_hyperband_over_its_own_rungs_and_brackets(tmp_path):
    from ray.tune.schedulers import ASHAScheduler

    searcher = prepared(tmp_path, scheduler={"name": "hyperband", "min_t": 1000, "reduction_factor": 3},
                        budget={"env_steps": 9000}, num_samples=12, searcher={"name": "random", "seed": 5}).searcher
    judge = searcher.scheduler
    # HyperBand over 9 units of 1,000 env steps at eta 3 opens 3 brackets: first rungs at 1,000, 3,000 and 9,000
    assert isinstance(judge, ASHAScheduler) and judge._time_attr == "env_steps" and judge._max_t == 9000
    assert [b._rungs[-1][0] if b._rungs else None for b in judge._brackets] == [1000, 3000, 9000]
    searcher.set_search_properties("episode_return_mean", "max", {})
    run_in_process(searcher, trials=4)
    endings = searcher.endings()
    assert searcher.started == 12 and "running" not in endings and endings.get("stopped_early", 0) >= 1


@pytest.mark.parametrize(("top", "fragments"), [
    ({reserved.MEMBERS_KEY: 0}, ["configs_per_trial: expected a positive integer, got 0"]),
    ({reserved.MEMBERS_KEY: "four"}, ["configs_per_trial: expected a positive integer, got 'four'"]),
    ({reserved.REFILL_KEY: "yes"}, ["refill: expected true or false, got 'yes'"]),
    ({reserved.MEMBERS_KEY: 4, "searcher": "smac"}, ["the smac searcher cannot fill population trials"]),
    ({reserved.MEMBERS_KEY: 4, "searcher": "hyperopt"}, ["space.x: the hyperopt searcher cannot give", "use optuna"]),
    ({reserved.MEMBERS_KEY: 4, "scheduler": "pbt"}, ["scheduler: pbt acts on whole trials"]),
    ({reserved.MEMBERS_KEY: 4, "scheduler": "pb2"}, ["scheduler: pb2 acts on whole trials"]),
    ({reserved.MEMBERS_KEY: 4, "trainable": "rllib/PPO"}, ["rllib/PPO trains one config per trial"]),
    ({reserved.MEMBERS_KEY: 4, "fixed_population": True}, ["fixed.population: a population given by hand"]),
    ({reserved.MEMBERS_KEY: 1, reserved.REFILL_KEY: False}, ["refill: false: refill is about population trials"]),
    ({reserved.MEMBERS_KEY: 4, "trainable": "ppo", "fixed_runners": 2}, ["num_env_runners: rollout workers act"]),
], ids=["zero", "text", "refill-text", "smac", "hyperopt-trial-level", "pbt", "pb2", "rllib", "by-hand", "refill-alone",
        "runners"])
def test_bad_population_settings_are_refused_before_launch(top, fragments, cli, untouched, tmp_path):
    raw = {"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": 6000},
           "fixed": {"optimum": {"lr": 1e-3, "x": 0.5}, "log_scale": ["lr"]},
           "space": {"lr": {"loguniform": [1e-5, 1e-1]}, "x": {"uniform": [0.0, 1.0]}}}
    if top.pop("fixed_population", False):
        raw["fixed"]["population"] = {"lr": [1e-3, 1e-4]}
    if top.get("trainable") in ("rllib/PPO", "ppo"):
        raw.update(fixed={}, space={"lr": {"loguniform": [1e-5, 1e-1]}})
    if "fixed_runners" in top:
        raw["fixed"]["num_env_runners"] = top.pop("fixed_runners")
    raw.update(top)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    untouched.mark()
    assert_one_line_error(cli("search", "--space", str(path)), str(path), *fragments)
    untouched.check()


def test_a_population_over_this_machines_memory_is_refused_with_the_estimate(cli, untouched, tmp_path):
    raw = {"trainable": "dqn", "env": "CartPole-v1", "budget": {"env_steps": 6000}, reserved.MEMBERS_KEY: 512,
           reserved.SEEDS_KEY: 64, "fixed": {"replay_buffer_config": {"capacity": 1_000_000}},
           "space": {"lr": {"loguniform": [1e-5, 1e-1]}}}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(raw))
    untouched.mark()
    assert_one_line_error(cli("search", "--space", str(path)), "32768 member seeds need about",
                          "lower configs_per_trial")
    untouched.check()


def test_the_flag_sets_configs_per_trial_and_a_bad_one_is_named(cli, untouched):
    assert_one_line_error(cli("search", "--space", "oracle", "--configs-per-trial", "0"), "--configs-per-trial")
    untouched.check()


def test_a_member_without_a_trial_folder_reads_no_checkpoint_from_the_working_directory(tmp_path, monkeypatch):
    from tune_runner.results.analysis import last_checkpoint

    (tmp_path / "checkpoint_000003").mkdir()
    monkeypatch.chdir(tmp_path)
    assert last_checkpoint(".").resolve() == tmp_path / "checkpoint_000003"  # a folder given is read
    assert last_checkpoint("") is None  # a member's record names none
