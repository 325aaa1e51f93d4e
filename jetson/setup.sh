#!/usr/bin/env bash
# Sets up tritonrs on a Jetson (or any Debian/Ubuntu host):
#   sudo jetson/setup.sh [tritonrs_<version>_arm64.deb]
# 1. installs the .deb when one is given;
# 2. says which JetPack / L4T this is and the power mode (nvpmodel), warning when it is not MAXN;
# 3. finds ONNX Runtime (>= 1.17: system, /opt, or a pip-installed onnxruntime), OpenVINO's C library
#    (>= 2025.1: INTEL_OPENVINO_DIR / OPENVINO_INSTALL_DIR, /opt/intel/openvino*, the system's lib
#    folders, or a pip-installed openvino), CUDA and TensorRT libraries, and writes the paths of the
#    first two into the configuration file as
#    backend-config = ["onnxruntime,library=...", "openvino,library=..."] unless one is set already
#    (tritonrs then needs no python3 with openvino to find OpenVINO); CUDA and TensorRT are
#    recorded as comments (tritonrs finds them by their sonames); with TensorRT 8 (JetPack 4.6 / 5)
#    it says whether the TensorRT 8 shim is installed and how to build it;
# 4. checks that the service's sandbox lets CUDA in: runs the unit's privileged nvidia-modprobe step,
#    then cuInit in a one-shot `systemd-run` with the unit's hardening properties, and says what it
#    found (skipped, with the reason, where this is not the running system, not root, or has no
#    systemd or libcuda);
# 5. checks the configuration with `tritonrs validate --config`.
# Other modes:
#   sudo jetson/setup.sh --check-sandbox        only step 4 (exit status 0 passed, 1 a problem, 2 skipped)
#   jetson/setup.sh --print-sandbox-properties UNITFILE
#                                               the --property= arguments step 4 passes to systemd-run,
#                                               one a line, read from UNITFILE's [Service] sections
# ROOT (default /) and CONFIG (default $ROOT/etc/tritonrs/tritonrs.toml) let tests run it on a fake tree.
set -euo pipefail

ROOT=${ROOT:-/}
ROOT=${ROOT%/}
CONFIG=${CONFIG:-$ROOT/etc/tritonrs/tritonrs.toml}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { printf 'setup: %s\n' "$*"; }

# --- the service's sandbox

# The lines of a unit file (FILE, or - for stdin, such as `systemctl cat` output) with continuation
# lines joined as systemd joins them.
unit_lines() {
    awk '
        { sub(/\r$/, "") }
        held != "" { $0 = held $0; held = "" }
        /\\$/ { held = substr($0, 1, length($0) - 1) " "; next }
        { print }
        END { if (held != "") print held }
    ' "$1"
}

# The hardening directives of the [Service] sections as systemd-run arguments, one a line:
# --property=NAME=VALUE for DynamicUser, User, Group, SupplementaryGroups, NoNewPrivileges,
# LockPersonality, MemoryDenyWriteExecute, Protect*, Private*, Restrict*, Device*, SystemCall*,
# CapabilityBoundingSet, AmbientCapabilities and the *Paths lists, in the file's order (a later
# assignment overrides or, when empty, resets an earlier one, as in drop-ins).
sandbox_properties() {
    unit_lines "$1" | awk '
        {
            line = $0
            sub(/^[ \t]+/, "", line)
            if (line == "" || line ~ /^[#;]/) next
            if (line ~ /^\[/) { service = (line ~ /^\[Service\][ \t]*$/); next }
            if (!service) next
            eq = index(line, "=")
            if (eq == 0) next
            name = substr(line, 1, eq - 1)
            sub(/[ \t]+$/, "", name)
            value = substr(line, eq + 1)
            sub(/^[ \t]+/, "", value)
            sub(/[ \t]+$/, "", value)
            if (name ~ /^(DynamicUser|User|Group|SupplementaryGroups|NoNewPrivileges|LockPersonality)$/ ||
                name ~ /^(MemoryDenyWriteExecute|CapabilityBoundingSet|AmbientCapabilities)$/ ||
                name ~ /^(Protect|Private|Restrict|Device|SystemCall)[A-Za-z]*$/ ||
                name ~ /^(ReadWrite|ReadOnly|Inaccessible)Paths$/)
                print "--property=" name "=" value
        }
    '
}

# The shell script of the unit's privileged ExecStartPre that runs nvidia-modprobe: the text between
# the first and last single quote, with systemd's $$ turned back into $.
unit_prestart_script() {
    unit_lines "$1" | awk '!found && /^[ \t]*ExecStartPre=/ && /nvidia-modprobe/ { print; found = 1 }' |
        sed -e "s/^[^']*'//" -e "s/'[^']*\$//" -e 's/[$][$]/$/g'
}

# Runs in the sandbox (and as root, for comparison): loads libcuda, calls cuInit and
# cuDeviceGetCount, and where that fails lists the GPU device nodes it may not read and write.
# Python 3.6 (JetPack 4.6) or later; no dollar sign in it, as systemd expands those in a command line.
CUDA_PROBE=$(cat <<'EOF'
import ctypes, glob, grp, os, sys
def out(*words):
    print("probe:", *words)
    sys.stdout.flush()
def group(gid):
    try:
        return "%s(%d)" % (grp.getgrgid(gid).gr_name, gid)
    except KeyError:
        return str(gid)
out("groups", ",".join(group(g) for g in os.getgroups()) or "none")
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    out("nolib", e)
    sys.exit(0)
count = ctypes.c_int(0)
rc = cuda.cuInit(0)
if rc == 0:
    rc = cuda.cuDeviceGetCount(ctypes.byref(count))
name = "-"
if rc != 0 and hasattr(cuda, "cuGetErrorName"):
    text = ctypes.c_char_p()
    if cuda.cuGetErrorName(rc, ctypes.byref(text)) == 0 and text.value:
        name = text.value.decode()
out("cuInit", rc, name, count.value)
if rc != 0:
    nodes = []
    for pattern in ("/dev/nvhost-*", "/dev/nvmap", "/dev/nvgpu/*/*", "/dev/nvidia*"):
        nodes += glob.glob(pattern)
    for path in sorted(nodes):
        if not os.path.isdir(path) and not os.access(path, os.R_OK | os.W_OK):
            out("denied", path)
EOF
)

# Where the installed unit is, else the one in this checkout.
unit_file() {
    local f
    for f in /etc/systemd/system/tritonrs.service /lib/systemd/system/tritonrs.service \
             /usr/lib/systemd/system/tritonrs.service "$HERE/../systemd/tritonrs.service"; do
        if [ -f "$f" ]; then
            printf '%s\n' "$f"
            return 0
        fi
    done
    return 1
}

have_libcuda() {
    local cache
    cache=$({ /sbin/ldconfig -p || ldconfig -p; } 2>/dev/null || true)
    grep -q 'libcuda\.so\.1 ' <<<"$cache" && return 0
    ls /usr/lib/*/tegra/libcuda.so.1 /usr/lib/*/libcuda.so.1 /usr/lib64/libcuda.so.1 >/dev/null 2>&1
}

systemd_version() {
    systemd-run --version 2>/dev/null | sed -n '1s/^systemd \([0-9][0-9]*\).*/\1/p'
}

# Why the sandbox check cannot run here (nothing when it can).
sandbox_skip_reason() {
    local version
    if [ -n "$ROOT" ]; then
        echo "ROOT=$ROOT is not this machine's root"
    elif [ "$(id -u)" != 0 ]; then
        echo "needs root (sudo $0 --check-sandbox)"
    elif ! command -v systemd-run >/dev/null 2>&1; then
        echo "no systemd-run"
    elif [ ! -d /run/systemd/system ]; then
        echo "systemd is not running here"
    elif ! command -v python3 >/dev/null 2>&1; then
        echo "no python3 to call cuInit with"
    elif ! have_libcuda; then
        echo "no libcuda.so.1 (no NVIDIA driver)"
    else
        # --wait came with systemd 232, --pipe with 235 (--collect, 236, is optional).
        version=$(systemd_version)
        if [ -n "$version" ] && [ "$version" -lt 235 ]; then
            echo "systemd $version's systemd-run has no --pipe (235 and later; JetPack 4.6 has 237)"
        fi
    fi
}

# What a failed cuInit means. $1 is the code, $2 the device nodes the sandbox may not use, $3 the
# sandbox's groups.
cuda_hint() {
    local code=$1 denied=$2 groups=$3
    if [ -n "$denied" ]; then
        echo "the service (groups: $groups) cannot read and write $denied; they should belong to group video (ls -l them; L4T's udev rules do that), or give the service their group in a drop-in: SupplementaryGroups=GROUP"
    elif [ "$code" = 999 ] && [ ! -e /etc/nv_tegra_release ] && ! command -v nvidia-modprobe >/dev/null 2>&1; then
        echo "on x86 this is nvidia_uvm not loaded: install nvidia-modprobe (the unit runs it as root before the server starts), or load the module at boot: echo nvidia_uvm | sudo tee /etc/modules-load.d/nvidia-uvm.conf"
    elif [ "$code" = 999 ] && [ ! -e /etc/nv_tegra_release ]; then
        echo "nvidia_uvm is still not usable after nvidia-modprobe -u -c=0: lsmod | grep nvidia_uvm, ls -l /dev/nvidia-uvm, sudo dmesg | tail"
    elif [ "$code" = 100 ]; then
        echo "no CUDA device: is the driver loaded (nvidia-smi; on a Jetson ls -l /dev/nvhost-ctrl-gpu /dev/nvgpu/igpu0), and does a drop-in set DevicePolicy= without the GPU's nodes?"
    else
        echo "compare with cuInit as root above, and see sudo dmesg | tail"
    fi
}

# cuInit under the unit's sandbox. Returns 0 when it works, 1 when it does not, 2 when skipped.
check_sandbox() {
    local reason unit source script version out err rc attempt=0 dropped="" refused p name
    local props=() kept=() collect=()
    local line code error count denied groups
    reason=$(sandbox_skip_reason)
    if [ -n "$reason" ]; then
        say "sandbox check skipped: $reason"
        return 2
    fi
    # The installed unit with its drop-ins, else the unit file.
    if systemctl cat tritonrs.service >/dev/null 2>&1; then
        source="systemctl cat tritonrs.service"
        mapfile -t props < <(systemctl cat tritonrs.service 2>/dev/null | sandbox_properties -)
        script=$(systemctl cat tritonrs.service 2>/dev/null | unit_prestart_script -)
    elif unit=$(unit_file); then
        source=$unit
        mapfile -t props < <(sandbox_properties "$unit")
        script=$(unit_prestart_script "$unit")
    else
        say "sandbox check skipped: no tritonrs.service installed or next to this script"
        return 2
    fi

    # First what the unit runs as root before the server starts (x86: nvidia_uvm and the nodes),
    # then cuInit as root, to compare with.
    if [ -n "$script" ]; then
        sh -c "$script" >/dev/null 2>&1 || true
    fi
    line=$(python3 -c "$CUDA_PROBE" </dev/null 2>/dev/null | sed -n 's/^probe: cuInit //p') || true
    if [ -n "$line" ]; then
        read -r code error count <<<"$line"
        [ "$error" != - ] || error=""
        say "as root, cuInit returns $code${error:+ ($error)} and sees $count GPU(s)"
    fi

    version=$(systemd_version)
    if [ -z "$version" ] || [ "$version" -ge 236 ]; then collect=(--collect); fi
    err=$(mktemp)
    # A property this systemd-run refuses (ProtectClock= on 237, say) is left out and the run tried
    # again: the service itself starts without it there, after a warning.
    while :; do
        attempt=$((attempt + 1))
        rc=0
        out=$(timeout 300 systemd-run --quiet --wait --pipe ${collect[@]+"${collect[@]}"} \
                  --unit="tritonrs-sandbox-check-$$-$attempt" ${props[@]+"${props[@]}"} \
                  "$(command -v python3)" -c "$CUDA_PROBE" </dev/null 2>"$err") || rc=$?
        if [ "${#collect[@]}" = 0 ]; then
            systemctl reset-failed "tritonrs-sandbox-check-$$-$attempt.service" >/dev/null 2>&1 || true
        fi
        if [ "$rc" = 124 ]; then
            systemctl stop "tritonrs-sandbox-check-$$-$attempt.service" >/dev/null 2>&1 || true
        fi
        grep -q '^probe: ' <<<"$out" && break
        refused=""
        for p in ${props[@]+"${props[@]}"}; do
            name=${p#--property=}
            name=${name%%=*}
            if grep -qw -- "$name" "$err"; then refused=$name; break; fi
        done
        [ -n "$refused" ] || break
        dropped="$dropped $refused"
        kept=()
        for p in "${props[@]}"; do
            case "$p" in "--property=$refused="*) ;; *) kept+=("$p") ;; esac
        done
        props=(${kept[@]+"${kept[@]}"})
    done
    say "sandbox check: ${#props[@]} hardening properties from $source${dropped:+ (this systemd-run refused:$dropped)}"

    line=$(sed -n 's/^probe: cuInit //p' <<<"$out")
    groups=$(sed -n 's/^probe: groups //p' <<<"$out")
    denied=$(sed -n 's/^probe: denied //p' <<<"$out" | tr '\n' ' ' | sed 's/ $//')
    if [ -z "$line" ]; then
        if grep -q '^probe: nolib' <<<"$out"; then
            say "warning: under the service's sandbox libcuda.so.1 does not load: $(sed -n 's/^probe: nolib //p' <<<"$out")"
        else
            say "warning: the sandbox check did not run (systemd-run exit status $rc): $(tail -n 3 "$err" | tr '\n' ' ')"
        fi
        rm -f "$err"
        return 1
    fi
    rm -f "$err"
    read -r code error count <<<"$line"
    [ "$error" != - ] || error=""
    if [ "$code" = 0 ] && [ "$count" -gt 0 ]; then
        say "under the service's sandbox cuInit returned 0 and sees $count GPU(s)"
        return 0
    fi
    say "warning: under the service's sandbox cuInit returned $code${error:+ ($error)} and sees $count GPU(s): $(cuda_hint "$code" "$denied" "$groups")"
    return 1
}

case "${1:-}" in
    --print-sandbox-properties)
        [ $# = 2 ] || { echo "usage: $0 --print-sandbox-properties UNITFILE" >&2; exit 2; }
        sandbox_properties "$2"
        exit 0
        ;;
    --check-sandbox)
        rc=0
        check_sandbox || rc=$?
        exit "$rc"
        ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
esac

if [ $# -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { say "run as root to install $1"; exit 1; }
    apt-get install -y "$(realpath "$1")"
fi

# --- which board and JetPack
if [ -r "$ROOT/etc/nv_tegra_release" ]; then
    l4t=$(sed -n 's/^# R\([0-9]*\) (release), REVISION: \([0-9.]*\).*/\1.\2/p' "$ROOT/etc/nv_tegra_release")
    case "$l4t" in
        32.*) jetpack="4.x (Ubuntu 18.04, CUDA 10.2)" ;;
        35.*) jetpack="5.x (Ubuntu 20.04, CUDA 11.4)" ;;
        36.*) jetpack="6.x (Ubuntu 22.04, CUDA 12)" ;;
        *) jetpack="unknown" ;;
    esac
    say "L4T R$l4t: JetPack $jetpack"
else
    say "not a Jetson (no /etc/nv_tegra_release)"
fi
if command -v nvpmodel >/dev/null && [ "$ROOT" = "" ]; then
    mode=$(nvpmodel -q 2>/dev/null | sed -n 's/^NV Power Mode: *//p')
    say "power mode: ${mode:-unknown}"
    case "$mode" in MAXN*) ;; *) say "for steady latency: sudo nvpmodel -m 0 && sudo jetson_clocks" ;; esac
fi

# --- libraries
newest() { { ls -1 "$@" 2>/dev/null || true; } | sort -V | tail -n1; }
# OpenVINO's version from a library's name: libopenvino_c.so.2641 -> 2026.4, libopenvino_c.so.2025.4.0
# -> 2025.4; nothing for the plain name.
ov_version() {
    local v=${1##*libopenvino_c.so}
    v=${v#.}
    case "$v" in
        [0-9][0-9][0-9][0-9]) printf '20%s.%s\n' "${v:0:2}" "${v:2:1}" ;;
        [0-9][0-9][0-9][0-9].*) printf '%s\n' "$v" | cut -d. -f1,2 ;;
    esac
}
# The newest of the OpenVINO libraries matching the patterns, by that version; the plain name (usually a
# link to a versioned file) only where there is no versioned one.
newest_ov() {
    local f v
    { ls -1 "$@" 2>/dev/null || true; } | while IFS= read -r f; do
        v=$(ov_version "$f")
        printf '%s\t%s\n' "${v:-0}" "$f"
    done | sort -t "$(printf '\t')" -V -k1,1 -k2,2 | tail -n1 | cut -f2-
}
ort=""
for pattern in "$ROOT/opt/tritonrs/lib/libonnxruntime.so*" "$ROOT/usr/local/lib/libonnxruntime.so*" \
               "$ROOT/usr/lib/aarch64-linux-gnu/libonnxruntime.so*" "$ROOT/usr/lib/x86_64-linux-gnu/libonnxruntime.so*" \
               "$ROOT/usr/local/lib/python3*/dist-packages/onnxruntime/capi/libonnxruntime.so*" \
               "$ROOT/usr/lib/python3/dist-packages/onnxruntime/capi/libonnxruntime.so*"; do
    # shellcheck disable=SC2086
    found=$(newest $pattern)
    if [ -n "$found" ]; then ort=$found; break; fi
done
# OpenVINO's C library: an archive named by the variables setupvars.sh sets, Intel's archives in
# /opt/intel (newest first), the system's lib folders, then a pip-installed openvino, whose libs/
# folder has only versioned names (libopenvino_c.so.2641 is 2026.4.1).
ov=""
ov_patterns=()
for dir in "${INTEL_OPENVINO_DIR:-}" "${OPENVINO_INSTALL_DIR:-}"; do
    [ -n "$dir" ] && ov_patterns+=("$ROOT$dir/runtime/lib/*/libopenvino_c.so*" "$ROOT$dir/lib/libopenvino_c.so*")
done
ov_patterns+=("$ROOT/opt/intel/openvino*/runtime/lib/*/libopenvino_c.so*" \
              "$ROOT/usr/local/lib/libopenvino_c.so*" "$ROOT/usr/lib/aarch64-linux-gnu/libopenvino_c.so*" \
              "$ROOT/usr/lib/x86_64-linux-gnu/libopenvino_c.so*" "$ROOT/usr/lib/libopenvino_c.so*" \
              "$ROOT/usr/local/lib/python3*/dist-packages/openvino/libs/libopenvino_c.so*" \
              "$ROOT/usr/lib/python3/dist-packages/openvino/libs/libopenvino_c.so*" \
              "$ROOT/usr/local/lib/python3*/site-packages/openvino/libs/libopenvino_c.so*" \
              "$ROOT/usr/lib/python3*/site-packages/openvino/libs/libopenvino_c.so*")
for pattern in "${ov_patterns[@]}"; do
    # shellcheck disable=SC2086
    found=$(newest_ov $pattern)
    if [ -n "$found" ]; then ov=$found; break; fi
done
cuda=$(newest "$ROOT"/usr/local/cuda/lib64/libcudart.so.*)
trt=$(newest "$ROOT"/usr/lib/aarch64-linux-gnu/libnvinfer.so.* "$ROOT"/usr/lib/x86_64-linux-gnu/libnvinfer.so.*)
say "ONNX Runtime: ${ort:-not found (see jetson/README.md: Which ONNX Runtime)}"
say "OpenVINO: ${ov:-not found (openvino and tensorflow models need it: pip3 install openvino, or an OpenVINO archive)}"
say "CUDA runtime: ${cuda:-not found}"
say "TensorRT: ${trt:-not found}"
case "${trt##*libnvinfer.so.}" in
    8.*)
        if [ -f "$ROOT/usr/lib/tritonrs/libtritonrs_trt8.so" ]; then
            say "TensorRT 8 shim: $ROOT/usr/lib/tritonrs/libtritonrs_trt8.so"
        else
            say "TensorRT 8 needs its shim for tensorrt_plan models: sudo /usr/share/tritonrs/trt-shim/build-trt8-shim.sh"
        fi
        ;;
esac
if [ -n "$ort" ]; then
    version=${ort##*libonnxruntime.so.}
    if [ "$version" != "$ort" ] && [ "$(printf '%s\n1.17\n' "$version" | sort -V | head -n1)" != "1.17" ]; then
        say "warning: ONNX Runtime $version is older than 1.17, which tritonrs needs; ONNX models will be UNAVAILABLE"
    fi
fi

if [ -n "$ov" ]; then
    version=$(ov_version "$ov")
    if [ -n "$version" ] && [ "$(printf '%s\n2025.1\n' "$version" | sort -V | head -n1)" != "2025.1" ]; then
        say "warning: OpenVINO $version is older than 2025.1, which tritonrs needs; OpenVINO models will be UNAVAILABLE"
    fi
fi

# --- cuInit under the service's sandbox
check_sandbox || true

# --- the configuration file
if [ ! -f "$CONFIG" ]; then
    say "no $CONFIG (is the package installed?)"
    exit 1
fi
entries=() written=()
if [ -n "$ort" ]; then entries+=("\"onnxruntime,library=${ort#"$ROOT"}\""); written+=("ONNX Runtime"); fi
if [ -n "$ov" ]; then entries+=("\"openvino,library=${ov#"$ROOT"}\""); written+=("OpenVINO"); fi
if ((${#entries[@]})); then
    if grep -q '^backend-config *=' "$CONFIG"; then
        say "$CONFIG already sets backend-config; left as it is"
    else
        list=$(IFS=,; printf '%s' "${entries[*]}" | sed 's/","/", "/g')
        printf '\n# Written by jetson/setup.sh.\nbackend-config = [%s]\n' "$list" >>"$CONFIG"
        say "wrote the $(IFS=/; printf '%s' "${written[*]}") library path(s) into $CONFIG"
    fi
fi
for lib in "$cuda" "$trt"; do
    if [ -n "$lib" ] && ! grep -qF "${lib#"$ROOT"}" "$CONFIG"; then
        printf '# Found by jetson/setup.sh: %s\n' "${lib#"$ROOT"}" >>"$CONFIG"
    fi
done
if command -v tritonrs >/dev/null; then
    tritonrs validate --config "$CONFIG" || say "tritonrs validate found problems (above)"
fi
say "next: put models in /var/lib/tritonrs/models, then: sudo systemctl restart tritonrs"
