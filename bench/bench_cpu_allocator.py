"""What the peak RSS of a training step holds beyond its tensors, with glibc's mmap threshold
moving (its default) and pinned (``MALLOC_MMAP_THRESHOLD_=131072``, as memopt's torch runs have it).

Each case runs in a fresh child: the recipe's model, batch and optimizer built and its two training
steps run by ``memopt.backends.torch.simulate`` on real tensors, which counts the live bytes of
every storage made from the model's first parameter on (``tensors``, at their highest); ``rss``
is the child's peak RSS (``VmHWM``) less its RSS before the model was built. The gap (rss less
tensors) is what the fake-tensor model adds from one run at another batch: it
holds for every batch and policy only where it does not move.

    python bench/bench_cpu_allocator.py                       # GPT-2-small shapes, 512 tokens
    python bench/bench_cpu_allocator.py --cases gpt:tiny:64:256
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from memopt.run.budget import CPU_ALLOCATOR_ENV

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def _child(recipe: str, size: str, seq: int, batch: int, plans: str) -> None:
    from memopt.backends.torch.simulate import simulate_steps
    from memopt.child.memory import proc_status_bytes
    from memopt.recipes import load_recipe
    from memopt.recompute import RecomputePlan, RecomputePolicy

    policy = RecomputePolicy(tuple(RecomputePlan.parse(p) for p in plans.split(";") if p))
    loaded = load_recipe(recipe, {"size": size, "seq_len": seq})
    before = proc_status_bytes("VmRSS")
    played = simulate_steps(loaded, batch, policy, fake=False)
    print(played.start_bytes, played.peak_bytes, before, proc_status_bytes("VmHWM"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="gpt:small:512:1,gpt:small:512:2,gpt:small:512:4")
    parser.add_argument("--policy", default="blocks.*: *", help="one more run of the last case with this policy")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        recipe, size, seq, batch, plans = args.child
        _child(recipe, size, int(seq), int(batch), plans)
        return
    cases = [(*text.split(":"), "") for text in args.cases.split(",")]
    cases.append((*cases[-1][:4], args.policy))
    print("| glibc's mmap threshold | case | policy | tensors at their highest MiB | RSS growth MiB | gap MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    pinned_to = " ".join(f"{name}={value}" for name, value in CPU_ALLOCATOR_ENV.items())
    for pinned in (False, True):
        env = {k: v for k, v in os.environ.items() if k not in CPU_ALLOCATOR_ENV} | (
            CPU_ALLOCATOR_ENV if pinned else {}
        )
        env["PYTHONPATH"] = str(ROOT)
        for recipe, size, seq, batch, plans in cases:
            done = subprocess.run(
                [sys.executable, __file__, "--child", recipe, size, seq, batch, plans],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            _, peak, before, hwm = map(int, done.stdout.split()[-4:])
            tensors, rss = peak, hwm - before
            print(
                f"| {'pinned (' + pinned_to + ')' if pinned else 'moving (default)'} | {recipe} {size}, {batch} × {seq} "
                f"| {plans or 'none'} | {tensors / MIB:,.0f} | {rss / MIB:,.0f} | {(rss - tensors) / MIB:+,.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
