/**
 * A few Services of every shape the proxy translates (ClientIP affinity, node ports with the
 * Local policy, external and load balancer IPs with source ranges, UDP, both families), rendered
 * as the proxy renders: the rules nft/read-back.ts has the host take and read back at start.
 */
import type { NftRuleset } from '../nft/ruleset.ts';
import { isInvalid, parseEndpointSlice, parseService, SERVICE_NAME_LABEL } from './model.ts';
import type { EndpointSlice, Service } from './model.ts';
import { ServiceRenderer } from './render.ts';
import type { RenderOptions } from './render-types.ts';

const SERVICES: Record<string, Record<string, unknown>> = {
  sticky: {
    clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10', 'fd00:10:96::10'], ipFamilyPolicy: 'RequireDualStack',
    sessionAffinity: 'ClientIP', ports: [{ port: 80, targetPort: 8080 }],
  },
  local: {
    type: 'NodePort', clusterIP: '10.96.0.11', externalTrafficPolicy: 'Local', externalIPs: ['198.18.0.10'],
    internalTrafficPolicy: 'Local', ports: [{ port: 53, protocol: 'UDP', nodePort: 30053 }, { port: 53, nodePort: 30054 }],
  },
  lb: {
    type: 'LoadBalancer', clusterIP: '10.96.0.12', loadBalancerSourceRanges: ['198.51.100.0/24'], ports: [{ port: 443, nodePort: 30443 }],
  },
  empty: { clusterIP: '10.96.0.13', ports: [{ port: 80 }] },
};

/** One ready endpoint on this node and one on another, of `family`. */
function slice(service: string, family: 'IPv4' | 'IPv6', node: string): Record<string, unknown> {
  const address = (i: number) => (family === 'IPv4' ? `10.244.0.${i}` : `fd00:244::${i}`);
  const ports = service === 'local' ? [{ port: 53, protocol: 'UDP' }, { port: 53 }] : [{ port: 8080 }];
  return {
    metadata: { namespace: 'sample', name: `${service}-${family}`, labels: { [SERVICE_NAME_LABEL]: service } },
    addressType: family, ports,
    endpoints: [2, 3].map((i) => ({ addresses: [address(i)], nodeName: i === 2 ? node : `not-${node}`, conditions: { ready: true } })),
  };
}

/** The rules of the sample Services as rendered with `options`. */
export function sampleRuleset(options: RenderOptions): NftRuleset {
  const services = new Map<string, Service>();
  const slices = new Map<string, EndpointSlice[]>();
  for (const [name, spec] of Object.entries(SERVICES)) {
    const status = name === 'lb' ? { loadBalancer: { ingress: [{ ip: '198.18.0.20' }] } } : {};
    const service = parseService({ metadata: { namespace: 'sample', name }, spec, status });
    if (isInvalid(service)) throw new Error(`sample Service ${name}: ${service.invalid}`);
    services.set(`sample/${name}`, service);
    if (name === 'empty') continue;
    const parsed = (['IPv4', 'IPv6'] as const).map((f) => parseEndpointSlice(slice(name, f, options.node)));
    slices.set(`sample/${name}`, parsed.filter((s): s is EndpointSlice => !isInvalid(s)));
  }
  return new ServiceRenderer().render({ services, slices }, options).ruleset;
}
