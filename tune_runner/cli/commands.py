"""The `tune-rl` commands: each reads its flags, calls the Python API (tune_runner.api) or the module that does
the work, and prints. What a search or a selection does lives in the API, so the two cannot drift apart."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from tune_runner import api
from tune_runner.cli.options import plugins_setting, positive, ray_settings
from tune_runner.cli.parser import search_argv
from tune_runner.errors import ExitStatus, SearchEnded, UserError


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    if args.resume:
        return cmd_resume(_resume_args(args), out)
    if not args.space:
        raise UserError("search: the following arguments are required: --space (or --resume NAME)")
    return _searched(lambda: api.search(args.space, **_spec_settings(args), name=args.name, storage=args.storage,
                                        mlflow_uri=args.mlflow_uri, export=not args.no_export,
                                        reevaluate=not args.no_reevaluate, register_model=args.register_model,
                                        **ray_settings(args), verbose=args.verbose, out=out))


def _spec_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `search` (and `submit`) flags that shape the spec, as the API's keywords."""
    return {"overrides": args.overrides, "num_samples": args.num_samples, "max_concurrent": args.max_concurrent,
            "top": args.reevaluate, "seeds": args.seeds, "max_failures": args.max_failures,
            "searcher": args.searcher, "scheduler": args.scheduler, "plugins": plugins_setting(args),
            "seeds_per_trial": args.seeds_per_trial, "seed_aggregate": args.seed_aggregate,
            "configs_per_trial": args.configs_per_trial}


def _searched(run: Callable[[], Any]) -> int:
    """Run a search through the API; its exit status. One that ended without a result has said why in its
    summary already: its status, no second line."""
    try:
        run()
    except SearchEnded as exc:
        return int(exc.exit_status)
    return ExitStatus.OK


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    return _searched(lambda: api.resume(args.name, storage=args.storage, mlflow_uri=args.mlflow_uri,
                                        num_cpus=args.num_cpus, verbose=args.verbose,
                                        plugins=not args.no_plugins, out=out))


def cmd_sync(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.api.checks import storage_setting
    from tune_runner.tuning.sync import sync

    return sync(args.name, where=storage_setting(args.storage), mlflow_uri=args.mlflow_uri, out=out)


# `tune-rl search` flags that shape a new search: a resumed one keeps those it was started with.
NOT_ON_RESUME = (("space", "--space"), ("overrides", "--set"), ("name", "--name"), ("num_samples", "--num-samples"),
                 ("searcher", "--searcher"), ("scheduler", "--scheduler"), ("max_concurrent", "--max-concurrent"),
                 ("max_failures", "--max-failures"), ("no_export", "--no-export"),
                 ("no_reevaluate", "--no-reevaluate"), ("reevaluate", "--reevaluate"), ("seeds", "--seeds"),
                 ("register_model", "--register-model"), ("plugins", "--plugins"),
                 ("seeds_per_trial", "--seeds-per-trial"), ("seed_aggregate", "--seed-aggregate"),
                 ("configs_per_trial", "--configs-per-trial"),
                 ("cpus_per_trial", "--cpus-per-trial"), ("gpus_per_trial", "--gpus-per-trial"),
                 ("address", "--address"), ("num_gpus", "--num-gpus"), ("gpu", "--gpu"))


def _resume_args(args: argparse.Namespace) -> argparse.Namespace:
    """`search --resume NAME` as `resume NAME`; a flag that would change the search is refused, not dropped."""
    for dest, flag in NOT_ON_RESUME:
        if getattr(args, dest, None) not in (None, False, []):
            from tune_runner.api.checks import storage_setting
            from tune_runner.tuning.resume import command

            # the store restated as given: a search saved before run options resumes with it
            again = command(args.resume, storage=storage_setting(args.storage), mlflow_uri=args.mlflow_uri,
                            saved=False)
            raise UserError(f"{flag}: a resumed search keeps the space and options it was started with (saved "
                            f"beside its results); drop {flag} and run: {again}")
    return argparse.Namespace(name=args.resume, storage=args.storage, mlflow_uri=args.mlflow_uri,
                              num_cpus=args.num_cpus, verbose=args.verbose, no_plugins=args.no_plugins)


def _search_spec(args: argparse.Namespace, *, command: str = "search") -> Any:
    """The space of a submitted search with its flags applied, checked; None for a --resume."""
    from tune_runner.api.searching import search_spec

    if args.resume:
        return None
    if not args.space:
        raise UserError(f"{command}: the following arguments are required: --space (or --resume NAME)")
    return search_spec(args.space, **_spec_settings(args), num_cpus=args.num_cpus)


def cmd_train(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.cli import train

    return train.command(args, out)


def cmd_spaces(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.files import read_text, read_yaml
    from tune_runner.spec.experiment import resolve_space, shipped_spaces

    if args.action == "list":
        spaces = shipped_spaces()
        width = max(map(len, spaces), default=0)
        for name, path in spaces.items():
            raw = read_yaml(path)
            description = raw.get("description", "") if isinstance(raw, dict) else ""
            print(f"{name:<{width}}  {description}", file=out)
        return ExitStatus.OK
    path = resolve_space(args.space)
    text = read_text(path, expected="a YAML space file")  # read before the header: a refusal prints nothing
    print(f"# {path}", file=out)
    print(text.rstrip(), file=out)
    return ExitStatus.OK


def cmd_schedulers(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.tuning.schedulers import presets

    shipped = presets()
    width = max(map(len, shipped), default=0)
    for name, preset in shipped.items():
        settings = " ".join(f"{k}={v}" for k, v in preset.settings.items())
        print(f"{name:<{width}}  {preset.description}" + (f"  [{settings}]" if settings else ""), file=out)
    return ExitStatus.OK

def cmd_best(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.results.analysis import fmt_config, fmt_value

    shown = err_or_out(args, out)
    if args.export:
        from tune_runner.api.results import export_target

        export_target(args.export)  # refused before a re-evaluation starts Ray
    best = api.best(args.experiment, storage=args.storage, mlflow_uri=args.mlflow_uri, metric=args.metric,
                    mode=args.mode, scope=args.scope, reevaluate=args.reevaluate, seeds=args.seeds,
                    num_cpus=args.num_cpus, out=shown)
    if best.mlflow_run is not None:  # which search, once it is sure to be read (a name may pick the newest of several)
        print(f"search     {best.experiment}  (MLflow run {best.mlflow_run}, {best.mlflow_uri})", file=shown)
    if args.json:
        print(json.dumps(dict(best.config), sort_keys=True, default=str), file=out)
    else:
        print(f"best       {best.trial_id}  {best.metric} {fmt_value(best.value)} ({best.scope}, {best.mode})",
              file=out)
        print(f"config     {fmt_config(dict(best.config), best.searched)}", file=out)  # --json: the whole config
    if args.export:
        print(f"exported   {best.export(args.export)}", file=shown)
    return ExitStatus.OK


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    written = api.report(args.experiment, storage=args.storage, mlflow_uri=args.mlflow_uri)
    print(f"report     {written.index.as_uri()}", file=out, flush=True)
    logged = written.mlflow_run
    print(f"mlflow     {'logged to parent run ' + logged if logged else 'no parent run found; not logged'}",
          file=out)
    return ExitStatus.OK


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner import paths
    from tune_runner.tuning import runner, verify
    from tune_runner.tuning.preflight import check_storage

    positive("--seeds", args.seeds)
    bundle = verify.load(args.bundle)  # bad input answered before Ray starts
    storage = args.storage or paths.default_storage()
    check_storage(storage)
    runner.quiet_logs(verbose=args.verbose)
    runner.ensure_ray(num_cpus=args.num_cpus, verbose=args.verbose)
    return verify.run(bundle, seeds=args.seeds, storage=storage, out=out)


def cmd_evaluate(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.results import evaluate

    options = {"episodes": args.episodes, "seed": args.seed, "render": args.render, "video": args.video,
               "epsilon": args.epsilon}
    evaluate.check_options(**options)  # before loading: RLlib's import alone takes seconds
    import torch

    torch.set_num_threads(1)  # one observation at a time: more threads only wait on each other
    policy = api.load_policy(args.path)
    print(f"policy     {policy.kind}  {policy.checkpoint}", file=out)
    result = evaluate.evaluate(policy, **options, progress=out)
    print(f"evaluate   {evaluate.summary(result, env_id=policy.env_id, seed=args.seed, epsilon=args.epsilon)}",
          file=out)
    if result.video is not None:
        print(f"video      {result.video}  ({result.frames} frames)", file=out)
    return ExitStatus.OK


def err_or_out(args: argparse.Namespace, out: TextIO) -> TextIO:
    """With --json, stdout carries only the JSON; other lines go to stderr."""
    return sys.stderr if args.json else out


def cmd_dashboard(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner import paths
    from tune_runner.tracking import dashboard

    server = dashboard.plan(uri=args.mlflow_uri or paths.default_mlflow_uri(), host=args.host, port=args.port,
                            allowed_hosts=args.allowed_hosts, cors_origins=args.cors_origins, open_browser=args.open)
    return dashboard.serve(server, out=out, verbose=args.verbose, open_browser=args.open)


def cmd_submit(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.cluster import jobs

    address = jobs.dashboard_address(args.address)
    for flag in ("num_cpus", "num_gpus", "gpu"):
        if getattr(args, flag) is not None:
            raise UserError(f"--{flag.replace('_', '-')}: sizes a local Ray; a submitted search runs on the "
                            f"cluster, which has its own size (use --cpus-per-trial/--gpus-per-trial)")
    _search_spec(args, command="submit")  # bad input answered here, not in the job's log
    mlflow = jobs.check_mlflow_uri(args.mlflow_uri, shared_fs=args.shared_fs)
    args.storage, results = jobs.check_storage(args.storage, shared_fs=args.shared_fs)
    for flag in ("cpus_per_trial", "gpus_per_trial"):
        if getattr(args, flag) is not None and not getattr(args, flag) >= 0:
            raise UserError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be 0 or more")
    job_id = jobs.submit(address=address, search_argv=search_argv(args), job_id=args.job_id)
    flag = f" --address {address}"
    print(f"submitted  {job_id}  to {address}", file=out)
    print(results, file=out)
    print(mlflow, file=out)
    print(f"follow     tune-rl jobs logs {job_id} --follow{flag}", file=out)
    print(f"stop       tune-rl jobs stop {job_id}{flag}", file=out, flush=True)
    if not args.wait:
        return ExitStatus.OK
    final = jobs.logs(address=address, job_id=job_id, out=out, follow=True)
    print(f"job        {job_id} {final}", file=out, flush=True)
    return ExitStatus.OK if final == "SUCCEEDED" else ExitStatus.ERROR


def cmd_jobs(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.cluster import jobs

    address = jobs.dashboard_address(args.address)
    if args.action == "list":
        found = jobs.list_jobs(address)
        if not found:
            print(f"no jobs at {address} yet (tune-rl submit sends one)", file=out)
        width = max((len(j.job_id) for j in found), default=0)
        for job in found:
            print(job.line(width=width), file=out)
    elif args.action == "logs":
        jobs.logs(address=address, job_id=args.job_id, out=out, follow=args.follow)
    elif jobs.stop(address, args.job_id):
        print(f"stopping   {args.job_id}", file=out)
    else:
        print(f"{args.job_id} is not running ({jobs.status(address, args.job_id)}); nothing to stop", file=out)
    return ExitStatus.OK


def cmd_completion(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.cli import completion

    print(completion.script(args.shell), file=out)
    return ExitStatus.OK


COMMANDS = {"search": cmd_search, "train": cmd_train, "spaces": cmd_spaces, "schedulers": cmd_schedulers,
            "best": cmd_best, "verify": cmd_verify, "report": cmd_report, "resume": cmd_resume,
            "evaluate": cmd_evaluate, "dashboard": cmd_dashboard, "submit": cmd_submit, "jobs": cmd_jobs,
            "completion": cmd_completion, "sync": cmd_sync}
