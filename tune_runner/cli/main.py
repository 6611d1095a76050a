"""`tune-rl`: search, spaces, schedulers, best, train, evaluate, dashboard.

The flags are built in cli/parser.py, the commands run in cli/commands.py (through the Python API,
tune_runner.api); here the two meet, and an error becomes one line and an exit status. Heavy imports (Ray,
RLlib, MLflow) happen inside the command that needs them, so `tune-rl --help` and bad-input errors answer at once.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

from tune_runner.cli.commands import COMMANDS
from tune_runner.cli.parser import Parser, build_parser, search_argv, search_flags  # noqa: F401 - this module's API
from tune_runner.errors import ExitStatus, UserError


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
        if isinstance(exc, BrokenPipeError) and reader_gone(out):
            return stdout_closed()
        if show_traceback:
            raise
        print(f"tune-rl: unexpected error: {type(exc).__name__}: {exc} (rerun with --traceback)", file=err)
        return ExitStatus.ERROR


def reader_gone(stream: TextIO) -> bool:
    """Whether what reads `stream` has closed its end (a pipe to `head`): a BrokenPipeError from elsewhere (a
    socket to an MLflow server) is an error to report, not this."""
    import select

    try:
        poll = select.poll()
        poll.register(stream.fileno(), select.POLLOUT)
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO)
        return False
    return any(events & select.POLLERR for _, events in poll.poll(0))


def stdout_closed() -> int:
    """What reads our stdout has gone (`tune-rl completion zsh | head -2`): nothing more can be said there and
    nothing went wrong here, so no line on stderr. Python's last flush would raise again at exit: stdout is
    pointed at /dev/null first (the rule of Python's signal docs). 141, as a command that SIGPIPE ends (cat,
    grep): a `set -o pipefail` script still sees that the output was cut."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return ExitStatus.BROKEN_PIPE


def entry_point() -> None:
    """The `tune-rl` console script."""
    import os

    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (tune-rl completion bash): answer, exit
        from tune_runner.cli import completion

        completion.complete(build_parser(completion.typed_words()))
    status = main()
    try:
        sys.stdout.flush()  # what is still buffered goes now, not in Python's exit, which cannot say why it failed
    except BrokenPipeError:
        status = stdout_closed()
    if status == ExitStatus.INTERRUPTED:
        # Interrupted and reported: another Ctrl-C while Ray's exit hooks run must not print
        # their traceback. It leaves at once; the reaper stops what Ray had started.
        import signal

        signal.signal(signal.SIGINT, lambda *_: os._exit(status))
    leave(status)


def leave(status: int) -> NoReturn:
    """Exit with `status`. After a command that ran Ray in this process and was not interrupted (a search, a
    re-evaluation), Ray is ended here and the process ends without Python's own teardown: unloading Ray's,
    torch's and MLflow's modules took 2-3 s after a search, and Ray's exit hook first sleeps 0.5 s for the
    trials' last log lines (with --verbose; theirs had all come by the summary), while everything the command
    wrote was closed already (bench/search_e2e.py, `exit`). A local Ray we started is killed at once
    (cluster.end_local_ray: 1.2 s less than ray.shutdown); from a joined cluster the driver disconnects."""
    import os

    ray = sys.modules.get("ray")
    if status == ExitStatus.INTERRUPTED or ray is None or not ray.is_initialized():
        sys.exit(status)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    from tune_runner.cluster.session import end_local_ray

    if not end_local_ray():  # a joined cluster: this driver disconnects
        ray.shutdown()
    os._exit(status)
