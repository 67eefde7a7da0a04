"""A Kubernetes API stand-in for tests and the demo: real HTTP, the apiserver's rules.

No kube-apiserver binary runs here, so this serves nodes, namespaces, pods, leases and events
over HTTP(S) to the real `kubernetes` client, enforcing what kube-steer's correctness depends on: label and
taint validation (422), resourceVersion conflicts (409), the PATCH flavours' semantics, list
paging and watches that expire (410). Bodies match those captured from a real apiserver.
"""

from kits.apistub.faults import RequestRecord
from kits.apistub.server import ApiStub

__all__ = ["ApiStub", "RequestRecord"]
