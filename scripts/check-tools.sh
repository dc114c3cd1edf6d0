#!/bin/sh
# make check-tools: every program of scripts/tools is where the tests will look for it (on PATH,
# in dist/peers, at its path); names each one that is not. Optional ones are not checked.
set -eu
cd "$(dirname "$0")/.."
missing=""
checked=0
while read -r name kind _; do
  case $name in '' | '#'*) continue ;; esac
  checked=$((checked + 1))
  case $kind in
    path) command -v "$name" >/dev/null 2>&1 || missing="$missing $name" ;;
    peer) [ -x "dist/peers/$name" ] || missing="$missing dist/peers/$name" ;;
    file) [ -x "$name" ] || missing="$missing $name" ;;
    optional) ;;
    *) echo "scripts/tools: $name: kind $kind is not path, peer, file or optional" >&2; exit 2 ;;
  esac
done < scripts/tools
if [ -n "$missing" ]; then
  echo "check-tools: missing:$missing" >&2
  echo "check-tools: make deps installs none of these; add their Debian packages to DEBIAN_PACKAGES (scripts/tools says who needs them)" >&2
  exit 1
fi
echo "check-tools: all $checked programs of scripts/tools are there"
