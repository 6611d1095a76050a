"""constraints.txt, the versions the suite last passed with: `make setup` installs them, and they agree with
pyproject.toml. A fresh clone otherwise took the newest numpy, scipy and gymnasium of the day (issue 42)."""

from __future__ import annotations

import importlib.metadata
import re
import sysconfig
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "constraints.txt"
# Not the lock's: torch is the Makefile's TORCH (a CPU build here, a CUDA build with its nvidia-* and triton on
# a GPU machine), the installers are the venv's, and tune-rl is this checkout.
NOT_LOCKED = re.compile(r"^(torch|nvidia-.*|triton|pip|setuptools|wheel|uv|tune-rl)$")


def locked(text: str) -> dict[str, str]:
    """name -> version of each `name==version` line; anything else but comments is an error."""
    pins: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and name.strip() and version.strip(), f"constraints.txt:{number}: {line!r} is not name==version"
        key = canonicalize_name(name)
        assert key not in pins, f"constraints.txt:{number}: {name} pinned twice"
        pins[key] = version.strip()
    return pins


def disagreements(pins: dict[str, str], installed: dict[str, str]) -> list[str]:
    """What is installed at another version than the lock's, or not in the lock at all."""
    wrong = []
    for name, version in sorted(installed.items()):
        if NOT_LOCKED.match(name):
            continue
        if name not in pins:
            wrong.append(f"{name} {version} is installed but not in constraints.txt")
        elif pins[name] != version:
            wrong.append(f"{name} {version} is installed, constraints.txt says {pins[name]}")
    return wrong


def unmet(pins: dict[str, str], requirements: list[str]) -> list[str]:
    """pyproject.toml's requirements (torch aside) that the lock leaves out or pins outside their range."""
    wrong = []
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if NOT_LOCKED.match(name):
            continue
        if name not in pins:
            wrong.append(f"{text}: not in constraints.txt")
        elif not requirement.specifier.contains(pins[name], prereleases=True):
            wrong.append(f"{text}: constraints.txt pins {pins[name]}")
    return wrong


def installed_versions() -> dict[str, str]:
    """The venv's own packages: those in its site-packages, not what another package puts on sys.path (Ray adds
    its vendored ray/thirdparty_files, colorama among them, once imported)."""
    places = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    return {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions(path=places)}


def test_the_installed_packages_are_the_locked_versions():
    problems = disagreements(locked(LOCK.read_text(encoding="utf-8")), installed_versions())
    assert not problems, "\n".join(problems) + "\nrun `make setup` (or `make lock` to take new versions on purpose)"


def test_the_lock_meets_every_requirement_of_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values()
                                                 for r in extra)]
    problems = unmet(locked(LOCK.read_text(encoding="utf-8")), requirements)
    assert not problems, "\n".join(problems) + "\nrun `make lock` after changing pyproject.toml's requirements"


def test_the_checks_name_each_disagreement():
    pins = locked("# a comment\nnumpy==2.4.6\nRay==2.60.0  # why\n")
    assert pins == {"numpy": "2.4.6", "ray": "2.60.0"}
    assert disagreements(pins, {"numpy": "2.4.7", "ray": "2.60.0", "scipy": "1.17.1", "torch": "2.13.0+cpu",
                                "nvidia-cublas-cu12": "12.8"}) == [
        "numpy 2.4.7 is installed, constraints.txt says 2.4.6", "scipy 1.17.1 is installed but not in constraints.txt"]
    assert unmet(pins, ["ray[tune,rllib]==2.61.0", "numpy>=2", "gymnasium>=1.0", "torch>=2.4"]) == [
        "ray[tune,rllib]==2.61.0: constraints.txt pins 2.60.0", "gymnasium>=1.0: not in constraints.txt"]
