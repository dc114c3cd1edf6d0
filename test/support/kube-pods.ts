/**
 * Pods for tests on a real-kubelet cluster (kube-cluster.ts), made through the API with kubectl:
 * agnhost (the e2e image of dist/peers, with busybox's ping and a curl-backed wget) on a chosen node.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import type { KubeCluster } from './kube-cluster.ts';
import { PEER_IMAGES } from './kube-images.ts';
import { peer } from './peers.ts';

export interface TestPodOptions {
  namespace?: string;
  labels?: Record<string, string>;
  /** The container's args to agnhost's entry point (default `pause`, none with `command`), or `command` to replace it. */
  args?: string[];
  command?: string[];
}

/** Creates agnhost pod `name` on `node` (by its hostname label, through the scheduler), tolerating every taint. */
export async function createTestPod(c: KubeCluster, name: string, node: string, o: TestPodOptions = {}): Promise<void> {
  await c.kubectl('apply', '-f', '-', {
    input: JSON.stringify({
      apiVersion: 'v1', kind: 'Pod',
      metadata: { name, namespace: o.namespace ?? 'default', ...(o.labels ? { labels: o.labels } : {}) },
      spec: {
        nodeSelector: { 'kubernetes.io/hostname': node }, tolerations: [{ operator: 'Exists' }], terminationGracePeriodSeconds: 1,
        containers: [{
          name: 'main', image: PEER_IMAGES.agnhost.name, ...(o.command ? { command: o.command } : {}),
          args: o.args ?? (o.command ? [] : ['pause']),
        }],
      },
    }),
  });
}

/** Waits (kubectl wait, a watch) until pod `name` is Ready; returns its IP. */
export async function podReady(c: KubeCluster, name: string, namespace = 'default', timeoutS = 120): Promise<string> {
  await c.kubectl('wait', '-n', namespace, '--for=condition=Ready', `pod/${name}`, `--timeout=${timeoutS}s`);
  return (await c.kubectl('get', 'pod', '-n', namespace, name, '-o', 'jsonpath={.status.podIP}')).trim();
}

/** `kubectl exec` into `pod`; resolves with stdout. */
export async function execIn(c: KubeCluster, pod: string, cmd: string[], namespace = 'default', container?: string): Promise<string> {
  return c.kubectl('exec', '-n', namespace, pod, ...(container ? ['-c', container] : []), '--', ...cmd);
}

/** The names of the pods matching `selector` in `namespace` on node `node`. */
export async function podsOn(c: KubeCluster, namespace: string, selector: string, node: string): Promise<string[]> {
  const out = await c.kubectl('get', 'pods', '-n', namespace, '-l', selector, `--field-selector=spec.nodeName=${node}`, '-o', 'name');
  return out.split('\n').filter(Boolean).map((s) => s.replace(/^pod\//, ''));
}

/**
 * The ICMP sequence numbers answered so far, from the log of a pod running busybox's `ping`
 * (`64 bytes from …: seq=N …`), sorted.
 */
export async function answeredPings(c: KubeCluster, pod: string, namespace = 'default'): Promise<number[]> {
  const log = await c.kubectl('logs', '-n', namespace, pod);
  return [...new Set([...log.matchAll(/ seq=(\d+) /g)].map((m) => Number(m[1])))].sort((a, b) => a - b);
}

/**
 * Watches pod `name` (kubectl get --watch). `watching` resolves once the watch has shown the pod
 * (tell the pod to stop after that); `code` with the exit code of its container `container` once the
 * kubelet reports it terminated, or undefined when the watch ends first (the pod gone without
 * showing one, or `timeoutMs` past).
 */
export function exitCodeWhenTerminated(c: KubeCluster, name: string, namespace: string, container: string,
  timeoutMs = 300_000): { watching: Promise<void>; code: Promise<number | undefined> } {
  const path = `{.status.containerStatuses[?(@.name=="${container}")].state.terminated.exitCode}{"\\n"}`;
  const proc: ChildProcess = spawn(peer('kubectl'), [`--kubeconfig=${c.kubeconfig}`, 'get', 'pod', '-n', namespace, name, '--watch',
    '-o', `jsonpath=${path}`], { stdio: ['ignore', 'pipe', 'ignore'] });
  const timer = setTimeout(() => proc.kill('SIGTERM'), timeoutMs);
  let out = '';
  const watching = new Promise<void>((resolve, reject) => {
    proc.stdout!.once('data', () => resolve());
    proc.once('exit', () => reject(new Error(`kubectl could not watch pod ${namespace}/${name}`)));
  });
  const code = new Promise<number | undefined>((resolve) => {
    proc.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const found = out.split('\n').find((l) => /^\d+$/.test(l.trim()));
      if (found !== undefined) {
        resolve(Number(found));
        proc.kill('SIGTERM');
      }
    });
    proc.on('exit', () => {
      clearTimeout(timer);
      resolve(undefined);
    });
  });
  return { watching, code };
}
