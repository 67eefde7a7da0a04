"""The watches that keep the cycle's inputs in memory, so a cycle lists nothing:

- `nodes`: every Node, reduced to a `NodeState`;
- `bindings`: the pods bound since the last cycle (anti-herding), feeding the ledger;
- `ledger`: which pods hold resources on which node (gates, budget pools, cluster scores).
"""
