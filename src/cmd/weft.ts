/**
 * weft, the CNI plugin entry point (installed as /opt/cni/bin/weft or /opt/cni/bin/flannel):
 * reads the network config from stdin and the CNI_* environment, runs the verb, prints the
 * result or the spec error. No logic here; see src/cni/plugin.ts.
 */
import { readFileSync, writeSync } from 'node:fs';
import { runPlugin } from '../cni/plugin.ts';

function readStdin(): string {
  try {
    return readFileSync(0, 'utf8');
  } catch {
    return '';
  }
}

const { stdout, exitCode } = runPlugin(process.env, readStdin());
if (stdout !== '') writeSync(1, stdout + '\n');
process.exitCode = exitCode;
