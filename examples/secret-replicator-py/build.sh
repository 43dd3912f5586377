#!/bin/sh
# Builds the secret replicator into a WebAssembly component with componentize-py.
#
#   examples/secret-replicator-py/build.sh [OUTPUT.wasm]
#
# componentize-py (pinned below) comes from PyPI into a virtual environment under the cargo
# target directory ($CARGO_TARGET_DIR, else target/ at the repository root), made on first use.
# Needs python3 with the venv module. The default output is
# <target>/python-guests/secret_replicator_py.wasm.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=0.25.1
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac
work=$target/python-guests
venv=$work/venv-componentize-py-$version
out=${1:-$work/secret_replicator_py.wasm}

if ! "$venv/bin/componentize-py" --version >/dev/null 2>&1; then
    echo "installing componentize-py $version into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "componentize-py==$version"
fi

# componentize-py snapshots a running interpreter, so two builds of the same sources differ byte
# for byte (and would each miss the host's compile cache): rebuild only when an input changed.
if [ -f "$out" ] && [ -z "$(find "$here" "$root/wit" -newer "$out" \( -name '*.py' -o -name '*.wit' -o -name build.sh \) -print)" ]; then
    echo "$out"
    exit 0
fi

mkdir -p "$(dirname "$out")"
# Installing is done by now; the build itself needs no network.
# Sources only from this folder (-p), so nothing from the build machine's site-packages ends up
# in the component; the world is the host's contract, kube:controller/controller.
cd "$here"
env -u VIRTUAL_ENV PYTHONDONTWRITEBYTECODE=1 "$venv/bin/componentize-py" --quiet \
    -d "$root/wit" -w kube:controller/controller \
    componentize app -p "$here" -o "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
