/**
 * A candidate for the egress controller Lease in a process of its own, so a test can pause it with
 * SIGSTOP: runs leases.ts's election as argv[3] against the API server of kubeconfig argv[2]
 * (lease duration, renew deadline and retry period in ms: argv[4..6]) and, while leading,
 * rewrites Lease default/probe every 20 ms with its name as holder (and the time), fenced as the
 * controller fences its writes: a read and a conditional update, each started only while the
 * leadership has time left and given only that time. Prints `leading` and `stopped` as it starts and stops leading.
 */
import { microTime, runElection } from '../../src/egress/leases.ts';
import { kubeConfigFromFlags } from '../../src/lease/kube/client.ts';
import { KubeHttp } from '../../src/lease/kube/http.ts';
import { silentLogger } from '../../src/log.ts';
import { sleep } from '../../src/retry.ts';

const [kubeconfigFile, identity, leaseMs, deadlineMs, retryMs] = process.argv.slice(2) as [string, string, string, string, string];
const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile }, {}));
const path = '/apis/coordination.k8s.io/v1/namespaces/default/leases/probe';
const stop = new AbortController();
process.on('SIGTERM', () => stop.abort());
await runElection(
  { http, namespace: 'default', identity, leaseDurationMs: Number(leaseMs), renewDeadlineMs: Number(deadlineMs), retryMs: Number(retryMs), log: silentLogger },
  stop.signal,
  async (leadership) => {
    process.stdout.write('leading\n');
    while (!leadership.signal.aborted) {
      try {
        if (leadership.remainingMs() <= 0) break;
        const probe = await http.get<Record<string, unknown>>(path, { signal: leadership.signal, timeoutMs: leadership.remainingMs() });
        if (leadership.remainingMs() <= 0) break;
        // A new renewTime makes every write a change, so a watch sees each one kube-apiserver accepts.
        const spec = { holderIdentity: identity, renewTime: microTime(Date.now()) };
        await http.update(path, { ...probe, spec }, { signal: leadership.signal, timeoutMs: leadership.remainingMs() });
      } catch {
        // refused (409) or cut short by the deadline: the loop asks again
      }
      await sleep(20, leadership.signal).catch(() => undefined);
    }
    process.stdout.write('stopped\n');
  },
);
