"""memopt's start-up hook for a user's training command; on ``PYTHONPATH`` only while memopt runs it.

Installs ``memopt.child.job`` (step counting and memory reports) where memopt asked for it
(``MEMOPT_JOB_STEPS_FILE`` set), then runs the ``sitecustomize`` this one shadows, so a
job's own start-up customisation still happens.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _install_job_hook() -> None:
    root = os.environ.get("MEMOPT_PACKAGE_ROOT", "")
    added = bool(root) and root not in sys.path
    if added:
        sys.path.insert(0, root)
    try:
        from memopt.child.job import install

        install()
    except Exception as err:  # the user's job runs on; memopt reports that it saw no step
        print(f"[memopt] the step hook could not be installed: {err!r}", file=sys.stderr, flush=True)
    finally:
        if added:
            sys.path.remove(root)


def _run_shadowed_sitecustomize() -> None:
    others = [entry for entry in sys.path if os.path.abspath(entry or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("MEMOPT_JOB_STEPS_FILE"):
    _install_job_hook()
_run_shadowed_sitecustomize()
