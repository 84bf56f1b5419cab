"""The standalone GPU harness of the CUDA kernels (see README.md and harness/)."""
