/** bin/weftctl (and other commands) run for the e2e tests, their exit code and output kept. */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Cluster, ClusterNode } from './cluster.ts';

const WEFTCTL = fileURLToPath(new URL('../../bin/weftctl', import.meta.url));

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** `cmd args`, never rejecting: a failure is its exit code. */
export function run(cmd: string, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(cmd, args, { maxBuffer: 16 << 20 }, (e, stdout, stderr) => {
      resolve({ code: e ? (typeof e.code === 'number' ? e.code : 1) : 0, stdout, stderr });
    });
  });
}

/** bin/weftctl in `n`'s namespace, told where the registry is (etcd, or the API server in kube mode). */
export function weftctl(c: Cluster, n: ClusterNode, ...args: string[]): Promise<Run> {
  const registry = c.etcd
    ? [`--etcd-endpoints=${c.etcd.endpoint}`]
    : ['--kube-subnet-mgr', `--kubeconfig-file=${join(c.dir, 'kubeconfig.json')}`, '--kube-api-url=https://127.0.0.1:6443', `--net-config-path=${join(c.dir, 'net-conf.json')}`];
  return run('ip', ['netns', 'exec', n.ns.name, WEFTCTL, `--subnet-file=${join(n.dir, 'subnet.env')}`, ...registry, ...args]);
}
