/** The throwaway PKI of a test's Kubernetes control plane (control-plane.ts), made with openssl. */
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * A cluster's PKI as kubeadm lays it out, in `dir`: the CA (ca.crt, ca.key); the API server's
 * certificate (apiserver.crt, .key) for the addresses `ips` and the `kubernetes` Service's names;
 * an admin client certificate (admin.crt, .key; group system:masters); the service-account signing
 * key pair (sa.key, sa.pub). Valid two days.
 */
export async function makeClusterPki(dir: string, ips: readonly string[]): Promise<void> {
  await mkdir(dir, { recursive: true });
  const ssl = (...args: string[]) => run('openssl', args, { cwd: dir });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await ssl('req', '-x509', ...ec, '-days', '2', '-subj', '/CN=kubernetes', '-keyout', 'ca.key', '-out', 'ca.crt');
  const sans = [...ips.map((ip) => `IP:${ip}`), 'DNS:localhost', 'DNS:kubernetes',
    'DNS:kubernetes.default', 'DNS:kubernetes.default.svc', 'DNS:kubernetes.default.svc.cluster.local'];
  const certs = [
    ['apiserver', '/CN=kube-apiserver', `subjectAltName=${sans.join(',')}\nextendedKeyUsage=serverAuth`],
    ['admin', '/O=system:masters/CN=kubernetes-admin', 'extendedKeyUsage=clientAuth'],
  ] as const;
  for (const [name, subj, ext] of certs) {
    await ssl('req', ...ec, '-subj', subj, '-keyout', `${name}.key`, '-out', `${name}.csr`);
    await writeFile(join(dir, `${name}.ext`), `${ext}\n`);
    await ssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
      '-extfile', `${name}.ext`, '-out', `${name}.crt`);
  }
  await ssl('genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', 'sa.key');
  await ssl('pkey', '-in', 'sa.key', '-pubout', '-out', 'sa.pub');
}
