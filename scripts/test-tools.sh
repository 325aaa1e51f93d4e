#!/usr/bin/env bash
# The reference tools some black-box tests drive tritonrs with, installed from package registries only
# (x86_64; idempotent, a no-op once done):
#   - perf_analyzer 2.60 (PyPI perf-analyzer) into $ANCHORS/pa, with the C runtime it needs beside it:
#     its binary wants glibc 2.38, newer than Debian 12's, so Debian 13's libc6, libstdc++6, libgcc-s1,
#     libssl3t64 and zlib1g are fetched with apt-get download (from this machine's Debian mirror) and
#     unpacked into $ANCHORS/glibc, never installed;
#   - the CUDA runtime library perf_analyzer 2.60 dlopens for any --shared-memory (no GPU needed to load
#     it), from the nvidia-pytriton 0.7.0 wheel the C API tests already use, into $ANCHORS/triton;
#   - Model Analyzer 1.58 (PyPI triton-model-analyzer) in its own venv, $REPO/.ma-venv
#     (tests/python/test_tune_ma.py);
#   - genai-perf 0.0.16 (PyPI) in its own venv, $REPO/.gp-venv (tests/python/test_openai.py): its
#     unpinned dependencies (numpy 2, pytest, pillow, transformers) would move the pins of
#     scripts/requirements.txt; it runs the perf_analyzer above (its own `perf-analyzer` dependency
#     resolves to a placeholder package without the binary);
#   - tritonserver 2.51 (CPU, Python backend) from the same wheel, the differential tests' reference.
# $ANCHORS defaults to $REPO/.anchors; the layout is that of ../shared/anchors/install.sh, so ANCHORS
# may point at either. Afterwards $ANCHORS/bin/perf_analyzer runs perf_analyzer.
#
#   scripts/test-tools.sh          # install what is missing
#
# A failure is reported and exits non-zero; scripts/test.sh then goes on, and the tests that need the
# missing tool skip with the reason.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
A="${ANCHORS:-$REPO/.anchors}"
PY="${TRITONRS_PYTHON:-python3}"
CACHE="${TRITONRS_TEST_CACHE:-$HOME/.cache/tritonrs-tests}"
log() { echo "test-tools: $*" >&2; }

if [ "$(uname -m)" != x86_64 ]; then
    log "perf_analyzer and Model Analyzer are only set up on x86_64; their tests skip here"
    exit 0
fi
mkdir -p "$A/bin" "$A/dl" "$CACHE"

if ! "$A/bin/perf_analyzer" --version >/dev/null 2>&1; then
    t0=$SECONDS
    if [ ! -x "$A/pa/perf_analyzer/bin/perf_analyzer" ]; then
        log "perf-analyzer 2.60.0 from PyPI"
        "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
            --platform manylinux_2_38_x86_64 -d "$A/dl" perf-analyzer==2.60.0
        rm -rf "$A/pa" && mkdir "$A/pa"
        "$PY" -m zipfile -e "$A"/dl/perf_analyzer-2.60.0-*.whl "$A/pa"
        chmod +x "$A/pa/perf_analyzer/bin/perf_analyzer"
    fi
    if [ ! -e "$A/glibc/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ]; then
        log "Debian 13's C runtime for it (apt-get download, unpacked under $A/glibc)"
        mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
        [ -n "$mirror" ] || mirror=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
        [ -n "$mirror" ] || { log "no Debian mirror in /etc/apt/sources.list*"; exit 1; }
        mkdir -p "$A/apt/lists/partial" "$A/apt/cache/archives/partial" "$A/apt/debs"
        printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
            "$mirror" /usr/share/keyrings/debian-archive-keyring.gpg > "$A/apt/trixie.sources"
        apt_opts=(-oDir::State::Lists="$A/apt/lists" -oDir::Cache="$A/apt/cache" -oDir::Etc::SourceList="$A/apt/trixie.sources"
                  -oDir::Etc::SourceParts=/nonexistent -oAPT::Architecture=amd64 -oDebug::NoLocking=1
                  -oAPT::Sandbox::User=root)
        apt-get "${apt_opts[@]}" update -qq
        (cd "$A/apt/debs" && apt-get "${apt_opts[@]}" download -qq \
            libc6:amd64 libstdc++6:amd64 libgcc-s1:amd64 libssl3t64:amd64 zlib1g:amd64)
        rm -rf "$A/glibc" && mkdir "$A/glibc"
        for deb in "$A"/apt/debs/*.deb; do dpkg-deb -x "$deb" "$A/glibc"; done
    fi
    if ! ls "$A"/triton/nvidia_pytriton.libs/libcudart*.so* >/dev/null 2>&1; then
        log "the CUDA runtime library perf_analyzer loads, from the nvidia-pytriton 0.7.0 wheel"
        ls "$CACHE"/nvidia_pytriton-0.7.0-*.whl >/dev/null 2>&1 ||
            "$PY" -m pip download -q --no-deps -d "$CACHE" nvidia-pytriton==0.7.0
        rm -rf "$A/triton" && mkdir -p "$A/triton"
        "$PY" - "$CACHE" "$A/triton" <<'PY'
import glob, sys, zipfile
wheel = sorted(glob.glob(f"{sys.argv[1]}/nvidia_pytriton-0.7.0-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    z.extractall(sys.argv[2], [m for m in z.namelist() if m.startswith("nvidia_pytriton.libs/libcudart")])
PY
    fi
    cat > "$A/bin/perf_analyzer" <<W
#!/bin/sh
# perf_analyzer 2.60 on the C runtime unpacked beside it (scripts/test-tools.sh)
L="$A/glibc/usr/lib/x86_64-linux-gnu"
exec "\$L/ld-linux-x86-64.so.2" --library-path "\$L:$A/triton/nvidia_pytriton.libs" "$A/pa/perf_analyzer/bin/perf_analyzer" "\$@"
W
    chmod +x "$A/bin/perf_analyzer"
    "$A/bin/perf_analyzer" --version >/dev/null 2>&1
    log "perf_analyzer ready in $((SECONDS - t0)) s: $A/bin/perf_analyzer"
fi

# NVIDIA's tritonserver 2.51 itself (CPU build with the Python backend, from the same nvidia-pytriton
# wheel), the reference of the differential tests: $ANCHORS/bin/tritonserver runs it with the Python
# backend preconfigured, its stub built for this interpreter and this repository's .venv (numpy 1.x) on PATH.
TS="$A/triton/pytriton/tritonserver"
# (`tritonserver --help` prints the flags on stderr and exits 1, so the check reads what it prints.)
ts_ok() { case "$("$A/bin/tritonserver" --help 2>&1)" in *--model-repository*) return 0 ;; *) return 1 ;; esac; }
if ! ts_ok; then
    t0=$SECONDS
    log "tritonserver 2.51 from the nvidia-pytriton 0.7.0 wheel"
    ls "$CACHE"/nvidia_pytriton-0.7.0-*.whl >/dev/null 2>&1 ||
        "$PY" -m pip download -q --no-deps -d "$CACHE" nvidia-pytriton==0.7.0
    "$PY" - "$CACHE" "$A/triton" <<'PY'
import glob, sys, zipfile
wheel = sorted(glob.glob(f"{sys.argv[1]}/nvidia_pytriton-0.7.0-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    z.extractall(sys.argv[2], [m for m in z.namelist()
                               if m.startswith(("pytriton/tritonserver/", "nvidia_pytriton.libs/"))])
PY
    pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    chmod +x "$TS/bin/tritonserver"
    if [ -e "$TS/python_backend_stubs/$pyver/triton_python_backend_stub" ]; then
        cp "$TS/python_backend_stubs/$pyver/triton_python_backend_stub" "$TS/backends/python/"
        chmod +x "$TS/backends/python/triton_python_backend_stub"
    else
        log "no Python backend stub for Python $pyver in the wheel; tritonserver's Python models will not load"
    fi
    cat > "$A/bin/tritonserver" <<W
#!/bin/sh
# tritonserver 2.51 (scripts/test-tools.sh); Python models run in the stub with the repository's .venv
export PATH="$REPO/.venv/bin:\$PATH"
export LD_LIBRARY_PATH="$A/triton/nvidia_pytriton.libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$TS/bin/tritonserver" --backend-directory="$TS/backends" --cache-directory="$TS/caches" "\$@"
W
    chmod +x "$A/bin/tritonserver"
    ts_ok || { log "$A/bin/tritonserver does not run"; exit 1; }
    log "tritonserver ready in $((SECONDS - t0)) s: $A/bin/tritonserver"
fi

MA="$REPO/.ma-venv"
if [ ! -x "$MA/bin/model-analyzer" ]; then
    t0=$SECONDS
    log "model-analyzer 1.58 from PyPI into $MA (about 600 MB)"
    [ -x "$MA/bin/python" ] || "$PY" -m venv "$MA"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$MA/bin/python" -m pip install -q --no-compile \
        triton-model-analyzer==1.58.0
    log "model-analyzer installed in $((SECONDS - t0)) s"
fi
# A venv that does not run (say, its interpreter moved) is reported, not deleted: it may hold
# someone's work, and the differential test then skips with the reason.
if ! "$MA/bin/model-analyzer" --help >/dev/null 2>&1; then
    log "$MA/bin/model-analyzer does not run; remove $MA to install it again"
    exit 1
fi

GP="$REPO/.gp-venv"
if [ ! -x "$GP/bin/genai-perf" ]; then
    t0=$SECONDS
    log "genai-perf 0.0.16 from PyPI into $GP (about 700 MB)"
    [ -x "$GP/bin/python" ] || "$PY" -m venv "$GP"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$GP/bin/python" -m pip install -q --no-compile \
        genai-perf==0.0.16
    log "genai-perf installed in $((SECONDS - t0)) s"
fi
if ! "$GP/bin/genai-perf" --version >/dev/null 2>&1; then
    log "$GP/bin/genai-perf does not run; remove $GP to install it again"
    exit 1
fi
