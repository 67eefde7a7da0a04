"""The scorer leader's jobs beside the cycle, each with its own watch and writes:

- `policy_status`: the SteeringPolicy's `status` (Accepted, DataReady);
- `pending`: the steered pods the scheduler cannot place, and the Warning Event on each that a
  kube-steer rule keeps Pending.

The Lease that makes a leader is `steer.adapters.lease`, shared with the controller.
"""
