"""`tune-rl dashboard` as a person uses it: a real subprocess serving a store that tune-rl's own
logging code filled, looked at in headless Chromium (Debian's, driven by Playwright), then
stopped with Ctrl-C. Screenshots go to tests/artifacts/dashboard/ (git-ignored; the path is printed).
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import HERE
from tests.mlflow_helpers import free_port, log_synthetic_search, process_tree, running, stop_tree, subprocess_env
from tune_runner.errors import UserError
from tune_runner.tracking import dashboard

SCREENSHOTS = HERE / "artifacts" / "dashboard"
CHROMIUM = "/usr/bin/chromium"


def read_lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The dashboard on a store holding two synthetic oracle searches, as `tune-rl dashboard --port P`:
    an older one of 5 trials, then the newest, of 3."""
    home = tmp_path_factory.mktemp("dashboard-home")
    uri = f"sqlite:///{home / 'mlflow.db'}"  # the default store of TUNE_RL_HOME=home
    log_synthetic_search(uri, name="oracle-older", folder=home / "results" / "oracle-older", count=5)
    records = log_synthetic_search(uri, name="oracle-demo", folder=home / "results" / "oracle-demo")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tune_runner", "dashboard", "--port", str(port)],
                            env=subprocess_env(TUNE_RL_HOME=str(home)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=read_lines, args=(proc.stdout, lines), daemon=True).start()
    printed = []
    while not any("newest search" in line for line in printed):
        try:
            printed.append(lines.get(timeout=240))
        except queue.Empty:
            stop_tree(proc)
            raise AssertionError(f"no link printed: {printed}; stderr: {proc.stderr.read()[-2000:]}") from None
    url, link = re.findall(r"http://\S+", "".join(printed))[:2]
    yield SimpleNamespace(url=url, link=link, port=port, proc=proc, printed=printed, home=home, records=records,
                          lines=lines)
    stop_tree(proc)


def get(url: str, **headers: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.e2e  # a real mlflow server (and a browser): not for the quick unit run
def test_prints_its_url_and_serves_the_default_store(served):
    assert served.url == f"http://127.0.0.1:{served.port}"
    assert served.printed[0].startswith(f"tune-rl dashboard: MLflow UI on sqlite:///{served.home}/mlflow.db")
    assert "up in" in served.printed[1] and "Ctrl-C stops it" in served.printed[1]
    exp_id, parent = served.records["experiment_id"], served.records["parent"]
    assert served.printed[2] == (f"  newest search oracle-demo: {served.url}/#/experiments/{exp_id}/runs?"
                                 f"viewStateShareKey=tune-rl-{parent}&workflowType=machine_learning\n")
    assert get(served.url + "/") == 200


@pytest.mark.e2e  # a real mlflow server (and a browser): not for the quick unit run
def test_bound_to_loopback_with_mlflows_host_check_on(served):
    listening = Path("/proc/net/tcp").read_text().split("\n")[1:]
    local = {line.split()[1] for line in listening if line.strip() and line.split()[3] == "0A"}  # LISTEN
    assert f"0100007F:{served.port:04X}" in local  # 127.0.0.1, not 0.0.0.0
    api = f"{served.url}/ajax-api/2.0/mlflow/experiments/search?max_results=5"
    assert get(api) == 200
    assert get(api, Host=f"attacker.example:{served.port}") == 403  # DNS rebinding refused


@pytest.mark.e2e  # a real mlflow server (and a browser): not for the quick unit run
def test_the_search_in_a_real_browser(served):
    """A person's path: Model training, the experiment, the parent run and its trials, the metric
    charts against env steps, the parent run's values and its learning-curve plot."""
    from playwright.sync_api import expect, sync_playwright

    # expect's own 5 s, not the page's 60 s: on a loaded CI machine MLflow's runs table took longer to load once
    expect.set_options(timeout=60_000)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {SCREENSHOTS}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(served.url)
        page.get_by_text("Model training", exact=True).click()
        page.get_by_role("link", name="oracle", exact=True).first.click()
        parent = page.get_by_role("link", name="oracle-demo")
        expect(parent).to_be_visible()
        if page.get_by_role("button", name="Close").count():
            page.get_by_role("button", name="Close").first.click()  # the assistant's side panel
        page.locator("[role=gridcell]", has=parent).locator("button").first.click()  # expand the trials
        for trial in served.records["trials"]:
            expect(page.get_by_role("link", name=trial.trial_id)).to_be_visible()
        page.screenshot(path=SCREENSHOTS / "runs.png")

        page.locator("label", has=page.locator("input[value=CHART]")).click()
        expect(page.get_by_text("episode_return_mean", exact=True).first).to_be_visible()
        page.wait_for_timeout(1000)  # let the charts draw
        page.screenshot(path=SCREENSHOTS / "charts.png")

        parent.first.click()
        expect(page.get_by_text("best_episode_return_mean")).to_be_visible()
        best = served.records["best"]
        metrics = page.locator("table, [role=table]").filter(has_text="best_episode_return_mean").first
        expect(metrics).to_contain_text(f"{best.value:g}")
        expect(page.get_by_text("best.lr")).to_be_visible()
        expect(page.get_by_text("Finished").first).to_be_visible()
        page.screenshot(path=SCREENSHOTS / "parent-run.png", full_page=True)

        page.get_by_role("tab", name="Artifacts").click()
        page.get_by_text("learning_curves.png").first.click()
        plot = page.locator("img[src*='learning_curves.png'], img[src^='blob:']").first
        expect(plot).to_be_visible()
        assert plot.evaluate("img => img.naturalWidth") == 900  # the PNG itself, decoded
        page.screenshot(path=SCREENSHOTS / "learning-curves.png")
        browser.close()
    assert all((SCREENSHOTS / name).stat().st_size > 10_000 for name in
               ("runs.png", "charts.png", "parent-run.png", "learning-curves.png"))


@pytest.mark.e2e  # a real mlflow server (and a browser): not for the quick unit run
def test_the_printed_link_lands_on_the_newest_searchs_trials(served, tmp_path):
    """One click on the printed link: the Model training runs table of the newest search's trials only,
    best first, with the metric and the searched parameters as columns; the charts one click away."""
    from playwright.sync_api import expect, sync_playwright

    spec, trials = served.records["spec"], served.records["trials"]
    best_first = sorted(trials, key=lambda t: -t.last_result[spec.metric])
    metric_column = f"metrics.`{spec.metric}`"
    expect.set_options(timeout=60_000)  # as above: expect's own 5 s failed here once on a busy CI machine
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(served.link)
        names = page.locator("[role=gridcell][col-id='attributes.`Run Name`']")
        expect(names).to_have_count(len(trials))  # not the older search's 5, nor the two parent runs
        expect(page.get_by_text(f"{len(trials)} matching runs")).to_be_visible()
        assert [name.rsplit("\n", 1)[-1] for name in names.all_inner_texts()] == [t.trial_id for t in best_first]
        values = page.locator(f"[role=gridcell][col-id='{metric_column}']").all_inner_texts()
        assert values == [f"{t.last_result[spec.metric]:g}" for t in best_first]
        expect(page.locator(f"[role=columnheader][col-id='{metric_column}']")).to_have_text(spec.metric)
        for name in spec.searched:
            expect(page.locator(f"[role=columnheader][col-id='params.`{name}`']")).to_have_text(name)
        lrs = page.locator("[role=gridcell][col-id='params.`lr`']").all_inner_texts()
        assert lrs == [str(t.config["lr"]) for t in best_first]
        expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()  # Model training, not GenAI
        page.screenshot(path=tmp_path / "deeplink.png")

        page.locator("label", has=page.locator("input[value=CHART]")).click()  # the chart view: one click
        expect(page.get_by_text(spec.metric, exact=True).first).to_be_visible()
        page.wait_for_timeout(1000)  # let the charts draw
        page.screenshot(path=tmp_path / "deeplink-charts.png")
        browser.close()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name in ("deeplink.png", "deeplink-charts.png"):
        assert (tmp_path / name).stat().st_size > 10_000
        shutil.copy(tmp_path / name, SCREENSHOTS / name)
    print(f"\nscreenshots: {tmp_path}, copied to {SCREENSHOTS}")


@pytest.mark.e2e  # a real mlflow server: not for the quick unit run
def test_open_hands_the_link_to_the_browser(served, tmp_path):
    """`--open` opens the printed link with the user's browser ($BROWSER, as Python's webbrowser reads it)."""
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > {opened}\n")
    browser.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "tune_runner", "dashboard", "--port", str(free_port()), "--open"],
                            env=subprocess_env(TUNE_RL_HOME=str(served.home), BROWSER=str(browser)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = [proc.stdout.readline() for _ in range(3)]
        link = re.search(r"newest search oracle-demo: (\S+)", printed[2]).group(1)
        deadline = time.monotonic() + 30
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert opened.read_text() == link
    finally:
        assert not stop_tree(proc)


@pytest.mark.e2e  # a real mlflow server (and a browser): not for the quick unit run
def test_ctrl_c_stops_the_server_and_everything_it_started(served):
    tree = process_tree(served.proc.pid)
    assert len(tree) >= 3, tree  # tune-rl, mlflow server, its uvicorn worker
    served.proc.send_signal(signal.SIGINT)
    status = served.proc.wait(60)
    assert status == 130  # interrupted, as every tune-rl command ends on Ctrl-C
    err = served.proc.stderr.read()
    assert "Traceback" not in err and err.strip().splitlines() == ["tune-rl: interrupted"]
    assert not stop_tree(served.proc) and not running(tree)


def test_exposing_it_sets_the_host_check_and_cors_deliberately(monkeypatch, tmp_path):
    store = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE", "true")  # never passed on
    server = dashboard.plan(uri=store, host="0.0.0.0", port=None)
    assert f"localhost:{server.port}" in server.allowed_hosts and f"127.0.0.1:{server.port}" in server.allowed_hosts
    assert server.cors_origins == tuple(f"http://{h}" for h in server.allowed_hosts)
    cmd = server.command()
    assert cmd[cmd.index("--allowed-hosts") + 1] == ",".join(server.allowed_hosts)
    assert cmd[cmd.index("--workers") + 1] == "1" and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert "--disable-security-middleware" not in cmd
    env = server.env()
    assert "MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE" not in env
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    chosen = dashboard.plan(uri=store, host="0.0.0.0", port=None,
                            allowed_hosts="rl.example.org:8080", cors_origins="https://notebooks.example.org")
    assert chosen.allowed_hosts == ("rl.example.org:8080",)
    assert chosen.cors_origins == ("https://notebooks.example.org",)
    local = dashboard.plan(uri=store, host="127.0.0.1", port=None)
    assert local.allowed_hosts == () and "--allowed-hosts" not in local.command()  # MLflow's loopback defaults


def test_artifacts_of_a_sqlite_store_are_served_from_beside_it(tmp_path):
    server = dashboard.plan(uri=f"sqlite:///{tmp_path}/mlflow.db", host="127.0.0.1", port=None)
    cmd = server.command()
    assert cmd[cmd.index("--artifacts-destination") + 1] == str(tmp_path / "mlartifacts")


def test_a_taken_default_port_moves_to_a_free_one(tmp_path):
    store = f"sqlite:///{tmp_path}/mlflow.db"
    import socket

    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("127.0.0.1", dashboard.DEFAULT_PORT))
        except OSError:
            pass  # already taken by someone else: just as good
        busy.listen()
        server = dashboard.plan(uri=store, host="127.0.0.1", port=None)
    assert server.port != dashboard.DEFAULT_PORT
    with pytest.raises(UserError, match="--allowed-hosts"):
        dashboard.plan(uri=store, host="0.0.0.0", port=None, allowed_hosts="*")


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fail the test if the dashboard starts a process."""
    def popen(*args, **kwargs):
        raise AssertionError(f"started {args[0][:4]}")

    monkeypatch.setattr(dashboard, "subprocess", SimpleNamespace(Popen=popen, STDOUT=subprocess.STDOUT,
                                                                 TimeoutExpired=subprocess.TimeoutExpired))


def test_open_without_a_browser_is_refused_before_anything_starts(cli, untouched, nothing_starts, monkeypatch):
    import webbrowser

    monkeypatch.setattr(webbrowser, "_tryorder", [])  # what webbrowser finds on a machine without one
    result = cli("dashboard", "--open")
    assert result.status == 2 and result.out == "" and len(result.err.strip().splitlines()) == 1, result
    assert "--open: no web browser found" in result.err and "BROWSER=" in result.err
    untouched.check()


def test_open_on_a_store_without_a_search_is_refused_before_anything_starts(cli, untouched, nothing_starts,
                                                                            monkeypatch, tmp_path):
    import webbrowser

    monkeypatch.setattr(webbrowser, "_tryorder", None)  # found again, from $BROWSER
    monkeypatch.setattr(webbrowser, "_browsers", {})
    monkeypatch.setenv("BROWSER", "true")
    result = cli("dashboard", "--open")  # the default store: not created yet
    assert result.status == 2 and result.out == "" and len(result.err.strip().splitlines()) == 1, result
    assert "--open: no search in sqlite:///" in result.err and "leave --open out" in result.err
    untouched.check()


@pytest.mark.e2e  # the lookup runs in a child that imports MLflow (5-10 s): with the e2e tests
def test_open_on_a_store_whose_runs_hold_no_search_is_refused(cli, monkeypatch, tmp_path):
    import webbrowser

    from tune_runner.tracking import uri as mlflow_uri

    monkeypatch.setattr(webbrowser, "_tryorder", None)
    monkeypatch.setattr(webbrowser, "_browsers", {})
    monkeypatch.setenv("BROWSER", "true")
    store = f"sqlite:///{tmp_path}/other.db"  # a store with a run, but no search's parent run
    client = mlflow_uri.client(store)  # a copy of the cached empty store: no 2 s of MLflow's migrations
    client.create_run(client.create_experiment("not-a-search"), run_name="by hand")
    result = cli("dashboard", "--open", "--mlflow-uri", store)
    assert result.status == 2 and f"--open: no search in {store} yet" in result.err, result


@pytest.mark.e2e  # two searches logged to MLflow, then MLflow imported again in the child: about 14 s
def test_the_newest_search_is_looked_up_outside_the_dashboards_own_process(tmp_path):
    """MLflow's client (about 190 MB) must not stay in the process that keeps the server for hours:
    the lookup runs in a child, and finds the newest of two searches."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    log_synthetic_search(uri, name="older", folder=tmp_path / "results" / "older", count=2)
    newest = log_synthetic_search(uri, name="newest", folder=tmp_path / "results" / "newest", count=2)
    code = ("import json, sys; from tune_runner.tracking.dashboard_link import newest_search; "
            "link = newest_search(sys.argv[1]); print(json.dumps([link.search, link.run_id, 'mlflow' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code, uri], capture_output=True, text=True, timeout=300,
                          env=subprocess_env())
    assert done.returncode == 0, done.stderr[-2000:]
    search, run_id, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert (search, imported) == ("newest", False)
    assert run_id == newest["parent"]
