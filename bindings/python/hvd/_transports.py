"""Which transports this machine can use, and why not.

``available_transports()`` asks libhvd's own loader (hvd_transport_probe):
the same search as ``hvd.init()`` -- HVD_TRANSPORT_PATH's folders, then the
folder libhvd.so was loaded from, with the optional libraries a plugin needs
(MPI, UCX, the CUDA runtime, NCCL) looked for where the system's loader looks
and in the Python environment's NVIDIA and Open MPI wheels. Nothing is
initialised; what loads is unloaded again where the library allows it (MPI
libraries stay loaded).
"""

from __future__ import annotations

import os

from . import _c_api

# The transports hvd ships plugins for, in the order a report lists them.
KNOWN = ("local", "gloo", "mpi", "ucx", "nccl")


def _plugin_names(dirs):
    """KNOWN plus any other libhvd_transport_<name>.so in the folders."""
    names = list(KNOWN)
    pre, post = "libhvd_transport_", ".so"
    for d in dirs:
        try:
            entries = sorted(os.listdir(d))
        except OSError:
            continue
        for f in entries:
            if f.startswith(pre) and f.endswith(post):
                name = f[len(pre):-len(post)]
                if name and name not in names:
                    names.append(name)
    return names


def available_transports(transport_path=None):
    """A dict name -> (usable, why): for every transport hvd knows and every
    plugin file found, whether it loads here and, where not, the loader's
    message (which plugin file was missing, or which library it needs and
    what to install). transport_path: ':'-separated plugin folders searched
    before libhvd's (default: HVD_TRANSPORT_PATH)."""
    if transport_path is None:
        transport_path = os.environ.get("HVD_TRANSPORT_PATH", "")
    lib = _c_api.lib()
    dirs = [d for d in transport_path.split(":") if d]
    dirs.append(os.path.dirname(lib.path))
    out = {}
    for name in _plugin_names(dirs):
        rc = lib.hvd_transport_probe(name.encode(), transport_path.encode())
        if rc == _c_api.HVD_OK:
            out[name] = (True, "built in" if name == "local" else "loads")
        else:
            out[name] = (False, _c_api.last_error())
    return out


def transports_report(transport_path=None):
    """available_transports() as a table, one line per transport."""
    lines = []
    for name, (ok, why) in available_transports(transport_path).items():
        lines.append(f"    [{'X' if ok else ' '}] {name:<6} {why}")
    return "\n".join(lines)
