"""The controller: the jobs that write what confines everyone else, under their own identity.

The scorer parses Prometheus answers and serves HTTP; a token stolen from it must not reach
admission objects, webhook configurations or Secrets (docs/security.md). So those jobs run
here, in a process that serves nothing but its health and metrics, as the ServiceAccount
steer-controller (manifests/controller/):
- `admission_sync` (`--admission-policies`): the admission policies compiled from the running
  policy, applied by the leader (what to write: `admission_plan`, pure);
- `certs_renewal` (`--webhook-certs=renew`): the webhook's serving certificate and the
  `caBundle` of its configurations;
- `policy_status`: what the sync found, in the SteeringPolicy's `status.admissionPolicies`.
`serve` wires them under one Lease (`steer-controller`); `cli` is `steer controller run`.
"""
