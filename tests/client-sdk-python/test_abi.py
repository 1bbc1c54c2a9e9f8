"""The binding's view of the C API against the C API itself: size getters vs the header's
macros, struct layouts vs a C compiler's sizeof/offsetof, defaults read back through the
binding's field offsets, status names vs core's enum, and the version."""

import ctypes
import os
import re
import shutil
import subprocess

import pytest

import flotilla_client as fc
from flotilla_client import _native
from conftest import ROOT

CLIENT_H = os.path.join(ROOT, "client-sdk", "include", "flotilla", "client.h")
COMMON_H = os.path.join(ROOT, "core", "include", "flotilla", "common.h")
VERSION_H = os.path.join(ROOT, "core", "include", "flotilla", "version.h")


def header_macros(path):
    out = {}
    with open(path) as f:
        for m in re.finditer(r"^#define\s+(FL_\w+)\s+(\d+)\b", f.read(), re.M):
            out[m.group(1)] = int(m.group(2))
    return out


def test_size_getters_match_header_macros():
    macros = header_macros(CLIENT_H)
    got = fc.sizes()
    assert set(got) == set(_native.HEADER_SIZES)
    for k, v in got.items():
        macro = "FL_CLIENT_" + k.upper()
        assert macro in macros, macro
        assert macros[macro] == v, macro
        assert _native.HEADER_SIZES[k] == v, k
    # Every FL_CLIENT_ size macro of the header has a getter the binding exposes.
    sized = {m for m in macros if m.startswith("FL_CLIENT_")}
    assert sized == {"FL_CLIENT_" + k.upper() for k in got}


def test_status_names_match_core_enum():
    with open(COMMON_H) as f:
        text = f.read()
    enum = dict((n, int(v)) for n, v in re.findall(r"^\s+(FL_(?:OK|ERR_\w+))\s*=\s*(\d+)",
                                                    text, re.M))
    assert len(enum) == header_macros(COMMON_H)["FL_STATUS_COUNT"]
    for name, code in enum.items():
        assert _native.STATUS_NAMES[code] == name
        assert fc.status_name(code) == name
    assert fc.status_name(999) == "FL_STATUS_999"


def test_version_matches_header():
    m = header_macros(VERSION_H)
    want = "%d.%d.%d" % (m["FL_VERSION_MAJOR"], m["FL_VERSION_MINOR"], m["FL_VERSION_PATCH"])
    assert fc.version() == want
    assert fc.version_number() == (m["FL_VERSION_MAJOR"] * 1000000 + m["FL_VERSION_MINOR"] * 1000
                                   + m["FL_VERSION_PATCH"])


@pytest.mark.parametrize("cls,init", [
    (_native.fl_client_store_config, "fl_client_store_config_init"),
    (_native.fl_client_train_params, "fl_client_train_params_init"),
    (_native.fl_client_curl_config, "fl_client_curl_config_init"),
    (_native.fl_client_config, "fl_client_config_init"),
])
def test_config_struct_size_matches_library(cls, init):
    # config_init writes sizeof(the C struct) into struct_size.
    _, view = _native.lib().init_struct(cls, init)
    assert view.struct_size == ctypes.sizeof(cls)


def test_defaults_read_through_binding_offsets():
    lib = _native.lib()
    _, p = lib.init_struct(_native.fl_client_train_params, "fl_client_train_params_init")
    assert (p.epochs, p.batch_size, p.learning_rate, p.momentum, p.weight_decay,
            p.proximal_mu, p.max_examples, p.seed) == (1, 32, 0.05, 0.9, 0.0, 0.0, 0, 1)
    _, c = lib.init_struct(_native.fl_client_config, "fl_client_config_init")
    assert c.platform == b"linux"
    assert (c.momentum, c.max_model_bytes, c.backoff_initial_ms, c.backoff_max_ms,
            c.request_timeout_ms, c.long_poll_s, c.retry_timeout_ms) == (
                0.9, 64 << 20, 1000, 3600000, 30000, 30, 300000)
    _, t = lib.init_struct(_native.fl_client_curl_config, "fl_client_curl_config_init")
    assert t.connect_timeout_ms == 10000


def _c_layout_program(structs):
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "flotilla/client.h"',
             "int main(void) {"]
    for cls in structs:
        n = cls.__name__
        lines.append('    printf("%s %%zu\\n", sizeof(%s));' % (n, n))
        for f, _ in cls._fields_:
            lines.append('    printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (n, f, n, f))
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def test_struct_layouts_match_c_compiler(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to check layouts against")
    structs = [_native.fl_allocator, _native.fl_logger, _native.fl_client_store_config,
               _native.fl_client_train_params, _native.fl_client_transport,
               _native.fl_client_curl_config, _native.fl_client_eligibility,
               _native.fl_client_config, _native.fl_client_stats, _native.fl_client_request,
               _native.fl_client_tensor]
    src = tmp_path / "layout.c"
    src.write_text(_c_layout_program(structs))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "client-sdk", "include"), "-I",
                    os.path.join(ROOT, "core", "include"), str(src), "-o", str(exe)],
                   check=True)
    want = dict(line.split() for line in
                subprocess.run([str(exe)], check=True, capture_output=True, text=True)
                .stdout.splitlines())
    for cls in structs:
        n = cls.__name__
        assert int(want[n]) == ctypes.sizeof(cls), n
        for f, _ in cls._fields_:
            assert int(want[n + "." + f]) == getattr(cls, f).offset, n + "." + f


def test_library_path_and_key_id():
    assert os.path.exists(fc.lib_path())
    env = os.environ.get("FLOTILLA_CLIENT_LIB")
    if env:
        assert os.path.realpath(env) == os.path.realpath(fc.lib_path())
    # docs/protocol.md 4.1: hex of the first 8 bytes of SHA-256(pk).
    import hashlib
    pk = bytes(range(32))
    assert fc.key_id(pk) == hashlib.sha256(pk).hexdigest()[:16]
    assert len(fc.key_id(pk)) == fc.sizes()["key_id_chars"]
    with pytest.raises(ValueError):
        fc.key_id(b"short")
