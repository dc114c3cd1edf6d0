#!/usr/bin/env bash
# make check-fresh: `make deps build` alone must equip a new machine of this kind for `make test`.
# A bare Debian bookworm root (mmdebstrap, minbase) gets only what every such machine has before
# make deps: git, make, the system Node 20 with its npm and headers, the machine's CA certificates
# and npm settings, and the Docker base's policy-rc.d. A clone of this checkout's HEAD (committed
# files only; the peers folder read-only beside it) runs `make deps build` there as root, then
# `make check-tools`, which names every program of scripts/tools the root still lacks.
#
# The work runs in a mount and PID namespace of its own (unshare --kill-child): its mounts, and
# any daemon a package starts, end with it even when this script is killed. The root is a temp dir
# removed on exit. apt and npm download afresh: no cache of this machine's is used.
#
# Usage: PEERS_SRC=DIR fresh-root.sh 'deb URL SUITE COMPONENT'...
set -euo pipefail

# A step of the check, with the seconds since it started: what the check costs, phase by phase.
say() {
  echo "fresh root [${SECONDS} s]: $*"
}

# Inside the namespace: build the root, bring in the machine's parts, run make there.
inside() {
  local work=$1 peers=$2
  shift 2
  local root=$work/root checkout
  checkout=$(cd "$(dirname "$0")/.." && pwd)
  say "mmdebstrap --variant=minbase bookworm (git, make, ca-certificates)"
  mmdebstrap --quiet --variant=minbase --include=git,make,ca-certificates bookworm "$root" "$@"
  machine_parts "$root"

  local head
  head=$(git -C "$checkout" rev-parse HEAD)
  git clone --quiet --no-checkout "$checkout" "$root/src/weft"
  git -C "$root/src/weft" checkout --quiet --detach "$head"
  say "clone of $checkout at $(git -C "$root/src/weft" log --oneline -1 | cut -c1-100)"

  mkdir -p "$root/src/shared/peers"
  mount --bind "$peers" "$root/src/shared/peers"
  mount -o remount,bind,ro "$root/src/shared/peers"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/run"

  # A clean environment: what make needs must come from the root's files, not from this shell.
  local -a run=(chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  say "$("${run[@]}" node --version) and npm $("${run[@]}" npm --version) from this machine; make deps build"
  "${run[@]}" make -C /src/weft --no-print-directory deps build
  # Debian's nodejs or npm would replace the machine's Node in the root, where on a machine apt
  # finds NodeSource's nodejs (which provides npm) installed: the check would then prove nothing.
  local node_packages
  node_packages=$("${run[@]}" dpkg-query -W -f='${Package} ${Status}\n' nodejs npm 2>/dev/null || true)
  if grep -q ' install ok installed$' <<<"$node_packages"; then
    echo "fresh root: make deps installed Debian's nodejs or npm: a package of DEBIAN_PACKAGES depends on them" >&2
    return 1
  fi
  say "make check-tools"
  "${run[@]}" make -C /src/weft --no-print-directory check-tools
}

# What every machine of this kind has besides Debian's minbase, git and make, copied from this one.
machine_parts() {
  local root=$1 npm
  # The system Node (NodeSource's nodejs 20: node, its headers, which the npm user config's
  # nodedir=/usr names, and the global modules with npm, updated in place), not the pinned Node 24.
  cp -a /usr/bin/node "$root/usr/bin/node"
  cp -a /usr/include/node "$root/usr/include/"
  cp -a /usr/lib/node_modules "$root/usr/lib/"
  npm=$(readlink -f /usr/bin/npm)
  [[ $npm == /usr/lib/node_modules/* ]] || { echo "fresh root: /usr/bin/npm is $npm, not in /usr/lib/node_modules" >&2; return 1; }
  for link in /usr/bin/npm /usr/bin/npx /usr/bin/corepack; do
    if [[ -L $link ]]; then cp -P "$link" "$root$link"; fi
  done
  # npm's settings: global (/etc/npmrc, /usr/etc/npmrc: cafile) and root's user config (nodedir,
  # update-notifier); the bundle the cafile names includes this network's intercepting CA.
  for f in /etc/npmrc /usr/etc/npmrc /root/.npmrc; do
    if [[ -f $f ]]; then install -D -m "$(stat -c %a "$f")" "$f" "$root$f"; fi
  done
  cp /usr/local/share/ca-certificates/* "$root/usr/local/share/ca-certificates/"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  # Docker's Debian base keeps packages from starting services (etcd, containerd) as they install.
  cp -a /usr/sbin/policy-rc.d "$root/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
}

if [[ ${1:-} == --inside ]]; then
  shift
  inside "$@"
  exit
fi

peers=$(cd "${PEERS_SRC:?the peers folder make deps unpacks}" && pwd)
(($# > 0)) || { echo "usage: PEERS_SRC=DIR $0 'deb URL SUITE COMPONENT'..." >&2; exit 2; }
started=$SECONDS
work=$(mktemp -d /tmp/weft-fresh-root.XXXXXX)
inner=''
cleanup() {
  local status=$?
  if [[ -n $inner ]] && kill -0 "$inner" 2>/dev/null; then
    # unshare ignores SIGTERM while it waits; killed, it takes the namespace's init (--kill-child)
    # and so everything in the namespace with it. Their files go once they are gone.
    local init
    init=$(pgrep -P "$inner" || true)
    kill -KILL "$inner"
    wait "$inner" 2>/dev/null || true
    for _ in {1..100}; do
      [[ -n $init ]] && grep -qs '^State:[[:space:]]*[^Z]' "/proc/$init/status" || break
      sleep 0.1
    done
  fi
  rm -rf --one-file-system "$work"
  if ((status == 0)); then
    echo "fresh root: passed in $((SECONDS - started)) s"
  else
    echo "fresh root: FAILED after $((SECONDS - started)) s" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
unshare --mount --propagation private --pid --fork --kill-child -- "$0" --inside "$work" "$peers" "$@" &
inner=$!
wait "$inner"
