"""The SteeringPolicy document (intermediate step: the module moved into the package)."""

from steer.core.policy.spec import *  # noqa: F403
