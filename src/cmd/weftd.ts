/**
 * weftd entry point: parses the command line, builds the parts and runs them. No logic here.
 *
 * What runs today: flags (with the FLANNELD_ environment fallback) and the external interface
 * choice. The lease sources, data plane and traffic rules are wired in by the daemon issue;
 * until then weftd reports its interface decision and exits non-zero, saying so.
 */
import { CommanderError } from 'commander';
import { parseFlags } from '../config/flags.ts';
import { WeftError } from '../errors.ts';
import { netlinkView, selectExternalInterface } from '../iface/select.ts';
import { NetlinkHandle } from '../netlink/index.ts';

async function main(argv: string[]): Promise<number> {
  const flags = parseFlags(argv);
  const netlink = NetlinkHandle.open();
  try {
    const ext = await selectExternalInterface(netlinkView(netlink), {
      ipv4: true,
      ipv6: flags.publicIpv6 !== '',
      iface: flags.iface,
      ifaceRegex: flags.ifaceRegex,
      ifaceCanReach: flags.ifaceCanReach,
      publicIp: flags.publicIp,
      publicIpv6: flags.publicIpv6,
    });
    console.error(
      `using interface ${ext.link.name} (index ${ext.link.index}, MTU ${ext.mtu}) address ${ext.ifaceAddr ?? ext.ifaceAddr6}` +
        ` public ${ext.extAddr ?? ext.extAddr6}: ${ext.reason}`,
    );
  } finally {
    netlink.close();
  }
  console.error('weftd: no lease source is wired in yet (etcd and Kubernetes land with the daemon issue); exiting');
  return 1;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (e) {
  if (e instanceof CommanderError) {
    process.exitCode = e.exitCode;
  } else if (e instanceof WeftError) {
    console.error(`weftd: ${e.message}`);
    process.exitCode = 1;
  } else {
    throw e;
  }
}
