"""Per-node trace cost in instructions (valgrind's callgrind), free of start-up costs:
the difference between tracing ``ResidualNormBlocks(large)`` and ``(small)`` (after a
warm-up trace), divided by the difference in node counts.

    python -m tools.bench.node_cost                     # runs callgrind twice per mode, prints Ir/node
    python -m tools.bench.node_cost --one 200 examples  # (what each callgrind run executes)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import torch

torch.set_num_threads(1)


def _trace(blocks: int, mode: str) -> int:
    import specfx
    from tools.bench.models import ResidualNormBlocks

    x = torch.randn(4, 32)
    examples = (x,) if mode == "examples" else None
    specfx.trace(ResidualNormBlocks(3), examples)  # warm-up: first-call caches out of the count
    model = ResidualNormBlocks(blocks)
    return len(specfx.trace(model, examples).graph.nodes)


def _callgrind(blocks: int, mode: str) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m", "tools.bench.node_cost",
             "--one", str(blocks), mode], capture_output=True, text=True, check=True)
        nodes = int(re.findall(r"^nodes (\d+)$", run.stdout, re.M)[-1])
        with open(out) as file:
            total = int(re.findall(r"^summary: (\d+)", file.read(), re.M)[-1])
    return nodes, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", nargs=2, metavar=("BLOCKS", "MODE"))
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=200)
    args = parser.parse_args()
    if args.one:
        print("nodes", _trace(int(args.one[0]), args.one[1]))
        return
    for mode in ("examples", "none"):
        (n1, i1), (n2, i2) = _callgrind(args.small, mode), _callgrind(args.large, mode)
        print(f"{mode:9s} nodes {n1}->{n2}  Ir {i1}->{i2}  per node {(i2 - i1) / (n2 - n1):,.0f} Ir")


if __name__ == "__main__":
    main()
