// A TCP proxy that stalls a connection mid-pipeline: it forwards requests whole, one at a time, and
// once a request containing a given text has gone to Redis it holds every later request (of every
// connection) until opened. The requests before the stall run on Redis and are answered; the rest
// wait. (A Redis client's reload stopped half-way: its first loads landed, the next ones not yet.)
// Whoever starts a proxy stops it.
import net from 'node:net'
import { respLength } from './fault-proxy.js'

export interface GateProxy {
  readonly port: number
  /** Hold every request after the next one that contains `match`; resolves once that one and every
   * request before it on its connection were answered by Redis. */
  holdAfter(match: string): Promise<void>
  /** Forward the held requests, and the later ones as they come. */
  open(): void
  stop(): Promise<void>
}

/** A gate proxy on 127.0.0.1 (free port) in front of 127.0.0.1:`port`. */
export async function startGateProxy(port: number): Promise<GateProxy> {
  let match: string | undefined
  let holding = false
  let onStalled: (() => void) | undefined
  const pumps = new Set<() => void>()
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1')
    sockets.add(client).add(upstream)
    let pending = Buffer.alloc(0)
    let replies = Buffer.alloc(0)
    let sent = 0
    let answered = 0
    let stallAt = -1
    const pump = () => {
      while (!holding) {
        const length = respLength(pending)
        if (length < 0) return
        const request = pending.subarray(0, length)
        pending = pending.subarray(length)
        upstream.write(request)
        sent++
        if (match !== undefined && request.toString('latin1').includes(match)) {
          match = undefined
          holding = true
          stallAt = sent
        }
      }
    }
    pumps.add(pump)
    client.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk])
      pump()
    })
    upstream.on('data', (chunk: Buffer) => {
      client.write(chunk)
      replies = Buffer.concat([replies, chunk])
      for (let length = respLength(replies); length >= 0; length = respLength(replies)) {
        replies = replies.subarray(length)
        answered++
      }
      if (stallAt > 0 && answered >= stallAt) {
        stallAt = -1
        onStalled?.()
      }
    })
    const close = () => {
      pumps.delete(pump)
      client.destroy()
      upstream.destroy()
    }
    client.on('error', close).on('close', close)
    upstream.on('error', close).on('close', close)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    port: (server.address() as net.AddressInfo).port,
    holdAfter(text) {
      match = text
      return new Promise<void>((resolve) => (onStalled = resolve))
    },
    open() {
      holding = false
      for (const pump of pumps) pump()
    },
    async stop() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
