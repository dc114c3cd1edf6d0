import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatIP } from '../../../src/ip/ip.ts';
import { requestedOf } from '../../../src/cni/requests.ts';
import type { Requested } from '../../../src/cni/requests.ts';

function asked(env: Record<string, string>, runtimeConfig?: unknown): { ips: string[]; mac: string | undefined } | string {
  const r = requestedOf(env, runtimeConfig);
  return typeof r === 'string' ? r : { ips: (r as Requested).ips.map(formatIP), mac: r.mac };
}

test('IP= comes first, then runtimeConfig.ips (addresses or CIDRs); runtimeConfig.mac wins over MAC=', () => {
  assert.deepEqual(
    asked({ CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=a;IP=10.244.7.9;MAC=0a:00:00:00:00:01' }, { ips: ['10.244.7.10/24', 'fd00::5'], mac: '0A:00:00:00:00:02' }),
    { ips: ['10.244.7.9', '10.244.7.10', 'fd00::5'], mac: '0a:00:00:00:00:02' },
  );
  assert.deepEqual(asked({}), { ips: [], mac: undefined });
  assert.deepEqual(asked({ CNI_ARGS: 'IgnoreUnknown=1;MAC=0a:00:00:00:00:01' }, { portMappings: [] }), { ips: [], mac: '0a:00:00:00:00:01' });
  assert.deepEqual(asked({ CNI_ARGS: 'IgnoreUnknown=TRUE;FOO=1' }), { ips: [], mac: undefined });
});

test('what the delegates would refuse or read otherwise is a reason to leave the call to them', () => {
  assert.match(asked({ CNI_ARGS: 'K8S_POD_NAME=a' }) as string, /K8S_POD_NAME without IgnoreUnknown/);
  assert.match(asked({ CNI_ARGS: 'IgnoreUnknown=0;FOO=1' }) as string, /without IgnoreUnknown/);
  assert.match(asked({ CNI_ARGS: 'IP=10.244.7.9' }) as string, /IP without IgnoreUnknown/, 'bridge refuses IP= it does not know');
  assert.match(asked({ CNI_ARGS: 'IgnoreUnknown=t;IP=10.244.7.9' }) as string, /IgnoreUnknown is not a boolean/);
  assert.match(asked({ CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=a=b' }) as string, /not K=V/);
  assert.match(asked({ CNI_ARGS: 'IgnoreUnknown=1;IP' }) as string, /not K=V/);
  assert.match(asked({ CNI_ARGS: 'IgnoreUnknown=1;IP=10.244.7.1,10.244.7.2' }) as string, /not an address/);
  assert.match(asked({}, { ips: '10.244.7.1' }) as string, /not a list/);
  assert.match(asked({}, { ips: [7] }) as string, /entry 7 is not an address/);
  assert.match(asked({}, { mac: '01:00:5e:00:00:01' }) as string, /not a unicast/);
  assert.match(asked({}, { mac: '0a00.0000.0001' }) as string, /aa:bb:cc:dd:ee:ff form/);
  assert.match(asked({}, []) as string, /runtimeConfig is not an object/);
});
