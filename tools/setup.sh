#!/usr/bin/env bash
# One setup step for every README command: Debian packages (Bazel and its offline rule
# repositories, Fashion-MNIST) and a virtual environment in .venv with the pinned Python
# packages and this library installed in it as editable (`pip install -e .`: `tff_adaptive` is
# importable from any directory with .venv/bin/python). Idempotent; when everything is already in
# place it returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
STAMP="$VENV/.setup-stamp"
want="$(cat requirements.txt requirements-nodeps.txt pyproject.toml tools/setup.sh | sha256sum | cut -d' ' -f1)"

apt_pkgs=(bazel-bootstrap bazel-rules-java dataset-fashion-mnist)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
echo "setup: creating $VENV and installing pinned Python packages (under a minute with uv, about 2 with pip)" >&2
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# uv (Astral's pip-compatible installer; same resolution of these pins, same packages) downloads and
# unpacks in parallel: measured here, requirements.txt took 31 s against pip's 69 s. Byte code is
# compiled at install (--compile-bytecode, as pip does) because environments that set
# PYTHONDONTWRITEBYTECODE would otherwise recompile TensorFlow's modules in every process. Where uv
# cannot be installed (an index without it), pip does the same installs.
install() {  # install ARGS...: `uv pip install` into the venv, or pip's
  if [ -x "$VENV/bin/uv" ]; then
    "$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" "$@"
  else
    "$VENV/bin/python" -m pip install -q "$@" 2>&1 | grep -v "is ignored" || true
  fi
}
if ! "$VENV/bin/python" -m pip install -q "uv==0.13.9" >/dev/null 2>&1; then
  echo "setup: uv unavailable, installing with pip" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1
fi
install -r requirements.txt
install --no-deps -r requirements-nodeps.txt
# The library itself, editable; its dependencies are all in place by now (pyproject.toml).
log="$VENV/.install-library.log"
install --no-deps -e . >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
"$VENV/bin/python" -c "import importlib.metadata as m; print('setup: tensorflow', m.version('tensorflow'), 'tensorflow-federated', m.version('tensorflow-federated'))" >&2
echo "$want" > "$STAMP"
