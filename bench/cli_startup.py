"""Start-up time of `tune-rl` commands against `python -c pass`, `mlflow --help` and `ray --help`, same run.

Each command runs --runs times (default 5) as a fresh process, after one warm-up run that is not
counted (it fills the bytecode cache); the runs go round-robin over the commands, so a noisy
moment on the machine is spread over all of them. Printed per command: the
median wall time, the median user+system CPU, and the wall time as a ratio to `python -c pass`
and to the peers' `--help`. Tab completion is timed through its real entry point (argcomplete's
environment, as the shell function sets it).

    .venv/bin/python bench/cli_startup.py                                   # this checkout's tune-rl
    .venv/bin/python bench/cli_startup.py --tune-rl ../main/.venv/bin/tune-rl  # another build, same table
    .venv/bin/python bench/cli_startup.py --experiment NAME --storage DIR   # also best/report NAME

The budgets (issue 20): every --help 0.3 s, spaces/schedulers 0.5 s, completion 0.3 s, best
1.5 s, report 4 s; a search refused for its env_config (issue 14, exit 2, nothing written) 3 s.
A command whose exit status is not the expected one is shown as `exit N`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
BUDGETS = {"help": 0.3, "list": 0.5, "complete": 0.3, "best": 1.5, "report": 4.0, "refuse": 3.0}
# A space refused by the env check before launch (issue 14): CartPole with an env_config it does not take.
BAD_ENV_CONFIG = Path(__file__).resolve().parent.parent / "tests" / "bad_inputs" / "env_config_unknown_kwarg.yaml"


@dataclass
class Command:
    """One timed command line; `env` is added to the environment, `expect` is its exit status."""

    label: str
    argv: list[str]
    kind: str = "peer"
    expect: int = 0
    env: dict[str, str] = field(default_factory=dict)
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    status: int | None = None


def run_once(command: Command, *, pycache: Path) -> None:
    """One fresh process; wall time from fork to exit, CPU (user + system) of its whole tree.

    Bytecode is cached (in `pycache`, not beside the sources), as an installed package has it,
    even where PYTHONDONTWRITEBYTECODE is set: compiling every module on each start is no user's case.
    """
    env = {**os.environ, **command.env, "PYTHONPYCACHEPREFIX": str(pycache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    proc = subprocess.Popen(command.argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    command.walls.append(time.perf_counter() - start)
    command.cpus.append(usage.ru_utime + usage.ru_stime)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != command.expect:
        command.status = proc.returncode


def completion(tune_rl: str, line: str, out: Path) -> dict[str, str]:
    """What bash's completion function sets before it calls `tune-rl` (argcomplete's protocol)."""
    return {"_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": "bash", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
            "COMP_POINT": str(len(line)), "COMP_TYPE": "9", "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}


def subcommands(tune_rl: str) -> list[str]:
    """The commands `tune-rl --help` lists (read from its help, so any build can be measured)."""
    text = subprocess.run([tune_rl, "--help"], capture_output=True, text=True, check=False).stdout
    return re.findall(r"^    ([a-z][\w-]*)", text, flags=re.MULTILINE)  # argparse indents them by 4


def tune_rl_commands(tune_rl: str, *, tag: str, args: argparse.Namespace, tmp: Path) -> list[Command]:
    """The tune-rl command lines timed for one build."""
    commands = subcommands(tune_rl)
    lines = [["--help"], *([name, "--help"] for name in commands), ["train", "--agent_name", "dqn", "--help"]]
    found = [Command(" ".join(argv), [tune_rl, *argv], "help") for argv in lines]
    found += [Command(" ".join(argv), [tune_rl, *argv], "list")
              for argv in (["spaces", "list"], ["spaces", "show", "ppo_small"], ["schedulers", "list"])]
    for line in ("tune-rl sea", "tune-rl search --space ", "tune-rl search --space ppo_small --set ")[
            : 3 if "completion" in commands else 0]:  # a build without completion has nothing to time
        found.append(Command(f"complete '{line}'", [tune_rl], "complete",
                             env=completion(tune_rl, line, tmp / "completions")))
    shown = BAD_ENV_CONFIG.relative_to(BAD_ENV_CONFIG.parents[2])
    found.append(Command(f"search --space {shown}", [tune_rl, "search", "--space", str(BAD_ENV_CONFIG)], "refuse",
                         expect=2, env={"TUNE_RL_HOME": str(tmp / "home")}))  # a refusal writes nothing; if not, there
    if args.experiment:
        storage = ["--storage", args.storage] if args.storage else []
        found.append(Command(f"best {args.experiment}", [tune_rl, "best", args.experiment, *storage], "best"))
        found.append(Command(f"report {args.experiment}", [tune_rl, "report", args.experiment, *storage],
                             "report"))
    found = [c for c in found if re.search(args.only, c.label)]
    for command in found:
        command.label = tag + command.label
    return found


def peers() -> list[Command]:
    found = [Command("python -c pass", [sys.executable, "-c", "pass"])]
    for name in ("mlflow", "ray"):
        path = shutil.which(name, path=str(BIN)) or shutil.which(name)
        if path:
            found.append(Command(f"{name} --help", [path, "--help"]))
    return found


def table(commands: list[Command]) -> list[str]:
    medians = {c.label: statistics.median(c.walls) for c in commands}
    base = medians["python -c pass"]
    peer_labels = [label for label in ("mlflow --help", "ray --help") if label in medians]
    head = f"{'command':<64} {'median s':>8} {'cpu s':>6} {'x python':>8}" + "".join(
        f" {'x ' + label.split()[0]:>8}" for label in peer_labels) + "  budget"
    lines = [head, "-" * len(head)]
    for c in commands:
        wall = medians[c.label]
        ratios = "".join(f" {wall / medians[label]:>8.2f}" for label in peer_labels)
        budget = BUDGETS.get(c.kind)
        verdict = "" if budget is None else f"  {budget:.1f} {'ok' if wall <= budget else 'OVER'}"
        shown = f"exit {c.status}" if c.status is not None else f"{wall:.3f}"
        lines.append(f"{c.label:<64} {shown:>8} {statistics.median(c.cpus):>6.2f} {wall / base:>8.1f}{ratios}"
                     f"{verdict}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--tune-rl", action="append", metavar="PATH",
                        help="a tune-rl executable to time (repeatable; default: the one beside this python)")
    parser.add_argument("--experiment", help="a finished search to time `best` and `report` on")
    parser.add_argument("--storage", help="the results folder holding --experiment")
    parser.add_argument("--only", default="", metavar="REGEX",
                        help="time only the tune-rl commands whose label matches (e.g. '^(--help|spaces)')")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every run's times as JSON")
    args = parser.parse_args()
    builds = args.tune_rl or [str(BIN / "tune-rl")]
    with tempfile.TemporaryDirectory(prefix="tune-rl-startup-") as tmp:
        commands = peers()
        for n, build in enumerate(builds):
            tag = f"[{n + 1}] " if len(builds) > 1 else ""
            commands += tune_rl_commands(build, tag=tag, args=args, tmp=Path(tmp))
        pycache = Path(tmp) / "pycache"
        for command in commands:  # a warm-up run, not counted: it fills the bytecode cache
            run_once(command, pycache=pycache)
            command.walls.clear()
            command.cpus.clear()
        for _ in range(args.runs):
            for command in commands:
                run_once(command, pycache=pycache)
    if len(builds) > 1:
        print("\n".join(f"[{n + 1}] {build}" for n, build in enumerate(builds)))
    print("\n".join(table(commands)))
    if args.json:
        args.json.write_text(json.dumps([{"command": c.label, "argv": c.argv, "walls": c.walls, "cpus": c.cpus,
                                          "unexpected_exit": c.status} for c in commands], indent=1))


if __name__ == "__main__":
    main()
