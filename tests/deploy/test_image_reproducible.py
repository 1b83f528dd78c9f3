"""The image is reproducible: its base pinned by digest, every dependency installed from
requirements.lock with its hashes (and that lock agreeing with pyproject.toml), tini as PID 1,
OCI labels. Checked on the files: no Docker engine runs here."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.manifests import DEPLOY, DOCKERFILE, dockerfile_instruction, entrypoint

ROOT = DEPLOY.parent
LOCK = ROOT / "requirements.lock"


def locked() -> dict[str, tuple[str, list[str]]]:
    """requirements.lock as pip reads it: name -> (version, hashes)."""
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text())
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)", line)
        assert match, f"not a hashed pin: {line!r}"
        pins[canonicalize_name(match.group(1))] = (match.group(2), re.findall(r"sha256:([0-9a-f]{64})", line))
    return pins


def test_the_base_image_is_pinned_by_digest() -> None:
    (argument,) = [a for a in dockerfile_instruction("ARG") if a.startswith("PYTHON_IMAGE=")]
    image = argument.split("=", 1)[1]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", image), image
    assert all(f.startswith("${PYTHON_IMAGE}") for f in dockerfile_instruction("FROM")), "every stage on it"


def test_dependencies_come_from_the_hashed_lock() -> None:
    text = DOCKERFILE.read_text()
    assert "--require-hashes" in text.split("AS tini")[0], "the build stage checks every download's hash"
    final = text.rsplit("\nFROM ", 1)[1]
    assert re.search(r"--require-hashes\s+-r\s+/wheels/requirements\.lock", final), "so does the install"
    assert "--no-deps" in final, "jobq's own wheel brings no unlocked dependency"


def test_the_lock_pins_every_dependency_pyproject_names() -> None:
    """Each of pyproject's runtime dependencies is locked at a version its specifier allows (a change
    of pyproject.toml without `pip-compile` fails here), and every pin carries hashes."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = locked()
    for dependency in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dependency.name)
        assert name in pins, f"{dependency.name} is not in requirements.lock: run pip-compile (its first lines)"
        version, hashes = pins[name]
        assert dependency.specifier.contains(version), f"{name}=={version} does not satisfy {dependency}"
        assert hashes
        for extra in dependency.extras:  # psycopg[binary] -> psycopg-binary, at the same version
            assert pins[canonicalize_name(f"{name}-{extra}")][0] == version


def test_tini_is_pid_1_and_the_image_is_labelled() -> None:
    assert entrypoint()[:2] == ["/usr/bin/tini", "--"]
    assert "COPY --from=tini /usr/bin/tini-static /usr/bin/tini" in DOCKERFILE.read_text()
    labels = " ".join(dockerfile_instruction("LABEL"))
    for key in ("title", "description", "version", "revision", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key
