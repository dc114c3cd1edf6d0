/**
 * The child process of {@link startKubeChild}: the test API server holding argv[2] Nodes. It sends
 * its kubeconfig and socket path once listening, and stops when the parent disconnects.
 */
import { KubeApiServer } from '../../test/support/kube-apiserver.ts';
import { kubeNode } from './weftd.ts';

const nodes = Number(process.argv[2]);
const api = await KubeApiServer.start();
for (let n = 0; n < nodes; n++) api.addNode(kubeNode(n));
process.send!({ kubeconfig: await api.kubeconfig(), socketPath: api.socketPath });
process.on('disconnect', () => void api.stop().then(() => process.exit(0)));
