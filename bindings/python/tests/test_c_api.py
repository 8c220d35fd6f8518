"""The ctypes layer: every hvd.h function declared, struct layouts equal to
the C compiler's, errors mapped, library search and version refusal."""

import ctypes
import os
import re
import shutil
import subprocess
import sys

import pytest

import harness
import hvd
import hvd._c_api as C

HEADER = os.path.join(harness.REPO, "include", "hvd.h")


def header_functions():
    text = open(HEADER).read()
    return set(re.findall(r"HVD_API\s+[^;]*?\b(hvd_\w+)\s*\(", text))


def test_every_header_function_is_declared():
    declared = header_functions()
    assert declared, "no functions parsed from hvd.h"
    assert declared == set(C.FUNCTIONS), (
        f"missing in _c_api: {sorted(declared - set(C.FUNCTIONS))}; "
        f"not in hvd.h: {sorted(set(C.FUNCTIONS) - declared)}")


def test_every_exported_function_has_argtypes():
    lib = C.lib()
    for name in C.FUNCTIONS:
        fn = getattr(lib, name)
        if name in C.MISSING:
            continue
        assert fn.argtypes is not None, name


def test_constants_match_header():
    text = open(HEADER).read()
    for name, value in re.findall(r"^\s*(HVD_[A-Z0-9_]+)\s*=\s*(-?\d+)", text, re.M):
        assert getattr(C, name) == int(value), name
    for name, shift in re.findall(r"#define (HVD_PARAM_[A-Z_]+)\s+\(1ULL << (\d+)\)", text):
        assert getattr(C, name) == 1 << int(shift), name
    top = re.search(r"#define HVD_PARAM_ALL_\s+\(\(1ULL << (\d+)\) - 1\)", text)
    assert top and C.HVD_PARAM_ALL_ == (1 << int(top.group(1))) - 1
    assert C.HVD_PARAM_ALL_ == (C.HVD_PARAM_PEER_TIMEOUT << 1) - 1
    assert C.HVD_DEVICE_CPU == -1 and C.HVD_MAX_NDIM == 32


LAYOUT_C = r"""
#include <stddef.h>
#include <stdio.h>
#include "hvd.h"
#define F(T, f) printf(#T " " #f " %zu %zu\n", offsetof(T, f), sizeof(((T*)0)->f));
int main(void) {
  printf("hvd_tensor_t sizeof %zu 0\n", sizeof(hvd_tensor_t));
  printf("hvd_params_t sizeof %zu 0\n", sizeof(hvd_params_t));
  F(hvd_tensor_t, data) F(hvd_tensor_t, dtype) F(hvd_tensor_t, ndim) F(hvd_tensor_t, shape)
  F(hvd_tensor_t, device) F(hvd_tensor_t, stream)
  %PARAMS%
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler to read the struct layouts from")
def test_struct_layouts_match_c(tmp_path):
    fields = " ".join(f"F(hvd_params_t, {f})" for f, _ in C.HvdParams._fields_)
    src = tmp_path / "layout.c"
    src.write_text(LAYOUT_C.replace("%PARAMS%", fields))
    exe = tmp_path / "layout"
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-std=c99", "-I", os.path.dirname(HEADER), str(src), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, stdout=subprocess.PIPE).stdout.decode()
    seen = 0
    for line in out.splitlines():
        struct, field, off, sz = line.split()
        cls = C.HvdTensor if struct == "hvd_tensor_t" else C.HvdParams
        if field == "sizeof":
            assert ctypes.sizeof(cls) == int(off), struct
            continue
        desc = getattr(cls, field)
        assert (desc.offset, desc.size) == (int(off), int(sz)), f"{struct}.{field}"
        seen += 1
    assert seen == len(C.HvdTensor._fields_) + len(C.HvdParams._fields_)


def test_params_init_defaults():
    p = C.HvdParams()
    assert p.struct_size == ctypes.sizeof(C.HvdParams) and p.mask == 0
    assert p.autotune == 0 and p.transport_path is None
    # The last fields, appended: older callers' structs end before them.
    assert C.HvdParams.autotune.offset >= C.HvdParams.transport_timeout_s.offset + 8
    assert C.HvdParams.transport_path.offset > C.HvdParams.autotune.offset


def test_version_and_status_strings():
    assert hvd.library_version()[0] == C.BINDING_VERSION_MAJOR
    for code in list(C._ERROR_CLASSES) + [C.HVD_OK, C.HVD_IN_PROGRESS, 12345]:
        s = C.status_string(code)
        assert isinstance(s, str) and s
    assert C.dtype_size(C.HVD_BFLOAT16) == 2 and C.dtype_size(C.HVD_FLOAT64) == 8


def test_errors_carry_status_and_message():
    with pytest.raises(hvd.InvalidArgumentError) as e:
        C.dtype_size(99)
    assert e.value.status == C.HVD_ERR_INVALID_ARGUMENT
    assert "dtype 99" in str(e.value) and isinstance(e.value, hvd.HvdError)
    assert isinstance(e.value, ValueError)
    for code, cls in C._ERROR_CLASSES.items():
        err = C.make_error(code, "m")
        assert isinstance(err, cls) and isinstance(err, hvd.HvdError) and err.status == code


def _python(code, env):
    e = dict(os.environ)
    e.update(env)
    e["PYTHONPATH"] = harness.PKG_ROOT
    return subprocess.run([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60)


def test_library_path_env_folder_and_file():
    d = harness.library_dir()
    for value in (d, os.path.join(d, "libhvd.so")):
        p = _python("import hvd; print(hvd.library_path())", {"HVD_LIBRARY_PATH": value})
        assert p.returncode == 0, p.stdout
        assert os.path.realpath(p.stdout.decode().strip()) == os.path.realpath(
            os.path.join(d, "libhvd.so"))


def test_library_path_env_bad_file_is_an_error(tmp_path):
    bad = tmp_path / "libhvd.so"
    bad.write_text("not a library")
    p = _python("import hvd; hvd.rank()", {"HVD_LIBRARY_PATH": str(bad)})
    assert p.returncode != 0
    assert "HVD_LIBRARY_PATH" in p.stdout.decode() and str(bad) in p.stdout.decode()


def test_library_not_found_lists_every_place(tmp_path):
    # A copy of the package outside the repository, with nothing to find.
    pkg = tmp_path / "hvd"
    shutil.copytree(os.path.join(harness.PKG_ROOT, "hvd"), pkg,
                    ignore=shutil.ignore_patterns("*.so*", "__pycache__"))
    e = dict(os.environ, PYTHONPATH=str(tmp_path), HVD_LIBRARY_PATH=str(tmp_path / "nowhere"),
             LD_LIBRARY_PATH="")
    p = subprocess.run([sys.executable, "-c", "import hvd; hvd.init()"], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                       cwd=str(tmp_path))
    text = p.stdout.decode()
    assert p.returncode != 0
    assert "LibraryNotFoundError" in text
    assert str(tmp_path / "nowhere") in text  # the env override
    assert str(pkg) in text  # the package folder
    assert "default loader" in text


def test_major_version_mismatch_is_refused():
    code = ("import hvd._c_api as C; C.BINDING_VERSION_MAJOR = 99\n"
            "try:\n    C.lib()\nexcept C.VersionError as e:\n    print('refused:', e)\n")
    p = _python(code, {})
    assert p.returncode == 0 and "refused:" in p.stdout.decode(), p.stdout
    assert "major version 99" in p.stdout.decode()


def test_missing_symbol_raises_unsupported():
    missing_fn = C._MissingFunction("hvd_future_call", "/x/libhvd.so")
    with pytest.raises(hvd.UnsupportedError, match="hvd_future_call: not exported"):
        missing_fn()


def test_device_result_memory_exposes_the_cuda_array_interface_only():
    """A result left in device memory (hvd_handle_output_device) is offered to
    frameworks through the CUDA array interface, complete (no stream to wait
    on); it has no host array interface, so numpy cannot read device memory."""
    from hvd import _ops
    mem = _ops.HandleDeviceMemory(None, 0x10000, 96)  # no handle: nothing to release
    cai = mem.__cuda_array_interface__
    assert cai == {"shape": (96,), "typestr": "|u1", "data": (0x10000, False), "version": 3,
                   "stream": None}
    assert not hasattr(mem, "__array_interface__")
    host = _ops.HandleMemory(None, 0x10000, 96)
    assert host.__array_interface__["data"] == (0x10000, False)
    assert "hvd_handle_output_device" in C.FUNCTIONS
