"""kube-steer: a data-driven scheduling policy enforced by the stock kube-scheduler."""

__version__ = "0.3.0"
