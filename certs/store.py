"""Where `steer certs` keeps its CA, and where it refuses to write a private key.

The CA outlives every serving certificate it signs, so its key must live somewhere private
and lasting: `$XDG_CONFIG_HOME/kube-steer/ca/` (default `~/.config/kube-steer/ca/`), directory
0700, files 0600, or a `--ca-dir`. A key that is readable by others is refused rather than
used, as ssh does. Neither the CA key nor a serving key is ever written into a Python package
folder or a git work tree where git would not ignore it: one `git add .` or `COPY` would
publish it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from certs.files import atomic_write
from certs.pki import (
    CA_DAYS,
    DEFAULT_KEY_TYPE,
    CertError,
    CertificateAuthority,
    KeyType,
    new_ca,
)

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
DIR_MODE = 0o700
FILE_MODE = 0o600


def default_ca_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kube-steer" / "ca"


def unsafe_key_location(directory: Path, key_name: str) -> str | None:
    """Why a private key must not be written into `directory`, or None when it may."""
    directory = directory.resolve()
    if (directory / "__init__.py").exists():
        return (
            f"{directory} is a Python package folder: the key would ship with the code; "
            "choose a directory outside the source tree"
        )
    root = _git_work_tree(directory)
    if root is None:
        return None
    if _git_ignores(root, directory / key_name):
        return None
    return (
        f"{directory} is inside the git work tree {root} and git would not ignore "
        f"{key_name} there; choose a directory outside the repository (or git-ignore it)"
    )


def _git_work_tree(directory: Path) -> Path | None:
    for candidate in (directory, *directory.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _git_ignores(root: Path, path: Path) -> bool:
    """`git check-ignore`; without a git binary nothing counts as ignored."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "check-ignore", "-q", "--no-index", str(path)],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@dataclass(frozen=True)
class CaStore:
    """A CA kept in `directory` as ca.crt and ca.key."""

    directory: Path

    @property
    def cert_path(self) -> Path:
        return self.directory / CA_CERT

    @property
    def key_path(self) -> Path:
        return self.directory / CA_KEY

    def exists(self) -> bool:
        return self.cert_path.exists() or self.key_path.exists()

    def load(self) -> CertificateAuthority:
        for path in (self.directory, self.key_path):
            try:
                mode = stat.S_IMODE(path.stat().st_mode)
            except FileNotFoundError:
                raise CertError(
                    f"{path}: missing; the CA in {self.directory} is incomplete (ca.crt without "
                    "ca.key?): restore it, or move the directory away to make a new CA"
                ) from None
            if mode & 0o077:
                raise CertError(
                    f"{path}: mode {mode:04o} lets other users read the CA; "
                    f"run `chmod {'700' if path.is_dir() else '600'} {path}`"
                )
        try:
            cert_pem, key_pem = self.cert_path.read_bytes(), self.key_path.read_bytes()
        except OSError as exc:
            raise CertError(f"cannot read the CA in {self.directory}: {exc}") from None
        try:
            return CertificateAuthority.load(cert_pem, key_pem)
        except CertError as exc:
            raise CertError(f"{self.directory}: {exc}") from None

    def create(
        self, *, key_type: KeyType = DEFAULT_KEY_TYPE, days: int = CA_DAYS
    ) -> CertificateAuthority:
        problem = unsafe_key_location(self.directory, CA_KEY)
        if problem:
            raise CertError(f"--ca-dir: {problem}")
        if self.directory.exists():
            mode = stat.S_IMODE(self.directory.stat().st_mode)
            if mode & 0o077:
                # Never chmod a directory we did not make (think --ca-dir /tmp).
                raise CertError(
                    f"--ca-dir: {self.directory} has mode {mode:04o}, open to other users; "
                    "give the CA a directory of its own (it is created 0700)"
                )
        else:
            self.directory.mkdir(mode=DIR_MODE, parents=True)
            self.directory.chmod(DIR_MODE)  # mkdir's mode is filtered by the umask
        ca = new_ca(days=days, key_type=key_type)
        # Key first: a ca.crt without its key would read as a broken CA.
        atomic_write(self.key_path, ca.key_pem, FILE_MODE)
        atomic_write(self.cert_path, ca.cert_pem, FILE_MODE)
        return ca

    def load_or_create(
        self, *, key_type: KeyType = DEFAULT_KEY_TYPE
    ) -> tuple[CertificateAuthority, bool]:
        """The CA, and whether it was made just now."""
        if self.exists():
            return self.load(), False
        return self.create(key_type=key_type), True
