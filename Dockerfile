# syntax=docker/dockerfile:1
# Weft's image: weftd, the DaemonSet's main container, and the CNI plugin its install-cni init
# container copies to the host (daemonset.yaml). Build: docker build -t weft:0.1.0 .
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
# runs on it, so both stages use the same one. test/unit/manifest.test.ts keeps the two equal.
ARG NODE_VERSION=24.21.0

FROM node:${NODE_VERSION}-bookworm-slim AS build
# pkg-config: native/binding.gyp asks it for libnl's include and library flags.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 make g++ pkg-config libnl-3-dev libnl-route-3-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, so that a source change reuses this layer. Touching .weft-installed tells the
# Makefile's deps-npm target that npm ci has run.
COPY package.json package-lock.json ./
RUN npm ci && touch node_modules/.weft-installed
# Only what the build reads: `COPY . .` would also bring a checkout's node_modules, dist and
# native/build into the image.
COPY Makefile tsconfig.json ./
COPY bin/ bin/
COPY scripts/ scripts/
COPY src/ src/
COPY native/binding.gyp native/
COPY native/src/ native/src/
# NODE_HEADERS: the base image ships its Node's headers in /usr/local/include/node, so node-gyp
# needs neither the npm package's copy nor a download.
COPY native/plugin/ native/plugin/
RUN make build-native build-cni build-weftd build-weftctl build-plugin NODE_HEADERS=/usr/local

FROM node:${NODE_VERSION}-bookworm-slim
# libnl: the addon's shared libraries. iptables (Debian's default, iptables-nft) and nftables: the
# masquerade and forward rules engines (--traffic-rules). iproute2: for debugging on the node.
# ethtool and iputils-ping: weftctl doctor's offload check and peer probe.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libnl-3-200 libnl-route-3-200 iptables nftables iproute2 ethtool iputils-ping ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/weft
COPY --from=build /src/package.json ./
COPY --from=build /src/dist/weftd/ dist/weftd/
COPY --from=build /src/dist/weftctl/ dist/weftctl/
COPY --from=build /src/dist/weft.cjs /src/dist/weft-cni dist/
COPY --from=build /src/native/build/Release/weft_netlink.node native/build/Release/
COPY --from=build /src/bin/ bin/
# bin/weftd runs <root>/node_modules/.bin/node, which in a checkout is the pinned npm package
# `node`; here the link points at the image's Node, the same release. bin/weft-node and
# bin/weft.cjs are links too: install-cni's cp copies what they point to. The last lines check
# that weftd, the fallback and the native plugin start (and fill weftd's compile cache).
RUN mkdir -p node_modules/.bin \
 && ln -sf /usr/local/bin/node node_modules/.bin/node \
 && ln -sf /usr/local/bin/node bin/weft-node \
 && ln -sf ../dist/weft.cjs bin/weft.cjs \
 && ln -sf /opt/weft/bin/weftctl /usr/local/bin/weftctl \
 && /opt/weft/bin/weftd --version \
 && /opt/weft/bin/weftctl --version \
 && CNI_COMMAND=VERSION /opt/weft/bin/weft </dev/null \
 && CNI_COMMAND=VERSION /opt/weft/dist/weft-cni </dev/null
ENTRYPOINT ["/opt/weft/bin/weftd"]
