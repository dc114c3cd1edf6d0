/**
 * Local sockets from another user's point of view: whether `nobody` can connect to a unix socket.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

/** Connects to the unix socket `path` as uid/gid 65534 (nobody); resolves with `connected` or the error code. */
export async function connectAsNobody(path: string): Promise<string> {
  const script = `require('node:net').createConnection(${JSON.stringify(path)}).on('connect', () => { console.log('connected'); process.exit(0); }).on('error', (e) => { console.log(e.code); process.exit(0); })`;
  const { stdout } = await promisify(execFile)('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', script]);
  return stdout.trim();
}
