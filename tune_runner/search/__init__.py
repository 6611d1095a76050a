"""Running a search: checks before it starts (preflight), Tune's schedulers and searchers, the run
itself (runner), its live view and files, resume, re-training on fresh seeds (verify), Ray Jobs."""
