// The gateway's memory per byte a client trickles in behind a request held upstream (G14), measured as
// the resident memory of a gateway process of its own (a child: its RSS is its own), on both front
// ends. A byte per TCP segment is the costly case: each read is a Buffer of its own, ~350 bytes for
// one byte, unless the bytes are copied together or left in the kernel.
import { describe, expect, it } from 'vitest'
import { type ChildHandle, spawnChild } from '../helpers/child.js'
import { eventually } from '../helpers/contract.js'
import { type RawConnection, rawConnect } from '../helpers/raw-http.js'
import { startRecorder } from '../helpers/recorder.js'

/** Connections trickling at once: 50 × 60 KB = 3 MB sent, so that the bound (4 bytes per byte, 12 MB)
 * stands well clear both of what the lean path keeps (~4 MB: the bytes, in blocks) and of how far
 * RSS moves with nothing kept (the Node path, which reads none of it: within 2 MB here). */
const CONNECTIONS = 50
const BYTES_PER_BYTE = 4
/** Requests of 2 KB behind the held one: 30 (60 KB, within the lean path's read-ahead of 64 KB), then
 * 20 more (100 KB: beyond it, where the kernel is to keep what the gateway does not read). */
const FIRST = 30
const THEN = 20
/** V8 flags of the measured process: no memory reducer (it gives pages back on a timer of its own),
 * and a young generation of 1 MB. Each read is a Buffer, garbage from the next scavenge on; V8 grows
 * the young generation to 16 MB a semi-space under such a load and keeps it: tens of MB of RSS, once
 * per process, whatever the number of connections. */
const NODE_ARGS = ['--no-memory-reducer', '--max-semi-space-size=1']

/** The gateway's resident memory after full garbage collections. */
async function rss(gateway: ChildHandle): Promise<number> {
  gateway.send({ type: 'rss' })
  return (await gateway.waitFor<{ type: string; bytes: number }>('rss')).bytes
}

const requests = (from: number, to: number) =>
  Buffer.from(
    Array.from(
      { length: to - from },
      (_, i) => `GET /behind/${from + i} HTTP/1.1\r\nHost: gw\r\nX-Pad: ${'p'.repeat(2000)}\r\n\r\n`,
    ).join(''),
    'latin1',
  )

/** Every client writes `bytes` a byte per write, and so a byte per segment (no Nagle; each write is
 * taken by the kernel at once, or the test fails), with a turn of the event loop between rounds. */
async function trickle(clients: RawConnection[], bytes: Buffer): Promise<void> {
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes.subarray(i, i + 1)
    for (const client of clients) {
      client.socket.write(byte)
      if (client.socket.writableLength > 0) throw new Error(`byte ${i}: not taken by the kernel at once`)
    }
    await new Promise((resolve) => setImmediate(resolve))
  }
}

describe('read-ahead memory', () => {
  for (const lean of [true, false]) {
    it(`G14: 60 KB, then 100 KB trickled a byte per packet behind a held request cost at most ${BYTES_PER_BYTE} bytes of gateway memory per byte [${lean ? 'lean' : 'node'}]`, async () => {
      const upstream = await startRecorder()
      const gateway = spawnChild('test/fixtures/gateway-memory.ts', [upstream.url, lean ? 'lean' : 'node'], {
        nodeArgs: NODE_ARGS,
      })
      const { port } = await gateway.waitFor<{ type: string; port: number }>('listening', 20_000)
      // Warm (JIT, the upstream pool's sockets) before the baseline.
      for (let i = 0; i < 200; i++) await (await fetch(`http://127.0.0.1:${port}/warm`)).text()
      const clients = await Promise.all(Array.from({ length: CONNECTIONS }, () => rawConnect(port)))
      for (const [i, client] of clients.entries()) {
        client.socket.setNoDelay(true)
        client.write(`GET /hold/${i} HTTP/1.1\r\nHost: gw\r\n\r\n`)
      }
      await eventually(() => upstream.inFlight.get('/hold') === CONNECTIONS)
      await rss(gateway) // the first collection after the warm-up frees what it left
      const before = await rss(gateway)
      let sent = 0
      for (const bytes of [requests(0, FIRST), requests(FIRST, FIRST + THEN)]) {
        await trickle(clients, bytes)
        sent += bytes.length
        // Still behind the held requests (the upstream timeout is 10 minutes).
        expect(upstream.inFlight.get('/hold')).toBe(CONNECTIONS)
        const grown = (await rss(gateway)) - before
        expect(
          grown / (CONNECTIONS * sent),
          `${(grown / 1024 / 1024).toFixed(1)} MB for ${CONNECTIONS} × ${sent} bytes`,
        ).toBeLessThanOrEqual(BYTES_PER_BYTE)
      }
      // The same bytes go upstream: every request behind, one at a time per connection, in order.
      upstream.release()
      const order = Array.from({ length: FIRST + THEN }, (_, i) => `ok GET /behind/${i} 0`)
      for (const client of clients) {
        const received = await client.waitFor(new RegExp(`ok GET /behind/${FIRST + THEN - 1} 0`), 30_000)
        expect(received.match(/ok GET \/behind\/\d+ 0/g)).toEqual(order)
      }
    }, 180_000)
  }
})
