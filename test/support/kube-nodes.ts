/**
 * Node objects as flanneld (or weftd) leaves them annotated, for the tests and benches that put
 * peers into the test API server.
 */

/** flannel's default annotation prefix (--kube-annotation-prefix). */
export const FLANNEL_PREFIX = 'flannel.alpha.coreos.com';

export interface FlannelNode {
  name: string;
  podCIDR: string;
  publicIP: string;
  vtepMac: string;
  /** More annotations, or replacements of the usual ones. */
  annotations?: Record<string, string>;
}

/** A vxlan peer's Node: flannel's four annotations and its pod CIDR. */
export function flannelNode(o: FlannelNode): { metadata: { name: string; annotations: Record<string, string> }; spec: { podCIDR: string; podCIDRs: string[] } } {
  const P = FLANNEL_PREFIX;
  return {
    metadata: {
      name: o.name,
      annotations: {
        [`${P}/kube-subnet-manager`]: 'true', [`${P}/backend-type`]: 'vxlan',
        [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"${o.vtepMac}"}`, [`${P}/public-ip`]: o.publicIP, ...o.annotations,
      },
    },
    spec: { podCIDR: o.podCIDR, podCIDRs: [o.podCIDR] },
  };
}
