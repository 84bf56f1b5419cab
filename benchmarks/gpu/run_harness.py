"""Run the GPU harness of the standard-Adam CUDA kernels: ``python benchmarks/gpu/run_harness.py``.

Every check and option is explained by ``--help`` and in README.md; the code
lives in the ``harness`` package beside this file.
"""
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness.cli import main
    main()
