"""Lets the examples run from a source checkout without `pip install`."""
import os
import sys

try:
    import hvd  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "bindings", "python"))
