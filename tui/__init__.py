"""memopt's terminal UI (installed as ``memopt.tui``): the ``memopt tune`` screen."""

__all__: list[str] = []
