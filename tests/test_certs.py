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
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from certs import (
    CertError,
    KeyType,
    WebhookIdentity,
    issue_webhook_certs,
    load_cert_info,
    write_webhook_certs,
)
from certs.cli import register

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
         "--days", "7", "--key-type", "rsa"]
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
        ["certs", "generate", "--out", str(tmp_path), "--service", "steer-webhook",
         "--namespace", "kube-steer", "--ip", "localhost"]
    )  # fmt: skip
    assert args.func(args) == 2
    assert "ip[0]: 'localhost' is not an IPv4 or IPv6 address" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_help_explains_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(["certs", "generate", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--out", "--service", "--namespace", "--dns", "--ip", "--days", "--key-type"):
        assert flag in text
    assert "caBundle" in text and "0600" in text
