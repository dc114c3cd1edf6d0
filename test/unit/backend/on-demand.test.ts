import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NUD_REACHABLE, OnDemand } from '../../../src/backend/on-demand.ts';
import { parseCIDR, parseIP } from '../../../src/ip/ip.ts';
import type { Lease } from '../../../src/lease/lease.ts';
import { LeaseTable } from '../../../src/lease/table.ts';
import { memoryLogger } from '../../../src/log.ts';
import type { NetlinkHandle } from '../../../src/netlink/handle.ts';
import type { Operation } from '../../../src/netlink/specs.ts';

const VX = 7;

function lease(n: number, mac: string): Lease {
  return { peer: `node-${n}`, subnet: parseCIDR(`10.244.${n}.0/24`, 's'), attrs: { publicIP: parseIP(`198.51.100.${n}`, 'ip'), backendType: 'vxlan', backendData: { VNI: 1, VtepMAC: mac } } };
}

function setup() {
  const written: Operation[][] = [];
  const handle = { batch: async (ops: Operation[]) => (written.push(ops), ops.map(() => null)) } as unknown as NetlinkHandle;
  const table = new LeaseTable();
  table.replaceAll([lease(2, '6e:00:00:00:00:02'), lease(3, '6e:00:00:00:00:03')]);
  const od = new OnDemand({ handle, table, devices: () => new Map(), subnetLen: { 4: 24, 6: 64 }, log: memoryLogger() });
  return { od, table, written };
}

test('an L3 miss is answered from the lease whose subnet holds the address: its FDB entry, then the neighbour, both aging', () => {
  const { od, written } = setup();
  od.start();
  try {
    od.onMiss({ kind: 'l3miss', linkIndex: VX, ip: '10.244.3.17' });
    assert.deepEqual(written, [[
      { op: 'fdbReplace', fdb: { linkIndex: VX, mac: '6e:00:00:00:00:03', dst: '198.51.100.3', state: NUD_REACHABLE, flags: 2 } },
      { op: 'neighReplace', neigh: { linkIndex: VX, ip: '10.244.3.17', mac: '6e:00:00:00:00:03', state: NUD_REACHABLE } },
    ]]);
    od.onMiss({ kind: 'l2miss', linkIndex: VX, mac: '6e:00:00:00:00:02' });
    assert.deepEqual(written[1], [{ op: 'fdbReplace', fdb: { linkIndex: VX, mac: '6e:00:00:00:00:02', dst: '198.51.100.2', state: NUD_REACHABLE, flags: 2 } }]);
    od.onMiss({ kind: 'l3miss', linkIndex: VX, ip: '10.244.9.1' });
    assert.equal(written.length, 2, 'an address no lease holds is not answered');
    assert.equal(od.answered, 2);
  } finally {
    od.stop();
  }
});

test('the lease index follows the table: a moved peer answers for its new subnet only, a removed one for nothing', () => {
  const { od, table, written } = setup();
  od.start();
  try {
    table.apply([{ ...lease(3, '6e:00:00:00:00:03'), subnet: parseCIDR('10.244.30.0/24', 's') }]);
    od.onMiss({ kind: 'l3miss', linkIndex: VX, ip: '10.244.3.17' });
    od.onMiss({ kind: 'l3miss', linkIndex: VX, ip: '10.244.30.17' });
    assert.equal(written.length, 1);
    table.apply([], ['node-3']);
    od.onMiss({ kind: 'l3miss', linkIndex: VX, ip: '10.244.30.17' });
    od.onMiss({ kind: 'l2miss', linkIndex: VX, mac: '6e:00:00:00:00:03' });
    assert.equal(written.length, 1);
  } finally {
    od.stop();
  }
});
