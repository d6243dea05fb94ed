import torch  # noqa: F401

raise RuntimeError("this recipe cannot be imported")
