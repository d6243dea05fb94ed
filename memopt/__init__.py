"""memopt: find, predict and verify what to recompute so a training batch fits a memory budget,
for ONNX Runtime Training's ORTModule (an ORTMODULE_MEMORY_OPT_CONFIG) and for plain PyTorch
(a policy that ``memopt.recompute.apply`` reads)."""

__version__ = "0.1.0"

__all__ = ["__version__"]
