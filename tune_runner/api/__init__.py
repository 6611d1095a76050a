"""tune-rl from Python: the calls the `tune-rl` commands make, with typed results and errors.

    import tune_runner as tr

    result = tr.search("ppo_small", overrides={"num_samples": 4}, storage="runs/")  # -> SearchResult
    result.best_config, result.dataframe(), result.export("cartpole-ppo.yaml")
    tr.best(result.name, storage="runs/", scope="avg-last-5")                        # -> BestResult
    tr.resume(name); tr.report(name); tr.load_policy("cartpole-ppo.yaml")

Bad input raises UserError (SpecError, NotFound, ...) with the one line the command line prints, before any
search starts; a search that ran without a result raises AllTrialsFailed or Interrupted, holding it. The
command line (tune_runner.cli) parses flags, calls these and prints: the two cannot drift apart.
"""

from tune_runner.api.reading import best, load_policy, report
from tune_runner.api.results import BestResult, ReportResult, SearchResult
from tune_runner.api.searching import resume, search
from tune_runner.errors import (
    AllTrialsFailed,
    DiskFull,
    ExitStatus,
    Interrupted,
    NotFound,
    SearchEnded,
    SpecError,
    UserError,
)

__all__ = ["AllTrialsFailed", "BestResult", "DiskFull", "ExitStatus", "Interrupted", "NotFound", "ReportResult",
           "SearchEnded", "SearchResult", "SpecError", "UserError", "best", "load_policy", "report", "resume", "search"]
