/**
 * Writes the etcd API etcd3 loads at start (<bundle>/proto/rpc.proto) cut to what Weft calls, as
 * protobufjs's JSON descriptor, which protobufjs reads whatever the file's name (a text that
 * starts with "{"). etcd3 parses its whole rpc.proto (six services, ~120 messages) and
 * @grpc/proto-loader builds a descriptor of every message each time weftd starts; this file holds
 * the four services and the messages their calls reach, so less is parsed and built.
 *
 * Usage: node scripts/etcd-proto.ts <output file>
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import protobuf from 'protobufjs';

/** The calls Weft makes through etcd3 (src/lease/etcd/client.ts), and Authenticate, which etcd3 makes for it. */
const CALLS: Record<string, string[]> = {
  KV: ['Range', 'Txn'],
  Watch: ['Watch'],
  Lease: ['LeaseGrant', 'LeaseRevoke'],
  Auth: ['Authenticate'],
};

const [output] = process.argv.slice(2);
if (!output) {
  process.stderr.write('usage: node scripts/etcd-proto.ts <output file>\n');
  process.exit(2);
}

// keepCase as etcd3 loads it: field names stay snake_case, as etcd3's code reads them.
const root = new protobuf.Root().loadSync(new URL('../node_modules/etcd3/proto/rpc.proto', import.meta.url).pathname, { keepCase: true });
root.resolveAll();

/** Every type a kept call reaches through its fields. */
const reached = new Set<protobuf.ReflectionObject>();
const visit = (t: protobuf.ReflectionObject | null | undefined): void => {
  if (!t || reached.has(t)) return;
  reached.add(t);
  if (t instanceof protobuf.Type) for (const f of t.fieldsArray) visit(f.resolvedType);
};

const pkg = root.lookup('etcdserverpb') as protobuf.Namespace;
for (const service of pkg.nestedArray.filter((n): n is protobuf.Service => n instanceof protobuf.Service)) {
  const keep = CALLS[service.name];
  if (!keep) {
    pkg.remove(service);
    continue;
  }
  for (const method of service.methodsArray) {
    if (!keep.includes(method.name)) {
      service.remove(method);
      continue;
    }
    visit(method.resolvedRequestType);
    visit(method.resolvedResponseType);
  }
}

/** Removes, from `ns` down, every type no kept call reaches; returns whether anything is left in it. */
const prune = (ns: protobuf.Namespace): boolean => {
  for (const child of [...ns.nestedArray]) {
    if (child instanceof protobuf.Service) continue;
    const nestedLeft = child instanceof protobuf.Namespace && prune(child);
    if (!reached.has(child) && !nestedLeft) ns.remove(child);
  }
  return ns.nestedArray.length > 0;
};
prune(root);

mkdirSync(dirname(output), { recursive: true });
writeFileSync(output, JSON.stringify(root.toJSON()));
