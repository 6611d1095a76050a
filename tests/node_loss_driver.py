"""Run by tests/test_resilience_e2e.py in its own process: a two-node local Ray cluster
(ray.cluster_utils.Cluster: head + worker on this machine), a search on it, and the worker node
removed mid-search. Prints one JSON line with what happened."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from pathlib import Path


def main(home: Path, space: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from tune_runner.spec.experiment import load_spec
    from tune_runner.tuning import runner

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    worker_id = worker.node_id
    out = io.StringIO()
    options = runner.RunOptions(storage=home / "results", mlflow_uri=f"sqlite:///{home / 'mlflow.db'}",
                                name="node-loss", reevaluate=False, max_failures=3)
    done: dict = {}

    def search() -> None:
        done["outcome"] = runner.run(load_spec(str(space)), options, out=out)

    thread = threading.Thread(target=search)
    thread.start()
    exp = home / "results" / "node-loss"
    expected = load_spec(str(space)).num_trials  # all at once: one CPU each, 1 + 2 CPUs in the cluster
    deadline = time.monotonic() + 120
    on_worker = 0
    # Until every trial has reported (so where it runs is known), and each on the worker node has saved a checkpoint
    # (every 5 iterations): a trial without one restarts from zero. A fixed 2 s after the first report was too short
    # on a slow day; waiting only for the trials that had reported missed one that started on the worker later.
    while time.monotonic() < deadline:
        reported = {p.parent: text for p in exp.glob("*/result.json") if (text := p.read_text()).strip()}
        trials = [trial for trial, text in reported.items() if worker_id in text]
        on_worker = len(trials)
        if len(reported) >= expected and trials and all(any(t.glob("checkpoint_*")) for t in trials):
            break
        time.sleep(0.3)
    cluster.remove_node(worker)
    removed_at = time.monotonic()
    thread.join(timeout=300)
    outcome = done.get("outcome")
    print(json.dumps({"trials_on_worker_before": on_worker, "removed_after_s": round(removed_at, 1),
                      "status": int(outcome.exit_status) if outcome else None,
                      "counts": dict(outcome.counts) if outcome else None, "worker_id": worker_id,
                      "log": out.getvalue()[-3000:]}))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
