"""Who may read what the scorer serves: every data-bearing endpoint (the page, `/explain/*`,
`/metrics`) authenticates its caller and asks the apiserver whether that caller may read what
the answer holds; only `/healthz` and `/readyz` answer anyone.

- `rules`: which permission each endpoint needs (pure): a pod's explanation `get pods` in its
  namespace, a node's `get nodes`, the lists what reading all of them needs, `/metrics` the
  `get` on its non-resource URL (the kube-rbac-proxy convention).
- `cache`: the bounded, short-lived memory of the apiserver's answers (pure).
- `reviews`: the caller's bearer token reviewed (TokenReview) and each permission asked
  (SubjectAccessReview) of the apiserver, cached; the scorer's ServiceAccount needs `create` on
  both (the `system:auth-delegator` ClusterRole).
- `gate`: the Flask side: the token from `Authorization` or, through the apiserver's Service
  proxy (which drops `Authorization`), from `X-Steer-Authorization`; 401, 403 or 503.
"""
