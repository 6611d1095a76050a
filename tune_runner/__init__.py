"""tune-rl: hyperparameter search for reinforcement learning on Ray Tune.

`import tune_runner as tr` gives the Python API (tune_runner.api): tr.search, tr.best, tr.resume, tr.report,
tr.load_policy, their results and errors. They load on first use, so that importing the package, and the
command line's --help, stay free of Ray, torch and MLflow.
"""

from tune_runner import _moved
from tune_runner.version import __version__  # noqa: F401 - tune_runner.__version__

_moved.install()  # the modules' paths before the subpackages (searches started by 0.1.0 pickled them)

API = ("search", "best", "resume", "report", "load_policy", "SearchResult", "BestResult", "ReportResult",
       "UserError", "SpecError", "NotFound", "SearchEnded", "AllTrialsFailed", "Interrupted", "DiskFull",
       "ExitStatus")


def __getattr__(name: str) -> object:
    if name not in API:
        raise AttributeError(f"module 'tune_runner' has no attribute {name!r}")
    from tune_runner import api

    return getattr(api, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
