"""The no-cluster demo, run from the checkout (`python -m kits.demo`, `make demo`).

`environment` builds the synthetic cluster (exporter, Prometheus, API stand-in), `pods` holds
the example pods, `loop` runs the scorer and the webhook on it and admits the pods, and `cli`
parses the command line. It lives in the kits, not in the product CLI: the wheel and the image
carry no stand-in to run it on.
"""
