"""How the placement bench's steering runs admit pods (`--admission`):

- `webhook`: `steer webhook serve`, registered by the project's manifests/webhook/admission.yaml
  (by URL), as the default install runs it;
- `policy`: no webhook process and no webhook configuration; the apiserver steers and checks
  pods itself with every object `steer policy admission-policy --mutating -f POLICY` prints
  (the ValidatingAdmissionPolicies, the MutatingAdmissionPolicy `steer-mutation`, their
  bindings), as components/admission-policy installs them.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any, Literal

from kubernetes import client

from kits.service_processes import create_or_replace, printed_admission_policies

ROOT = Path(__file__).resolve().parent.parent.parent

AdmissionPath = Literal["webhook", "policy"]
ADMISSION_PATHS: tuple[AdmissionPath, ...] = ("webhook", "policy")
# Every object the CLI prints carries it (steer/core/admission_policy/objects.py).
PART_OF = "app.kubernetes.io/part-of=kube-steer"
COMPILED_KINDS = (
    "MutatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
)


def compiled_policies(policy_file: Path) -> list[dict[str, Any]]:
    """What `steer policy admission-policy --mutating -f policy_file` prints, parsed."""
    return printed_admission_policies(policy_file)


def apply_compiled(api_client: client.ApiClient, docs: list[dict[str, Any]]) -> list[str]:
    """Create (or replace) each object; returns their kinds/names. The apiserver enforces them
    a moment later (it loads them from a watch)."""
    admission = client.AdmissionregistrationV1Api(api_client)
    made = []
    for doc in docs:
        create_or_replace(admission, doc)
        made.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return made


def _snake(kind: str) -> str:
    """MutatingAdmissionPolicyBinding -> mutating_admission_policy_binding (the client's names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def remove_compiled(api_client: client.ApiClient) -> None:
    """Delete every admission policy and binding of the project (the part-of label)."""
    admission: Any = client.AdmissionregistrationV1Api(api_client)
    for kind in COMPILED_KINDS:
        with contextlib.suppress(client.ApiException):
            getattr(admission, f"delete_collection_{_snake(kind)}")(label_selector=PART_OF)
