#!/usr/bin/env bash
# Install a system package the build needs when it is missing: `node` (npm, for the vendored
# browser assets) or `chromium` (the browser test). Uses Debian's apt as root, else explains.
set -euo pipefail
what=${1:?usage: install_system_deps.sh node|chromium}
case "$what" in
  node) packages="nodejs npm" ;;
  chromium) packages="chromium" ;;
  *) echo "unknown dependency: $what" >&2; exit 2 ;;
esac
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
else
  echo "Please install $packages (e.g. sudo apt-get install $packages) and re-run make." >&2
  exit 1
fi
