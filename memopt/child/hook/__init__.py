"""The folder memopt puts first on a user's job's ``PYTHONPATH``: it holds only ``sitecustomize``.

Python imports ``sitecustomize`` at start-up in every process of the job (torchrun's
workers included), which installs ``memopt.child.job``'s step counter, then runs the
``sitecustomize`` this folder shadows, if there is one.
"""
