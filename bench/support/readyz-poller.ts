/**
 * A poller for a node's namespace (run by `node -e POLLER <readyz URL> <subnet.env path>`): it
 * prints `polling` once it runs, then checks for subnet.env and asks /readyz every 2 ms, and prints
 * `{"subnet":<epoch ms>,"ready":<epoch ms>}` when each first succeeded, and exits.
 * bench/image.bench.ts and bench/node.bench.ts time weftd's start by it.
 */
export const POLLER = `
const [url, file] = process.argv.slice(1);
const { existsSync } = require('node:fs');
const http = require('node:http');
let subnet = 0, ready = 0, asking = false;
console.log('polling');
const tick = () => {
  if (!subnet && existsSync(file)) subnet = Date.now();
  if (!ready && !asking) {
    asking = true;
    http.get(url, (res) => { res.resume(); if (res.statusCode === 200) ready = Date.now(); asking = false; })
      .on('error', () => { asking = false; });
  }
  if (subnet && ready) {
    console.log(JSON.stringify({ subnet, ready }));
    process.exit(0);
  }
  setTimeout(tick, 2);
};
tick();
`;
