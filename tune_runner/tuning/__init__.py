"""Running a search: the checks before it starts (preflight), Tune's schedulers, the run itself (runner), its
stopper, live view and files, resume, re-evaluation of the best configs on fresh seeds (reevaluate, warm) and
`tune-rl verify` (verify). The searchers are tune_runner.searchers; where Ray runs, tune_runner.cluster."""
