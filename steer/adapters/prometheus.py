"""Prometheus HTTP API client: one instant query in, typed samples or a typed error out.

The scorer asks one PromQL query per score dimension for the whole cluster, so this client only
does instant queries (`/api/v1/query`). Each failure kind gets its own exception because the
caller reacts differently: `PrometheusUnavailable` (down, slow, 5xx) means "keep the last labels
until they age out", `PrometheusQueryError` means the policy's PromQL is wrong and the operator
must fix it, `PrometheusResponseError` means the URL does not point at a Prometheus API.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

import orjson
import requests
from requests.adapters import HTTPAdapter

from steer.adapters.gc_pause import gc_paused


class PrometheusError(Exception):
    """Base of every error this adapter raises; `query` is the PromQL that was asked."""

    def __init__(self, message: str, *, query: str = "", error_type: str = "") -> None:
        super().__init__(message)
        self.query = query
        self.error_type = error_type


class PrometheusUnavailable(PrometheusError):
    """Connection refused or reset, client timeout, server-side timeout or a 5xx answer."""


class PrometheusQueryError(PrometheusError):
    """Prometheus refused the query (400 bad_data, 422 execution): the PromQL must change."""


class PrometheusAuthError(PrometheusError):
    """401/403: the basic auth, bearer token or client certificate is missing or wrong."""


class PrometheusResponseError(PrometheusError):
    """The answer is not a Prometheus API answer (not JSON, 404, unexpected result type)."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector (or the value of a scalar, with no labels)."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class QueryResult:
    """`evaluated_at` is the server's evaluation time (unix seconds) as reported in the samples;
    for an empty result it is the `time=` asked for, else the client clock before the request.
    `infos` is filled by Prometheus >= 2.52 only."""

    query: str
    samples: tuple[Sample, ...]
    warnings: tuple[str, ...]
    duration_s: float
    evaluated_at: float
    infos: tuple[str, ...] = field(default=())

    def values_by(self, label: str) -> dict[str, float]:
        """Map a label's value (e.g. the node name) to the sample value. Samples without the
        label are skipped; two samples with the same value mean the query lacks `by (label)`."""
        out: dict[str, float] = {}
        for sample in self.samples:
            key = sample.labels.get(label)
            if key is None:
                continue
            if key in out:
                raise PrometheusResponseError(
                    f"query {self.query!r} returned several series with {label}={key!r}; "
                    f"aggregate it, e.g. max by ({label}) (...)",
                    query=self.query,
                )
            out[key] = sample.value
        return out


def parse_value(raw: str) -> float:
    """Prometheus sends values as strings so that NaN and +-Inf survive JSON."""
    return float(raw)  # float() accepts "NaN", "+Inf", "-Inf" exactly as Prometheus writes them


class PrometheusClient:
    """Keep one client per Prometheus: it reuses keep-alive connections from a pool of
    `pool_size`, so the scorer's per-dimension queries do not reconnect every cycle.

    `trust_env=False` by default: proxy variables, netrc and REQUESTS_CA_BUNDLE from the
    environment would otherwise silently replace `ca_file` and route in-cluster traffic through
    an egress proxy. `server_timeout_s` (sent as `timeout=`) defaults to 90 % of the client
    timeout so Prometheus abandons the query, and says so, before the client gives up on it.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        server_timeout_s: float | None = None,
        basic_auth: tuple[str, str] | None = None,
        bearer_token: str | None = None,
        bearer_token_file: str | None = None,
        ca_file: str | None = None,
        verify_tls: bool = True,
        method: Literal["GET", "POST"] = "POST",
        pool_size: int = 4,
        trust_env: bool = False,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0 seconds, got {timeout_s}")
        if bearer_token and bearer_token_file:
            raise ValueError("bearer_token and bearer_token_file: set one of them, not both")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.server_timeout_s = server_timeout_s if server_timeout_s else timeout_s * 0.9
        self.method = method
        self._bearer_token = bearer_token
        self._bearer_token_file = bearer_token_file
        self._verify: bool | str = ca_file if ca_file else verify_tls
        self._session = requests.Session()
        self._session.trust_env = trust_env
        self._session.auth = basic_auth
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=pool_size, max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _headers(self) -> dict[str, str]:
        token = self._bearer_token
        if self._bearer_token_file:
            # Re-read on every call: projected service-account tokens rotate on disk.
            with open(self._bearer_token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def query(
        self, promql: str, *, time: float | datetime | None = None, timeout_s: float | None = None
    ) -> QueryResult:
        """Evaluate `promql` at `time` (default: the server's now)."""
        client_timeout = timeout_s if timeout_s else self.timeout_s
        server_timeout = client_timeout * 0.9 if timeout_s else self.server_timeout_s
        params: dict[str, str] = {"query": promql, "timeout": f"{server_timeout:g}"}
        at = time.timestamp() if isinstance(time, datetime) else time
        if at is not None:
            params["time"] = f"{at:.3f}"
        started_wall, started = _time.time(), _time.monotonic()
        data, warnings, infos = self._call(
            "/api/v1/query", params, promql, client_timeout, server_timeout
        )
        duration = _time.monotonic() - started
        if not isinstance(data, dict):
            raise PrometheusResponseError(
                f"{self.url}/api/v1/query: answer has no 'data' object", query=promql
            )
        with gc_paused():  # thousands of samples, freed by reference counting
            samples = _samples(data, promql)
        evaluated_at = _first_timestamp(data) or at or started_wall
        return QueryResult(
            query=promql,
            samples=samples,
            warnings=warnings,
            infos=infos,
            duration_s=duration,
            evaluated_at=evaluated_at,
        )

    def label_values(self, label: str, *, timeout_s: float | None = None) -> tuple[str, ...]:
        """Every value of `label` in the TSDB's index (`/api/v1/label/<label>/values`): with
        `__name__`, every metric name Prometheus holds. Cheap: read from the index, no series
        are evaluated."""
        client_timeout = timeout_s if timeout_s else self.timeout_s
        what = f"label values of {label}"
        data, _, _ = self._call(
            f"/api/v1/label/{label}/values", {}, what, client_timeout, client_timeout * 0.9, "GET"
        )
        if not isinstance(data, list):
            raise PrometheusResponseError(f"{self.url}: {what} is not a list", query=what)
        return tuple(str(v) for v in data)

    def _call(
        self,
        path: str,
        params: dict[str, str],
        what: str,
        client_timeout: float,
        server_timeout: float,
        method: str | None = None,
    ) -> tuple[Any, tuple[str, ...], tuple[str, ...]]:
        """The `data`, warnings and infos of a successful API answer; every failure as its
        `PrometheusError`."""
        method = method or self.method
        endpoint = f"{self.url}{path}"
        try:
            resp = self._session.request(
                method,
                endpoint,
                params=params if method == "GET" else None,
                data=params if method == "POST" else None,
                headers=self._headers(),
                timeout=client_timeout,
                verify=self._verify,  # per request: a Session's own verify loses to the env
            )
        except requests.Timeout as exc:
            raise PrometheusUnavailable(
                f"Prometheus at {self.url} did not answer query {what!r} within "
                f"{client_timeout:g}s; raise timeout_s or check the server's load",
                query=what,
            ) from exc
        except requests.ConnectionError as exc:
            fix = (
                "set ca_file to the CA"
                if isinstance(exc, requests.exceptions.SSLError)
                else ("check the URL and that Prometheus is up")
            )
            raise PrometheusUnavailable(
                f"cannot reach Prometheus at {self.url} for query {what!r}: {exc}; {fix}",
                query=what,
            ) from exc
        body = self._decode(resp, what)
        if body.get("status") != "success":
            raise self._api_error(resp.status_code, body, what, server_timeout)
        return (
            body.get("data"),
            tuple(str(w) for w in body.get("warnings") or ()),
            tuple(str(i) for i in body.get("infos") or ()),
        )

    def _decode(self, resp: requests.Response, promql: str) -> dict[str, Any]:
        if resp.status_code in (401, 403):
            raise PrometheusAuthError(
                f"Prometheus at {self.url} answered {resp.status_code} for query {promql!r}; "
                "set basic_auth, bearer_token or bearer_token_file to credentials it accepts",
                query=promql,
            )
        try:
            # An answer of 5,000 series allocates ~100,000 objects: with the collector running
            # over the scorer's heap that cost 3x the decoding (measured at 100,000 pods).
            with gc_paused():
                body = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            hint = "; is the URL the Prometheus base URL?" if resp.status_code == 404 else ""
            if resp.status_code >= 500:  # a proxy in front of Prometheus (502/503/504 pages)
                raise PrometheusUnavailable(
                    f"{self.url} answered HTTP {resp.status_code} for query {promql!r}",
                    query=promql,
                ) from None
            raise PrometheusResponseError(
                f"{resp.url} answered HTTP {resp.status_code} with non-JSON "
                f"({resp.headers.get('Content-Type', 'no content type')}) for query "
                f"{promql!r}{hint}",
                query=promql,
            ) from None
        if not isinstance(body, dict):
            raise PrometheusResponseError(f"{resp.url}: answer is not a JSON object", query=promql)
        return body

    def _api_error(
        self, status: int, body: Mapping[str, Any], promql: str, server_timeout: float
    ) -> PrometheusError:
        error_type = str(body.get("errorType", ""))
        error = str(body.get("error", "no error text"))
        if error_type == "timeout":
            return PrometheusUnavailable(
                f"Prometheus gave up on query {promql!r} after the server-side timeout "
                f"({server_timeout:g}s): {error}; raise the timeout or simplify the query",
                query=promql,
                error_type=error_type,
            )
        if status in (400, 422) or error_type in ("bad_data", "execution"):
            return PrometheusQueryError(
                f"Prometheus rejected query {promql!r} ({error_type}): {error}",
                query=promql,
                error_type=error_type,
            )
        return PrometheusUnavailable(
            f"Prometheus at {self.url} failed query {promql!r} with HTTP {status} "
            f"({error_type}): {error}",
            query=promql,
            error_type=error_type,
        )


def _samples(data: Mapping[str, Any], promql: str) -> tuple[Sample, ...]:
    result_type = data.get("resultType")
    result: Any = data.get("result")
    try:
        if result_type == "vector":
            return tuple(
                # The decoded labels are this sample's own: read-only, not copied.
                Sample(MappingProxyType(item["metric"]), parse_value(item["value"][1]))
                for item in result
            )
        if result_type == "scalar":
            return (Sample(MappingProxyType({}), parse_value(result[1])),)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise PrometheusResponseError(
            f"malformed {result_type} result for query {promql!r}: {exc!r}", query=promql
        ) from exc
    raise PrometheusResponseError(
        f"query {promql!r} returned a {result_type}; score queries must return an instant "
        "vector or a scalar (drop the [range] selector, or wrap it in a *_over_time function)",
        query=promql,
    )


def _first_timestamp(data: Mapping[str, Any]) -> float | None:
    result: Sequence[Any] = data.get("result") or ()
    if data.get("resultType") == "scalar":
        return float(result[0])
    if result:
        stamp = float(result[0]["value"][0])
        return stamp if math.isfinite(stamp) else None
    return None
