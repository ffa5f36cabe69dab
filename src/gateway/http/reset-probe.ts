// A connection the gateway has stopped reading (a request in flight, and what its client sent behind
// it left unread: parsed behind it on http.Server, or beyond the lean path's read-ahead) does not
// show its client leaving: Node reads neither the FIN nor the reset, and has neither EPOLLRDHUP nor
// MSG_PEEK, with which nginx sees them without reading. A reset still shows on a write: an empty
// one, once a second, has the kernel report it (ECONNRESET, EPIPE) without sending a byte, and the
// socket is destroyed as if it had been read. A FIN does not show (it comes after the bytes not
// read): that request ends with its upstream's answer, at most upstreamTimeoutMs (G14).
import type { Socket } from 'node:net'

const PROBE_MS = 1000
const EMPTY = Buffer.alloc(0)
/** Sockets paused with a request in flight. */
const unread = new Set<Socket>()
let timer: NodeJS.Timeout | undefined

/** Probe `socket` for a reset while it stays paused (from now on; resumed, it reads again). Returns
 * a way to stop at once (an empty write resets a socket's idle timer: a socket handed on to a bound
 * of its own must not be probed). */
export function probeWhilePaused(socket: Socket): () => void {
  unread.add(socket)
  timer ??= setInterval(probe, PROBE_MS).unref()
  return () => unread.delete(socket)
}

function probe(): void {
  for (const socket of unread) {
    if (socket.destroyed || !socket.isPaused()) {
      unread.delete(socket)
      continue
    }
    // A write in progress reports a reset itself.
    if (socket.writable && socket.writableLength === 0) socket.write(EMPTY)
  }
  if (unread.size === 0) {
    clearInterval(timer)
    timer = undefined
  }
}
