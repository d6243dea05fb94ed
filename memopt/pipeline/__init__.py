"""The orchestration stage: what runs across back ends, above both.

- ``torch_export``: an ORT config carried over to plain PyTorch (ORT's scan and plan names
  matched against the torch back end's scan).

It sits above ``memopt.backends`` (each back end's scan, model, trials and session) and
imports them; no back end imports it.
"""
