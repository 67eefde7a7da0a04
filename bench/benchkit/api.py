"""A raw JSON client of the kube-apiserver, for the benches' bulk requests and watches.

The `kubernetes` client's model (de)serialisation costs more CPU than the apiserver's own work
on the 2-core machine, and the client shares those cores with what it measures.

`steer.adapters.kubejson.KubeJson` goes through the `kubernetes` client's urllib3 pool and
returns decoded objects only; the benches also need byte bodies sent as they are, retries on
429 and 5xx while tens of threads create objects, the apiserver's `/metrics` text and a
streaming session of their own for a watch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import requests
from requests.adapters import HTTPAdapter

from kits.control_plane import ControlPlane

from .progress import WORKERS


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    """JSON over HTTPS with the admin certificate: one requests.Session (no environment: this
    machine sets REQUESTS_CA_BUNDLE) with a connection pool as large as the thread count."""

    def __init__(self, plane: ControlPlane, pool: int = 2 * WORKERS) -> None:
        self.base = plane.url
        self.session = self._session(plane, pool)
        self._plane = plane
        self.retries = 0

    @staticmethod
    def _session(plane: ControlPlane, pool: int) -> requests.Session:
        session = requests.Session()
        session.trust_env = False
        session.verify = str(plane.ca_file)
        session.cert = (str(plane.pki_dir / "admin.crt"), str(plane.pki_dir / "admin.key"))
        session.mount("https://", HTTPAdapter(pool_connections=4, pool_maxsize=pool))
        return session

    def new_session(self) -> requests.Session:
        """A session of its own, for a long watch."""
        return self._session(self._plane, 2)

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        ok: Sequence[int] = (),
        attempts: int = 6,
    ) -> requests.Response:
        """One request, retried on 429, 5xx and connection errors; other errors raise."""
        for attempt in range(1, attempts + 1):
            try:
                resp = self.session.request(
                    method,
                    self.base + path,
                    data=body,
                    headers={"Content-Type": content_type, "Accept": "application/json"},
                    params=params,
                    timeout=120,
                )
            except requests.ConnectionError:
                if attempt == attempts:
                    raise
                self.retries += 1
                time.sleep(0.2 * attempt)
                continue
            if resp.status_code < 300 or resp.status_code in ok:
                return resp
            if (resp.status_code == 429 or resp.status_code >= 500) and attempt < attempts:
                self.retries += 1
                time.sleep(0.2 * attempt)
                continue
            raise ApiError(method, path, resp.status_code, resp.text)
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        data = None if body is None else orjson.dumps(body)
        resp = self.send(method, path, data, **kwargs)
        result: dict[str, Any] = orjson.loads(resp.content) if resp.content else {}
        return result

    def pages(
        self, path: str, params: Mapping[str, str] | None = None, limit: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection, page by page, and the snapshot's resourceVersion."""
        items: list[dict[str, Any]] = []
        query = {"limit": str(limit), **(params or {})}
        while True:
            page = self.json("GET", path, params=query)
            items += page.get("items") or []
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            query["continue"] = meta["continue"]

    def metrics(self) -> str:
        return self.send("GET", "/metrics").text

    def close(self) -> None:
        self.session.close()
