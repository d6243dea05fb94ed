"""The plain-PyTorch back end: a step's saved activations (``memopt.recompute.capture``) grouped
into recompute plans (``scan``, and ``command_scan`` for a user's own job), the peak model
(``predict``), trials (``trial``), plan and tune (``tune``), and an ORT config carried over
(``export``, with ``gradients``' bitwise check).

The plans are ``memopt.recompute``'s: module-path patterns and aten ops, applied in the user's
script (and in a trial's child process) by ``memopt.recompute.apply``.
"""
