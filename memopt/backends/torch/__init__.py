"""The plain-PyTorch back end: recompute plans as module-path patterns and aten ops.

``policy`` reads and writes the policy file, ``apply`` puts a policy on a model (both need
only torch and the standard library: a user's training script imports them through
``memopt.recompute``); ``capture`` scans one training step's saved activations.
"""
