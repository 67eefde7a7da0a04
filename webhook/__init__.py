"""The kube-steer admission webhook: Pod mutation and validation over TLS, from memory."""
