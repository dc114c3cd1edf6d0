/** One other node's lease as the extension backend's SubnetAddCommand and SubnetRemoveCommand see it (a Plan's side entry). */
export interface ExtensionSubnet {
  peer: string;
  /** `SUBNET`: the lease's IPv4 subnet ('' without one). */
  subnet: string;
  /** `PUBLIC_IP` */
  publicIP: string;
  /** Standard input: the node's backend data, a JSON string as its pre-startup command printed it. */
  data: string;
}
