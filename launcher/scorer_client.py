"""How `steer explain` and `kubectl steer` reach a running scorer's `/explain` answers.

`DirectScorer` calls its URL (a port-forward, the demo, inside the cluster) with a bearer
token in `Authorization`. `ProxiedScorer` goes through the apiserver's Service proxy
(`/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy/...`) with a kubeconfig's credentials,
as `kubectl` itself would: no port-forward, no route to the pod network. The apiserver checks
`get` on `services/proxy` (`create` for a posted pod), then drops `Authorization` before it
proxies (kubernetes#38775), so the kubeconfig's bearer token goes again in
`X-Steer-Authorization`: the scorer has the apiserver review it and answers only what that
user may read (scorer/access/). A kubeconfig that authenticates with a client certificate has
no token to send: `--token` gives one.

Both hand back the scorer's JSON answer or raise `ScorerError`, whose message says what failed
and what to check.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import quote

import orjson
import requests
from kubernetes import client

DEFAULT_TIMEOUT_S = 10.0
TOKEN_HEADER = "X-Steer-Authorization"  # scorer.access.gate reads it; the proxy passes it on


class ScorerError(RuntimeError):
    """The scorer could not be reached, or did not answer with JSON (the message says why)."""


# Headers of a scorer's answer a relay (launcher.page_relay) passes on to the browser.
RELAYED_HEADERS = (
    "Content-Type",
    "Cache-Control",
    "Content-Security-Policy",
    "X-Content-Type-Options",
)


@dataclass(frozen=True)
class Relayed:
    """A scorer's answer as it is: the page's files and `/explain` answers for the relay."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Ask(NamedTuple):
    """One request to a scorer."""

    method: str
    path: str
    body: bytes | None = None
    params: Mapping[str, str] = {}
    content_type: str | None = None
    timeout_s: float | None = None


class ScorerClient(ABC):
    """The `/explain` endpoints of one scorer: its JSON answers asked with GET or POST, and
    any request relayed as it is. A client says how it sends (`_call`, `relay`)."""

    @property
    @abstractmethod
    def where(self) -> str:
        """The scorer as a person would name it, for messages."""

    def get(self, path: str, *, timeout_s: float | None = None) -> Any:
        return self._call(Ask("GET", path, timeout_s=timeout_s))

    def post(
        self,
        path: str,
        body: bytes,
        *,
        params: Mapping[str, str],
        content_type: str,
        timeout_s: float | None = None,
    ) -> Any:
        return self._call(Ask("POST", path, body, params, content_type, timeout_s))

    @abstractmethod
    def relay(
        self, method: str, path: str, body: bytes | None, content_type: str | None
    ) -> Relayed:
        """Any request (`path` with its query) as it is, answered as it is."""

    @abstractmethod
    def _call(self, ask: Ask) -> Any:
        """The scorer's JSON answer to `ask`; `ScorerError` when there is none."""


def _relayed(status: int, headers: Mapping[str, str], body: bytes) -> Relayed:
    return Relayed(status, {k: headers[k] for k in RELAYED_HEADERS if k in headers}, body)


def _error_text(data: bytes) -> str:
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        return data[:200].decode("utf-8", "replace")
    return str(body.get("error", body)) if isinstance(body, dict) else str(body)


def decode_answer(where: str, status: int, data: bytes) -> Any:
    """The JSON of a 200 answer; anything else as a `ScorerError` naming the scorer's error."""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        text = data[:200].decode("utf-8", "replace")
        raise ScorerError(f"{where}: HTTP {status}, not JSON: {text}") from None
    if status != 200:
        detail = body.get("error", body) if isinstance(body, dict) else body
        raise ScorerError(f"{where}: HTTP {status}: {detail}")
    return body


def kubeconfig_token(api_client: client.ApiClient) -> str | None:
    """The bearer token the kubeconfig's user authenticates with (a token, a token file, an
    exec plugin's or OIDC's, refreshed as the client refreshes it), or None (a client
    certificate)."""
    # The client's own header value ("Bearer ..."), as it sends it to the apiserver.
    value = api_client.configuration.auth_settings().get("BearerToken", {}).get("value")
    if not value:
        return None
    scheme, _, token = str(value).partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def unauthorized_hint(token_sent: bool) -> str:
    if token_sent:
        return "the apiserver did not accept the token (expired? another cluster's?)"
    return (
        "no bearer token was sent: a kubeconfig user with a client certificate has none to "
        "pass on; give --token TOKEN (an OIDC id-token, or `kubectl create token SA` of a "
        "ServiceAccount allowed to read what you ask)"
    )


@dataclass
class DirectScorer(ScorerClient):
    """A scorer at `base_url` (e.g. http://127.0.0.1:8080), asked with `token` if given."""

    base_url: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    token: str | None = None

    @property
    def where(self) -> str:
        return self.base_url.rstrip("/")

    def _session(self) -> requests.Session:
        session = requests.Session()
        session.trust_env = False  # a proxy from the environment would not reach a port-forward
        if self.token:
            session.headers["Authorization"] = f"Bearer {self.token}"
        return session

    def _decode(self, resp: requests.Response) -> Any:
        if resp.status_code == 401:
            raise ScorerError(
                f"{resp.url}: HTTP 401: {_error_text(resp.content)}; "
                + unauthorized_hint(bool(self.token))
            )
        return decode_answer(resp.url, resp.status_code, resp.content)

    def _send(self, ask: Ask) -> requests.Response:
        """One request to the scorer; `ScorerError` when it cannot be reached."""
        url = f"{self.where}{ask.path}"
        headers = {"Content-Type": ask.content_type} if ask.content_type else {}
        with self._session() as session:
            try:
                return session.request(
                    ask.method,
                    url,
                    data=ask.body,
                    params=dict(ask.params),
                    headers=headers,
                    timeout=ask.timeout_s or self.timeout_s,
                )
            except requests.RequestException as exc:
                raise ScorerError(
                    f"cannot reach the scorer at {url}: {exc} (set --scorer or $STEER_SCORER_URL)"
                ) from None

    def _call(self, ask: Ask) -> Any:
        return self._decode(self._send(ask))

    def relay(
        self, method: str, path: str, body: bytes | None, content_type: str | None
    ) -> Relayed:
        resp = self._send(Ask(method, path, body, content_type=content_type))
        return _relayed(resp.status_code, resp.headers, resp.content)


@dataclass
class ProxiedScorer(ScorerClient):
    """The scorer behind the Service `namespace/service` (port name or number `port`), reached
    through the apiserver of `api_client`; `token` (default: the kubeconfig's) is what the
    scorer reviews."""

    api_client: client.ApiClient
    namespace: str = "kube-steer"
    service: str = "steer-scorer"
    port: str = "http"
    scheme: str = "http"
    timeout_s: float = DEFAULT_TIMEOUT_S
    token: str | None = None

    def _token(self) -> str | None:
        # Read on each call: an exec plugin's or OIDC token is refreshed by the client.
        return self.token or kubeconfig_token(self.api_client)

    @property
    def where(self) -> str:
        return f"the scorer Service {self.namespace}/{self.service} (port {self.port})"

    @property
    def proxy_path(self) -> str:
        name = quote(f"{self.scheme}:{self.service}:{self.port}", safe=":")
        return f"/api/v1/namespaces/{quote(self.namespace)}/services/{name}/proxy"

    def _call(self, ask: Ask) -> Any:
        status, _headers, data = self._send(ask, accept="application/json")
        return self._answer(status, data)

    def relay(
        self, method: str, path: str, body: bytes | None, content_type: str | None
    ) -> Relayed:
        return _relayed(
            *self._send(Ask(method, path, body, content_type=content_type), accept="*/*")
        )

    def _send(self, ask: Ask, *, accept: str) -> tuple[int, Mapping[str, str], bytes]:
        # The path may carry its own query (`?limit=`): the client would escape the `?`.
        path, _, query = ask.path.partition("?")
        pairs = [tuple(p.split("=", 1)) for p in query.split("&") if "=" in p]
        headers = {"Accept": accept}
        if ask.content_type:
            headers["Content-Type"] = ask.content_type
        token = self._token()
        if token:
            headers[TOKEN_HEADER] = f"Bearer {token}"
        api = self.api_client
        request = api.param_serialize(
            method=ask.method,
            resource_path=self.proxy_path + path,
            query_params=[*pairs, *ask.params.items()],
            header_params=headers,
            body=ask.body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = api.call_api(*request, _request_timeout=ask.timeout_s or self.timeout_s)
            data = resp.read()
        except Exception as exc:  # urllib3 connection, TLS and timeout errors
            raise ScorerError(
                f"cannot reach the Kubernetes API at {api.configuration.host}: {exc} "
                "(check --kubeconfig / --context)"
            ) from None
        return resp.status, resp.headers, data

    def _answer(self, status: int, data: bytes) -> Any:
        if status == 200:
            return decode_answer(self.where, status, data)
        try:
            body = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            body = {"message": data[:200].decode("utf-8", "replace")}
        if not isinstance(body, dict):
            body = {"message": str(body)}
        if "error" in body:  # the scorer's own answer, passed through by the proxy
            hint = f"; {unauthorized_hint(bool(self._token()))}" if status == 401 else ""
            raise ScorerError(f"{self.where}: HTTP {status}: {body['error']}{hint}")
        message = str(body.get("message") or body)
        if status in (401, 403):
            hint = (
                "reaching the scorer through the apiserver needs `get` (and `create` for "
                f"a posted pod) on services/proxy in {self.namespace}; or pass --scorer URL"
            )
        elif status == 404:
            hint = "is kube-steer installed there? (--scorer-namespace, --scorer-service)"
        elif status == 503:
            hint = (
                f"is a scorer replica running? (kubectl -n {self.namespace} get pods "
                "-l app.kubernetes.io/name=steer-scorer)"
            )
        else:
            hint = "see the scorer log"
        raise ScorerError(f"{self.where}: HTTP {status}: {message}; {hint}")
