"""`tune-rl`: search, spaces, schedulers, best, train, evaluate, dashboard.

Heavy imports (Ray, RLlib, MLflow) happen inside the command that needs them, so
`tune-rl --help` and bad-input errors answer at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from tune_runner import __version__
from tune_runner.cli.options import check_run_flags, positive, run_options
from tune_runner.errors import ExitStatus, UserError, closest


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, with a did-you-mean for misspelled flags.

    Abbreviated flags are off: `--spac` must not silently mean `--space`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        if "unrecognized arguments:" in message:
            words = message.split(":", 1)[1].split()
            word = words[0].split("=")[0] if words else ""
            near = closest(word, _all_flags(self)) if word else None
            if near == word:  # a flag of another command (tune-rl resume --max-failures)
                message += f"; {word} is not a flag of this command"
            elif near:
                message += f"; did you mean {near}?"
        raise UserError(f"{message} (see {self.prog} --help)")


def _all_flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag of a parser and its subcommands (extra arguments surface at the top parser)."""
    flags = []
    for action in parser._actions:
        flags += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags += _all_flags(sub)
    return sorted(set(flags))


def _storage(value: str) -> Any:
    from tune_runner.storage import parse

    return parse(value)


def _name(value: str) -> str:
    from tune_runner.paths import check_name

    return check_name(value)


STORAGE_HELP = "results folder or URI (s3://bucket/results, gs://..., file://...) (default: $TUNE_RL_HOME/results)"


def _run_flags(parser: argparse.ArgumentParser, *, storage: Any = _storage) -> None:
    """Flags of any run: overrides, names, where results and tracking go, trial resources."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a fixed value, the budget (budget=50000) or env_config.KEY; repeatable")
    parser.add_argument("--name", type=_name, help="experiment name, one folder name under --storage "
                                                   "(default: <space>-<timestamp>)")
    parser.add_argument("--storage", type=storage, help=STORAGE_HELP)
    parser.add_argument("--mlflow-uri", help="MLflow tracking URI (default: sqlite:///$TUNE_RL_HOME/mlflow.db)")
    parser.add_argument("--cpus-per-trial", type=float, metavar="N", help="CPUs for each trial's trainer (default 1)")
    parser.add_argument("--gpus-per-trial", type=float, metavar="F", help="GPUs per trial, fractions allowed (0.25)")
    parser.add_argument("--plugins", action="append", default=[], metavar="PATH",
                        help="a .py file or folder registering envs, models or agents (repeatable; "
                             "./envs/ is read anyway)")
    parser.add_argument("--verbose", action="store_true", help="show Ray's and the trials' own logs")


def _ray_flags(parser: argparse.ArgumentParser) -> None:
    """Which Ray runs it: a local one (sized here) or a cluster joined with --address."""
    parser.add_argument("--address", help="join this Ray cluster: auto, host:port or ray://host:10001 "
                                           "(default: start a local Ray)")
    parser.add_argument("--num-cpus", "--num_cpus", dest="num_cpus", type=int,
                        help="CPUs for the local Ray (default: all)")
    parser.add_argument("--num-gpus", "--num_gpus", dest="num_gpus", type=float,
                        help="GPUs the local Ray offers (default: those it finds; more declares logical GPUs)")
    parser.add_argument("--gpu", metavar="IDS", help='GPUs the local Ray may see, e.g. "0,1" (CUDA_VISIBLE_DEVICES)')


def _common_run_flags(parser: argparse.ArgumentParser) -> None:
    _run_flags(parser)
    _ray_flags(parser)


def search_flags(parser: argparse.ArgumentParser, *, storage: Any = _storage) -> None:
    """The flags of `tune-rl search`, less those choosing its Ray; `tune-rl submit` takes the same and
    sends them on (a flag added here travels with a submitted search)."""
    parser.add_argument("--space", help="a shipped space name (tune-rl spaces list) or a YAML path (required)")
    parser.add_argument("--resume", metavar="NAME", help="continue the interrupted search NAME (= tune-rl resume NAME)")
    parser.add_argument("--max-failures", type=int, metavar="N",
                        help="retries of a failing trial, from its newest checkpoint (default 2)")
    parser.add_argument("--num-samples", type=int, help="number of trials")
    parser.add_argument("--searcher", "--search-alg", dest="searcher",
                        help="search algorithm: random, grid, optuna, hyperopt, bohb")
    parser.add_argument("--scheduler", help="scheduler preset or type (tune-rl schedulers list)")
    parser.add_argument("--max-concurrent", type=int, help="trials running at once (default: as CPUs allow)")
    parser.add_argument("--no-export", action="store_true", help="do not write best.yaml at the end")
    parser.add_argument("--no-reevaluate", action="store_true",
                        help="skip re-training the top configs on fresh seeds at the end")
    parser.add_argument("--reevaluate", type=int, metavar="K", help="re-train the top K configs (default 2)")
    parser.add_argument("--seeds", type=int, metavar="N", help="... on N fresh seeds each (default 3)")
    parser.add_argument("--register-model", metavar="NAME",
                        help="register the best trial's policy in the MLflow model registry as NAME (ppo, dqn)")
    _run_flags(parser, storage=storage)


def _jobs_address(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", help="the Ray dashboard's URL, e.g. http://127.0.0.1:8265 (default: "
                                           "$RAY_API_SERVER_ADDRESS, or $RAY_ADDRESS if it is http(s)://, "
                                           "else http://127.0.0.1:8265)")


def _submit_parser(sub: Any) -> None:
    submit = sub.add_parser("submit", help="send a search to a Ray cluster as a job and return at once")
    search_flags(submit, storage=str)  # a path on the cluster: nothing to resolve here
    submit._option_string_actions["--mlflow-uri"].help = ("the MLflow store as the cluster sees it (required), "
                                                          "e.g. http://mlflow:5000")
    _jobs_address(submit)
    submit.add_argument("--job-id", metavar="ID", help="the job's submission id (default: one Ray makes up)")
    wait = submit.add_mutually_exclusive_group()
    wait.add_argument("--no-wait", dest="wait", action="store_false", help="return once submitted (the default)")
    wait.add_argument("--wait", action="store_true", help="follow the job's log until it ends; exit 0 if it "
                                                          "succeeded, else 1")
    submit.add_argument("--shared-fs", action="store_true",
                        help="the cluster's nodes see this machine's files (a cluster on this machine, or a shared "
                             "mount): allows a sqlite:/// or file: --mlflow-uri and resolves a relative --storage "
                             "here")
    for flag in ("--num-cpus", "--num-gpus", "--gpu"):  # taken only to be refused in one clear line
        submit.add_argument(flag, help=argparse.SUPPRESS)
    submit.set_defaults(wait=False)

    jobs = sub.add_parser("jobs", help="list, follow or stop submitted jobs")
    jobs_sub = jobs.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser, required=True)
    _jobs_address(jobs_sub.add_parser("list", help="one line per job: id, status, start, command"))
    logs = jobs_sub.add_parser("logs", help="a job's output so far (--follow: until it ends)")
    logs.add_argument("job_id", metavar="ID", help="the job's submission id (tune-rl jobs list)")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    _jobs_address(logs)
    stop = jobs_sub.add_parser("stop", help="stop a running job")
    stop.add_argument("job_id", metavar="ID", help="the job's submission id (tune-rl jobs list)")
    _jobs_address(stop)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The whole command line (`train`'s options depend on the agent and model that argv names)."""
    parser = Parser(prog="tune-rl", description="Hyperparameter search for reinforcement learning on Ray Tune.")
    parser.add_argument("--version", action="version", version=f"tune-rl {__version__}")
    parser.add_argument("--traceback", action="store_true", help="show the full stack on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    search = sub.add_parser("search", help="run a search over a space")
    search_flags(search)
    _ray_flags(search)
    _submit_parser(sub)

    spaces = sub.add_parser("spaces", help="list or show the shipped search spaces")
    spaces_sub = spaces.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser, required=True)
    spaces_sub.add_parser("list", help="shipped spaces with their descriptions")
    show = spaces_sub.add_parser("show", help="print a space file")
    show.add_argument("space", help="a space name or a YAML path")

    scheds = sub.add_parser("schedulers", help="list the scheduler presets")
    scheds_sub = scheds.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser, required=True)
    scheds_sub.add_parser("list", help="presets with their descriptions")

    best = sub.add_parser("best", help="select the best trial of an experiment and export it")
    best.add_argument("experiment", help="an experiment name (under --storage) or folder path; or "
                                          "runs:/<parent run id> of a search in MLflow (see --mlflow-uri)")
    best.add_argument("--metric", help="metric to rank by (default: the space's metric)")
    best.add_argument("--mode", choices=("max", "min"), help="max or min (default: the space's mode)")
    best.add_argument("--scope", default="last", help="last | max | avg-last-N (default: last)")
    best.add_argument("--export", type=Path, metavar="FILE", help="write the best config bundle to FILE (YAML)")
    best.add_argument("--json", action="store_true", help="print the best config as JSON on stdout")
    best.add_argument("--storage", type=_storage, help=STORAGE_HELP)
    best.add_argument("--mlflow-uri", metavar="URI",
                      help="read the search from this MLflow store, not its results folder: EXPERIMENT is then "
                           "runs:/<parent run id>, the search's name, or an MLflow experiment (its newest "
                           "search); runs:/ alone reads the default store")
    best.add_argument("--reevaluate", type=int, metavar="K",
                      help="re-train the top K configs on fresh seeds and pick the best interquartile mean")
    best.add_argument("--seeds", type=int, metavar="N", help="seeds per re-trained config (default 3)")
    best.add_argument("--num-cpus", type=int, help="CPUs for the local Ray of a re-evaluation (default: all)")

    rep = sub.add_parser("report", help="write an HTML report of an experiment (plots, importances, top configs)")
    rep.add_argument("experiment", help="an experiment name (under --storage) or folder path")
    rep.add_argument("--storage", type=_storage, help=STORAGE_HELP)
    rep.add_argument("--mlflow-uri", help="also log it to the search's MLflow parent run in this store "
                                          "(default: the store the search logged to)")

    resume = sub.add_parser("resume", help="continue an interrupted search where it stopped, with the options it "
                                           "was started with")
    resume.add_argument("name", help="the experiment's name (under --storage) or its folder")
    resume.add_argument("--storage", type=_storage, help="the results folder or URI the search was started with "
                                                         "(default: $TUNE_RL_HOME/results)")
    resume.add_argument("--mlflow-uri", help="the tracking URI the search logs to, needed only if its password "
                                             "or token is not saved (default: the saved one)")
    resume.add_argument("--num-cpus", type=int, help="CPUs for the local Ray (default: as the search was started)")
    resume.add_argument("--verbose", action="store_true", help="show Ray's and the trials' own logs")

    verify = sub.add_parser("verify", help="re-train an exported config and check the bundle's claim holds: with "
                                           "stop_at the solved share and the IQM of env steps to it, else the IQM of "
                                           "the final metric, inside the bundle's CI")
    verify.add_argument("bundle", type=Path, help="a file written by tune-rl best --export (after a re-evaluation)")
    verify.add_argument("--seeds", type=int, default=3, metavar="N", help="fresh seeds to train on (default 3)")
    verify.add_argument("--storage", type=_storage, help=STORAGE_HELP)
    verify.add_argument("--num-cpus", type=int, help="CPUs for the local Ray (default: all)")
    verify.add_argument("--verbose", action="store_true", help="show Ray's and the trials' own logs")

    from tune_runner.cli import train

    train.add_parser(sub, argv, _common_run_flags)

    ev = sub.add_parser("evaluate", help="run a trained policy deterministically and print its mean return")
    ev.add_argument("path", help="a checkpoint folder (ours or RLlib's), a trial folder (its newest checkpoint) "
                                 "or a bundle from tune-rl best --export")
    ev.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to run (default 10)")
    ev.add_argument("--seed", type=int, default=0, metavar="S", help="episode i resets the env with seed S+i "
                                                                      "(default 0)")
    ev.add_argument("--render", metavar="MODE", help="rgb_array (frames for --video) or human (a window)")
    ev.add_argument("--video", type=Path, metavar="FILE",
                    help="write every frame to FILE (.mp4) with --render rgb_array; needs tune-rl[video]")

    dash = sub.add_parser("dashboard", help="the MLflow UI on the store searches write to (Ctrl-C stops it)")
    dash.add_argument("--mlflow-uri", help="the store to show (default: sqlite:///$TUNE_RL_HOME/mlflow.db)")
    dash.add_argument("--port", type=int, help="port to serve on (default: 5000, or a free one if it is taken)")
    dash.add_argument("--host", default="127.0.0.1",
                      help="interface to bind (default: 127.0.0.1, this machine only); another address exposes "
                           "the UI, without login, to the network")
    dash.add_argument("--allowed-hosts", metavar="H:PORT,...",
                      help="Host headers the server answers (with --host: this machine's names and the address)")
    dash.add_argument("--cors-origins", metavar="URL,...",
                      help="origins allowed to call its API from a browser (default: http:// + each allowed host)")
    dash.add_argument("--verbose", action="store_true", help="show the server's own log (every request)")
    dash.add_argument("--open", action="store_true",
                      help="open the newest search's trials (the printed link) in your web browser")

    comp = sub.add_parser("completion", help="print the shell code for tab completion (README: Tab completion)")
    comp.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete in")
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the CLI; returns the exit status (the console script exits with it)."""
    out, err = out or sys.stdout, err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    show_traceback = "--traceback" in argv
    try:
        args = build_parser(argv).parse_args(argv)
        if not args.command:
            build_parser().print_help(out)
            return ExitStatus.BAD_INPUT
        return int(COMMANDS[args.command](args, out))
    except UserError as exc:
        if show_traceback:
            raise
        print(f"tune-rl: {exc}", file=err)
        return int(exc.exit_status)
    except KeyboardInterrupt:
        print("tune-rl: interrupted", file=err)
        return ExitStatus.INTERRUPTED
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    except Exception as exc:  # noqa: BLE001 - one line unless --traceback
        if show_traceback:
            raise
        print(f"tune-rl: unexpected error: {type(exc).__name__}: {exc} (rerun with --traceback)", file=err)
        return ExitStatus.ERROR


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.search import resume

    positive("--num-cpus", args.num_cpus)
    folder = resume.locate(args.name, where=args.storage)
    counts = resume.finished(folder)
    if counts is not None:
        print(f"{folder.name} finished already ({sum(counts.values())} trials: "
              f"{', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}); nothing to resume", file=out)
        return ExitStatus.OK
    spec = resume.read_spec(folder)
    saved = resume.read_run(folder)
    fields = resume.continued(saved, folder=folder, where=args.storage, mlflow_uri=args.mlflow_uri,
                              num_cpus=args.num_cpus)
    resume.check_tune_state(fields["storage"], folder)
    if saved is None:
        print(f"note: {folder.name} has no {resume.RUN_FILE} (started before tune-rl saved run options); it "
              f"continues with this command's flags and the current defaults", file=out, flush=True)
    from tune_runner.search import runner

    options = runner.RunOptions(**fields, name=folder.name, verbose=args.verbose, resume=True)
    return runner.run(spec, options, out=out).exit_status


# `tune-rl search` flags that shape a new search: a resumed one keeps those it was started with.
NOT_ON_RESUME = (("space", "--space"), ("overrides", "--set"), ("name", "--name"), ("num_samples", "--num-samples"),
                 ("searcher", "--searcher"), ("scheduler", "--scheduler"), ("max_concurrent", "--max-concurrent"),
                 ("max_failures", "--max-failures"), ("no_export", "--no-export"),
                 ("no_reevaluate", "--no-reevaluate"), ("reevaluate", "--reevaluate"), ("seeds", "--seeds"),
                 ("register_model", "--register-model"), ("plugins", "--plugins"),
                 ("cpus_per_trial", "--cpus-per-trial"), ("gpus_per_trial", "--gpus-per-trial"),
                 ("address", "--address"), ("num_gpus", "--num-gpus"), ("gpu", "--gpu"))


def _resume_args(args: argparse.Namespace) -> argparse.Namespace:
    """`search --resume NAME` as `resume NAME`; a flag that would change the search is refused, not dropped."""
    for dest, flag in NOT_ON_RESUME:
        if getattr(args, dest, None) not in (None, False, []):
            raise UserError(f"{flag}: a resumed search keeps the space and options it was started with (saved "
                            f"beside its results); drop {flag} and run: tune-rl resume {args.resume}")
    return argparse.Namespace(name=args.resume, storage=args.storage, mlflow_uri=args.mlflow_uri,
                              num_cpus=args.num_cpus, verbose=args.verbose)


def _search_spec(args: argparse.Namespace, *, command: str = "search") -> Any:
    """The space of a search (or submit) with its flags applied, checked; None for a --resume."""
    from tune_runner.spec.experiment import Component, load_spec

    if args.resume:
        return None
    if not args.space:
        raise UserError(f"{command}: the following arguments are required: --space (or --resume NAME)")
    for flag in ("num_samples", "max_concurrent", "num_cpus", "reevaluate", "seeds"):
        positive("--" + flag.replace("_", "-"), getattr(args, flag, None))
    if args.max_failures is not None and args.max_failures < 0:
        raise UserError(f"--max-failures {args.max_failures}: must be 0 or more")
    spec = load_spec(args.space, overrides=args.overrides)
    changes: dict[str, Any] = {}
    if args.num_samples:
        changes["num_samples"] = args.num_samples
    if args.max_concurrent:
        changes["max_concurrent"] = args.max_concurrent
    if args.searcher:
        from tune_runner.search.searchers import COMMON

        kept = {k: v for k, v in spec.searcher.settings.items() if k in COMMON}  # seed, warm start, points
        changes["searcher"] = Component(args.searcher, kept)
    if args.scheduler:
        changes["scheduler"] = Component(args.scheduler)
    if args.plugins:
        from tune_runner.plugins import load_plugins

        load_plugins(args.plugins)  # a bad path is named with its flag, before the space's own plugins
        changes["plugins"] = spec.plugins + tuple(str(Path(p).expanduser().resolve()) for p in args.plugins)
    return spec.with_overrides(**changes)


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    if args.resume:
        return cmd_resume(_resume_args(args), out)
    spec = _search_spec(args)
    check_run_flags(args)
    from tune_runner.search import preflight

    # A bad env or env_config is refused here, before Ray Tune and torch load (runner imports them): seconds sooner.
    preflight.check_before_ray(preflight.with_trial_resources(spec, cpus=args.cpus_per_trial,
                                                              gpus=args.gpus_per_trial))
    from tune_runner.search import runner

    extra: dict[str, Any] = {}
    if args.max_failures is not None:
        extra["max_failures"] = args.max_failures
    options = run_options(args, export=not args.no_export, reevaluate=not args.no_reevaluate,
                           top=args.reevaluate, seeds=args.seeds, **extra,
                           register_model=args.register_model)
    outcome = runner.run(spec, options, out=out)
    return outcome.exit_status


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
    from tune_runner.search.schedulers import presets

    shipped = presets()
    width = max(map(len, shipped), default=0)
    for name, preset in shipped.items():
        settings = " ".join(f"{k}={v}" for k, v in preset.settings.items())
        print(f"{name:<{width}}  {preset.description}" + (f"  [{settings}]" if settings else ""), file=out)
    return ExitStatus.OK


def cmd_best(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.results import analysis, export
    from tune_runner.results.analysis import fmt_config, fmt_value

    analysis.parse_scope(args.scope)
    for flag in ("reevaluate", "seeds", "num_cpus"):  # the flags first: they need no experiment to be wrong
        positive("--" + flag.replace("_", "-"), getattr(args, flag))
    tracked = _tracked_search(args)  # runs:/<id> or --mlflow-uri: the search from its tracking store
    if tracked is None:
        path = analysis.experiment_path(args.experiment, storage=args.storage)
        spec, loaded, name = _saved_spec(path), analysis.read(path), path.name  # Tune's files, without Ray
    else:
        path, spec, loaded, name = None, tracked.spec, tracked.results, tracked.name
    best, judged = analysis.select(spec, loaded, metric=args.metric, mode=args.mode, scope=args.scope)
    metric, mode = judged.metric, judged.mode
    if tracked is not None:  # which search, once it is sure to be read (a name may pick the newest of several)
        print(f"search     {tracked.name}  (MLflow run {tracked.run_id}, {tracked.shown_uri})",
              file=err_or_out(args, out))
    verdict = None
    if args.reevaluate and path is not None:
        from tune_runner.results.robust import scope

        verdict = _reevaluate_best(judged, loaded, path, args, out)
        best = analysis.trial_best(loaded, verdict.winner.candidate.trial_id, metric=metric, mode=mode,
                                   value=verdict.winner.iqm, scope=scope(verdict))
    if args.json:
        config = export.exported_config(best.config)
        print(json.dumps(config, sort_keys=True, default=str), file=out)
    else:
        shown = tuple(export.exported_config(best.config))
        print(f"best       {best.trial_id}  {metric} {fmt_value(best.value)} ({best.scope}, {mode})", file=out)
        print(f"config     {fmt_config(best.config, shown)}", file=out)
    if args.export:
        origin = None if tracked is None else {"mlflow_run": tracked.reference, "mlflow_uri": tracked.shown_uri}
        written = export.bundle(spec, best, experiment=name, verdict=verdict, origin=origin).write(args.export)
        print(f"exported   {written}", file=err_or_out(args, out))
    return ExitStatus.OK


def _tracked_search(args: argparse.Namespace) -> Any:
    """The search `tune-rl best` reads from MLflow (a runs:/ reference, or any name with --mlflow-uri), or
    None to read a results folder. The flags that need the folder are refused first."""
    from tune_runner import paths
    from tune_runner.results import tracked

    if not (tracked.is_reference(args.experiment) or args.mlflow_uri):
        return None
    if args.storage is not None:
        raise UserError(f"--storage {args.storage}: names where results folders are; {args.experiment} is read from "
                        f"MLflow (runs:/ or --mlflow-uri); drop --storage, or drop --mlflow-uri to read the folder")
    if args.reevaluate:
        raise UserError(f"--reevaluate {args.reevaluate}: re-trains from the search's results folder and writes "
                        f"its verdict there; MLflow holds neither; run tune-rl best <the search's folder> "
                        f"--reevaluate {args.reevaluate}")
    return tracked.read(args.experiment, uri=args.mlflow_uri or paths.default_mlflow_uri(), metric=args.metric)


def _reevaluate_best(spec: Any, loaded: Any, path: Path, args: argparse.Namespace, out: TextIO) -> Any:
    from datetime import datetime

    from tune_runner.results import robust
    from tune_runner.search.reevaluate import reevaluate_best

    shown = err_or_out(args, out)
    verdict = reevaluate_best(spec, loaded, path, top=args.reevaluate, seeds=args.seeds, num_cpus=args.num_cpus,
                              name=f"reevaluation-{datetime.now():%Y%m%d-%H%M%S}", out=shown)
    for line in robust.describe(verdict, metric=spec.metric):
        print(f"robust     {line}", file=shown)
    return verdict


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner import mlflow_uri, paths
    from tune_runner.results import analysis
    from tune_runner.results import report as html_report
    from tune_runner.search import resume
    from tune_runner.tracking import parent as parent_run

    path = analysis.experiment_path(args.experiment, storage=args.storage, command="report")
    spec = _saved_spec(path)
    saved = resume.read_run(path) or {}
    uri = args.mlflow_uri or saved.get("mlflow_uri", paths.default_mlflow_uri())  # where the search logged
    if resume.HIDDEN in uri:
        raise UserError(f"--mlflow-uri: missing; {path.name} logs to {uri}, whose secret is not saved; give it")
    mlflow_uri.check_uri(uri)
    # MLflow's import and store open on the other core while this one draws: about half the wall time.
    logger = parent_run.ReportLogger(uri, spec.name, path, search_id=saved.get("search_id"))
    try:
        index = html_report.write(path, spec)
    except BaseException:
        logger.cancel()
        raise
    print(f"report     {index.as_uri()}", file=out, flush=True)
    logged = logger.finish(index.parent)
    print(f"mlflow     {'logged to parent run ' + logged if logged else 'no parent run found; not logged'}",
          file=out)
    return ExitStatus.OK


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner import paths
    from tune_runner.search import runner, verify
    from tune_runner.search.preflight import check_storage

    positive("--seeds", args.seeds)
    bundle = verify.load(args.bundle)  # bad input answered before Ray starts
    storage = args.storage or paths.default_storage()
    check_storage(storage)
    runner.quiet_logs(verbose=args.verbose)
    runner.ensure_ray(num_cpus=args.num_cpus, verbose=args.verbose)
    return verify.run(bundle, seeds=args.seeds, storage=storage, out=out)


def cmd_evaluate(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.results import evaluate
    from tune_runner.results.policy import load_policy

    options = {"episodes": args.episodes, "seed": args.seed, "render": args.render, "video": args.video}
    evaluate.check_options(**options)  # before loading: RLlib's import alone takes seconds
    import torch

    torch.set_num_threads(1)  # one observation at a time: more threads only wait on each other
    policy = load_policy(args.path)
    print(f"policy     {policy.kind}  {policy.checkpoint}", file=out)
    result = evaluate.evaluate(policy, **options, progress=out)
    print(f"evaluate   {evaluate.summary(result, env_id=policy.env_id, seed=args.seed)}", file=out)
    if result.video is not None:
        print(f"video      {result.video}  ({result.frames} frames)", file=out)
    return ExitStatus.OK


def err_or_out(args: argparse.Namespace, out: TextIO) -> TextIO:
    """With --json, stdout carries only the JSON; other lines go to stderr."""
    return sys.stderr if args.json else out


def _saved_spec(path: Path) -> Any:
    """The spec a search saved beside its results (tune_rl_spec.yaml)."""
    from tune_runner.search.resume import read_spec

    return read_spec(path)


def cmd_dashboard(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner import paths
    from tune_runner.tracking import dashboard

    server = dashboard.plan(uri=args.mlflow_uri or paths.default_mlflow_uri(), host=args.host, port=args.port,
                            allowed_hosts=args.allowed_hosts, cors_origins=args.cors_origins, open_browser=args.open)
    return dashboard.serve(server, out=out, verbose=args.verbose, open_browser=args.open)


def search_argv(args: argparse.Namespace) -> list[str]:
    """The `tune-rl search` flags that `args` holds, written out again (what a submitted job runs)."""
    flags = Parser(add_help=False)
    search_flags(flags, storage=str)
    argv: list[str] = []
    for action in flags._actions:
        value = getattr(args, action.dest, None)
        if value is None or value == action.default:
            continue
        flag = action.option_strings[0]
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flag)
        elif isinstance(action, argparse._AppendAction):
            argv += [part for item in value for part in (flag, str(item))]
        else:
            argv += [flag, str(value)]
    return argv


def cmd_submit(args: argparse.Namespace, out: TextIO) -> int:
    from tune_runner.search import jobs

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
    from tune_runner.search import jobs

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
            "completion": cmd_completion}


def entry_point() -> None:
    """The `tune-rl` console script."""
    import os

    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (tune-rl completion bash): answer, exit
        from tune_runner.cli import completion

        completion.complete(build_parser(completion.typed_words()))
    status = main()
    if status == ExitStatus.INTERRUPTED:
        # Interrupted and reported: another Ctrl-C while Ray's exit hooks run must not print
        # their traceback. It leaves at once; the reaper stops what Ray had started.
        import signal

        signal.signal(signal.SIGINT, lambda *_: os._exit(status))
    sys.exit(status)
