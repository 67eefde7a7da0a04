"""The wheel holds the product and nothing else: no test kit, and `steer` runs from it alone.

The kits (`kits/`: the API stand-in, the control-plane launcher, the exporters, the demo) stay
in the checkout; `[tool.setuptools.packages.find]` in pyproject.toml leaves them out, and the
image installs this same wheel. It is also installed for real, by pip, into a fresh virtual
environment that sees the runtime dependencies already installed here and not the checkout,
and both console scripts (`steer`, `kubectl-steer`) run from there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

PRODUCT = {"steer", "scorer", "controller", "webhook", "certs", "launcher"}
# Besides modules, the wheel carries exactly the package data pyproject.toml declares.
PACKAGE_DATA = re.compile(
    r"steer/py\.typed|steer/presets/[^/]+\.yaml|scorer/page/[^/]+\.(html|css|js)"
)
# Where kits lived before they left the product package, and where they live now.
KIT_PATHS = ("kits/", "steer/testing/", "steer/apistub/", "scorer/demo.py")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel .` builds, from a copy of every top-level package of the checkout
    (an in-tree build would leave build/ beside the sources); no network, no build isolation."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert "kits" in packages  # the build sees the kits and must leave them out
    for name in packages:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = subprocess.run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    (built,) = out.glob("kube_steer-*.whl")
    return built


def test_the_wheel_holds_the_product_packages_and_no_kit(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    assert top == PRODUCT
    assert [n for n in names if n.startswith(KIT_PATHS)] == []
    assert "steer/presets/policy.yaml" in names  # the example policy is product data
    for page_file in ("index.html", "page.css", "page.js"):  # the explain page, offline
        assert f"scorer/page/{page_file}" in names
    (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "steer = launcher.commands:main" in scripts
    assert "kubectl-steer = launcher.commands:kubectl_main" in scripts


def test_the_wheel_holds_only_modules_and_declared_package_data(wheel: Path) -> None:
    """No test, fixture, certificate, key, bytecode or stray file of the checkout."""
    files = [n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n]
    stray = [n for n in files if not n.endswith(".py") and not PACKAGE_DATA.fullmatch(n)]
    assert stray == []
    assert not [n for n in files if "/tests/" in n or "__pycache__" in n]


def test_steer_runs_from_the_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    """Every subcommand module imports from the unpacked wheel: none reaches for a kit."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import contextlib, importlib.util, io, json, sys\n"
        "from launcher.commands import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "files = {m.__name__: getattr(m, '__file__', None) for m in list(sys.modules.values())\n"
        "         if m.__name__.split('.')[0] in ('steer', 'scorer', 'webhook', 'certs', 'launcher', 'kits')}\n"
        "print(json.dumps({'help': out.getvalue(), 'files': files,\n"
        "                  'kits': importlib.util.find_spec('kits') is not None}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # cwd first on sys.path: the wheel's modules win over the editable install of the checkout
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=site,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["help"].startswith("usage: steer ")
    assert "apistub" not in result["help"]
    assert {"scorer.cli", "webhook.cli", "certs.cli", "launcher.kubectl"} <= set(result["files"])
    outside = {m: f for m, f in result["files"].items() if f and not f.startswith(str(site))}
    assert outside == {}
    assert result["kits"] is False


def dependency_path(tmp_path: Path) -> Path:
    """A folder of links to this environment's installed distributions, without kube-steer
    itself (no dist-info, no editable finder, no .pth that would put the checkout on the
    path): what a venv with only the runtime dependencies would hold."""
    (installed,) = {Path(p).resolve() for p in site.getsitepackages() if Path(p, "pip").exists()}
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in installed.iterdir():
        name = entry.name
        if name.endswith(".pth") or "kube_steer" in name or name.split(".")[0] in PRODUCT:
            continue
        (deps / name).symlink_to(entry)
    return deps


def test_pip_installs_the_wheel_into_a_clean_venv_and_both_commands_run(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    Path(purelib, "runtime-deps.pth").write_text(f"{dependency_path(tmp_path)}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    outside = tmp_path / "elsewhere"  # not the checkout: nothing of it on the path
    outside.mkdir()
    # pip resolves the wheel's dependencies against what is installed: none may be missing.
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check",
         "install", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=180, cwd=outside, env=env,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    for command, usage in (("steer", "usage: steer "), ("kubectl-steer", "usage: kubectl steer ")):
        script = venv / "bin" / command
        assert script.exists(), f"pip installed no {command} script"
        run = subprocess.run(
            [str(script), "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=outside,
            env=env,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(usage)
    where = subprocess.run(
        [str(python), "-c",
         "import json, scorer.cli, launcher.commands, webhook.cli, certs;"
         "print(json.dumps([m.__file__ for m in (scorer.cli, launcher.commands, webhook.cli, certs)]))"],
        capture_output=True, text=True, timeout=60, cwd=outside, env=env,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert all(f.startswith(purelib) for f in json.loads(where.stdout))
