"""Run `tune-rl <args>` in this process with clocks on its stages; bench/search_e2e.py starts it.

    python bench/search_probe.py OUT.json search --space ppo_small

Whichever tune_runner is first on sys.path is measured (search_e2e.py points PYTHONPATH at this
checkout or at the base commit's). The hooks wrap functions of tune_runner's runner and of Ray Tune's
controller by name and leave out any a version lacks, so one probe measures both. Written to OUT.json:

- `phases`: start and seconds of each stage the runner goes through (Ray's start, MLflow, the search's
  Tuner.fit, the re-evaluation's, the report, the model log), from this process's start;
- `trials`: per trial, whether it got a new actor or a reused one, and the seconds from the moment
  its actor was asked for (new) or handed over (reused) to the start of its first iteration (the
  first result's arrival less its time_this_iter_s);
- `actors`: per Ray worker, from Ray's timeline: its busy seconds, the seconds of its actor's
  __init__, and the gaps between one task (train, save, reset) and the next, which is how long a
  trial waits for Tune's loop between its iterations;
- `driver_cpu_s` and `wall_s` of this process (from its first line to the CLI's return), `started_at`;
- `probe_s` and `probe_cpu_s`: the wall and CPU seconds this probe spent reading Ray's timeline after the
  runner's `_finish` (about 1 s), which a user's `tune-rl search` does not spend.
"""

from __future__ import annotations

import functools
import json
import resource
import sys
import time
from collections import defaultdict
from typing import Any

START, STARTED_AT = time.monotonic(), time.time()  # the latter against the parent's clock (search_e2e.py)
GAP_MAX_S = 0.5  # a longer pause between two tasks of one worker is not a round trip (an idle actor)
PHASES = (("tune_runner.tuning.runner", ("_checked", "ensure_ray", "_tracking", "_fit", "_finish", "_log_model")),
          ("tune_runner.tuning.reevaluate", ("reevaluate",)),
          ("tune_runner.tracking.parent", ("log_outcome", "close")),
          ("tune_runner.results.summary", ("write",)),
          ("tune_runner.results.export", ("bundle",)))
RECORD: dict[str, Any] = {"phases": [], "trials": [], "actors": []}


def now() -> float:
    return time.monotonic() - START


def wrap_phase(module: Any, name: str) -> None:
    """Record the start and length of every call of module.name (if it has one)."""
    original = getattr(module, name, None)
    if original is None:
        return

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = now()
        try:
            return original(*args, **kwargs)
        finally:
            RECORD["phases"].append({"name": name, "start": began, "seconds": now() - began})

    setattr(module, name, timed)


class TrialClock:
    """When each trial got its actor, and when its first iteration started."""

    def __init__(self) -> None:
        self.asked: dict[int, float] = {}  # id(tracked actor) -> when Tune asked Ray for it
        self.assigned: dict[str, tuple[str, float]] = {}  # trial id -> (new | reused, since when)
        self.seen: set[str] = set()

    def install(self) -> None:
        from ray.air.execution._internal.actor_manager import RayActorManager
        from ray.tune.execution.tune_controller import TuneController

        clock = self
        add_actor, reuse = RayActorManager.add_actor, TuneController._maybe_reuse_cached_actor
        started, result = TuneController._actor_started, TuneController._on_training_result

        def asked(manager: Any, *args: Any, **kwargs: Any) -> Any:
            tracked = add_actor(manager, *args, **kwargs)
            clock.asked[id(tracked)] = now()
            return tracked

        def reused(controller: Any, trial: Any) -> bool:
            handed = now()
            ok = reuse(controller, trial)
            if ok:
                clock.assigned[trial.trial_id] = ("reused", handed)
            return ok

        def actor_started(controller: Any, tracked: Any, log: str = "STARTED") -> Any:
            trial = controller._actor_to_trial.get(tracked)
            if trial is not None and log == "STARTED" and id(tracked) in clock.asked:
                clock.assigned[trial.trial_id] = ("new", clock.asked[id(tracked)])
            return started(controller, tracked, log)

        def on_result(controller: Any, trial: Any, results: Any) -> Any:
            clock.first_result(trial, results[0] if isinstance(results, list) else results)
            return result(controller, trial, results)

        RayActorManager.add_actor, TuneController._maybe_reuse_cached_actor = asked, reused
        TuneController._actor_started, TuneController._on_training_result = actor_started, on_result

    def first_result(self, trial: Any, result: dict) -> None:
        if trial.trial_id in self.seen or trial.trial_id not in self.assigned:
            return
        self.seen.add(trial.trial_id)
        kind, since = self.assigned[trial.trial_id]
        began = now() - float(result.get("time_this_iter_s") or 0.0)
        RECORD["trials"].append({"trial_id": trial.trial_id, "actor": kind, "to_first_iteration_s": began - since,
                                 "first_iteration_at": began})


def actor_spans() -> list[dict]:
    """Per worker of Ray's timeline: busy seconds, its actor's __init__, the gaps between its tasks."""
    import ray

    spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for event in ray.timeline():
        if event.get("ph") == "X" and event.get("name") in ("train", "save", "reset", "__init__", "restore"):
            start = event["ts"] / 1e6
            spans[event["tid"]].append((start, start + event["dur"] / 1e6, event["name"]))
    actors = []
    for worker, tasks in spans.items():
        tasks.sort()
        gaps = [b[0] - a[1] for a, b in zip(tasks, tasks[1:], strict=False)]
        actors.append({"worker": worker[-8:], "busy_s": sum(end - start for start, end, _ in tasks),
                       "init_s": sum(end - start for start, end, name in tasks if name == "__init__"),
                       "tasks": len(tasks), "gaps": [g for g in gaps if 0 <= g < GAP_MAX_S]})
    return actors


def install(out: str) -> None:
    import importlib

    for module_name, names in PHASES:
        module = importlib.import_module(module_name)
        for name in names:
            wrap_phase(module, name)
    TrialClock().install()
    runner = importlib.import_module("tune_runner.tuning.runner")
    finish = runner._finish

    @functools.wraps(finish)
    def finish_then_read_timeline(*args: Any, **kwargs: Any) -> Any:
        try:
            return finish(*args, **kwargs)
        finally:  # Ray is still up here: the runner ends it at exit. Reading the timeline takes about 1 s: the
            # probe's own time, which search_e2e.py takes off the wall and the driver's CPU
            began, cpu = now(), time.process_time()
            RECORD["actors"] = actor_spans()
            RECORD.update(probe_s=now() - began, probe_cpu_s=time.process_time() - cpu)

    runner._finish = finish_then_read_timeline


def main() -> None:
    """Run the command, write the record, then exit as the console script does (cli.main.leave where the
    version has it), so that the parent's clock sees the same exit as a user's `tune-rl`."""
    out, argv = sys.argv[1], sys.argv[2:]
    from tune_runner.cli import main as cli

    RECORD["started_at"] = STARTED_AT
    install(out)
    try:
        status = cli.main(argv)
    finally:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        RECORD.update(driver_cpu_s=usage.ru_utime + usage.ru_stime, wall_s=now())
        with open(out, "w") as f:
            json.dump(RECORD, f)
    getattr(cli, "leave", sys.exit)(status)


if __name__ == "__main__":
    main()
