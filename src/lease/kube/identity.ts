/**
 * Which Node this agent runs on (reference §3): NODE_NAME, else the `spec.nodeName` of the pod
 * named by POD_NAME in POD_NAMESPACE (the downward API of flannel's DaemonSet).
 */
import { ConfigError } from '../../errors.ts';

/** Reads a pod's `spec.nodeName`; the source passes one backed by the API client. */
export type PodNodeNameReader = (namespace: string, name: string) => Promise<string | undefined>;

/**
 * The Node name from `env`: NODE_NAME when set, else POD_NAME + POD_NAMESPACE looked up with
 * `readPod`. ConfigError names the variable when neither is usable; errors of `readPod` pass through.
 */
export async function resolveNodeName(env: NodeJS.ProcessEnv, readPod: PodNodeNameReader): Promise<string> {
  if (env.NODE_NAME) return env.NODE_NAME;
  const pod = env.POD_NAME;
  const ns = env.POD_NAMESPACE;
  if (!pod || !ns) {
    throw new ConfigError(
      pod ? 'POD_NAMESPACE' : 'POD_NAME',
      'NODE_NAME is unset, so the env variables POD_NAME and POD_NAMESPACE must be set',
    );
  }
  const node = await readPod(ns, pod);
  if (!node) throw new ConfigError('POD_NAME', `pod ${ns}/${pod} has no spec.nodeName (not scheduled yet?)`);
  return node;
}
