"""Training back ends other than ORTModule: each captures a step, names its recompute plans and applies them."""
