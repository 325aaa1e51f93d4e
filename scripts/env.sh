#!/usr/bin/env bash
# Python + ONNX Runtime environment for tritonrs (tests, README commands, model generation).
#
#   source scripts/env.sh          # set up if needed, then export the variables below into this shell
#   scripts/env.sh CMD [ARGS...]   # set up if needed, then run CMD inside the environment
#   scripts/env.sh                 # set up if needed, then print `export` lines (eval "$(scripts/env.sh)")
#
# What it does (idempotent; a no-op costing a few milliseconds once done):
#   1. creates $REPO/.venv (python3 -m venv) and pip-installs scripts/requirements.txt into it;
#      a marker holding the sha256 of that file skips the install on later runs.
#   2. symlinks $REPO/.ort/libonnxruntime.so -> the libonnxruntime.so.* shipped in the
#      onnxruntime wheel (site-packages/onnxruntime/capi/).
#   3. exports ORT_DYLIB_PATH=$REPO/.ort/libonnxruntime.so, TRITONRS_VENV=$REPO/.venv,
#      VIRTUAL_ENV=$REPO/.venv and puts $REPO/.venv/bin first on PATH.
#
# Knobs: TRITONRS_PYTHON (interpreter used to create the venv, default python3),
#        TRITONRS_ENV_FORCE=1 (re-run pip and relink even when the marker matches).
# pip runs with --no-compile (halves the first run; Python compiles what it imports lazily).
# Every message of the setup goes to stderr, so `scripts/env.sh CMD` keeps CMD's stdout clean.

_tritonrs_env_setup() {
    local repo="$1"
    local venv="$repo/.venv"
    local ort_dir="$repo/.ort"
    local req="$repo/scripts/requirements.txt"
    local marker="$venv/.tritonrs-requirements.sha256"
    local link="$ort_dir/libonnxruntime.so"
    local py="${TRITONRS_PYTHON:-python3}"
    local want have=""

    [ -f "$req" ] || { echo "env.sh: missing $req" >&2; return 1; }
    want="$(sha256sum "$req" | cut -d' ' -f1)"

    _tritonrs_env_ready() {
        [ -z "${TRITONRS_ENV_FORCE:-}" ] || return 1
        [ -x "$venv/bin/python" ] || return 1
        [ -e "$link" ] || return 1   # -e follows the symlink: a dangling link is "not ready"
        [ -f "$marker" ] || return 1
        have="$(cat "$marker")"
        [ "$have" = "$want" ]
    }

    # Fast path: nothing to do.
    if _tritonrs_env_ready; then
        return 0
    fi

    mkdir -p "$ort_dir"
    # Serialise concurrent first runs (e.g. parallel tests); re-check once the lock is held.
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$ort_dir/.env.lock"
        flock 9
        if _tritonrs_env_ready; then
            return 0
        fi
    fi

    local t0=$SECONDS

    # 1a. A Python interpreter with a working venv module.
    if ! command -v "$py" >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && [ "$py" = python3 ]; then
            echo "env.sh: python3 not found; installing python3 + python3-venv with apt-get" >&2
            # shellcheck source=scripts/apt.sh
            source "$repo/scripts/apt.sh"
            apt_get update -qq >&2
            apt_get install -y -qq python3 python3-venv >&2
        else
            echo "env.sh: '$py' not found. Install Python 3 (Debian: sudo apt-get install python3 python3-venv)" \
                 "or point TRITONRS_PYTHON at an interpreter." >&2
            return 1
        fi
    fi

    if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
        echo "env.sh: $venv is broken (its interpreter does not start); recreating it" >&2
        rm -rf "$venv"
    fi

    if [ ! -x "$venv/bin/python" ]; then
        rm -rf "$venv"
        # Debian splits ensurepip (needed by `python3 -m venv`) into python3-venv.
        if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
                echo "env.sh: python venv/ensurepip module missing; installing python3-venv with apt-get" >&2
                # shellcheck source=scripts/apt.sh
                source "$repo/scripts/apt.sh"
                apt_get update -qq >&2
                apt_get install -y -qq python3-venv >&2
            fi
            if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
                echo "env.sh: '$py -m venv' is unavailable (no venv/ensurepip module)." >&2
                echo "env.sh: on Debian/Ubuntu run: sudo apt-get install python3-venv   (then re-run this script)" >&2
                return 1
            fi
        fi
        echo "env.sh: creating $venv with $("$py" --version 2>&1)" >&2
        "$py" -m venv "$venv" >&2
    fi

    # 1b. Pinned packages.
    echo "env.sh: installing scripts/requirements.txt into .venv (about 40 s when fresh)" >&2
    rm -f "$marker"
    if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$venv/bin/python" -m pip install -q --no-compile -r "$req" >&2; then
        echo "env.sh: pip install failed (is PyPI reachable?)" >&2
        return 1
    fi

    # 2. Stable symlink to the ONNX Runtime shared library inside the wheel.
    local lib="" f
    for f in "$venv"/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so*; do
        # Prefer the real, fully versioned file (libonnxruntime.so.1.22.1) over any symlink.
        if [ -f "$f" ] && [ ! -L "$f" ]; then lib="$f"; fi
    done
    if [ -z "$lib" ]; then
        echo "env.sh: no libonnxruntime.so* under $venv/lib/python3*/site-packages/onnxruntime/capi" >&2
        return 1
    fi
    # Relative link (../.venv/...) so it keeps pointing inside this checkout.
    ln -sfn "../${lib#"$repo"/}" "$link.tmp.$$"
    mv -Tf "$link.tmp.$$" "$link"

    echo "$want" > "$marker"
    echo "env.sh: ready in $((SECONDS - t0))s; ORT_DYLIB_PATH -> ${lib#"$repo"/}" >&2
}

_tritonrs_env_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # Sourced: run the setup as a separate strict-mode bash process (a subshell inside `if`
    # would silently ignore `set -e`), so neither the options nor the lock leak into the caller.
    unset -f _tritonrs_env_setup
    if ! "${BASH:-bash}" "${BASH_SOURCE[0]}" >/dev/null; then
        echo "env.sh: setup failed; environment not changed" >&2
        unset _tritonrs_env_repo
        return 1
    fi
    export TRITONRS_VENV="$_tritonrs_env_repo/.venv"
    export VIRTUAL_ENV="$TRITONRS_VENV"
    export ORT_DYLIB_PATH="$_tritonrs_env_repo/.ort/libonnxruntime.so"
    case ":$PATH:" in
        *":$TRITONRS_VENV/bin:"*) ;;
        *) export PATH="$TRITONRS_VENV/bin:$PATH" ;;
    esac
    unset PYTHONHOME
    unset _tritonrs_env_repo
    return 0
fi

# Executed.
set -euo pipefail
( _tritonrs_env_setup "$_tritonrs_env_repo" )
export TRITONRS_VENV="$_tritonrs_env_repo/.venv"
export VIRTUAL_ENV="$TRITONRS_VENV"
export ORT_DYLIB_PATH="$_tritonrs_env_repo/.ort/libonnxruntime.so"
case ":$PATH:" in
    *":$TRITONRS_VENV/bin:"*) ;;
    *) export PATH="$TRITONRS_VENV/bin:$PATH" ;;
esac
unset PYTHONHOME

if [ "$#" -eq 0 ]; then
    printf 'export TRITONRS_VENV=%q\n' "$TRITONRS_VENV"
    printf 'export VIRTUAL_ENV=%q\n' "$VIRTUAL_ENV"
    printf 'export ORT_DYLIB_PATH=%q\n' "$ORT_DYLIB_PATH"
    printf 'export PATH=%q\n' "$PATH"
    exit 0
fi
exec "$@"
