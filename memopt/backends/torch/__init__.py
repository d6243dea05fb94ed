"""The plain-PyTorch back end: a step's saved activations (``capture``) grouped into recompute plans (``scan``).

The plans are ``memopt.recompute``'s: module-path patterns and aten ops, applied in the user's
script (and in a trial's child process) by ``memopt.recompute.apply``.
"""
