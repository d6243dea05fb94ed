"""A job that leaves a daemon: a plain fork, setsid, a second session; the job itself exits.

The daemon writes its pid to the file named by its first argument, then sleeps.
"""

import os
import sys
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1] + ".tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(120)
    os._exit(0)
deadline = time.monotonic() + 30
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("the daemon is running")
