#!/bin/sh
# Installs those of the Debian packages named as arguments that the system lacks, and leaves no
# package lists behind: the Dockerfile's stages run it, so a base that has them all (make image's)
# installs nothing and needs no network, and another (Node's or Debian's official one) gets them.
set -eu
missing=""
for p in "$@"; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
apt-get update
# $missing unquoted: one word per package.
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
rm -rf /var/lib/apt/lists/*
