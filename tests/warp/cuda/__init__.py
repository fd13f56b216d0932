"""The CUDA path: checked without a GPU (faked devices, streams and driver calls, PTX from NVRTC), and on one.

The native handler's CUDA branch, the callable executor under XLA's capture, module loads during a capture, every
CUDA launch against its compiled kernel, Warp's deterministic mode, ahead-of-time builds and CUDA lowerings, and the
tests marked ``gpu`` (skipped without a CUDA device unless ``JARP_REQUIRE_GPU=1``).
"""
