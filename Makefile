# Weft: `make test` installs what it needs, builds and runs every test; `make demo` shows a cluster.
# Everything runs on the Node 24 pinned in package.json (node_modules/.bin/node), never the system Node.

SHELL := /bin/bash
NODE := $(CURDIR)/node_modules/.bin/node
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)

# make image: a Debian root file system (mmdebstrap), the build (buildah) and podman's image store,
# with runc (crun refuses this machine's hybrid cgroup hierarchy). Defined before DEBIAN_PACKAGES,
# which expands it at once (:=).
IMAGE_TOOLS := mmdebstrap buildah podman runc conmon
# The real kubelet's nodes (test/support/kube-cluster.ts): containerd (with ctr) under runc, conntrack for
# kube-proxy, util-linux's nsenter/unshare and mount, hostname, gcc and libc6-dev for the static pause
# program, tar for its image.
KUBE_NODE_TOOLS := containerd conntrack util-linux mount hostname gcc libc6-dev tar
DEBIAN_PACKAGES := libnl-3-dev libnl-route-3-dev libnl-nf-3-dev etcd-server containernetworking-plugins \
	iproute2 procps iputils-ping nftables iptables iperf3 openssl python3 make g++ pkg-config ethtool curl wireguard-go tcpdump \
	xz-utils prometheus $(IMAGE_TOOLS) $(KUBE_NODE_TOOLS)

TEST_FLAGS := --expose-gc --test-reporter=spec --test-concurrency=2

.PHONY: all deps deps-debian deps-npm deps-peers build build-native build-ts test test-unit test-integration \
	build-plugin typecheck bench-netlink bench-reconcile bench-etcd bench-kube build-cni build-weftd build-weftctl bench-cni bench-dataplane \
	bench-footprint bench-scale bench-faults bench-etcd-faults bench-weftctl bench-netpol bench-egress bench-fip bench-egress-peers demo clean \
	bench-fixed-release bench-dashboard image test-image bench-image bench-services bench-hooks bench-node check-tools check-fresh \
	bench-udp-stale test-conformance bench-visibility bench-addr-lifetime

all: build

deps: deps-debian deps-npm deps-peers

# The real Kubernetes v1.28.4 and flannel v0.20.2 binaries the tests run against, from ../shared/peers
# beside the checkout (its README says what they are); unpack checks each against SHA256SUMS.
PEERS_SRC ?= $(CURDIR)/../shared/peers
PEERS := $(CURDIR)/dist/peers
deps-peers: deps-debian
	@test -x $(PEERS_SRC)/unpack || { echo "make deps: no $(PEERS_SRC)/unpack (the peers folder beside this checkout)" >&2; exit 1; }
	$(PEERS_SRC)/unpack $(PEERS)

# Installs only what is missing, so a second run is quick and needs no network.
deps-debian:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "make deps: need root to install:" $$missing >&2; exit 1; fi; \
		echo "installing Debian packages:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# npm ci only when package-lock.json changed since the last install.
deps-npm: node_modules/.weft-installed
node_modules/.weft-installed: package-lock.json package.json
	npm ci
	@touch $@

build: build-native build-ts build-cni build-weftd build-weftctl build-plugin

# Node-API is ABI-stable, so the addon builds offline against whichever Node headers are here:
# those shipped with the pinned Node (npm may prune them later), else the machine's in /usr.
NODE_HEADERS = $(patsubst %/include/node/node_api.h,%,$(firstword $(wildcard \
	$(CURDIR)/node_modules/node/node_modules/node-linux-*/include/node/node_api.h \
	/usr/include/node/node_api.h)))

build-native: deps-npm
	cd native && $(NODE) $(CURDIR)/node_modules/node-gyp/bin/node-gyp.js rebuild --nodedir="$(NODE_HEADERS)" --jobs=2

build-ts: deps-npm
	$(NODE) node_modules/typescript/bin/tsc -p tsconfig.json

# The CNI plugin as one CommonJS file, so bin/weft starts with a single module to load (and runs
# the same when copied where no package.json says "type": "module").
build-cni: deps-npm
	node_modules/.bin/esbuild src/cmd/weft.ts --bundle --platform=node --format=cjs --target=node24 \
		--outfile=dist/weft.cjs --log-level=warning

# weftd as one ES module entry plus chunks it imports on demand (dist/weftd/): the flags are read
# before the etcd or Kubernetes client is loaded, and each mode loads only its own. CommonJS
# dependencies inside the chunks get `require`, `__dirname` and `__filename` from the banner.
# Chunks go one level down (chunks/), because etcd3 reads its rpc.proto from <chunk dir>/../proto
# at load: dist/weftd/proto, inside the directory the image copies. That file is the etcd API cut
# to the calls Weft makes, as a JSON descriptor (scripts/etcd-proto.ts): building etcd3's gRPC
# definitions from it takes ~6 ms at start instead of ~45 ms from the whole rpc.proto. Identifiers are kept, so stack
# traces name functions without source maps (which Node would parse at load, costing memory).
ESM_BANNER := import { createRequire as __weftCreateRequire } from 'node:module'; \
	const require = __weftCreateRequire(import.meta.url), __dirname = import.meta.dirname, __filename = import.meta.filename;
build-weftd: deps-npm
	rm -rf dist/weftd
	node_modules/.bin/esbuild src/cmd/weftd.ts --bundle --splitting --format=esm --platform=node --target=node24 \
		--outdir=dist/weftd --out-extension:.js=.mjs --chunk-names=chunks/[name]-[hash] --minify-whitespace --minify-syntax \
		--banner:js="$(ESM_BANNER)" --log-level=warning
	$(NODE) scripts/etcd-proto.ts dist/weftd/proto/rpc.proto

# weftctl cut the same way (dist/weftctl/, its own proto/): `status` with weftd up loads commander
# and the socket client only; netlink, the doctor's checks and the etcd client (weftd down) are
# chunks loaded on demand.
build-weftctl: deps-npm
	rm -rf dist/weftctl
	node_modules/.bin/esbuild src/cmd/weftctl.ts --bundle --splitting --format=esm --platform=node --target=node24 \
		--outdir=dist/weftctl --out-extension:.js=.mjs --chunk-names=chunks/[name]-[hash] --minify-whitespace --minify-syntax \
		--banner:js="$(ESM_BANNER)" --log-level=warning
	$(NODE) scripts/etcd-proto.ts dist/weftctl/proto/rpc.proto

# The plugin the runtime executes: static, since it runs on the host, whose libc is not the image's.
build-plugin: dist/weft-cni
dist/weft-cni: native/plugin/weft-cni.c
	@mkdir -p dist
	gcc -static -Os -std=c11 -Wall -Wextra -Werror -o $@ $<

# The image (Dockerfile) built from Debian's and npm's registries alone. Both bases are made here
# with mmdebstrap from the package lists the Dockerfile names, so its install steps find nothing to
# do and need no network: the build base adds the pinned Node (the binary the tests run on, with its headers) and
# npm; the run base gets only Node, copied from the build stage. Documentation, manuals and
# translations are left out as dpkg unpacks them. The result is saved as a docker-archive that
# `podman load` and `ctr -n k8s.io images import` take, named as daemonset.yaml names it
# (weft:<version>, which containerd and kubelet read as docker.io/library/weft:<version>).
VERSION := $(shell sed -n 's/^  "version": "\(.*\)",$$/\1/p' package.json)
NODE_VERSION := $(shell sed -n 's/^    "node": "\(.*\)",$$/\1/p' package.json)
NPM_VERSION := 11.19.1
IMAGE := weft:$(VERSION)
IMAGE_ARCHIVE := dist/weft-$(VERSION).tar
# The directory the Dockerfile's COPY lines read (bench-image builds a changed copy).
IMAGE_CONTEXT := .
BUILD_BASE := localhost/weft-build-base:$(NODE_VERSION)-bookworm
RUN_BASE := localhost/weft-run-base:bookworm
dockerfile_arg = $(shell sed -n 's/^ARG $(1)="\(.*\)"$$/\1/p' Dockerfile)
DEBIAN_SOURCES := "deb http://deb.debian.org/debian bookworm main" "deb http://deb.debian.org/debian bookworm-updates main" \
	"deb http://deb.debian.org/debian-security bookworm-security main"
MMDEBSTRAP := mmdebstrap --quiet --format=tar --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
NODE_DIST = $(firstword $(wildcard $(CURDIR)/node_modules/node/node_modules/node-linux-*))
# The OCI runtime raises no resource limit given at or below the current ones (root here lacks
# CAP_SYS_RESOURCE: ../shared/reference/machine.md).
ULIMITS := --ulimit nofile=16384:16384 --ulimit nproc=4096:4096

# Each base is remade when its package list in the Dockerfile changes (the build base also when
# the pinned Node does), and imported into the image store as it is made.
dist/image/%.packages: Dockerfile
	@mkdir -p $(@D)
	@echo '$(call dockerfile_arg,$(*)_PACKAGES)' | cmp -s - $@ || echo '$(call dockerfile_arg,$(*)_PACKAGES)' > $@

dist/image/run-base.tar: dist/image/RUN.packages
	$(MMDEBSTRAP) --include="$$(cat $<)" bookworm $@.tmp $(DEBIAN_SOURCES)
	podman import --quiet $@.tmp $(RUN_BASE) >/dev/null
	mv -f $@.tmp $@

# npm in the build trusts the certificate authorities this machine trusts (a TLS-intercepting
# proxy's among them), as npm on the machine does; the bundle stays in the build base.
dist/image/build-base.tar: dist/image/BUILD.packages package.json node_modules/.weft-installed
	npm pack --silent --pack-destination $(@D) npm@$(NPM_VERSION) >/dev/null
	$(MMDEBSTRAP) --include="$$(cat $<)" \
		--customize-hook='mkdir -p "$$1/usr/local/bin" "$$1/usr/local/include" "$$1/usr/local/etc" "$$1/usr/local/lib/node_modules/npm"' \
		--customize-hook='copy-in $(NODE_DIST)/bin/node /usr/local/bin' \
		--customize-hook='copy-in $(NODE_DIST)/include/node /usr/local/include' \
		--customize-hook='tar -xzf $(CURDIR)/$(@D)/npm-$(NPM_VERSION).tgz -C "$$1/usr/local/lib/node_modules/npm" --strip-components=1' \
		--customize-hook='ln -s ../lib/node_modules/npm/bin/npm-cli.js "$$1/usr/local/bin/npm"' \
		--customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$$1/usr/local/etc/build-ca.crt"' \
		--customize-hook='echo cafile=/usr/local/etc/build-ca.crt > "$$1/usr/local/etc/npmrc"' \
		bookworm $@.tmp $(DEBIAN_SOURCES)
	podman import --quiet $@.tmp $(BUILD_BASE) >/dev/null
	mv -f $@.tmp $@

image: deps dist/image/run-base.tar dist/image/build-base.tar
	podman image exists $(BUILD_BASE) || podman import --quiet dist/image/build-base.tar $(BUILD_BASE)
	podman image exists $(RUN_BASE) || podman import --quiet dist/image/run-base.tar $(RUN_BASE)
	buildah bud --quiet --layers --pull=never --network=host --runtime=runc $(ULIMITS) --build-arg NODE_VERSION=$(NODE_VERSION) \
		--build-arg BUILD_BASE=$(BUILD_BASE) --build-arg RUN_BASE=$(RUN_BASE) -t $(IMAGE) -f $(IMAGE_CONTEXT)/Dockerfile $(IMAGE_CONTEXT)
	podman tag $(IMAGE) docker.io/library/$(IMAGE)
	rm -f $(IMAGE_ARCHIVE).tmp
	podman save --quiet --format docker-archive -o $(IMAGE_ARCHIVE).tmp docker.io/library/$(IMAGE)
	mv -f $(IMAGE_ARCHIVE).tmp $(IMAGE_ARCHIVE)
	@root=$$(podman image mount $(IMAGE)) && trap 'podman image unmount $(IMAGE) >/dev/null' EXIT && \
		echo "$(IMAGE): $$(du -sm "$$root" | cut -f1) MiB unpacked, $(IMAGE_ARCHIVE) $$(du -m $(IMAGE_ARCHIVE) | cut -f1) MiB" && \
		echo "largest directories (MiB):" $$(du -xm --max-depth=2 "$$root" | sed "s|$$root||" | awk -F/ 'NF == 3 && $$1 + 0 > 1' | sort -rn | head -8 | tr '\t\n' ' ') && \
		echo "largest files (MiB):" $$(cd "$$root" && find . -xdev -type f -size +1M -exec du -m {} + | sort -rn | head -6 | sed 's|\./|/|' | tr '\t\n' ' ')

typecheck: deps-npm
	$(NODE) node_modules/typescript/bin/tsc -p tsconfig.json --noEmit

# The image test (test/e2e/image.test.ts) runs the archive `make image` saves.
test: deps build image
	$(NODE) --test $(TEST_FLAGS) 'test/unit/**/*.test.ts' 'test/fuzz/**/*.test.ts' 'test/integration/**/*.test.ts' 'test/e2e/**/*.test.ts'

test-unit: build
	$(NODE) --test $(TEST_FLAGS) 'test/unit/**/*.test.ts' 'test/fuzz/**/*.test.ts'

test-integration: build image
	$(NODE) --test $(TEST_FLAGS) 'test/integration/**/*.test.ts' 'test/e2e/**/*.test.ts'

# Every program the Makefile, scripts, tests, benches, demo and src run (scripts/tools, which
# test/unit/tools.test.ts keeps complete) is on PATH, in dist/peers, or at its path.
check-tools:
	scripts/check-tools.sh

# make deps build, then check-tools, in a bare Debian root holding only what a new machine of this
# kind has, from a clone of HEAD (scripts/fresh-root.sh says what and how). .ci/run runs it after
# make test.
check-fresh: deps-debian
	PEERS_SRC=$(PEERS_SRC) scripts/fresh-root.sh $(DEBIAN_SOURCES)

# The image as daemonset.yaml runs it, alone (it is part of make test too).
test-image: deps build image
	$(NODE) --test $(TEST_FLAGS) test/e2e/image.test.ts

# The image's size, make image's time after a source change, and the weftd container's start to
# /readyz against bin/weftd's (bench/image.bench.ts says how); about 8 minutes.
bench-image: deps build image
	$(NODE) bench/image.bench.ts

bench-netlink: deps build
	$(NODE) bench/netlink.bench.ts

bench-reconcile: deps build
	$(NODE) bench/reconcile.bench.ts

bench-etcd: deps build
	$(NODE) bench/etcd.bench.ts

# Runs the compiled lease source the way bin/weftd runs weftd (dist/, no type stripping), with a
# small V8 young generation (--max-semi-space-size=4) that keeps the peak RSS of a 5,000-Node list low.
bench-kube: deps build
	$(NODE) --max-semi-space-size=4 dist/bench/kube.bench.js

# bin/weftd as a node runs it: exec → subnet.env → converged, peak memory and idle CPU, at 1,000
# and 5,000 etcd leases and 5,000 Nodes in kube mode.
bench-footprint: deps build
	$(NODE) bench/footprint.bench.ts

# bin/weftd at 5,000, 20,000 and 50,000 etcd leases and 20,000 and 50,000 Nodes: convergence,
# memory, event latency and full-resync CPU at the largest N (bench/scale.bench.ts says how).
bench-scale: deps build
	$(NODE) bench/scale.bench.ts

bench-cni: deps build
	$(NODE) bench/cni.bench.ts

bench-dataplane: deps build
	$(NODE) bench/dataplane.bench.ts

# 200 Job pods with fixed addresses on, finished on a node in kube mode (the real kube-apiserver):
# how soon their addresses are released, and how many are still held a minute later; ~1.5 minutes.
bench-fixed-release: deps build
	$(NODE) bench/fixed-release.bench.ts

# A real Prometheus scraping a three-node cluster's weftds: how many of weft-dashboard.json's
# queries return no series (dashboard_queries_empty), and how long until every weftd is scraped.
bench-dashboard: deps build
	$(NODE) bench/visibility-dashboard.bench.ts

# Issue #42's figures on a two-node cluster of real weftds (kube mode): denied connections logged
# and how late, weftd's CPU while 1,000 denied connections a second arrive, trace against real
# connections for every truth-table cell and Services case; then the dashboard's empty queries
# against a real Prometheus on a cluster of its own.
bench-visibility: deps build
	$(NODE) bench/visibility.bench.ts

# bin/weftctl status against a running weftd in a node namespace: median of 20.
bench-weftctl: deps build
	$(NODE) bench/weftctl.bench.ts

# Faults injected one at a time into clusters of the e2e harness; about 3 minutes (two 60 s outages).
bench-faults: deps build
	$(NODE) bench/faults.bench.ts

# etcd's faults (partition, dead endpoint, auth restart, hostile endpoint, 50,000 leases over a
# slow link) on three-member etcd clusters in namespaces; a few minutes.
bench-etcd-faults: deps build
	$(NODE) bench/etcd-faults.bench.ts

# NetworkPolicy on a two-node cluster: apply latency and start at 1,000 policies over 2,000 pods,
# connection rate and throughput with 100 policies against none; a few minutes.
bench-netpol: deps build
	$(NODE) bench/netpol.bench.ts

# Services through weftd's proxy on a two-node cluster: 10,000 Services of 10 endpoints, cold sync,
# update latency, connect latency at 100 and 10,000 Services, rate and throughput via a cluster IP.
bench-services: deps build
	$(NODE) bench/services.bench.ts

# Kubernetes v1.28.4's own [sig-network] e2e tests (Conformance, Services, Networking) on a real
# two-node cluster running Weft from daemonset.yaml + service-proxy.yaml and no kube-proxy; the skip
# list and its reasons are in test/conformance/run.ts's header. Not part of make test (~20 minutes).
test-conformance: deps build image
	$(NODE) test/conformance/run.ts

# Egress gateways on the cluster harness: policy to EIP, failovers by link cut and weftd kill, dual
# answers, a 10 s API stall, throughput through a gateway, forced controller overlap, 40 EIPs failed
# over by a weftd kill, every API request 1 s slower for 60 s; ~8 minutes.
bench-egress: deps build
	$(NODE) bench/egress.bench.ts

# How late the kernel deletes an address whose lifetime ran out (the EIP fence's slack); ~1 minute, root.
bench-addr-lifetime: deps build
	$(NODE) bench/addr-lifetime.bench.ts

# Inbound EIPs on the cluster harness: floating IP to first connection, failovers, dual answers, a
# 10 s API stall, throughput via the EIP, forced controller overlap; ~5 minutes.
bench-fip: deps build
	$(NODE) bench/fip.bench.ts

# The gateways' liveness over the underlay (--egress-peer-key-file): packets to two EIPs lost in a
# 30 s API outage, and how soon a gateway cut from its peers and the API stops answering; ~3 minutes.
bench-egress-peers: deps build
	$(NODE) bench/egress-peers.bench.ts

# The extension backend's commands: how far past its timeout a command that backgrounds a child
# returns, and a pass over 200 leases whose add command takes 100 ms; a few seconds, no root.
bench-hooks: deps build
	$(NODE) bench/hooks.bench.ts

# The Service proxy's conntrack cleanup (#39 item 2): a UDP flow from one source port while its only endpoint is replaced.
bench-udp-stale: deps build
	$(NODE) bench/udp-stale.bench.ts

# A node as an operator installs it (bench/node.bench.ts says how): the real control plane and
# kubelet, daemonset.yaml applied with kubectl; about 6 minutes, root.
bench-node: deps build image
	$(NODE) bench/node.bench.ts

# A 3-node cluster with pods in namespaces on this machine; Ctrl-C removes it.
demo: deps build
	$(NODE) demo/demo.ts

clean:
	rm -rf dist native/build
