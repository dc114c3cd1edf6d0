/**
 * Client identities for the components of a real-kubelet cluster (kube-cluster.ts), as kubeadm
 * gives them: a certificate signed by the cluster CA of control-plane.ts's PKI, whose CN is the user
 * and O the group (`system:node:<name>` in `system:nodes` for a kubelet, which the Node authorizer
 * serves; `system:kube-proxy`, which the bootstrap `system:node-proxier` binding serves), and a
 * kubeconfig naming it.
 */
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** A client identity: its user (CN) and groups (O). */
export interface ClientIdentity {
  /** File names in the PKI directory: `<name>.crt`, `<name>.key`. */
  name: string;
  user: string;
  groups?: string[];
}

/**
 * Issues `who`'s client certificate in `pkiDir` (which holds the cluster's ca.crt and ca.key) and
 * writes a kubeconfig for it at `file`, for the API at `server`; returns `file`.
 */
export async function clientKubeconfig(pkiDir: string, who: ClientIdentity, server: string, file: string): Promise<string> {
  const subject = [...(who.groups ?? []).map((g) => `/O=${g}`), `/CN=${who.user}`].join('');
  const ssl = (...args: string[]) => run('openssl', args, { cwd: pkiDir });
  await ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', subject,
    '-keyout', `${who.name}.key`, '-out', `${who.name}.csr`);
  await writeFile(join(pkiDir, `${who.name}.ext`), 'extendedKeyUsage=clientAuth\n');
  await ssl('x509', '-req', '-in', `${who.name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
    '-extfile', `${who.name}.ext`, '-out', `${who.name}.crt`);
  await writeFile(file, JSON.stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': 'cluster',
    clusters: [{ name: 'cluster', cluster: { server, 'certificate-authority': join(pkiDir, 'ca.crt') } }],
    users: [{
      name: who.user, user: { 'client-certificate': join(pkiDir, `${who.name}.crt`), 'client-key': join(pkiDir, `${who.name}.key`) },
    }],
    contexts: [{ name: 'cluster', context: { cluster: 'cluster', user: who.user } }],
  }));
  return file;
}
