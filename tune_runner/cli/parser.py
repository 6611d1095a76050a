"""The `tune-rl` command line's flags: one parser, a builder per command. Nothing here imports more than
argparse until a flag's value is read (a --storage, a --name), so --help answers at once."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tune_runner.errors import UserError
from tune_runner.version import __version__


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, with a did-you-mean for misspelled flags.

    Abbreviated flags are off: `--spac` must not silently mean `--space`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see {self.prog} --help)")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:
        """argparse's, with an unknown flag judged against the chosen command's own flags (argparse reports it
        at the top parser, which knows every command's)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            own = _command_parser(self, getattr(parsed, "command", None)) or self
            raise UserError(f"unrecognized arguments: {' '.join(extras)}{self._hint(extras[0], own)} "
                            f"(see {own.prog} --help)")
        return parsed

    def _hint(self, word: str, own: argparse.ArgumentParser) -> str:
        word = word.split("=")[0]
        if not word.startswith("--") or len(word) < 3:
            return ""
        flags = _all_flags(own)
        near = _flag_near(word, flags)
        if near:
            return f"; did you mean {near}?"
        if word in _all_flags(self):  # a flag of another command (tune-rl resume --max-failures)
            return f"; {word} is not a flag of this command"
        if own is not self and "--set" in flags:  # a space's setting or hyperparameter: --trainable dqn, --lr 1e-3
            return f"; a setting goes with --set {word[2:].replace('-', '_')}=VALUE"
        return ""


def _all_flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag of a parser and its subcommands."""
    flags = []
    for action in parser._actions:
        flags += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags += _all_flags(sub)
    return sorted(set(flags))


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser | None:
    """The subcommand's parser (`search`'s for tune-rl search ...), or None."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return None


def _flag_near(word: str, flags: Sequence[str]) -> str | None:
    """The flag `word` was meant as, by its name with - and _ alike: the same name (--seeds_per_trial), the one
    flag it begins (--env for --env_name; two or three: each, --env_name or --env_backend), else a close spelling
    (--num-sample). None rather than a far guess."""
    def name(flag: str) -> str:
        return flag.lstrip("-").replace("_", "-").lower()

    names = {name(flag): flag for flag in flags if flag.startswith("--")}
    wanted = name(word)
    if wanted in names:
        return names[wanted]
    begun = [flag for key, flag in names.items() if key.startswith(wanted + "-")]
    if 1 <= len(begun) <= 3:
        return " or ".join(begun)
    found = difflib.get_close_matches(wanted, list(names), n=1, cutoff=0.75)
    return names[found[0]] if found else None


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
    parser.add_argument("--no-plugins", action="store_true",
                        help="import no plug-in: not ./envs/, and refuse a space file that names plug-in files "
                             "(its plugins: are code it runs)")
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
                        help=f"search algorithm: {', '.join(searcher_names())} (default: the space's, else random)")
    parser.add_argument("--scheduler", help="scheduler preset or type (tune-rl schedulers list)")
    parser.add_argument("--max-concurrent", type=int, help="trials running at once (default: as CPUs allow)")
    parser.add_argument("--seeds-per-trial", type=int, metavar="K",
                        help="train K seeds of each config in one trial, judged by their aggregate (our own "
                             "learners, and agents that declare it; default 1)")
    parser.add_argument("--configs-per-trial", type=int, metavar="B",
                        help="train B configs of the searcher in one trial as one batched learner, each judged, "
                             "stopped and refilled on its own (our ppo and dqn, the oracle; default 1)")
    parser.add_argument("--seed-aggregate", metavar="HOW",
                        help="how a trial's seeds are summed up: iqm (default), mean, median, min")
    parser.add_argument("--no-export", action="store_true", help="do not write best.yaml at the end")
    parser.add_argument("--no-reevaluate", action="store_true",
                        help="skip re-training the top configs on fresh seeds at the end")
    parser.add_argument("--reevaluate", type=int, metavar="K", help="re-train the top K configs (default 2)")
    parser.add_argument("--seeds", type=int, metavar="N", help="... on N fresh seeds each (default 3)")
    parser.add_argument("--register-model", metavar="NAME",
                        help="register the best trial's policy in the MLflow model registry as NAME (our own "
                             "learners' policies)")
    _run_flags(parser, storage=storage)


def searcher_names() -> list[str]:
    """The registered searchers' names: read from the registry's table, no searcher module imported."""
    from tune_runner.searchers import SEARCHERS

    return SEARCHERS.names()


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


def _jobs_parser(sub: Any) -> None:
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
    _search_parser(sub)
    _submit_parser(sub)
    _jobs_parser(sub)
    _spaces_parser(sub)
    _schedulers_parser(sub)
    _best_parser(sub)
    _report_parser(sub)
    _resume_parser(sub)
    _sync_parser(sub)
    _verify_parser(sub)
    from tune_runner.cli import train

    train.add_parser(sub, argv, _common_run_flags)
    _evaluate_parser(sub)
    _dashboard_parser(sub)
    _completion_parser(sub)
    return parser


def _search_parser(sub: Any) -> None:
    search = sub.add_parser("search", help="run a search over a space")
    search_flags(search)
    _ray_flags(search)


def _spaces_parser(sub: Any) -> None:
    """`spaces list` and `spaces show SPACE`."""
    spaces = sub.add_parser("spaces", help="list or show the shipped search spaces")
    spaces_sub = spaces.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser, required=True)
    spaces_sub.add_parser("list", help="shipped spaces with their descriptions")
    show = spaces_sub.add_parser("show", help="print a space file")
    show.add_argument("space", help="a space name or a YAML path")


def _schedulers_parser(sub: Any) -> None:
    """`schedulers list`."""
    scheds = sub.add_parser("schedulers", help="list the scheduler presets")
    scheds_sub = scheds.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser, required=True)
    scheds_sub.add_parser("list", help="presets with their descriptions")


def _best_parser(sub: Any) -> None:
    """`best EXPERIMENT`: select, print and export the best trial."""
    best = sub.add_parser("best", help="select the best trial of an experiment and export it")
    best.add_argument("experiment", help="an experiment name (under --storage) or folder path; or "
                                          "runs:/<parent run id> of a search in MLflow (see --mlflow-uri)")
    best.add_argument("--metric", help="metric to rank by (default: the space's metric)")
    best.add_argument("--mode", choices=("max", "min"), help="max or min (default: the space's mode)")
    best.add_argument("--scope", help="last | max | avg-last-N (default: the re-evaluation's winner where the search "
                                      "ran one, as it exported; else last)")
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


def _report_parser(sub: Any) -> None:
    """`report EXPERIMENT`: the HTML report."""
    rep = sub.add_parser("report", help="write an HTML report of an experiment (plots, importances, top configs)")
    rep.add_argument("experiment", help="an experiment name (under --storage) or folder path")
    rep.add_argument("--storage", type=_storage, help=STORAGE_HELP)
    rep.add_argument("--mlflow-uri", help="also log it to the search's MLflow parent run in this store "
                                          "(default: the store the search logged to)")


def _resume_parser(sub: Any) -> None:
    """`resume NAME`: continue an interrupted search."""
    resume = _saved_search(sub.add_parser("resume", help="continue an interrupted search where it stopped, with the "
                                                          "options it was started with"))
    resume.add_argument("--num-cpus", type=int, help="CPUs for the local Ray (default: as the search was started)")
    resume.add_argument("--no-plugins", action="store_true",
                        help="import no plug-in: not ./envs/; refused where the search imported plug-in files")
    resume.add_argument("--verbose", action="store_true", help="show Ray's and the trials' own logs")


def _sync_parser(sub: Any) -> None:
    """`sync NAME`: write what a search spooled while its MLflow store was away."""
    _saved_search(sub.add_parser("sync", help="write to MLflow what a search kept in its folder while the store was "
                                              "unreachable (its summary says so)"))


def _saved_search(command: Any) -> Any:
    """The arguments that find a saved search and its store, as resume and sync both take them."""
    command.add_argument("name", help="the experiment's name (under --storage) or its folder")
    command.add_argument("--storage", type=_storage, help="the results folder or URI the search was started with "
                                                          "(default: $TUNE_RL_HOME/results)")
    command.add_argument("--mlflow-uri", help="the tracking URI the search logs to, needed only if its password "
                                              "or token is not saved (default: the saved one)")
    return command


def _verify_parser(sub: Any) -> None:
    """`verify BUNDLE`: re-train an exported config."""
    verify = sub.add_parser("verify", help="re-train an exported config and check the bundle's claim holds: with "
                                           "stop_at the solved share and the IQM of env steps to it, else the IQM of "
                                           "the final metric, inside the bundle's CI")
    verify.add_argument("bundle", type=Path, help="a file written by tune-rl best --export (after a re-evaluation)")
    verify.add_argument("--seeds", type=int, default=3, metavar="N", help="fresh seeds to train on (default 3)")
    verify.add_argument("--storage", type=_storage, help=STORAGE_HELP)
    verify.add_argument("--num-cpus", type=int, help="CPUs for the local Ray (default: all)")
    verify.add_argument("--verbose", action="store_true", help="show Ray's and the trials' own logs")


def _evaluate_parser(sub: Any) -> None:
    """`evaluate PATH`: run a trained policy."""
    ev = sub.add_parser("evaluate", help="run a trained policy deterministically and print its mean return")
    ev.add_argument("path", help="a checkpoint folder (ours or RLlib's), a trial folder (its newest checkpoint) "
                                 "or a bundle from tune-rl best --export")
    ev.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to run (default 10)")
    ev.add_argument("--seed", type=int, default=0, metavar="S", help="episode i resets the env with seed S+i "
                                                                      "(default 0)")
    ev.add_argument("--epsilon", type=float, default=0.0, metavar="E",
                    help="take a random action with probability E at each step (default 0: greedy)")
    ev.add_argument("--render", metavar="MODE", help="rgb_array (frames for --video) or human (a window)")
    ev.add_argument("--video", type=Path, metavar="FILE",
                    help="write every frame to FILE (.mp4), rendered as rgb_array; needs tune-rl[video]")


def _dashboard_parser(sub: Any) -> None:
    """`dashboard`: the MLflow UI."""
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


def _completion_parser(sub: Any) -> None:
    """`completion SHELL`: the shell code for tab completion."""
    comp = sub.add_parser("completion", help="print the shell code for tab completion (README: Tab completion)")
    comp.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete in")


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
