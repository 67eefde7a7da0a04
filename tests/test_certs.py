"""Webhook certificates: chain verification, SANs, file modes, and a real TLS handshake."""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.server
import ipaddress
import ssl
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from certs import (
    CertError,
    KeyType,
    WebhookCerts,
    WebhookIdentity,
    issue_webhook_certs,
    load_cert_info,
    write_webhook_certs,
)
from certs.cli import register
from certs.pki import CertificateAuthority, issue_cert, issue_serving_cert, new_ca
from certs.renewal import ServingPems, renewal_reasons
from certs.store import CaStore, default_ca_dir, unsafe_key_location

IDENTITY = WebhookIdentity("steer-webhook", "kube-steer", ("localhost",), ("127.0.0.1",))
IN_CLUSTER_NAMES = (
    "steer-webhook",
    "steer-webhook.kube-steer",
    "steer-webhook.kube-steer.svc",
    "steer-webhook.kube-steer.svc.cluster.local",
)


def _verify(ca_pem: bytes, cert_pem: bytes, subject: x509.verification.Subject) -> None:
    """Verify the chain with cryptography's own path builder (serverAuth policy)."""
    ca = x509.load_pem_x509_certificate(ca_pem)
    leaf = x509.load_pem_x509_certificate(cert_pem)
    verifier = (
        PolicyBuilder().store(Store([ca])).time(datetime.now(UTC)).build_server_verifier(subject)
    )
    verifier.verify(leaf, [])


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
def test_certificate_verifies_against_its_ca_for_every_name(key_type: KeyType) -> None:
    certs = issue_webhook_certs(IDENTITY, key_type=key_type)
    for name in (*IN_CLUSTER_NAMES, "localhost"):
        _verify(certs.ca_cert_pem, certs.cert_pem, x509.DNSName(name))
    _verify(certs.ca_cert_pem, certs.cert_pem, x509.IPAddress(ipaddress.ip_address("127.0.0.1")))


def test_certificate_does_not_verify_for_other_names_or_another_ca() -> None:
    certs = issue_webhook_certs(IDENTITY)
    with pytest.raises(VerificationError):
        _verify(certs.ca_cert_pem, certs.cert_pem, x509.DNSName("other.kube-steer.svc"))
    other = issue_webhook_certs(IDENTITY)
    with pytest.raises(VerificationError):
        _verify(other.ca_cert_pem, certs.cert_pem, x509.DNSName("steer-webhook.kube-steer.svc"))


def test_default_is_ecdsa_p256_with_server_auth_usages() -> None:
    certs = issue_webhook_certs(IDENTITY)
    key = load_pem_private_key(certs.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    cert = x509.load_pem_x509_certificate(certs.cert_pem)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
    ca = x509.load_pem_x509_certificate(certs.ca_cert_pem)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0


def test_a_client_certificate_names_the_user_and_its_groups_and_no_address() -> None:
    ca = new_ca(days=2)
    issued = issue_cert(ca, "system:node:n1", purpose="client", organizations=["system:nodes"])
    cert = x509.load_pem_x509_certificate(issued.cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    groups = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [g.value for g in groups] == ["system:nodes"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    server = issue_cert(ca, "prometheus", ips=["127.0.0.1"])
    _verify(ca.cert_pem, server.cert_pem, x509.IPAddress(ipaddress.ip_address("127.0.0.1")))


def test_rsa_option_gives_2048_bit_key() -> None:
    certs = issue_webhook_certs(IDENTITY, key_type="rsa")
    key = load_pem_private_key(certs.key_pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048


def test_days_sets_expiry_and_bad_inputs_name_the_field() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cert = x509.load_pem_x509_certificate(issue_webhook_certs(IDENTITY, days=30, now=now).cert_pem)
    assert cert.not_valid_after_utc == now + timedelta(days=30)
    assert cert.not_valid_before_utc < now

    with pytest.raises(CertError, match=r"^days: must be 1\.\.3650, got 0"):
        issue_webhook_certs(IDENTITY, days=0)
    with pytest.raises(CertError, match=r"^ip\[0\]: '300\.1\.1\.1' is not an IPv4 or IPv6"):
        WebhookIdentity("steer-webhook", "kube-steer", ips=("300.1.1.1",))
    with pytest.raises(CertError, match=r"^service: '1webhook' must be an RFC 1035 label"):
        WebhookIdentity("1webhook", "kube-steer")
    with pytest.raises(CertError, match=r"^namespace: 'Kube_Steer' must be an RFC 1123 label"):
        WebhookIdentity("steer-webhook", "Kube_Steer")
    with pytest.raises(CertError, match=r"^dns\[1\]: 'bad name'"):
        WebhookIdentity("steer-webhook", "kube-steer", ("localhost", "bad name"))


def test_files_have_modes_and_cert_info_matches(tmp_path: Path) -> None:
    certs = issue_webhook_certs(IDENTITY, days=10)
    paths = write_webhook_certs(tmp_path / "tls", certs)

    assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.cert.stat().st_mode) == 0o644
    assert stat.S_IMODE(paths.ca_cert.stat().st_mode) == 0o644
    assert stat.S_IMODE(paths.ca_cert.parent.stat().st_mode) == 0o700
    assert paths.key.read_bytes() == certs.key_pem

    info = load_cert_info(paths.cert)
    assert info.subject == "CN=steer-webhook.kube-steer.svc"
    assert info.dns_names == (*IN_CLUSTER_NAMES, "localhost")
    assert info.ip_addresses == ("127.0.0.1",)
    assert timedelta(days=9) < info.not_after - datetime.now(UTC) <= timedelta(days=10)
    # Fingerprint computed independently, through the stdlib's PEM decoder.
    der = ssl.PEM_cert_to_DER_cert(paths.cert.read_text())
    assert info.fingerprint_sha256.replace(":", "") == hashlib.sha256(der).hexdigest().upper()
    assert info.as_json()["dnsNames"] == list(info.dns_names)


def test_rewrite_replaces_files_by_rename_and_leaves_no_temporaries(tmp_path: Path) -> None:
    first = write_webhook_certs(tmp_path, issue_webhook_certs(IDENTITY))
    inode_before = first.key.stat().st_ino
    first.key.chmod(0o644)  # a loosened mode must not survive the rewrite
    second_certs = issue_webhook_certs(IDENTITY)
    second = write_webhook_certs(tmp_path, second_certs)

    assert second.key.stat().st_ino != inode_before
    assert stat.S_IMODE(second.key.stat().st_mode) == 0o600
    assert second.cert.read_bytes() == second_certs.cert_pem
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]


def test_load_cert_info_names_the_file_when_missing(tmp_path: Path) -> None:
    with pytest.raises(CertError, match="no such file; run `steer certs generate"):
        load_cert_info(tmp_path / "tls.crt")
    (tmp_path / "junk.crt").write_text("not a certificate")
    with pytest.raises(CertError, match="not a PEM certificate"):
        load_cert_info(tmp_path / "junk.crt")


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _https_server(cert: Path, key: Path) -> Iterator[int]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
def test_tls_handshake_verifies_against_written_ca(tmp_path: Path, key_type: KeyType) -> None:
    paths = write_webhook_certs(tmp_path, issue_webhook_certs(IDENTITY, key_type=key_type))
    stranger = write_webhook_certs(tmp_path / "other", issue_webhook_certs(IDENTITY))
    with _https_server(paths.cert, paths.key) as port:
        # verify= per request: this machine sets REQUESTS_CA_BUNDLE, which a Session would prefer.
        reply = requests.get(f"https://127.0.0.1:{port}/", verify=str(paths.ca_cert), timeout=5)
        assert reply.status_code == 200 and reply.text == "ok"
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"https://127.0.0.1:{port}/", verify=str(stranger.ca_cert), timeout=5)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="steer")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_generate_writes_files_and_prints_ca_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "certs"
    args = _parser().parse_args(
        ["certs", "generate", "--out", str(out), "--service", "steer-webhook",
         "--namespace", "kube-steer", "--dns", "localhost", "--ip", "127.0.0.1",
         "--days", "7", "--key-type", "rsa", "--ca-dir", str(tmp_path / "ca")]
    )  # fmt: skip
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert base64.b64decode(captured.out.strip()) == (out / "ca.crt").read_bytes()
    assert "steer-webhook.kube-steer.svc" in captured.err
    info = load_cert_info(out / "tls.crt")
    assert "localhost" in info.dns_names and info.ip_addresses == ("127.0.0.1",)
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    _verify(
        (out / "ca.crt").read_bytes(), (out / "tls.crt").read_bytes(), x509.DNSName("localhost")
    )


def test_cli_reports_bad_input_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parser().parse_args(
        ["certs", "generate", "--out", str(tmp_path / "out"), "--service", "steer-webhook",
         "--namespace", "kube-steer", "--ip", "localhost", "--ca-dir", str(tmp_path / "ca")]
    )  # fmt: skip
    assert args.func(args) == 2
    assert "ip[0]: 'localhost' is not an IPv4 or IPv6 address" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no CA made, no files written


def test_cli_help_explains_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(["certs", "generate", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "--out",
        "--service",
        "--namespace",
        "--dns",
        "--ip",
        "--days",
        "--key-type",
        "--ca-dir",
    ):
        assert flag in text
    assert "caBundle" in text and "0600" in text


def test_cli_rotate_help_states_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["certs", "rotate", "--help"])
    text = capsys.readouterr().out
    for flag in ("--namespace", "--service", "--secret", "--kubeconfig", "--ca-dir",
                 "--renew-before", "--webhook-config", "--dry-run"):  # fmt: skip
        assert flag in text
    args = _parser().parse_args(["certs", "rotate"])
    assert (args.namespace, args.service, args.secret, args.renew_before) == (
        "kube-steer",
        "steer-webhook",
        "steer-webhook-tls",
        30,
    )


# --- the kept CA ------------------------------------------------------------------------------


def test_ca_store_creates_private_files_and_reuses_them(tmp_path: Path) -> None:
    store = CaStore(tmp_path / "ca")
    ca, created = store.load_or_create()
    assert created
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.cert_path.stat().st_mode) == 0o600
    again, created_again = store.load_or_create()
    assert not created_again and again == ca
    # Certificates issued on two runs verify against the one CA (the caBundle stays).
    first = issue_serving_cert(ca, IDENTITY)
    second = issue_serving_cert(again, IDENTITY)
    for certs in (first, second):
        _verify(ca.cert_pem, certs.cert_pem, x509.DNSName("steer-webhook.kube-steer.svc"))


def test_default_ca_dir_follows_xdg_config_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_ca_dir() == tmp_path / "kube-steer" / "ca"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_ca_dir() == tmp_path / "home" / ".config" / "kube-steer" / "ca"


def test_a_ca_readable_by_others_or_incomplete_is_refused(tmp_path: Path) -> None:
    store = CaStore(tmp_path / "ca")
    store.create()
    store.key_path.chmod(0o644)
    with pytest.raises(
        CertError, match=r"ca\.key: mode 0644 lets other users read the CA; run `chmod 600"
    ):
        store.load()
    store.key_path.chmod(0o600)
    store.directory.chmod(0o755)
    with pytest.raises(CertError, match=r"mode 0755 .* run `chmod 700"):
        store.load()
    store.directory.chmod(0o700)
    store.key_path.unlink()
    with pytest.raises(CertError, match=r"ca\.key: missing; the CA .* is incomplete"):
        store.load()


def test_a_shared_directory_is_not_taken_for_the_ca(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(CertError, match=r"has mode 1777, open to other users"):
        CaStore(shared).create()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777 and not list(shared.iterdir())


def test_a_ca_key_that_is_not_the_certificates_is_refused(tmp_path: Path) -> None:
    one, other = new_ca(), new_ca()
    with pytest.raises(CertError, match="does not belong to the CA certificate"):
        CertificateAuthority.load(one.cert_pem, other.key_pem)


def test_keys_are_not_written_into_a_package_folder_or_a_tracked_git_tree(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    assert "Python package folder" in (unsafe_key_location(package, "tls.key") or "")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    problem = unsafe_key_location(repo / "out", "tls.key")
    assert problem is not None and "git would not ignore tls.key" in problem
    assert unsafe_key_location(tmp_path / "elsewhere", "tls.key") is None
    # The repository's own certs/ package: refused by `steer certs generate`.
    assert unsafe_key_location(Path(__file__).parents[1] / "certs", "tls.key") is not None


def test_cli_generate_reuses_the_ca_and_refuses_the_package_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca_dir = tmp_path / "ca"
    bundles = []
    for run in range(2):
        out = tmp_path / f"out{run}"
        args = _parser().parse_args(
            ["certs", "generate", "--out", str(out), "--service", "steer-webhook",
             "--namespace", "kube-steer", "--ca-dir", str(ca_dir)]
        )  # fmt: skip
        assert args.func(args) == 0
        bundles.append(capsys.readouterr().out.strip())
    assert bundles[0] == bundles[1]
    assert base64.b64decode(bundles[0]) == (ca_dir / "ca.crt").read_bytes()

    package = Path(__file__).parents[1] / "certs"
    before = sorted(p.name for p in package.iterdir())
    args = _parser().parse_args(
        ["certs", "generate", "--out", str(package), "--service", "steer-webhook",
         "--namespace", "kube-steer", "--ca-dir", str(ca_dir)]
    )  # fmt: skip
    assert args.func(args) == 2
    assert "is a Python package folder" in capsys.readouterr().err
    assert sorted(p.name for p in package.iterdir()) == before


# --- when to renew ----------------------------------------------------------------------------

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SERVICE = WebhookIdentity("steer-webhook", "kube-steer")


def _held(certs: WebhookCerts) -> ServingPems:
    return ServingPems(certs.cert_pem, certs.key_pem, certs.ca_cert_pem)


def _reasons(
    held: ServingPems | None, ca: CertificateAuthority, days: float = 30
) -> tuple[str, ...]:
    return renewal_reasons(held, ca, SERVICE, now=NOW, renew_before=timedelta(days=days))


def test_a_valid_certificate_under_the_ca_is_kept() -> None:
    ca = new_ca(now=NOW)
    assert _reasons(_held(issue_serving_cert(ca, SERVICE, days=90, now=NOW)), ca) == ()


def test_expiry_within_the_window_renews() -> None:
    ca = new_ca(now=NOW)
    held = _held(issue_serving_cert(ca, SERVICE, days=20, now=NOW))
    (reason,) = _reasons(held, ca)
    assert (
        reason.startswith("tls.crt expires on 2026-06-21")
        and "within --renew-before (30 days)" in reason
    )
    assert _reasons(held, ca, days=10) == ()
    expired = _held(issue_serving_cert(ca, SERVICE, days=1, now=NOW - timedelta(days=3)))
    assert _reasons(expired, ca)[0].startswith("tls.crt expired on 2026-05-30 00:00 UTC")


def test_another_ca_or_a_foreign_key_renews() -> None:
    ca, other = new_ca(now=NOW), new_ca(now=NOW)
    held = _held(issue_serving_cert(other, SERVICE, days=90, now=NOW))
    assert _reasons(held, ca) == (
        f"tls.crt is not signed by the CA ({ca.certificate.subject.rfc4514_string()})",
        "ca.crt is not the CA",
    )
    mine = issue_serving_cert(ca, SERVICE, days=90, now=NOW)
    theirs = issue_serving_cert(ca, SERVICE, days=90, now=NOW)
    assert _reasons(ServingPems(mine.cert_pem, theirs.key_pem, ca.cert_pem), ca) == (
        "tls.key is missing or does not belong to tls.crt",
    )


def test_missing_service_names_renew() -> None:
    ca = new_ca(now=NOW)
    other_service = WebhookIdentity("other-webhook", "kube-steer")
    held = _held(issue_serving_cert(ca, other_service, days=90, now=NOW))
    (reason,) = _reasons(held, ca)
    assert reason == (
        "tls.crt does not name steer-webhook, steer-webhook.kube-steer, "
        "steer-webhook.kube-steer.svc, steer-webhook.kube-steer.svc.cluster.local"
    )


def test_no_secret_or_no_certificate_renews() -> None:
    ca = new_ca(now=NOW)
    assert _reasons(None, ca) == ("the Secret does not exist",)
    assert _reasons(ServingPems(None, None, None), ca) == ("the Secret has no tls.crt",)
    assert _reasons(ServingPems(b"junk", None, None), ca) == ("tls.crt is not a PEM certificate",)


def test_a_certificate_never_outlives_its_ca() -> None:
    ca = new_ca(days=10, now=NOW)
    cert = x509.load_pem_x509_certificate(
        issue_serving_cert(ca, SERVICE, days=365, now=NOW).cert_pem
    )
    assert cert.not_valid_after_utc == ca.certificate.not_valid_after_utc
    with pytest.raises(CertError, match="the CA expired on"):
        issue_serving_cert(ca, SERVICE, now=NOW + timedelta(days=11))


def test_cli_rotate_refuses_a_window_as_long_as_the_validity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parser().parse_args(
        ["certs", "rotate", "--ca-dir", str(tmp_path / "ca"), "--renew-before", "400"]
    )
    assert args.func(args) == 2
    assert "--renew-before: must be 0 or more days and less than --days (365)" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "ca").exists()
