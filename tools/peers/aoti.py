#!/usr/bin/env python
"""AOTInductor on a specialized model (CPU): specfx.export → aoti_compile_and_package →
load → compare with eager → the guard fires in the compiled package.

    python -m tools.peers.aoti

Not part of the test suite: the C++ compile takes about a minute on two cores
(the time is printed; docs/quantization.md quotes one run).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

import specfx
from specfx import Policy

from tools.peers.export_routes import DataBranch


def main() -> None:
    torch.manual_seed(0)
    model = DataBranch().eval()
    example = torch.randn(4, 8) + 2
    start = time.perf_counter()
    program = specfx.export(model, (example,), policy=Policy(bool=True))
    exported = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "data_branch.pt2")
        start = time.perf_counter()
        torch._inductor.aoti_compile_and_package(program, package_path=path)
        compiled = time.perf_counter() - start
        runner = torch._inductor.aoti_load_package(path)
        fresh = torch.randn(7, 8) + 2  # another batch size: the batch dimension is dynamic
        torch.testing.assert_close(runner(fresh), model(fresh), atol=1e-5, rtol=1e-5)
        print(f"specfx.export {exported:.1f} s, aoti_compile_and_package {compiled:.1f} s; "
              f"the package matches eager on batch 7")
        try:
            runner(torch.randn(4, 8) - 2)
        except RuntimeError as error:
            print("the guard fires in the compiled package:", str(error).splitlines()[0][:160])
        else:
            raise SystemExit("the guard did not fire in the AOTInductor package")


if __name__ == "__main__":
    # no options; parsing still gives --help and refuses a mistyped argument before the long compile
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    main()
