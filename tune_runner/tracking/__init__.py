"""MLflow, everything written to it: a search's parent run (parent), its trials' child runs (callback), the best
policy's model (model); and the dashboard on its store (dashboard, dashboard_link)."""

from tune_runner._moved import forward

__getattr__ = forward(__name__)  # tune_runner.tracking.callback in 0.1.0, now tracking.callback
