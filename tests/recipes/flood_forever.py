"""A job that prints without end and never trains: a command for `memopt trial --cmd`."""

import sys

line = "x" * 1023 + "\n"
block = line * 1024
count = 0
while True:
    count += 1
    sys.stdout.write(f"block {count}\n{block}")
