"""docker-compose.yml and deploy/Dockerfile agree with the code they deploy.

No Docker needed: the compose file is loaded with PyYAML and checked against the parts of
the Compose Specification that can be written down without its JSON schema, and against
``Settings``; the Dockerfile is checked against pyproject's packages. Where a Docker
engine is present, ``docker compose config`` validates the files as well.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentworker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
AGENTS_OVERRIDE = ROOT / "deploy" / "compose.agents.yml"
PYPROJECT = ROOT / "pyproject.toml"

# Compose Specification: the top-level elements (plus x-* extensions).
TOP_LEVEL = {"version", "name", "services", "networks", "volumes", "configs", "secrets"}
# The service attributes this project may use (a deliberate subset of the specification).
SERVICE_KEYS = {
    "build",
    "command",
    "container_name",
    "depends_on",
    "deploy",
    "entrypoint",
    "env_file",
    "environment",
    "expose",
    "healthcheck",
    "image",
    "init",
    "labels",
    "logging",
    "networks",
    "ports",
    "profiles",
    "restart",
    "stop_grace_period",
    "stop_signal",
    "user",
    "volumes",
    "working_dir",
}
BUILD_KEYS = {"context", "dockerfile", "args", "target", "labels", "cache_from", "network"}
HEALTHCHECK_KEYS = {"test", "interval", "timeout", "retries", "start_period", "start_interval"}
DEPLOY_KEYS = {"mode", "replicas", "resources", "restart_policy", "labels", "placement"}
DEPENDS_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
RESTART = {"no", "always", "on-failure", "unless-stopped"}
DURATION = re.compile(r"^(\d+(\.\d+)?(us|ms|s|m|h))+$")
SERVICE_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
PROJECT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
PROFILE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
# Flower runs behind its gate, which starts `celery -A agentworker flower` itself.
CELERY_SERVICES = {"worker": "worker", "beat": "beat"}
APP_SERVICES = ("worker", "beat", "http", "flower", "producer")
LONG_RUNNING = ("redis", "worker", "beat", "http", "flower")
INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}`` ($$ left alone)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        if env.get(name):
            return env[name]
        if op and op.endswith("?"):
            raise KeyError(f"{name}: {arg}")
        return arg if op else ""

    return INTERPOLATION.sub(one, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict), "docker-compose.yml is not a mapping"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose.get("services")
    assert isinstance(found, dict) and found, "no services"
    return found


def argv(service: dict[str, Any]) -> list[str]:
    """The service's command as Compose runs it (a string is split like a shell would)."""
    command = service.get("command")
    if isinstance(command, list):
        return [str(c) for c in command]
    assert isinstance(command, str), f"no command: {service}"
    return shlex.split(command)


def env_names() -> set[str]:
    """Every environment variable ``Settings`` reads."""
    prefix = Settings.model_config.get("env_prefix", "")
    names = set()
    for field_name, field in Settings.model_fields.items():
        names.add((prefix + field_name).upper())
        if isinstance(field.validation_alias, str):
            names.add(field.validation_alias.upper())
    return names


def top_level_packages() -> set[str]:
    find = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["packages"]["find"]
    return {pattern.rstrip("*").split(".")[0] for pattern in find["include"]}


def dockerfile_copies() -> list[tuple[list[str], str]]:
    """``(sources, destination)`` of every COPY (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    copies = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0].upper() == "COPY":
            args = [w for w in words[1:] if not w.startswith("--")]
            copies.append((args[:-1], args[-1]))
    return copies


# --- docker-compose.yml: the Compose Specification's structure --------------------------


def test_compose_top_level_keys_are_from_the_specification(compose: dict[str, Any]) -> None:
    unknown = {k for k in compose if k not in TOP_LEVEL and not str(k).startswith("x-")}
    assert not unknown, f"not Compose Specification top-level elements: {sorted(unknown)}"
    assert PROJECT_NAME.match(str(compose.get("name", "agentworker")))
    for section in ("networks", "volumes", "configs", "secrets"):
        value = compose.get(section)
        assert value is None or isinstance(value, dict), section


def test_compose_services_use_only_known_attributes(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        assert SERVICE_NAME.match(name), name
        assert isinstance(service, dict), name
        unknown = {k for k in service if k not in SERVICE_KEYS and not k.startswith("x-")}
        assert not unknown, f"{name}: unknown attributes {sorted(unknown)}"
        assert "image" in service or "build" in service, f"{name}: neither image nor build"
        command = service.get("command")
        assert command is None or isinstance(command, str | list), name
        if "restart" in service:
            assert str(service["restart"]).split(":")[0] in RESTART, name
        if "stop_grace_period" in service:
            assert DURATION.match(str(service["stop_grace_period"])), name
        for profile in service.get("profiles", []):
            assert isinstance(profile, str) and PROFILE.match(profile), (name, profile)
        for port in service.get("ports", []):
            assert isinstance(port, str | int | dict), (name, port)
        if "deploy" in service:
            deploy = service["deploy"]
            assert isinstance(deploy, dict) and set(deploy) <= DEPLOY_KEYS, (name, deploy)
            assert isinstance(deploy.get("replicas", 1), int), name


def test_compose_healthchecks_are_well_formed(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        check = service.get("healthcheck")
        if check is None:
            continue
        assert isinstance(check, dict) and set(check) <= HEALTHCHECK_KEYS | {"disable"}, name
        if check.get("disable"):
            assert check == {"disable": True}, name
            continue
        test = check.get("test")
        assert isinstance(test, str) or (
            isinstance(test, list) and test and test[0] in {"NONE", "CMD", "CMD-SHELL"}
        ), (name, test)
        for key in ("interval", "timeout", "start_period", "start_interval"):
            if key in check:
                assert DURATION.match(str(check[key])), (name, key)
        assert isinstance(check.get("retries", 1), int), name


def test_compose_depends_on_names_existing_services(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        depends = service.get("depends_on", {})
        if isinstance(depends, list):
            depends = {d: {"condition": "service_started"} for d in depends}
        assert isinstance(depends, dict), name
        for target, spec in depends.items():
            assert target in services, f"{name} depends on unknown service {target!r}"
            assert target != name, f"{name} depends on itself"
            condition = (spec or {}).get("condition", "service_started")
            assert condition in DEPENDS_CONDITIONS, (name, condition)
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{target} has no healthcheck"


def test_compose_named_volumes_are_declared(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source")
            if source and not source.startswith((".", "/", "~", "$")):
                assert source in declared, f"{name}: volume {source!r} is not declared"


def test_compose_build_contexts_and_dockerfiles_exist(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        build = service.get("build")
        if build is None:
            continue
        if isinstance(build, str):
            build = {"context": build}
        assert set(build) <= BUILD_KEYS, (name, build)
        context = (ROOT / build.get("context", ".")).resolve()
        assert context.is_dir(), f"{name}: build context {context} does not exist"
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"


# --- docker-compose.yml: this deployment -------------------------------------------------


def test_compose_has_the_fleet(services: dict[str, dict[str, Any]]) -> None:
    assert {"redis", "worker", "beat", "http", "flower", "producer"} <= set(services)


def test_every_service_has_a_healthcheck_and_a_restart_policy(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck")
        assert check and not check.get("disable"), f"{name} has no healthcheck"
        assert services[name].get("restart") == "unless-stopped", name
    # The one-shot producer says why it has none.
    assert services["producer"]["healthcheck"] == {"disable": True}
    assert services["producer"]["restart"] == "no"


def test_the_worker_health_is_a_celery_ping_of_itself(services: dict[str, dict[str, Any]]) -> None:
    test = services["worker"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    args = shlex.split(test[1])
    assert args[:4] == ["celery", "-A", "agentworker", "inspect"] and args[4] == "ping"
    # -d names this container's worker, as --hostname=worker@%h named it ($$: no interpolation).
    assert "--hostname=worker@%h" in argv(services["worker"])
    assert args[args.index("-d") + 1] == "worker@$$HOSTNAME"


def test_health_commands_run_the_health_module(services: dict[str, dict[str, Any]]) -> None:
    from agentworker.ops.health import main

    for name in ("beat", "http", "flower"):
        test = services[name]["healthcheck"]["test"]
        assert test[:4] == ["CMD", "python", "-m", "agentworker.ops.health"], (name, test)
        assert main(["nonsense"]) == 2
    beat_args = services["beat"]["healthcheck"]["test"][4:]
    schedule = next(a.split("=", 1)[1] for a in argv(services["beat"]) if "--schedule=" in a)
    assert beat_args == ["beat", schedule]
    port = services["http"]["ports"][0].rsplit(":", 1)[1]
    assert f"127.0.0.1:{port}/" in services["http"]["healthcheck"]["test"][5]
    assert "--port" in argv(services["http"]) and port in argv(services["http"])


def test_the_health_module_checks_what_it_says(tmp_path: Path) -> None:
    from agentworker.ops.health import beat_is_fresh, http_answers

    schedule = tmp_path / "celerybeat-schedule"
    assert beat_is_fresh(str(schedule)) is not None  # not written yet
    (tmp_path / "celerybeat-schedule.db").write_bytes(b"")  # a dbm suffix counts
    assert beat_is_fresh(str(schedule)) is None
    os.utime(tmp_path / "celerybeat-schedule.db", (0, 0))
    assert "old" in (beat_is_fresh(str(schedule)) or "")
    from tests.support.servers import free_port

    assert http_answers(f"http://127.0.0.1:{free_port()}/", timeout=1) is not None


def test_the_http_service_requires_a_webhook_secret(services: dict[str, dict[str, Any]]) -> None:
    http = services["http"]
    assert argv(http)[:2] == ["uvicorn", "agentworker.http:app"]
    secret = http["environment"]["AGENTWORKER_WEBHOOK_SECRET"]
    assert secret.startswith("${AGENTWORKER_WEBHOOK_SECRET:?"), secret
    with pytest.raises(KeyError, match="AGENTWORKER_WEBHOOK_SECRET"):
        interpolate(secret, {})
    assert http["ports"] == ["127.0.0.1:8000:8000"]


def test_redis_maxmemory_makes_noeviction_real(services: dict[str, dict[str, Any]]) -> None:
    args = shlex.split(interpolate(services["redis"]["command"], {}))
    assert args[args.index("--maxmemory") + 1] == "1gb"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    args = shlex.split(interpolate(services["redis"]["command"], {"REDIS_MAXMEMORY": "4gb"}))
    assert args[args.index("--maxmemory") + 1] == "4gb"


def test_the_agents_override_mounts_code_and_sets_the_loader(
    services: dict[str, dict[str, Any]],
) -> None:
    override = yaml.safe_load(AGENTS_OVERRIDE.read_text())
    assert set(override["services"]) <= set(services)
    assert "worker" in override["services"] and "http" in override["services"]
    for name, service in override["services"].items():
        assert set(service) <= SERVICE_KEYS, name
        source, target, *_ = service["volumes"][0].split(":")
        package = target.rsplit("/", 1)[1]
        assert target == f"/app/{package}" and source == f"./{package}"
        module = service["environment"]["AGENTWORKER_AGENT_LOADER"].split(":")[0]
        assert module.split(".")[0] == package, name
    # /app is on the image's import path.
    assert re.search(r"^ENV .*PYTHONPATH=/app\b", DOCKERFILE.read_text(), re.M)


def test_the_comments_tell_the_truth_about_docker_inspect() -> None:
    text = COMPOSE.read_text()
    for line in text.splitlines():
        if "docker inspect" in line:
            assert "still shows" in line or "shows a container's environment" in line, line


def test_docker_compose_config_accepts_the_files(tmp_path: Path) -> None:
    # `docker compose config` needs the CLI and its compose plugin, not a running engine.
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run([docker, "compose", "version"], capture_output=True).returncode
    ):
        pytest.skip("no docker compose here: the structural checks above stand in")
    env = {**os.environ, "FLOWER_PASSWORD": "x", "AGENTWORKER_WEBHOOK_SECRET": "y"}
    for files in (["-f", str(COMPOSE)], ["-f", str(COMPOSE), "-f", str(AGENTS_OVERRIDE)]):
        done = subprocess.run(
            [docker, "compose", *files, "config", "--quiet"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr


def test_redis_is_durable_and_never_evicts(services: dict[str, dict[str, Any]]) -> None:
    command = " ".join(argv(services["redis"]))
    assert argv(services["redis"])[0] == "redis-server"
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command
    assert "healthcheck" in services["redis"]


def test_celery_roles_run_the_agentworker_app(services: dict[str, dict[str, Any]]) -> None:
    for name, role in CELERY_SERVICES.items():
        args = argv(services[name])
        assert args[:4] == ["celery", "-A", "agentworker", role], (name, args)


def test_workers_consume_the_step_and_sweep_queues(services: dict[str, dict[str, Any]]) -> None:
    args = argv(services["worker"])
    selected = [a for a in args if a.startswith(("--queues", "-Q"))]
    if not selected:
        return  # no -Q: the worker consumes every queue the app declares (both)
    queues = next(a.split("=", 1)[1] for a in args if a.startswith(("--queues=", "-Q")))
    # The compose environment leaves the queue names at their defaults.
    defaults = {Settings.model_fields[f].default for f in ("step_queue", "sweep_queue")}
    assert set(queues.split(",")) == defaults


def test_flower_requires_basic_auth_from_the_environment(
    services: dict[str, dict[str, Any]],
) -> None:
    flower = services["flower"]
    # Not on the command line (ps, docker inspect would show it) ...
    assert not [a for a in argv(flower) if a.startswith("--basic-auth")]
    # ... but from the environment, and required: no default password to forget.
    auth = flower["environment"]["FLOWER_BASIC_AUTH"]
    assert auth.startswith("ops:${FLOWER_PASSWORD:?"), auth
    # Published on the loopback interface only.
    assert flower["ports"] == ["127.0.0.1:5555:5555"]


def test_flower_is_behind_the_gate_so_metrics_are_not_anonymous(
    services: dict[str, dict[str, Any]],
) -> None:
    # Flower answers /metrics and /healthcheck without its password: it must not own the
    # published port. The gate does (basic auth on every path; tests/e2e/test_flower.py).
    from agentworker.http import flower_gate

    flower = services["flower"]
    assert argv(flower)[:3] == ["python", "-m", "agentworker.http.flower_gate"]
    assert flower_gate.__name__ == "agentworker.http.flower_gate"
    port = flower["ports"][0].rsplit(":", 1)[1]
    assert port == flower["environment"].get("FLOWER_GATE_PORT", "5555")


def test_producer_module_exists_and_is_copied_into_the_image(
    services: dict[str, dict[str, Any]],
) -> None:
    args = argv(services["producer"])
    assert args[:2] == ["python", "-m"], args
    assert importlib.util.find_spec(args[2]) is not None, args[2]
    copied = {src.rstrip("/") for sources, _ in dockerfile_copies() for src in sources}
    assert args[2].split(".")[0] in copied


def test_the_x_anchor_gives_every_app_service_the_same_environment(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    shared = compose["x-agentworker-env"]
    assert isinstance(shared, dict) and shared
    own = {
        "FLOWER_BASIC_AUTH",
        "AGENTWORKER_WEBHOOK_SECRET",
        "AGENTWORKER_API_TOKEN",
        "AGENTWORKER_CREDENTIALS",
    }
    for name in APP_SERVICES:
        env = {k: v for k, v in services[name]["environment"].items() if k not in own}
        assert env == shared, name


def test_compose_environment_names_real_settings(services: dict[str, dict[str, Any]]) -> None:
    known = env_names()
    for name, service in services.items():
        env = service.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
        for key, value in env.items():
            # Compose accepts strings, numbers and null; a YAML boolean would arrive as "True".
            assert value is None or type(value) in (str, int, float), (name, key, value)
            if key.startswith("AGENTWORKER_"):
                assert key in known, f"{name}: {key} is not a setting (known: {sorted(known)})"


def test_compose_environment_is_a_valid_configuration(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in env_names():
        monkeypatch.delenv(key, raising=False)
    for key, value in compose["x-agentworker-env"].items():
        monkeypatch.setenv(key, interpolate(str(value), {}))
    settings = Settings()
    assert settings.broker.startswith("redis://redis:6379/")
    assert settings.redis_url.startswith("redis://redis:6379/")
    # The example agents, explicitly (a worker has no default), and they load.
    assert settings.agent_loader == "examples.orders:order_loader"
    assert settings.load_agent_loader() is not None


def test_deploy_readme_documents_only_real_settings() -> None:
    documented = set(re.findall(r"AGENTWORKER_[A-Z_]+", (ROOT / "deploy/README.md").read_text()))
    assert documented, "deploy/README.md documents no settings"
    assert documented <= env_names(), sorted(documented - env_names())


# --- docker-compose.yml: the scaled profile (RabbitMQ + a Redis Cluster) ------------------

SCALED = ("rabbitmq", "redis-node-1", "redis-node-2", "redis-node-3", "redis-cluster-init")
SCALED_APP = ("worker-scaled", "beat-scaled")


def test_the_scaled_shape_is_a_profile_the_default_up_leaves_alone(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in (*SCALED, *SCALED_APP):
        assert services[name].get("profiles") == ["scaled"], name
    for name in LONG_RUNNING:
        assert "profiles" not in services[name], name
    for name in (*SCALED, *SCALED_APP):
        if name == "redis-cluster-init":
            continue
        check = services[name].get("healthcheck")
        assert check and not check.get("disable"), f"{name} has no healthcheck"
        assert services[name].get("restart") == "unless-stopped", name


def test_the_scaled_environment_is_a_valid_rabbitmq_and_cluster_configuration(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in env_names():
        monkeypatch.delenv(key, raising=False)
    shared = compose["x-agentworker-scaled-env"]
    for key, value in shared.items():
        monkeypatch.setenv(key, interpolate(str(value), {}))
    settings = Settings()
    assert settings.queue_type == "quorum"
    assert settings.step_time_limit < settings.broker_consumer_timeout
    # every node a seed, and the broker a vhost of the RabbitMQ service with its user
    nodes = [n for n in services if n.startswith("redis-node-")]
    assert settings.redis_url == "redis+cluster://" + ",".join(f"{n}:6379" for n in nodes)
    rabbit = services["rabbitmq"]["environment"]
    user = rabbit["RABBITMQ_DEFAULT_USER"]
    password = interpolate(rabbit["RABBITMQ_DEFAULT_PASS"], {})
    vhost = rabbit["RABBITMQ_DEFAULT_VHOST"]
    assert settings.broker == f"amqp://{user}:{password}@rabbitmq:5672/{vhost}"
    for name in SCALED_APP:
        assert services[name]["environment"] == shared, name
        assert services[name]["build"] == services["worker"]["build"], name


def test_scaled_workers_run_prefork_after_the_cluster_and_broker_are_up(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, role in (("worker-scaled", "worker"), ("beat-scaled", "beat")):
        args = argv(services[name])
        assert args[:4] == ["celery", "-A", "agentworker", role], (name, args)
        assert not [a for a in args if a.startswith(("--pool", "-P"))], "prefork, the default"
        depends = services[name]["depends_on"]
        assert depends["rabbitmq"]["condition"] == "service_healthy"
        assert depends["redis-cluster-init"]["condition"] == "service_completed_successfully"
    assert services["worker-scaled"]["healthcheck"] == services["worker"]["healthcheck"]


def test_the_cluster_nodes_are_durable_masters_that_the_init_job_joins(
    services: dict[str, dict[str, Any]],
) -> None:
    nodes = [n for n in services if n.startswith("redis-node-")]
    assert len(nodes) == 3
    for name in nodes:
        node = services[name]
        command = interpolate(" ".join(argv(node)), {})
        for flag in ("--cluster-enabled yes", "--appendonly yes", "--maxmemory 1gb"):
            assert flag in command, (name, flag)
        assert "--maxmemory-policy noeviction" in command, name
        assert node["environment"]["NODE"] == name  # the hostname it announces
        assert node["volumes"] == [f"{name}:/data"]
    init = services["redis-cluster-init"]
    script = argv(init)[2]
    assert argv(init)[:2] == ["sh", "-c"]
    for name in nodes:
        assert f"getent hosts {name} " in script, name
        assert init["depends_on"][name]["condition"] == "service_healthy"
    assert "--cluster-replicas 0" in script and "--cluster-yes" in script
    # it is a no-op once the cluster exists (a restart of the stack must not fail here)
    assert script.startswith("redis-cli -h redis-node-1 cluster info | grep -q cluster_state:ok ||")
    assert init["restart"] == "no" and init["healthcheck"] == {"disable": True}


# --- deploy/Dockerfile ------------------------------------------------------------------


def test_dockerfile_copies_every_package() -> None:
    copied = {
        src.rstrip("/"): dest.removeprefix("./").rstrip("/")
        for sources, dest in dockerfile_copies()
        for src in sources
    }
    for package in top_level_packages():
        assert package in copied, f"deploy/Dockerfile does not COPY {package}/"
        assert copied[package] == package, f"{package} is copied to {copied[package]}"
        assert (ROOT / package / "__init__.py").is_file(), package


def test_dockerfile_copies_what_pip_install_needs_and_nothing_missing() -> None:
    sources = [src for srcs, _ in dockerfile_copies() for src in srcs]
    for src in sources:
        assert (ROOT / src).exists(), f"deploy/Dockerfile copies {src}, which does not exist"
    readme = tomllib.loads(PYPROJECT.read_text())["project"].get("readme")
    for needed in ("pyproject.toml", readme):
        if needed:
            assert needed in sources, f"deploy/Dockerfile does not COPY {needed}"


def test_no_document_puts_the_flower_password_on_the_command_line() -> None:
    for path in (ROOT / "deploy/README.md", ROOT / "README.md", COMPOSE, ROOT / "Makefile"):
        assert "--basic-auth" not in path.read_text(), path
