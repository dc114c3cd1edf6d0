# syntax=docker/dockerfile:1
# Weft's image: weftd, the DaemonSet's main container, and the CNI plugin its install-cni init
# container copies to the host (daemonset.yaml).
#
# Two ways to build it, one description:
#   docker build -t weft:0.1.0 .     where Docker Hub is reachable: the bases below are Node's and
#                                    Debian's official images;
#   make image                       where only Debian's and npm's registries are: the Makefile makes
#                                    both bases with mmdebstrap (the packages named here, Node from
#                                    the npm package `node`) and builds this file FROM them with
#                                    buildah, then saves dist/weft-<version>.tar.
#
# /opt/weft, as bin/weftd, bin/weft and src/netlink/native.ts expect it:
#   package.json                  the root native.ts looks up to
#   bin/weftd                     execs <root>/node_modules/.bin/node on dist/weftd/weftd.mjs
#   dist/weft-cni                 the static native plugin install-cni copies as weft and flannel
#   bin/weft                      the fallback launcher; bin/weft.cjs and bin/weft-node next to it
#   bin/weft.cjs, bin/weft-node   are its "installed copy" layout, copied beside the plugin
#   dist/weftd/                   weftd bundled with its dependencies
#   bin/weftctl, dist/weftctl/    weftctl (on PATH as /usr/local/bin/weftctl) and its bundle
#   dist/weft.cjs                 the plugin bundle
#   dist/.compile-cache/          Node's compile cache, filled at build so the first start is fast
#   native/build/Release/weft_netlink.node
#   node_modules/.bin/node        a link to the image's Node: the bundles need no node_modules

# The Node release package.json pins (devDependency "node"): the Makefile builds with it and weftd
# runs on it. test/unit/manifest.test.ts keeps the two equal.
ARG NODE_VERSION=24.21.0
# Node with npm and its headers, on Debian bookworm.
ARG BUILD_BASE=node:${NODE_VERSION}-bookworm-slim
# Debian bookworm; the build stage's Node is copied onto it, without npm.
ARG RUN_BASE=debian:bookworm-slim
# What each stage needs from Debian (scripts/apt-install-missing.sh installs what its base lacks;
# make image's bases have them all). The Makefile reads these two lines.
# pkg-config: native/binding.gyp asks it for libnl's include and library flags.
ARG BUILD_PACKAGES="python3 make g++ pkg-config libnl-3-dev libnl-route-3-dev libnl-nf-3-dev"
# libnl: the addon's shared libraries (libnl-nf: the Service proxy's conntrack cleanup over ctnetlink).
# iptables (Debian's default, iptables-nft) and nftables: the masquerade and forward rules engines
# (--traffic-rules). iproute2: for debugging on the node.
# ethtool and iputils-ping: weftctl doctor's offload check and peer probe. libstdc++6: Node's.
# kmod: modprobe, for the DaemonSet's node-prep init container (br_netfilter).
ARG RUN_PACKAGES="libstdc++6 libnl-3-200 libnl-route-3-200 libnl-nf-3-200 iptables nftables iproute2 ethtool iputils-ping ca-certificates kmod"

FROM ${BUILD_BASE} AS build
ARG BUILD_PACKAGES
RUN --mount=type=bind,source=scripts/apt-install-missing.sh,target=/tmp/apt-install-missing.sh \
    /tmp/apt-install-missing.sh $BUILD_PACKAGES
WORKDIR /src
# Dependencies first, so that a source change reuses this layer. --ignore-scripts: the only
# install script is the npm package `node`'s, which would download a second Node; the build runs
# on the base's (NODE= below). Touching .weft-installed tells the Makefile that npm ci has run.
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts --no-audit --no-fund && touch node_modules/.weft-installed
# Only what the build reads: `COPY . .` would also bring a checkout's node_modules, dist and
# native/build into the image.
COPY Makefile tsconfig.json ./
COPY bin/ bin/
COPY scripts/ scripts/
COPY src/ src/
COPY native/binding.gyp native/
COPY native/src/ native/src/
COPY native/plugin/ native/plugin/
# NODE_HEADERS: both bases keep their Node's headers in /usr/local/include/node, so node-gyp
# needs neither the npm package's copy nor a download.
RUN make build-native build-cni build-weftd build-weftctl build-plugin NODE=/usr/local/bin/node NODE_HEADERS=/usr/local

FROM ${RUN_BASE}
ARG RUN_PACKAGES
RUN --mount=type=bind,source=scripts/apt-install-missing.sh,target=/tmp/apt-install-missing.sh \
    /tmp/apt-install-missing.sh $RUN_PACKAGES
COPY --from=build /usr/local/bin/node /usr/local/bin/node
WORKDIR /opt/weft
COPY --from=build /src/package.json ./
COPY --from=build /src/dist/weftd/ dist/weftd/
COPY --from=build /src/dist/weftctl/ dist/weftctl/
COPY --from=build /src/dist/weft.cjs /src/dist/weft-cni dist/
COPY --from=build /src/native/build/Release/weft_netlink.node native/build/Release/
COPY --from=build /src/bin/ bin/
# bin/weftd runs <root>/node_modules/.bin/node, which in a checkout is the pinned npm package
# `node`; here the link points at the image's Node, the same release. bin/weft-node and
# bin/weft.cjs are links too: install-cni's cp copies what they point to. The next lines check
# that weftd, the fallback and the native plugin start; the last fills Node's compile cache with
# every chunk of weftd and weftctl (what a mode loads on demand too): each container starts from
# the image's cache, so what it compiled in an earlier container is not there.
RUN mkdir -p node_modules/.bin \
 && ln -sf /usr/local/bin/node node_modules/.bin/node \
 && ln -sf /usr/local/bin/node bin/weft-node \
 && ln -sf ../dist/weft.cjs bin/weft.cjs \
 && ln -sf /opt/weft/bin/weftctl /usr/local/bin/weftctl \
 && /opt/weft/bin/weftd --version \
 && /opt/weft/bin/weftctl --version \
 && CNI_COMMAND=VERSION /opt/weft/bin/weft </dev/null \
 && CNI_COMMAND=VERSION /opt/weft/dist/weft-cni </dev/null \
 && NODE_COMPILE_CACHE=/opt/weft/dist/.compile-cache node --input-type=module --eval ' \
      import { readdirSync } from "node:fs"; \
      for (const dir of ["weftd", "weftctl"]) for (const file of readdirSync(`dist/${dir}/chunks`)) \
        await import(`/opt/weft/dist/${dir}/chunks/${file}`);'
ENTRYPOINT ["/opt/weft/bin/weftd"]
