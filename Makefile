# Weft: `make test` installs what it needs, builds and runs every test; `make demo` shows a cluster.
# Everything runs on the Node 24 pinned in package.json (node_modules/.bin/node), never the system Node.

SHELL := /bin/bash
NODE := $(CURDIR)/node_modules/.bin/node
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)

DEBIAN_PACKAGES := libnl-3-dev libnl-route-3-dev etcd-server containernetworking-plugins \
	iproute2 iputils-ping nftables iptables iperf3 openssl python3 make g++ pkg-config ethtool

TEST_FLAGS := --expose-gc --test-reporter=spec --test-concurrency=2

.PHONY: all deps deps-debian deps-npm build build-native build-ts test test-unit test-integration \
	build-plugin typecheck bench-netlink bench-reconcile bench-etcd bench-kube build-cni build-weftd build-weftctl bench-cni bench-dataplane \
	bench-footprint bench-scale bench-faults bench-etcd-faults bench-weftctl bench-netpol bench-egress bench-fip demo clean

all: build

deps: deps-debian deps-npm

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

typecheck: deps-npm
	$(NODE) node_modules/typescript/bin/tsc -p tsconfig.json --noEmit

test: deps build
	$(NODE) --test $(TEST_FLAGS) 'test/unit/**/*.test.ts' 'test/fuzz/**/*.test.ts' 'test/integration/**/*.test.ts' 'test/e2e/**/*.test.ts'

test-unit: build
	$(NODE) --test $(TEST_FLAGS) 'test/unit/**/*.test.ts' 'test/fuzz/**/*.test.ts'

test-integration: build
	$(NODE) --test $(TEST_FLAGS) 'test/integration/**/*.test.ts' 'test/e2e/**/*.test.ts'

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

# Egress gateways on the cluster harness: policy to EIP, failover, throughput through a gateway.
bench-egress: deps build
	$(NODE) bench/egress.bench.ts

# Inbound EIPs on the cluster harness: floating IP to first connection, failover, throughput via the EIP.
bench-fip: deps build
	$(NODE) bench/fip.bench.ts

# A 3-node cluster with pods in namespaces on this machine; Ctrl-C removes it.
demo: deps build
	$(NODE) demo/demo.ts

clean:
	rm -rf dist native/build
