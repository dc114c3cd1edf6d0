/**
 * Container images for real-kubelet nodes (kube-cluster.ts), none from a registry: each node's
 * containerd imports OCI or docker archives (`ctr -n k8s.io images import`), and pods use them
 * with `imagePullPolicy: IfNotPresent`, the default for a tag other than `latest`.
 *
 * - the pod sandbox image `registry.k8s.io/pause:3.9`, built here from Kubernetes' pause.c
 *   (dist/peers/pause.c) with `gcc -static` as a single-layer OCI archive;
 * - the e2e images of dist/peers (`image-*.tar`), under the names Kubernetes' e2e asks for;
 * - Weft's own archive, which `make image` saves (dist/weft-<version>.tar).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { PEERS_DIR } from './peers.ts';
import { needsRootAnd } from './netns.ts';

const run = promisify(execFile);
const ROOT = new URL('../../', import.meta.url);

/** Weft's version, as package.json says. */
export const VERSION = (JSON.parse(await readFile(new URL('package.json', ROOT), 'utf8')) as { version: string }).version;
/** What `make image` saves: `weft:<version>`, which containerd knows as docker.io/library/weft:<version>. */
export const WEFT_IMAGE_ARCHIVE = new URL(`dist/weft-${VERSION}.tar`, ROOT).pathname;

/** The sandbox image containerd's CRI runs each pod's pause container from. */
export const PAUSE_IMAGE = 'registry.k8s.io/pause:3.9';

/** The e2e images of dist/peers, by the name pods give (README of ../shared/peers). */
export const PEER_IMAGES = {
  agnhost: { name: 'registry.k8s.io/e2e-test-images/agnhost:2.45', archive: join(PEERS_DIR, 'image-agnhost.tar') },
  busybox: { name: 'registry.k8s.io/e2e-test-images/busybox:1.29-4', archive: join(PEERS_DIR, 'image-busybox.tar') },
  httpd: { name: 'registry.k8s.io/e2e-test-images/httpd:2.4.38-4', archive: join(PEERS_DIR, 'image-httpd.tar') },
  nginx: { name: 'registry.k8s.io/e2e-test-images/nginx:1.14-4', archive: join(PEERS_DIR, 'image-nginx.tar') },
} as const;

const sha256 = (data: Buffer | string): string => createHash('sha256').update(data).digest('hex');

/**
 * Builds the pause image in `dir` from dist/peers/pause.c: the static program as /pause, one
 * uncompressed layer, an OCI image layout tarred as `ctr images import` reads it. Returns the archive.
 */
export async function buildPauseImage(dir: string): Promise<string> {
  const rootfs = join(dir, 'rootfs');
  const blobs = join(dir, 'layout', 'blobs', 'sha256');
  await mkdir(rootfs, { recursive: true });
  await mkdir(blobs, { recursive: true });
  await run('gcc', ['-static', '-O2', '-DVERSION=v3.9-0', '-o', join(rootfs, 'pause'), join(PEERS_DIR, 'pause.c')]);
  const layerFile = join(dir, 'layer.tar');
  await run('tar', ['--create', '--file', layerFile, '--owner=0', '--group=0', '--numeric-owner', '--mtime=@0', '-C', rootfs, 'pause']);
  const layer = await readFile(layerFile);
  const blob = async (data: Buffer | string): Promise<{ digest: string; size: number }> => {
    const hex = sha256(data);
    await writeFile(join(blobs, hex), data);
    return { digest: `sha256:${hex}`, size: Buffer.byteLength(data) };
  };
  const layerBlob = await blob(layer);
  const config = await blob(JSON.stringify({
    architecture: 'amd64', os: 'linux', config: { Entrypoint: ['/pause'], WorkingDir: '/' },
    rootfs: { type: 'layers', diff_ids: [layerBlob.digest] },
  }));
  const manifest = await blob(JSON.stringify({
    schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
    layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', ...layerBlob }],
  }));
  await writeFile(join(dir, 'layout', 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  await writeFile(join(dir, 'layout', 'index.json'), JSON.stringify({
    schemaVersion: 2, mediaType: 'application/vnd.oci.image.index.v1+json',
    manifests: [{
      mediaType: 'application/vnd.oci.image.manifest.v1+json', ...manifest, platform: { architecture: 'amd64', os: 'linux' },
      annotations: { 'io.containerd.image.name': PAUSE_IMAGE, 'org.opencontainers.image.ref.name': '3.9' },
    }],
  }));
  const archive = join(dir, 'pause.tar');
  await run('tar', ['--create', '--file', archive, '-C', join(dir, 'layout'), 'oci-layout', 'index.json', 'blobs']);
  return archive;
}

/** For `test(..., { skip })`: why the image test cannot run here (no archive), else false. */
export const needsWeftImage: string | false = needsRootAnd(WEFT_IMAGE_ARCHIVE);
