/**
 * What the tests of the Kubernetes lease source (src/lease/kube/source.ts) share, on the real
 * kube-apiserver (kube.test.ts) and on the test API server (kube-faults.test.ts): peers' Nodes as
 * flanneld annotates them, our lease's attributes, sources made from a kubeconfig per token, and
 * a watch into a fresh LeaseTable.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatCIDR, parseIP } from '../../src/ip/ip.ts';
import type { LeaseAttrs } from '../../src/lease/lease.ts';
import { KubeLeaseSource } from '../../src/lease/kube/source.ts';
import type { KubeSourceOptions } from '../../src/lease/kube/options.ts';
import { LeaseTable } from '../../src/lease/table.ts';
import type { LeaseEvent } from '../../src/lease/table.ts';
import { silentLogger } from '../../src/log.ts';
import { sleep } from '../../src/retry.ts';
import { flannelNode } from './kube-nodes.ts';

/** flannel's annotation prefix, short for the tests' many annotation keys. */
export { FLANNEL_PREFIX as P } from './kube-nodes.ts';
/** net-conf.json of an IPv4 vxlan network. */
export const V4_CONF = '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}';
/** net-conf.json of a dual-stack vxlan network. */
export const DUAL_CONF = '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}';

/** The VTEP MAC of node `n`. */
export function mac(n: number): string {
  return `6e:00:00:00:00:${n.toString(16).padStart(2, '0')}`;
}

/** Node `n`'s vxlan lease attributes. */
export function attrs(n: number): LeaseAttrs {
  return { backendType: 'vxlan', publicIP: parseIP(`198.18.0.${n}`, 'ip'), backendData: { VNI: 1, VtepMAC: mac(n) } };
}

/** Node `node-<n>` as another flanneld would have annotated it, with pod CIDR 10.244.<n>.0/24. */
export function peerNode(n: number, extra: Record<string, string> = {}): ReturnType<typeof flannelNode> {
  return flannelNode({ name: `node-${n}`, podCIDR: `10.244.${n}.0/24`, publicIP: `198.18.0.${n}`, vtepMac: mac(n), annotations: extra });
}

/** Backoff waits shortened tenfold so retries happen within a test's time. */
export const fastDelay = (ms: number, signal: AbortSignal): Promise<void> => sleep(ms / 10, signal);

/** Makes sources as node-1's weftd, each with the kubeconfig of a token. */
export interface Sources {
  source: (token: string, extra?: Partial<KubeSourceOptions>, conf?: string) => Promise<KubeLeaseSource>;
  dir: string;
  /** Closes every source made and removes their files. */
  close: () => Promise<void>;
}

/** {@link Sources} whose kubeconfig for a token is `kubeconfig(token)`. */
export async function sources(kubeconfig: (token: string) => Promise<string>): Promise<Sources> {
  const dir = await mkdtemp(join(tmpdir(), 'weft-kube-test-'));
  const made: KubeLeaseSource[] = [];
  return {
    dir,
    source: async (token, extra = {}, conf = V4_CONF) => {
      const netConfigPath = join(dir, `net-conf-${made.length}.json`);
      await writeFile(netConfigPath, conf);
      const s = KubeLeaseSource.create({
        kubeconfigFile: await kubeconfig(token), netConfigPath, env: { NODE_NAME: 'node-1' }, log: silentLogger,
        delay: fastDelay, watchSilenceMs: 5_000, ...extra,
      });
      made.push(s);
      return s;
    },
    close: async () => {
      for (const s of made.splice(0)) await s.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A watch of `s` into a fresh table: the table, its batches, the watch's promise and a stop function. */
export function watchInto(s: KubeLeaseSource): {
  table: LeaseTable; batches: LeaseEvent[][]; done: Promise<void>; stop: () => Promise<void>;
} {
  const table = new LeaseTable();
  const batches: LeaseEvent[][] = [];
  table.subscribe((b) => batches.push([...b]));
  const ac = new AbortController();
  const done = s.watch(table, ac.signal);
  return { table, batches, done, stop: async () => { ac.abort(); await done; } };
}

/** The table's leases as `peer=subnet`, sorted. */
export function subnets(table: LeaseTable): string[] {
  return table.leases().map((l) => `${l.peer}=${formatCIDR(l.subnet!)}`).sort();
}
