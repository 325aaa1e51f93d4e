# shellcheck shell=bash
# apt_get ARGS...: apt-get with the options every script here uses (wait up to 15 min for another apt
# run's lock, retry downloads, no questions), and a world-writable temporary folder of its own.
# apt's download methods run as the _apt user and write their temporary files under $TMPDIR (else
# /tmp); on a machine whose /tmp is not world-writable (some containers) the signature checks then
# fail, no package list is read, and every install fails with "Unable to locate package".
apt_get() {
    local tmp rc=0
    tmp=$(mktemp -d)
    chmod 1777 "$tmp"
    TMPDIR="$tmp" DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=900 -o Acquire::Retries=3 "$@" || rc=$?
    rm -rf "$tmp"
    return "$rc"
}
