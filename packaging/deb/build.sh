#!/usr/bin/env bash
# Build nri-plrm_<version>_<arch>.deb from this repository.
#
# The package carries a self-contained virtual environment under /opt/nri-plrm, made with the
# target system's Python (default /usr/bin/python3) and filled from PyPI, so it does not depend
# on the distribution's python3-grpcio or python3-protobuf. The venv is built inside a staging
# root and then relocated: shebangs, activate scripts and pyvenv.cfg name /opt/nri-plrm, and the
# byte code is compiled with /opt/nri-plrm source paths.
#
# Usage: packaging/deb/build.sh [--python /usr/bin/python3] [--output DIR]
# Needs: the target python3 with venv + ensurepip (Debian: python3-venv), dpkg-deb, network
# access to PyPI. Prints the path of the .deb on its last line.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$repo/packaging/deb"
python=/usr/bin/python3
output="$repo/dist"
prefix=/opt/nri-plrm

while [ $# -gt 0 ]; do
    case "$1" in
        --python) python="$2"; shift 2 ;;
        --output) output="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "build.sh: $*" >&2; exit 1; }

[ -x "$python" ] || die "--python $python: not an executable"
"$python" -c 'import venv, ensurepip' 2>/dev/null \
    || die "--python $python: has no venv/ensurepip module (Debian: apt-get install python3-venv)"
command -v dpkg-deb >/dev/null || die "dpkg-deb: not found (Debian: apt-get install dpkg)"
[ -f "$repo/packaging/config.toml" ] || die "packaging/config.toml: missing (the default config)"
[ -f "$repo/packaging/grafana/nri-plrm.json" ] || die "packaging/grafana/nri-plrm.json: missing"
compgen -G "$repo/examples/*.yaml" >/dev/null \
    || die "examples/: no *.yaml files (the package ships the seed examples)"

version="$("$python" - "$repo/pyproject.toml" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
try:
    import tomllib
except ImportError:  # Python 3.10: the [project] table's version line
    project = text.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    print(re.search(r'^version\s*=\s*"([^"]+)"', project, re.M).group(1))
else:
    print(tomllib.loads(text)["project"]["version"])
PY
)"
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "pyproject.toml: version '$version': not a Debian version"
pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
arch="$(dpkg --print-architecture)"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
venv="$root$prefix"
mkdir -p "$root"

# Build from a copy of exactly what the package needs, so the build leaves the tree untouched.
src="$stage/src"
mkdir -p "$src"
cp "$repo/pyproject.toml" "$repo/README.md" "$src/"
tar -C "$repo" --exclude=__pycache__ --exclude='*.pyc' -cf - nri_plrm | tar -C "$src" -xf -

echo "build.sh: venv with $python (Python $pyver) at $prefix" >&2
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile "$src"
"$venv/bin/python" -m pip uninstall -q -y pip setuptools >/dev/null 2>&1 || true
rm -f "$venv"/bin/pip* "$venv"/bin/Activate.ps1
find "$venv" -name __pycache__ -type d -prune -exec rm -rf {} +

# Relocate: every absolute reference to the staging root now names the final path.
grep -rlF --null "$root" "$venv/bin" "$venv/pyvenv.cfg" | xargs -0 -r sed -i "s#$root##g"
if grep -rqF "$root" "$venv"; then
    die "staging path $root still referenced in: $(grep -rlF "$root" "$venv" | head -5)"
fi
"$python" -m compileall -q -j 0 --invalidation-mode checked-hash -s "$root" -p / \
    "$venv/lib/python$pyver/site-packages" >/dev/null
# The interpreter finds its venv next to itself, so the relocated tree still imports here.
"$venv/bin/python" -I -c 'import nri_plrm.cli, nri_plrm.daemon.service, grpc, google.protobuf, yaml' \
    || die "the relocated venv cannot import nri-plrm and its dependencies"

install -D -m 0644 "$repo/systemd/nri-plrm.service" "$root/lib/systemd/system/nri-plrm.service"
install -D -m 0644 "$repo/systemd/nri-plrm.default" "$root/etc/default/nri-plrm"
install -D -m 0644 "$repo/packaging/config.toml" "$root/etc/nri-plrm/config.toml"
mkdir -p "$root/usr/bin"
ln -s "$prefix/bin/nri-plrm" "$root/usr/bin/nri-plrm"
install -d "$root/usr/share/nri-plrm/examples"
install -m 0644 "$repo"/examples/*.yaml "$root/usr/share/nri-plrm/examples/"
for extra in "$repo"/examples/*.toml "$repo"/examples/README.md; do
    [ -e "$extra" ] && install -m 0644 "$extra" "$root/usr/share/nri-plrm/examples/"
done
# The Grafana dashboard (docs/operations.md, "The dashboard, panel by panel").
install -D -m 0644 "$repo/packaging/grafana/nri-plrm.json" \
    "$root/usr/share/nri-plrm/grafana/nri-plrm.json"
doc="$root/usr/share/doc/nri-plrm"
install -d "$doc"
install -m 0644 "$here/copyright" "$doc/copyright"
install -m 0644 "$repo/README.md" "$doc/README.md"
# The documented example with every default: `nri-plrm run` points here when /etc's is missing.
install -m 0644 "$repo/packaging/config.toml" "$doc/config.toml"
for page in "$repo"/docs/*.md; do
    [ -e "$page" ] && install -m 0644 "$page" "$doc/"
done

install -d "$root/DEBIAN"
for script in postinst prerm postrm; do
    install -m 0755 "$here/$script" "$root/DEBIAN/$script"
done
printf '%s\n' /etc/default/nri-plrm /etc/nri-plrm/config.toml > "$root/DEBIAN/conffiles"
size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@PYVER@/$pyver/" \
    -e "s/@SIZE@/$size/" "$here/control.in" > "$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' \
    | LC_ALL=C sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"

mkdir -p "$output"
deb="$output/nri-plrm_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz -z6 --build "$root" "$deb" >/dev/null
echo "$deb"
