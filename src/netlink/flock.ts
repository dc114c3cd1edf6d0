/**
 * flock(2), which Node lacks: host-local and the container runtime's plugins lock their stores
 * with it, and Weft shares those stores. It lives beside netlink because the addon is the
 * process's one piece of native code.
 */
import { loadAddon } from './native.ts';

/**
 * `flock(fd, LOCK_EX | LOCK_NB)` (or LOCK_SH, LOCK_UN): true when taken (or released), false when
 * another open file holds it. Never blocks the JS thread; the caller retries.
 */
export function tryFlock(fd: number, mode: 'ex' | 'sh' | 'un'): boolean {
  return loadAddon().flock(fd, mode);
}
