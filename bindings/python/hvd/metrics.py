"""hvd.metrics: what the running job did, always on (docs/metrics.md).

``hvd.metrics()`` returns this rank's report as a dict (the library's JSON,
``"version": 1``): per collective and algorithm counts, bytes and seconds,
bus bandwidth per size class, fusion, the response cache, negotiation
against data time, errors by status, and the stragglers (who submitted last,
and what it cost). The module itself is callable, so ``hvd.metrics()`` and
``hvd.metrics.serve(9400)`` both work; ``hvd.metrics.snapshot()`` is the same
call by name.

``serve(port)`` exposes the report to Prometheus through the optional
``prometheus_client`` package (on loopback unless ``addr`` is given).
"""

from __future__ import annotations

import ctypes
import json
import sys
import types

from . import _c_api

__all__ = ["snapshot", "text", "serve", "JSON", "PROMETHEUS"]

JSON = 0        # HVD_METRICS_JSON
PROMETHEUS = 1  # HVD_METRICS_PROMETHEUS


def _handle(context):
    if context is None:
        return None
    require = getattr(context, "_require", None)
    if require is None:
        raise TypeError(f"hvd.metrics: context must be an hvd.Context, got {type(context).__name__}")
    return require()


def text(format=JSON, context=None) -> str:
    """The report as text: JSON (``format=JSON``) or Prometheus' text format
    (``format=PROMETHEUS``), of ``context`` (default: hvd.init's)."""
    handle = _handle(context)
    needed = ctypes.c_size_t(0)
    _c_api.call("hvd_metrics", handle, int(format), None, 0, ctypes.byref(needed))
    # The counters may grow between the two calls: room to spare, and a retry.
    for _ in range(8):
        buf = ctypes.create_string_buffer(needed.value + 4096)
        rc = _c_api.lib().hvd_metrics(handle, int(format), buf, len(buf), ctypes.byref(needed))
        if rc != _c_api.HVD_ERR_INVALID_ARGUMENT or needed.value <= len(buf):
            _c_api.check_call(rc)
            return buf.value.decode("utf-8")
    _c_api.check_call(rc)
    return buf.value.decode("utf-8")


def snapshot(context=None) -> dict:
    """This rank's report as a dict (docs/metrics.md lists the fields)."""
    return json.loads(text(JSON, context))


class Server:
    """A running metrics endpoint (``serve``); ``close()`` stops it."""

    def __init__(self, httpd, thread):
        self._httpd = httpd
        self._thread = thread
        self.port = httpd.server_address[1]

    def close(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def serve(port: int, addr: str = "127.0.0.1", context=None) -> Server:
    """Serves this rank's metrics at http://addr:port/metrics for Prometheus
    (port 0: any free port, see ``Server.port``). Needs ``prometheus_client``.
    For the whole job from one place, run under ``hvdrun --metrics-port``."""
    try:
        import prometheus_client
        from prometheus_client.parser import text_string_to_metric_families
        from prometheus_client.registry import CollectorRegistry
    except ImportError as e:
        raise ImportError("hvd.metrics.serve needs the prometheus_client package "
                          "(pip install prometheus_client)") from e

    class _Collector:
        def collect(self):
            yield from text_string_to_metric_families(text(PROMETHEUS, context))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    httpd, thread = prometheus_client.start_http_server(int(port), addr=addr, registry=registry)
    return Server(httpd, thread)


class _CallableModule(types.ModuleType):
    """hvd.metrics() is hvd.metrics.snapshot()."""

    def __call__(self, context=None) -> dict:
        return snapshot(context)


sys.modules[__name__].__class__ = _CallableModule
