#!/usr/bin/env bash
# Produces the release packages: tritonrs_<version>-1_amd64.deb and tritonrs_<version>-1_arm64.deb, with
# SHA-256 checksums, in target/release-debs/.
#
#   scripts/release.sh
#
# 1. scripts/build-portable.sh: both release binaries with the glibc 2.27 floor, checked and
#    smoke-tested (the arm64 one under qemu).
# 2. cargo deb --no-build for each (cargo-deb from crates.io, installed when missing; its settings are
#    [package.metadata.deb] in Cargo.toml): the binary, the systemd unit in /usr/lib/systemd/system
#    (enabled by the postinst, not started), the
#    preset, /etc/tritonrs/tritonrs.toml as a conffile, the example repository under
#    /usr/share/tritonrs/examples.
# 3. Checks each package with dpkg-deb: its architecture, version and dependencies, and that every
#    file above is in it; then writes SHA256SUMS.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
OUT=target/release-debs
PORTABLE=${PORTABLE_TARGET_DIR:-$PWD/target/portable}
log() { printf '[release] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
start=$(date +%s)

scripts/build-portable.sh x86_64 aarch64

if ! command -v cargo-deb >/dev/null; then
    log "cargo install cargo-deb@$CARGO_DEB_VERSION"
    cargo install -q --locked cargo-deb --version "$CARGO_DEB_VERSION"
fi
command -v dpkg-deb >/dev/null || die "dpkg-deb not found (Debian's dpkg)"

# Debian version: the crate's version and package revision 1 (cargo-deb's default).
version=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["packages"][0]["version"])')-1
rm -rf "$OUT"
mkdir -p "$OUT"
for pair in x86_64:amd64 aarch64:arm64; do
    arch=${pair%%:*}
    debarch=${pair##*:}
    triple=$arch-unknown-linux-gnu
    log "+ cargo deb --no-build --target $triple"
    CARGO_TARGET_DIR="$PORTABLE" cargo deb --no-build --no-strip --target "$triple" --output "$OUT/tritonrs_${version}_${debarch}.deb"
    deb="$OUT/tritonrs_${version}_${debarch}.deb"
    [ -f "$deb" ] || die "$deb was not written"

    # --- what the package says and holds
    [ "$(dpkg-deb -f "$deb" Package)" = tritonrs ] || die "$deb: wrong Package"
    [ "$(dpkg-deb -f "$deb" Architecture)" = "$debarch" ] || die "$deb: Architecture is $(dpkg-deb -f "$deb" Architecture), not $debarch"
    [ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || die "$deb: Version is $(dpkg-deb -f "$deb" Version), not $version"
    depends=$(dpkg-deb -f "$deb" Depends)
    case "$depends" in *"libc6 (>= 2.27)"*) ;; *) die "$deb: Depends is '$depends'" ;; esac
    contents=$(dpkg-deb -c "$deb")
    for f in ./usr/bin/tritonrs ./usr/lib/systemd/system/tritonrs.service ./usr/lib/systemd/system-preset/90-tritonrs.preset \
             ./etc/tritonrs/tritonrs.toml ./usr/share/doc/tritonrs/README.md \
             ./usr/share/tritonrs/examples/simple/config.pbtxt ./usr/share/tritonrs/examples/simple/1/model.onnx \
             ./usr/share/tritonrs/setup.sh ./usr/share/tritonrs/selftest.sh ./usr/lib/tritonrs/libtritonserver.so; do
        grep -q " $f\$" <<<"$contents" || die "$deb lacks $f"
    done
    grep -q '/etc/tritonrs/tritonrs.toml' < <(dpkg-deb -I "$deb" conffiles) || die "$deb: tritonrs.toml is not a conffile"
    # cargo-deb's maintainer scripts enable the unit (deb-systemd-helper) without starting it.
    dpkg-deb -I "$deb" postinst | grep -q 'deb-systemd-helper.*enable.*tritonrs.service' || die "$deb: postinst does not enable the unit"
    tmp=$(mktemp -d)
    dpkg-deb -x "$deb" "$tmp"
    machine=$(readelf -h "$tmp/usr/bin/tritonrs" | sed -n 's/^ *Machine: *//p')
    case "$arch:$machine" in
        x86_64:*X86-64*|aarch64:AArch64) ;;
        *) die "$deb: usr/bin/tritonrs is for '$machine'" ;;
    esac
    readelf -d "$tmp/usr/lib/tritonrs/libtritonserver.so" | grep -q 'Library soname: \[libtritonserver.so\]' \
        || die "$deb: usr/lib/tritonrs/libtritonserver.so has no soname libtritonserver.so"
    if [ "$arch" = x86_64 ]; then
        # The packaged binary (zig-linked: it exports no symbol) serves C backends through the packaged
        # libtritonserver.so: the C API tests against it.
        log "C API tests against $deb"
        # shellcheck source=scripts/env.sh
        (source scripts/env.sh && TRITONRS_BIN="$tmp/usr/bin/tritonrs" TRITONRS_EXPECT_NO_EXPORTS=1 \
            python -m pytest -p no:cacheprovider tests/python/test_capi.py) || die "$deb: the C API tests failed"
    fi
    rm -rf "$tmp"
    log "$deb: $(du -h "$deb" | cut -f1), Depends: $depends, contents checked"
done
(cd "$OUT" && sha256sum ./*.deb > SHA256SUMS && cat SHA256SUMS >&2)
log "OK in $(( $(date +%s) - start )) s: $OUT"
