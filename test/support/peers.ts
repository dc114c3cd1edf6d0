/**
 * The real Kubernetes v1.28.4 and flannel v0.20.2 programs the tests run against: `make deps`
 * unpacks them from ../shared/peers (beside the checkout) into dist/peers.
 */
import { accessSync, constants } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const PEERS_DIR = fileURLToPath(new URL('../../dist/peers/', import.meta.url));

export type Peer = 'kube-apiserver' | 'kube-controller-manager' | 'kube-scheduler' | 'kubelet' | 'kube-proxy' | 'kubectl'
  | 'flanneld' | 'flannel-cni-v1.1.2' | 'flannel-cni-v1.7.1-flannel1' | 'cnitool' | 'e2e.test' | 'ginkgo';

/** The path of peer program `name`; throws, naming the missing file, when `make deps` has not unpacked it. */
export function peer(name: Peer): string {
  const file = `${PEERS_DIR}${name}`;
  try {
    accessSync(file, constants.X_OK);
  } catch {
    throw new Error(`${file} is missing: make deps unpacks it from ../shared/peers`);
  }
  return file;
}
