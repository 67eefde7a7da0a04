"""How `steer explain` and `kubectl steer` reach a running scorer's `/explain` answers.

`DirectScorer` calls its URL (a port-forward, the demo, inside the cluster). `ProxiedScorer`
goes through the apiserver's Service proxy
(`/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy/...`) with a kubeconfig's credentials,
as `kubectl` itself would: no port-forward, no route to the pod network, and the apiserver's
RBAC decides (`get` on `services/proxy`, `create` for a posted pod).

Both hand back the scorer's JSON answer or raise `ScorerError`, whose message says what failed
and what to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import orjson
import requests
from kubernetes import client

DEFAULT_TIMEOUT_S = 10.0


class ScorerError(RuntimeError):
    """The scorer could not be reached, or did not answer with JSON (the message says why)."""


class ScorerClient(Protocol):
    """The `/explain` endpoints of one scorer."""

    @property
    def where(self) -> str:
        """The scorer as a person would name it, for messages."""
        ...

    def get(self, path: str, *, timeout_s: float | None = None) -> Any: ...

    def post(
        self,
        path: str,
        body: bytes,
        *,
        params: Mapping[str, str],
        content_type: str,
        timeout_s: float | None = None,
    ) -> Any: ...


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


@dataclass
class DirectScorer:
    """A scorer at `base_url` (e.g. http://127.0.0.1:8080)."""

    base_url: str
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def where(self) -> str:
        return self.base_url.rstrip("/")

    def _session(self) -> requests.Session:
        session = requests.Session()
        session.trust_env = False  # a proxy from the environment would not reach a port-forward
        return session

    def get(self, path: str, *, timeout_s: float | None = None) -> Any:
        url = f"{self.where}{path}"
        with self._session() as session:
            try:
                resp = session.get(url, timeout=timeout_s or self.timeout_s)
            except requests.RequestException as exc:
                raise ScorerError(
                    f"cannot reach the scorer at {url}: {exc} (set --scorer or $STEER_SCORER_URL)"
                ) from None
        return decode_answer(resp.url, resp.status_code, resp.content)

    def post(
        self,
        path: str,
        body: bytes,
        *,
        params: Mapping[str, str],
        content_type: str,
        timeout_s: float | None = None,
    ) -> Any:
        with self._session() as session:
            try:
                resp = session.post(
                    f"{self.where}{path}",
                    data=body,
                    params=dict(params),
                    headers={"Content-Type": content_type},
                    timeout=timeout_s or self.timeout_s,
                )
            except requests.RequestException as exc:
                raise ScorerError(f"cannot reach the scorer at {self.where}: {exc}") from None
        return decode_answer(resp.url, resp.status_code, resp.content)


@dataclass
class ProxiedScorer:
    """The scorer behind the Service `namespace/service` (port name or number `port`), reached
    through the apiserver of `api_client`."""

    api_client: client.ApiClient
    namespace: str = "kube-steer"
    service: str = "steer-scorer"
    port: str = "http"
    scheme: str = "http"
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def where(self) -> str:
        return f"the scorer Service {self.namespace}/{self.service} (port {self.port})"

    @property
    def proxy_path(self) -> str:
        name = quote(f"{self.scheme}:{self.service}:{self.port}", safe=":")
        return f"/api/v1/namespaces/{quote(self.namespace)}/services/{name}/proxy"

    def get(self, path: str, *, timeout_s: float | None = None) -> Any:
        return self._call("GET", path, None, {}, None, timeout_s)

    def post(
        self,
        path: str,
        body: bytes,
        *,
        params: Mapping[str, str],
        content_type: str,
        timeout_s: float | None = None,
    ) -> Any:
        return self._call("POST", path, body, params, content_type, timeout_s)

    def _call(
        self,
        method: str,
        path: str,
        body: bytes | None,
        params: Mapping[str, str],
        content_type: str | None,
        timeout_s: float | None,
    ) -> Any:
        # The path may carry its own query (`?limit=`): the client would escape the `?`.
        path, _, query = path.partition("?")
        pairs = [tuple(p.split("=", 1)) for p in query.split("&") if "=" in p]
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        api = self.api_client
        request = api.param_serialize(
            method=method,
            resource_path=self.proxy_path + path,
            query_params=[*pairs, *params.items()],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = api.call_api(*request, _request_timeout=timeout_s or self.timeout_s)
            data = resp.read()
        except Exception as exc:  # urllib3 connection, TLS and timeout errors
            raise ScorerError(
                f"cannot reach the Kubernetes API at {api.configuration.host}: {exc} "
                "(check --kubeconfig / --context)"
            ) from None
        return self._answer(resp.status, data)

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
            raise ScorerError(f"{self.where}: HTTP {status}: {body['error']}")
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
