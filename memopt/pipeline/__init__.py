"""The orchestration stage: what runs across back ends, above both.

- ``carry_over``: an ORT config carried over to plain PyTorch and verified there (``map_config``,
  then ``verify_mapped``): what ``memopt export --torch`` and ``tune --export-torch`` run.
- ``torch_export``: the matching itself, ORT's scan and plan names against the torch back end's scan.

It sits above ``memopt.backends`` (each back end's scan, model, trials and session) and
imports them; no back end imports it.
"""
