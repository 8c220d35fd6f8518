"""Turns a results folder (results.jsonl + meta.json) into report.md, the PNG
plots and machine.md. Used by bench/run_all.py; `run_all.py --report-only DIR`
rebuilds a report from stored results.

One module per part of the report: common (series, loading, formats, tables),
collectives, fusion, latency, e2e, many_hosts, ucx, gpu, plots, document
(report.md in order) and machine (machine.md)."""

from .common import fmt_bytes, load
from .document import write_all
from .machine import write_machine

__all__ = ["fmt_bytes", "load", "write_all", "write_machine"]
