"""Checking mode: every call's buffers checked against its plan inside the call (`checking_mode`).

The checks run where the call runs (the FFI stage, `_ffi._checking`); this is their public face.
"""

from ._ffi._checking import CheckingModeError as CheckingModeError
from ._ffi._checking import checking_mode as checking_mode
from ._ffi._checking import set_checking_mode as set_checking_mode

__all__ = ["CheckingModeError", "checking_mode", "set_checking_mode"]
