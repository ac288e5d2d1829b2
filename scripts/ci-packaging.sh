#!/usr/bin/env bash
# CI for packaging (issue 6). Runs as root on a fresh Debian 12, from any directory:
#   1. install what the checks need (python3-venv, systemd's analyzer) if it is missing;
#   2. build the .deb with packaging/deb/build.sh;
#   3. install it with dpkg into a scratch root (maintainer scripts run chrootless with
#      DPKG_ROOT), then, in a private mount namespace where the scratch root's /usr, /opt and /etc
#      are overlaid on the machine's (the machine itself is not changed), run the installed
#      `nri-plrm version`, `check-config`, `topology`,
#      `simulate /usr/share/nri-plrm/examples/*.yaml` and `doctor`, then start the installed plugin the way
#      the unit does against a simulated containerd (scripts/ci-packaging-live.py: READY=1,
#      /healthz, a seed pod pinned, `nri-plrm state`, reload, STOPPING=1);
#   4. `systemd-analyze verify` the unit with the installed ExecStart binary in place;
#   5. reinstall over itself (conffile edits and state kept), purge, check the root is clean;
#   6. run tests/packaging with the Helm chart renderer required (no skips).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export DEBIAN_FRONTEND=noninteractive

log() { printf 'ci-packaging: %s\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

missing=()
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v unshare >/dev/null || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

log "building the .deb"
start=$SECONDS
deb="$(packaging/deb/build.sh --output "$work/dist" | tail -n 1)"
log "built $(basename "$deb") ($(du -h "$deb" | cut -f1)) in $((SECONDS - start)) s"
case "$(basename "$deb")" in
    nri-plrm_*_"$(dpkg --print-architecture)".deb) ;;
    *) die "package file name $(basename "$deb") is not nri-plrm_<version>_<arch>.deb" ;;
esac
dpkg-deb --field "$deb" Package Version Architecture Depends >&2
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles)" = \
    "$(printf '%s\n' /etc/default/nri-plrm /etc/nri-plrm/config.toml)" ] \
    || die "conffiles must be /etc/default/nri-plrm and /etc/nri-plrm/config.toml"

root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
dpkg_root=(dpkg "--root=$root" --force-script-chrootless --force-depends --log=/dev/null)
log "installing into the scratch root $root"
"${dpkg_root[@]}" -i "$deb" >&2
[ "$(stat -c %a "$root/var/lib/nri-plrm")" = 700 ] || die "state dir /var/lib/nri-plrm not 0700"
[ "$(readlink "$root/usr/bin/nri-plrm")" = /opt/nri-plrm/bin/nri-plrm ] \
    || die "/usr/bin/nri-plrm must link to /opt/nri-plrm/bin/nri-plrm"
[[ "$(head -n 1 "$root/opt/nri-plrm/bin/nri-plrm")" =~ ^'#!/opt/nri-plrm/bin/python'3?$ ]] \
    || die "installed nri-plrm shebang: $(head -n 1 "$root/opt/nri-plrm/bin/nri-plrm")"
if grep -rqF "$work" "$root/opt/nri-plrm" "$root/etc" "$root/lib"; then
    die "the package references the build's staging paths"
fi

# What an operator runs after `apt install ./nri-plrm_*.deb`, at the real paths.
cat > "$work/installed-checks.sh" <<'CHECKS'
set -euo pipefail
root="$1"
ci_python="$3"
for dir in usr opt etc; do
    mount -t overlay overlay -o "lowerdir=$root/$dir:/$dir" "/$dir"
done
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
unset VIRTUAL_ENV PYTHONPATH PYTHONHOME
[ "$(command -v nri-plrm)" = /usr/bin/nri-plrm ]
/opt/nri-plrm/bin/python -c 'import grpc, google.protobuf, prometheus_client, pyroute2, yaml, nri_plrm'
set -x
nri-plrm version
nri-plrm check-config /etc/nri-plrm/config.toml
nri-plrm simulate /usr/share/nri-plrm/examples/*.yaml
nri-plrm topology
nri-plrm simulate --output json /usr/share/nri-plrm/examples/*.yaml > "$2/simulate.json"
# the preflight runs read-only; no plugin is registered yet, so its worst result is FAIL
doctor_exit=0
nri-plrm doctor --output json > "$2/doctor.json" || doctor_exit=$?
[ "$doctor_exit" = 2 ]
systemd-analyze verify "$root/lib/systemd/system/nri-plrm.service"
"$ci_python" "$repo/scripts/ci-packaging-live.py" "$2/live" \
    "$root/lib/systemd/system/nri-plrm.service"
CHECKS
log "running the installed nri-plrm"
repo="$repo" unshare --mount --propagation private \
    bash "$work/installed-checks.sh" "$root" "$work" "$(command -v python)"
/usr/bin/python3 - "$work/simulate.json" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
pods = result["pods"]
assert pods, "simulate --output json reported no pods"
print(f"ci-packaging: simulate: {len(pods)} pods, "
      f"{sum(p['admitted'] for p in pods)} admitted", file=sys.stderr)
PY
/usr/bin/python3 - "$work/doctor.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["exit_code"] == 2 and report["status"] == "FAIL", report["status"]
failed = {c["area"] + "." + c["name"] for c in report["checks"] if c["status"] == "FAIL"}
assert "plugin.registered" in failed, failed
print(f"ci-packaging: doctor: {report['counts']}", file=sys.stderr)
PY
cmp -s systemd/nri-plrm.service "$root/lib/systemd/system/nri-plrm.service" \
    || die "the packaged unit differs from systemd/nri-plrm.service"

log "reinstalling over itself (the upgrade path): conffile edits and state survive"
echo '# edited by the operator' >> "$root/etc/nri-plrm/config.toml"
echo '{}' > "$root/var/lib/nri-plrm/state.json"
upgrade_log="$("${dpkg_root[@]}" -i "$deb" 2>&1)"
grep -q '^# edited by the operator$' "$root/etc/nri-plrm/config.toml" \
    || die "the upgrade replaced the edited /etc/nri-plrm/config.toml"
[ -s "$root/var/lib/nri-plrm/state.json" ] || die "the upgrade lost /var/lib/nri-plrm"
if grep -q 'enabled, not started' <<<"$upgrade_log"; then
    die "the upgrade printed the first-install notice"
fi

log "purging"
"${dpkg_root[@]}" --purge nri-plrm >&2
left="$(cd "$root" && find . -mindepth 1 -not -path './var' -not -path './var/lib' \
    -not -path './var/lib/dpkg' -not -path './var/lib/dpkg/*')"
[ -z "$left" ] || die "purge left behind: $left"

log "packaging tests (DaemonSet, Helm chart, Containerfile, unit, sdnotify)"
python -c 'import helm_python' 2>/dev/null || python -m pip install -q 'helm-python-sdk>=0.2.2,<0.3'
NRI_PLRM_REQUIRE_HELM=1 NRI_PLRM_REQUIRE_SYSTEMD=1 python -m pytest tests/packaging
log "ok"
