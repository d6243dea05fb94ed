"""memopt: find, predict and verify ONNX Runtime Training memory-optimizer configs."""

__version__ = "0.1.0"

__all__ = ["__version__"]
