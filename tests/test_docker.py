"""docker/: the Dockerfile and the compose file, parsed and checked without a Docker engine.

Every service, port, volume, network and variable they name must exist; nothing is published beyond
the host's loopback; no secret is written in them. `docker compose config` runs as well where the
Compose plugin is installed.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
ENV_EXAMPLE = DOCKER / ".env.example"
LOOPBACK = "127.0.0.1"
PUBLISHED = {5000, 8265, 10001}  # MLflow, Ray dashboard and job server, Ray Client
SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|_KEY$|CREDENTIAL", re.IGNORECASE)
# `$$` is Compose's escape for a literal `$`; it is removed before looking for variables.
VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?P<modifier>[^}]*)\}|(?P<bare>[A-Za-z_]\w*))")
KNOWN_INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                      "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
BASE_IMAGE_ENV = {"PATH", "HOME"}  # set by every base image, usable without an ARG or ENV


# ---------------------------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Instruction:
    line: int
    name: str
    args: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """Logical instructions: continuation lines joined, comments and blank lines dropped.

    Heredocs (`RUN <<EOF`) are not understood, and refused so that they are not misread.
    """
    found: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        name, _, args = (pending + stripped).partition(" ")
        if "<<" in args and re.search(r"<<-?\s*['\"]?[A-Z]+", args):
            raise ValueError(f"Dockerfile line {start}: heredocs are not supported by this parser")
        found.append(Instruction(start, name.upper(), args.strip()))
        pending = ""
    if pending:
        raise ValueError("Dockerfile ends inside a continued line")
    return found


def variables(text: str) -> set[str]:
    """Names of `$X` and `${X...}` references, `$$` escapes excluded."""
    return {m["braced"] or m["bare"] for m in VARIABLE.finditer(text.replace("$$", ""))}


def arg_names(args: str) -> list[str]:
    return [token.partition("=")[0] for token in shlex.split(args)]


def env_names(args: str) -> list[str]:
    tokens = shlex.split(args)
    if len(tokens) >= 2 and "=" not in tokens[0]:  # legacy `ENV KEY value`
        return [tokens[0]]
    return [token.partition("=")[0] for token in tokens]


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """The instructions of each build stage, its FROM first."""
    result: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.name == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent folders decides."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!").strip("/"))
        if any(regex.match(prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


def env_example() -> dict[str, str]:
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"docker/.env.example: {line!r} is not KEY=VALUE"
            pairs[key.strip()] = value.strip()
    return pairs


def strings(node: object) -> list[str]:
    """Every string (mapping keys included) in a parsed YAML tree."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for key, value in node.items() for s in strings(key) + strings(value)]
    if isinstance(node, list):
        return [s for item in node for s in strings(item)]
    return []


def as_mapping(environment: object) -> dict[str, str]:
    if isinstance(environment, list):
        return dict(item.partition("=")[::2] for item in environment)
    return {key: "" if value is None else str(value) for key, value in (environment or {}).items()}


def names(section: object) -> list[str]:
    """`depends_on` and `networks` come as a list or as a mapping."""
    return list(section) if isinstance(section, (list, dict)) else []


def volume_mounts(service: dict) -> list[tuple[str, str]]:
    """(source, target) of each mount, short or long syntax."""
    mounts = []
    for entry in service.get("volumes", []):
        if isinstance(entry, str):
            source, _, rest = entry.partition(":")
            mounts.append((source, rest.partition(":")[0]))
        else:
            mounts.append((entry.get("source", ""), entry["target"]))
    return mounts


def port_bindings(service: dict) -> list[tuple[str, str, str]]:
    """(host ip, host port, container port) of each published port, short or long syntax."""
    bindings = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            bindings.append((str(entry.get("host_ip", "")), str(entry.get("published", "")), str(entry["target"])))
            continue
        parts = str(entry).partition("/")[0].split(":")
        ip = parts[0] if len(parts) == 3 else ""
        bindings.append((ip, parts[-2] if len(parts) >= 2 else "", parts[-1]))
    return bindings


def flag(command: list[str], name: str) -> str | None:
    """The value of `--name value` or `--name=value` in an exec-form command."""
    for i, token in enumerate(command):
        if token == name and i + 1 < len(command):
            return command[i + 1]
        if token.startswith(name + "="):
            return token.partition("=")[2]
    return None


class MissingVariable(ValueError):
    pass


def interpolate(node: object, env: dict[str, str]) -> object:
    """Compose's variable substitution: ${X}, ${X:-default}, ${X-default}, ${X:?error}, ${X?error}, $$."""
    if isinstance(node, dict):
        return {interpolate(key, env): interpolate(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if not isinstance(node, str):
        return node

    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        name, modifier = match["braced"] or match["bare"], match["modifier"] or ""
        value = env.get(name)
        operator = re.match(r":?[-?]?", modifier)[0]  # ":-", "-", ":?", "?" or none
        word = modifier[len(operator):]
        missing = not value if operator.startswith(":") else value is None
        if operator.endswith("?") and missing:
            raise MissingVariable(f"{name}: {word}")
        if operator.endswith("-") and missing:
            return word
        return value or ""

    return re.sub(r"\$\$|" + VARIABLE.pattern, one, node)


@pytest.fixture(scope="module")
def raw_compose() -> dict:
    """compose.yaml as written, variables unresolved."""
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose(raw_compose: dict) -> dict:
    """compose.yaml as Compose sees it with docker/.env.example's values."""
    return interpolate(raw_compose, env_example())


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


# ------------------------------------------------------------------------------------- Dockerfile lint


def _from_image(instruction: Instruction, global_args: dict[str, str]) -> str:
    image = [token for token in instruction.args.split() if not token.startswith("--")][0]
    return re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m[1], m[0]), image)


def _lint_from(instructions: list[Instruction]) -> list[str]:
    problems, global_args, stage_names = [], {}, set()
    seen_from = False
    for ins in instructions:
        if ins.name == "FROM":
            seen_from = True
            for name in sorted(variables(ins.args) - set(global_args)):
                problems.append(f"line {ins.line}: FROM uses ${name}, not declared by an ARG before the first FROM")
            image = _from_image(ins, global_args)
            tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
            if image not in stage_names and (not tagged or image.endswith(":latest")):
                problems.append(f"line {ins.line}: DL3006/DL3007 base image {image!r} needs a pinned tag")
            words = ins.args.split()
            if len(words) >= 3 and words[-2].upper() == "AS":
                stage_names.add(words[-1])
        elif not seen_from and ins.name == "ARG":
            for token in shlex.split(ins.args):
                key, _, default = token.partition("=")
                global_args[key] = default
        elif not seen_from:
            problems.append(f"line {ins.line}: {ins.name} before the first FROM (only ARG may come first)")
    return problems


def _lint_stage_variables(stage: list[Instruction]) -> list[str]:
    """An ARG declared before FROM is out of scope after it unless declared again: a classic bug."""
    problems, declared = [], set(BASE_IMAGE_ENV)
    for ins in stage[1:]:
        if ins.name not in ("ARG", "ENV"):
            for name in sorted(variables(ins.args) - declared):
                problems.append(f"line {ins.line}: {ins.name} uses ${name}, not declared in this stage")
            continue
        names_here = arg_names(ins.args) if ins.name == "ARG" else env_names(ins.args)
        for name in sorted(variables(ins.args) - declared - set(names_here)):
            problems.append(f"line {ins.line}: {ins.name} uses ${name}, not declared in this stage")
        declared |= set(names_here)
    return problems


def _lint_user(stage: list[Instruction]) -> list[str]:
    starts = [ins for ins in stage if ins.name in ("CMD", "ENTRYPOINT")]
    if not starts:
        return ["the final stage has no CMD or ENTRYPOINT"]
    users = [ins for ins in stage if ins.name == "USER" and ins.line < starts[0].line]
    if not users:
        return [f"line {starts[0].line}: {starts[0].name} runs as root: no USER before it"]
    if users[-1].args.partition(":")[0] in ("root", "0"):
        return [f"line {users[-1].line}: DL3002 the last USER is root"]
    return []


def _lint_run(ins: Instruction, *, pip_cache_off: bool) -> list[str]:
    problems, command = [], ins.args
    if "apt-get install" in command:
        if "--no-install-recommends" not in command:
            problems.append(f"line {ins.line}: DL3015 apt-get install without --no-install-recommends")
        if not re.search(r"apt-get install[^&;]*\s(-y|--yes)\b", command):
            problems.append(f"line {ins.line}: DL3014 apt-get install without -y")
        if "rm -rf /var/lib/apt/lists" not in command:
            problems.append(f"line {ins.line}: DL3009 apt lists left in the layer")
    if "pip install" in command and "--no-cache-dir" not in command and not pip_cache_off:
        problems.append(f"line {ins.line}: DL3042 pip install without --no-cache-dir")
    if re.search(r"(^|[;&|]\s*)sudo\b", command):
        problems.append(f"line {ins.line}: DL3004 sudo")
    if re.search(r"(^|[;&|]\s*)cd\s", command):
        problems.append(f"line {ins.line}: DL3003 cd in RUN; use WORKDIR")
    return problems


def lint_dockerfile(instructions: list[Instruction]) -> list[str]:
    """Our Dockerfile rules plus the hadolint basics worth having (their ids where hadolint has one)."""
    problems = [f"line {ins.line}: unknown instruction {ins.name}" for ins in instructions
                if ins.name not in KNOWN_INSTRUCTIONS]
    problems += _lint_from(instructions)
    all_stages = stages(instructions)
    if not all_stages:
        return [*problems, "no FROM"]
    for stage in all_stages:
        problems += _lint_stage_variables(stage)
    problems += _lint_user(all_stages[-1])
    pip_cache_off = False
    for ins in instructions:
        if ins.name == "ENV" and "PIP_NO_CACHE_DIR" in env_names(ins.args):
            pip_cache_off = True
        if ins.name == "RUN":
            problems += _lint_run(ins, pip_cache_off=pip_cache_off)
        if ins.name == "WORKDIR" and not ins.args.startswith(("/", "$")):
            problems.append(f"line {ins.line}: DL3000 WORKDIR {ins.args} is not absolute")
        if ins.name == "ADD" and not re.search(r"https?://|\.tar", ins.args):
            problems.append(f"line {ins.line}: DL3020 ADD for local files; use COPY")
        if ins.name in ("CMD", "ENTRYPOINT") and not ins.args.startswith("["):
            problems.append(f"line {ins.line}: DL3025 {ins.name} in shell form; use the JSON form")
        if ins.name in ("ARG", "ENV"):
            found = arg_names(ins.args) if ins.name == "ARG" else env_names(ins.args)
            problems += [f"line {ins.line}: {ins.name} {name} bakes a secret into the image"
                         for name in found if SECRET_NAME.search(name)]
    for name in ("CMD", "ENTRYPOINT"):
        if sum(ins.name == name for ins in all_stages[-1]) > 1:
            problems.append(f"DL4003/DL4004 more than one {name} in the final stage")
    return problems


def copy_problems(instructions: list[Instruction], *, context: Path, patterns: list[str]) -> list[str]:
    """Every COPY source exists in the build context and .dockerignore lets it in."""
    problems = []
    for ins in instructions:
        if ins.name != "COPY" or "--from" in ins.args:
            continue
        tokens = [token for token in shlex.split(ins.args) if not token.startswith("--")]
        for source in tokens[:-1]:
            path = source.rstrip("/")
            if not (context / path).exists():
                problems.append(f"line {ins.line}: COPY {source}: not in the build context {context}")
            elif dockerignored(path, patterns):
                problems.append(f"line {ins.line}: COPY {source}: excluded by .dockerignore")
    return problems


def test_dockerfile_passes_lint(dockerfile: list[Instruction]) -> None:
    assert lint_dockerfile(dockerfile) == []


def test_dockerfile_linter_catches_each_rule() -> None:
    bad = parse_dockerfile(
        "MAINTAINER someone\n"
        "FROM ${IMAGE}\n"
        "FROM python AS build\n"
        "ARG API_TOKEN=abc\n"
        "RUN apt-get update && apt-get install curl\n"
        "RUN cd /src && sudo pip install . \\\n"
        "    && echo $VERSION\n"
        "ADD src /src\n"
        "WORKDIR src\n"
        "USER root\n"
        "CMD tune-rl --help\n"
        "CMD [\"tune-rl\"]\n"
    )
    found = "\n".join(lint_dockerfile(bad))
    for expected in ("unknown instruction MAINTAINER", "MAINTAINER before the first FROM",
                     "FROM uses $IMAGE", "DL3006/DL3007 base image 'python'", "DL3015", "DL3014", "DL3009",
                     "DL3042", "DL3004", "DL3003", "line 6: RUN uses $VERSION", "DL3020", "DL3000",
                     "DL3002", "DL3025", "DL4003/DL4004 more than one CMD", "ARG API_TOKEN bakes a secret"):
        assert expected in found
    assert lint_dockerfile(parse_dockerfile("FROM python:3.11-slim\nCMD [\"x\"]\n")) == [
        "line 2: CMD runs as root: no USER before it"]


def test_an_arg_before_from_is_out_of_scope_after_it() -> None:
    text = "ARG BASE=python:3.11-slim\nARG UID=1\nFROM ${BASE}\nRUN echo $UID\nUSER x\nCMD [\"x\"]\n"
    assert lint_dockerfile(parse_dockerfile(text)) == ["line 4: RUN uses $UID, not declared in this stage"]


def test_dockerfile_continued_lines_join_into_one_instruction() -> None:
    parsed = parse_dockerfile("# c\nFROM a:1\nRUN one \\\n  # a comment inside\n  two\nUSER u\n")
    assert [(i.line, i.name, i.args) for i in parsed] == [(2, "FROM", "a:1"), (3, "RUN", "one two"), (6, "USER", "u")]


def test_copy_sources_exist_and_enter_the_build_context(dockerfile: list[Instruction]) -> None:
    patterns = dockerignore_patterns()
    assert copy_problems(dockerfile, context=ROOT, patterns=patterns) == []
    bad = parse_dockerfile("COPY missing.txt docker/compose.yaml ./\n")
    assert copy_problems(bad, context=ROOT, patterns=patterns) == [
        f"line 1: COPY missing.txt: not in the build context {ROOT}",
        "line 1: COPY docker/compose.yaml: excluded by .dockerignore",
    ]


def test_dockerignore_keeps_secrets_and_local_state_out() -> None:
    patterns = dockerignore_patterns()
    for path in ("docker/.env", ".git/config", ".venv/bin/python", "tune_runner/__pycache__/cli.cpython-311.pyc",
                 "bench/solve_cartpole.py", "tests/test_docker.py"):
        assert dockerignored(path, patterns), path
    for path in ("pyproject.toml", "README.md", "tune_runner/cli/main.py", "search_spaces/ppo_small.yaml"):
        assert not dockerignored(path, patterns), path


def test_dockerfile_defaults_to_cpu_torch_with_a_cuda_switch(dockerfile: list[Instruction]) -> None:
    args = {token.partition("=")[0]: token.partition("=")[2]
            for ins in dockerfile if ins.name == "ARG" for token in shlex.split(ins.args)}
    assert args["TORCH_INDEX"].endswith("/whl/cpu")
    assert args["BASE"].startswith("python:3.11")
    readme = (DOCKER / "README.md").read_text()
    for name in args:
        assert f"`{name}`" in readme, f"docker/README.md does not document the build argument {name}"
    assert "--build-arg BASE=nvidia/cuda:" in readme
    assert "--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu" in readme


# ------------------------------------------------------------------------------------------- compose


def test_every_service_has_an_image_or_a_build(services: dict) -> None:
    for name, service in services.items():
        assert service.get("image") or service.get("build"), f"service {name}: neither image nor build"


def test_builds_point_at_our_dockerfile_with_declared_args(services: dict, dockerfile: list[Instruction]) -> None:
    declared = {name for ins in dockerfile if ins.name == "ARG" for name in arg_names(ins.args)}
    built = {name: service["build"] for name, service in services.items() if "build" in service}
    assert set(built) == {"mlflow", "ray-head", "ray-worker"}
    for name, build in built.items():
        context = (DOCKER / build["context"]).resolve()
        assert context == ROOT, f"service {name}: build context {context}, expected the repository root"
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE
        assert set(build.get("args", {})) <= declared, f"service {name}: build args the Dockerfile lacks"
    # One image for every node: Ray wants the same Python and Ray on each.
    assert len({service["image"] for service in services.values() if "build" in service}) == 1


def test_pulled_images_carry_a_pinned_tag(services: dict) -> None:
    for name, service in services.items():
        if "build" not in service:
            image = service["image"]
            assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), f"service {name}: {image}"


def test_named_volumes_are_declared_and_used(compose: dict, services: dict) -> None:
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, service in services.items():
        for source, target in volume_mounts(service):
            assert target.startswith("/"), f"service {name}: mount target {target!r}"
            if source.startswith((".", "/", "~")):
                pytest.fail(f"service {name}: bind mount {source}; the cluster uses named volumes only")
            assert source in declared, f"service {name}: volume {source!r} is not declared under volumes:"
            used.add(source)
    assert declared == used, f"declared but unused volumes: {sorted(declared - used)}"


def test_networks_exist_and_postgres_is_internal(compose: dict, services: dict) -> None:
    declared = compose.get("networks") or {}
    for name, service in services.items():
        assert "network_mode" not in service, f"service {name}: network_mode bypasses the port rules"
        for network in names(service.get("networks")):
            assert network in declared, f"service {name}: network {network!r} is not declared"
    db_networks = names(services["postgres"]["networks"])
    assert all((declared[n] or {}).get("internal") for n in db_networks)
    members = {name for name, service in services.items() if set(names(service.get("networks"))) & set(db_networks)}
    assert members == {"postgres", "mlflow"}, "only MLflow may reach PostgreSQL"


def test_depends_on_targets_exist_and_wait_for_health(services: dict) -> None:
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        for target in names(depends):
            assert target in services, f"service {name}: depends_on {target!r}, no such service"
            condition = depends[target]["condition"] if isinstance(depends, dict) else "service_started"
            assert condition in conditions, f"service {name}: depends_on {target}: condition {condition!r}"
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}'s health, it has no check"
    assert services["mlflow"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["ray-worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"


def test_postgres_mlflow_and_ray_head_have_healthchecks(services: dict) -> None:
    for name in ("postgres", "mlflow", "ray-head"):
        test = services[name]["healthcheck"]["test"]
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL"), f"service {name}: healthcheck {test!r}"
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"][1]
    assert "127.0.0.1:5000/health" in services["mlflow"]["healthcheck"]["test"][-1]


def test_published_ports_bind_loopback_only(services: dict) -> None:
    published = set()
    for name, service in services.items():
        for ip, host_port, container_port in port_bindings(service):
            assert ip == LOOPBACK, f"service {name}: port {host_port or container_port} binds {ip or 'every address'}"
            published.add(int(host_port))
    assert published == PUBLISHED
    readme = (DOCKER / "README.md").read_text()
    for port in PUBLISHED:
        assert f"127.0.0.1:{port}" in readme, f"docker/README.md never mentions 127.0.0.1:{port}"


def test_port_parser_reads_every_syntax() -> None:
    service = {"ports": ["8080", "9000:90", "127.0.0.1:5000:5000/tcp",
                         {"target": 80, "published": 8081, "host_ip": "0.0.0.0"}]}
    assert port_bindings(service) == [("", "", "8080"), ("", "9000", "90"), ("127.0.0.1", "5000", "5000"),
                                      ("0.0.0.0", "8081", "80")]


def test_ray_worker_scales(raw_compose: dict, services: dict) -> None:
    worker = services["ray-worker"]
    assert "container_name" not in worker and not worker.get("ports"), "--scale needs no fixed name or host port"
    assert raw_compose["services"]["ray-worker"]["deploy"]["replicas"].startswith("${RAY_WORKERS")
    assert worker["deploy"]["replicas"].isdigit()


def test_ray_nodes_join_the_head_and_share_the_results_volume(services: dict) -> None:
    head, worker = services["ray-head"]["command"], services["ray-worker"]["command"]
    assert "--head" in head and "--block" in head and "--block" in worker
    assert flag(worker, "--address") == f"ray-head:{flag(head, '--port')}"
    container_ports = {container for _, _, container in port_bindings(services["ray-head"])}
    assert {flag(head, "--dashboard-port"), flag(head, "--ray-client-server-port")} == container_ports
    assert flag(head, "--dashboard-host") == "0.0.0.0"  # inside the container; published on loopback
    assert ("results", "/shared/results") in volume_mounts(services["ray-head"])
    assert volume_mounts(services["ray-head"]) == volume_mounts(services["ray-worker"])


def test_mlflow_server_flags(services: dict) -> None:
    mlflow = services["mlflow"]
    command = mlflow["command"]
    assert command[:2] == ["mlflow", "server"]
    assert flag(command, "--workers") == "1"
    assert "--serve-artifacts" in command
    assert (flag(command, "--artifacts-destination") in {target for _, target in volume_mounts(mlflow)})
    backend = flag(command, "--backend-store-uri")
    assert re.match(r"postgresql(\+psycopg2)?://[^:@/]+@postgres:5432/", backend), backend
    container_port = port_bindings(mlflow)[0][2]
    hosts = flag(command, "--allowed-hosts").split(",")
    assert not any("*" in host for host in hosts), hosts
    assert set(hosts) == {f"mlflow:{container_port}", f"localhost:{container_port}", f"127.0.0.1:{container_port}"}


def test_every_variable_is_in_env_example_and_every_example_is_used(raw_compose: dict) -> None:
    used = {name for text in strings(raw_compose) for name in variables(text)}
    example = set(env_example())
    assert used - example == set(), f"docker/.env.example lacks {sorted(used - example)}"
    assert example - used == set(), f"docker/.env.example sets unused {sorted(example - used)}"


def test_no_literal_secret_in_compose(raw_compose: dict, compose: dict) -> None:
    for name, service in raw_compose["services"].items():
        for key, value in as_mapping(service.get("environment")).items():
            if SECRET_NAME.search(key):
                match = re.fullmatch(r"\$\{(\w+):\?[^}]+\}", value)
                assert match, f"service {name}: {key} must be a required ${{VAR:?...}} from docker/.env, got {value!r}"
                assert SECRET_NAME.search(match[1]), f"service {name}: {key} comes from {match[1]}"
    for text in strings(compose):
        for password in re.findall(r"://[^/:@\s]+:([^@\s]+)@", text):
            pytest.fail(f"compose.yaml: a password in a URI ({password!r}); pass it in the environment")
    example = env_example()
    raw = COMPOSE.read_text()
    for key, value in example.items():
        if SECRET_NAME.search(key):
            assert value == "change-me", f"docker/.env.example: {key} must stay a placeholder"
            assert value not in raw


@pytest.mark.parametrize("secret", ["POSTGRES_PASSWORD", "RAY_AUTH_TOKEN"])
@pytest.mark.parametrize("how", ["unset", "empty"])
def test_compose_refuses_to_start_without_a_secret(raw_compose: dict, secret: str, how: str) -> None:
    env = env_example()
    if how == "unset":
        del env[secret]
    else:
        env[secret] = ""
    with pytest.raises(MissingVariable, match=rf"^{secret}: set {secret} in docker/\.env$"):
        interpolate(raw_compose, env)


def test_interpolation_follows_compose() -> None:
    env = {"SET": "v", "EMPTY": ""}
    assert interpolate(["$SET ${SET} $$SET ${EMPTY:-d} ${EMPTY-d} ${UNSET-d} ${UNSET}"], env) == ["v v $SET d  d "]
    with pytest.raises(MissingVariable, match="EMPTY: needed"):
        interpolate("${EMPTY:?needed}", env)
    assert interpolate("${EMPTY?needed}", env) == ""


def test_env_file_is_ignored_by_git_and_the_example_is_not_skipped_outside_a_git_checkout() -> None:
    git = shutil.which("git")
    if git is None or subprocess.run([git, "rev-parse"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    assert subprocess.run([git, "check-ignore", "-q", "docker/.env"], cwd=ROOT).returncode == 0
    assert subprocess.run([git, "check-ignore", "-q", "docker/.env.example"], cwd=ROOT).returncode == 1


def test_the_image_prepares_every_volume_mount_for_its_user(services: dict, dockerfile: list[Instruction]) -> None:
    """A new named volume takes the owner of its mount point; a root-owned one would lock the user out."""
    user = [ins.args for ins in dockerfile if ins.name == "USER"][-1].partition(":")[0]
    runs = [ins.args for ins in dockerfile if ins.name == "RUN"]
    targets = {target for service in services.values() if "build" in service for _, target in volume_mounts(service)}
    for target in targets:
        assert any(re.search(rf"mkdir -p [^&]*{re.escape(target)}\b", run)
                   and re.search(rf"chown -R {user}:\S+ {re.escape(target.rsplit('/', 1)[0])}\b", run)
                   for run in runs), f"the Dockerfile does not create {target} owned by {user}"


@functools.cache
def _compose_cli() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=20)
    return docker if probe.returncode == 0 else None


@pytest.mark.skipif(_compose_cli() is None, reason="no docker CLI with the compose plugin here")
def test_docker_compose_config_accepts_the_file_skipped_without_docker_compose(tmp_path: Path) -> None:
    # The shell's own variables would mask the env file's, so the check runs without them.
    shell = {key: value for key, value in os.environ.items() if key not in env_example()}

    def config(env_file: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([_compose_cli(), "compose", "-f", str(COMPOSE), "--env-file", str(env_file), "config",
                               "-q"], capture_output=True, text=True, timeout=60, env=shell)

    complete, empty = tmp_path / "complete.env", tmp_path / "empty.env"
    complete.write_text(ENV_EXAMPLE.read_text().replace("change-me", "not-a-real-secret"))
    empty.write_text("")
    accepted = config(complete)
    assert accepted.returncode == 0, accepted.stderr
    refused = config(empty)
    assert refused.returncode != 0 and "docker/.env" in refused.stderr
