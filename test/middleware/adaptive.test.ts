// The middleware's `adaptive` option: the limit learns from the responses the handlers send (their
// status decides the drops, README "Adaptive limits"), in Express and Koa alike; a client that leaves
// before its response is not counted; a client that reads slowly is not a slow handler (the sample
// ends when the handler ends its response); and the option refuses what would not be one limit.
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import express from 'express'
import Koa from 'koa'
import { afterEach, describe, expect, it } from 'vitest'
import { ConfigError, createMemoryStore } from '../../src/index.js'
import { semaphore as expressSemaphore } from '../../src/middleware/express.js'
import { semaphore as honoSemaphore } from '../../src/middleware/hono.js'
import { semaphore as koaSemaphore } from '../../src/middleware/koa.js'
import { Hono } from 'hono'
import { eventually, sleep } from '../helpers/contract.js'

const ADAPTIVE = {
  max: 16,
  initial: 8,
  algorithm: 'aimd',
  increase: 2,
  backoff: 0.5,
  windowMs: 100,
  drops: ['5xx'],
} as const

const servers: http.Server[] = []
afterEach(() => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    server.close()
  }
})

/** 16 MB: more than the socket buffers between a server and a client on this machine hold. */
const BIG = Buffer.alloc(16 * 1024 * 1024, 0x61)

/** An app with the adaptive middleware (a store of its own: one name in one store is one limit, for
 * every middleware using it): GET /ok answers 200 after 5 ms, GET /fail 503, GET /late 200 once the
 * client has left (to nobody), GET /big 16 MB at once. */
async function app(framework: 'express' | 'koa') {
  const store = createMemoryStore()
  let middleware: {
    adaptive: { status(): { limit: number; rttMs?: number | undefined }; close(): void } | undefined
  }
  let server: http.Server
  if (framework === 'express') {
    const mw = expressSemaphore({ store, adaptive: ADAPTIVE, maxWaitMs: 10_000 })
    middleware = mw
    const a = express()
    a.use(mw)
    a.get('/ok', async (_req, res) => {
      await sleep(5)
      res.send('ok')
    })
    a.get('/fail', (_req, res) => {
      res.status(503).send('overloaded')
    })
    a.get('/late', (_req, res) => {
      res.once('close', () => res.send('late'))
    })
    a.get('/big', (_req, res) => {
      res.send(BIG)
    })
    server = http.createServer(a)
  } else {
    const mw = koaSemaphore({ store, adaptive: ADAPTIVE, maxWaitMs: 10_000 })
    middleware = mw
    const a = new Koa()
    a.use(mw)
    a.use(async (ctx) => {
      if (ctx.path === '/fail') {
        ctx.status = 503
        ctx.body = 'overloaded'
        return
      }
      if (ctx.path === '/big') {
        ctx.body = BIG
        return
      }
      if (ctx.path === '/late') {
        await new Promise((resolve) => ctx.res.once('close', resolve))
        ctx.body = 'late'
        return
      }
      await sleep(5)
      ctx.body = 'ok'
    })
    server = http.createServer(a.callback())
  }
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const control = middleware.adaptive!
  servers.push({ closeAllConnections() {}, close: () => control.close() } as unknown as http.Server)
  return { url, adaptive: control }
}

/** GET `path` on a socket of its own, read at about `bytesPerS`; resolves with the bytes read. */
function readSlowly(url: string, path: string, bytesPerS: number): Promise<number> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), hostname)
    socket.write(`GET ${path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`)
    let read = 0
    let timer: NodeJS.Timeout | undefined
    socket.on('data', (chunk: Buffer) => {
      read += chunk.length
      socket.pause()
      timer = setTimeout(() => socket.resume(), (1000 * chunk.length) / bytesPerS)
    })
    socket.on('error', () => undefined)
    socket.once('close', () => {
      clearTimeout(timer)
      resolve(read)
    })
  })
}

/** Every latency (rttMs) the limit's steps reported while `during` ran and 300 ms after (the window
 * of the last sample is stepped too), polled every 10 ms. */
async function latencies(adaptive: { status(): { rttMs?: number | undefined } }, during: Promise<unknown>) {
  const seen: number[] = []
  let until = Number.POSITIVE_INFINITY
  void during.finally(() => (until = Date.now() + 300))
  while (Date.now() < until) {
    const rtt = adaptive.status().rttMs
    if (rtt !== undefined && seen.at(-1) !== rtt) seen.push(rtt)
    await sleep(10)
  }
  return seen
}

/** `clients` closed loops of GET `path` for `ms`. */
async function drive(url: string, path: string, clients: number, ms: number): Promise<void> {
  const until = Date.now() + ms
  const agent = new http.Agent({ keepAlive: true })
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (Date.now() < until) {
        await new Promise<void>((resolve) => {
          http
            .get(`${url}${path}`, { agent }, (res) => res.resume().on('end', resolve))
            .on('error', () => resolve())
        })
      }
    }),
  )
  agent.destroy()
}

describe.each(['express', 'koa'] as const)('semaphore({ adaptive }) [%s]', (framework) => {
  it('backs off while the handlers answer with a drop status, and grows again while they answer 200', async () => {
    const { url, adaptive } = await app(framework)
    expect(adaptive.status().limit).toBe(8)
    await drive(url, '/fail', 12, 800)
    await eventually(() => adaptive.status().limit <= 2, 2_000)
    await drive(url, '/ok', 16, 1_000)
    expect(adaptive.status().limit).toBeGreaterThan(4)
  })

  it('a client that leaves before its response counts for nothing (neither a drop nor a sample)', async () => {
    const { url, adaptive } = await app(framework)
    // Requests cut by the client while the handler works: 503s that never reach anyone are not sent,
    // and a cut 200 is no latency sample either, so the limit does not move.
    const cut = () =>
      new Promise<void>((resolve) => {
        // (/late: the answer comes after the client left, however loaded the machine.)
        const req = http.get(`${url}/late`)
        req.on('error', () => resolve())
        setTimeout(() => {
          req.destroy()
          resolve()
        }, 1)
      })
    for (let i = 0; i < 10; i++) await Promise.all(Array.from({ length: 10 }, cut))
    await sleep(300)
    expect(adaptive.status()).toMatchObject({ limit: 8, reason: 'empty' })
  })

  it('a client reading 16 MB slowly is no slow handler: the sample ends when the handler ends the response', async () => {
    const { url, adaptive } = await app(framework)
    // ~2 s to read it all; the handler handed it over at once (res.end()).
    const reading = readSlowly(url, '/big', 8 * 1024 * 1024)
    const seen = await latencies(adaptive, reading)
    expect(await reading).toBeGreaterThan(BIG.length)
    // Its window's latency is the handler's, not the ~2 s the client took (before: ~1-2 s, the sample
    // ran until the response's close).
    expect(seen.length).toBeGreaterThan(0)
    expect(Math.max(...seen), String(seen)).toBeLessThan(500)
    // Rounded for people: at most 2 decimals (before: e.g. 1862.4471430000001).
    for (const rtt of seen) expect(Math.round(rtt * 100) / 100).toBe(rtt)
  })
})

// Hono on a fetch runtime (Bun, Deno, workers: app.fetch, no Node response object): the status comes
// from the Response the handler returns; a request whose body nobody read to its end is not counted.
describe('semaphore({ adaptive }) [hono, fetch]', () => {
  async function run(app: Hono, path: string, clients: number, ms: number): Promise<void> {
    const until = Date.now() + ms
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (Date.now() < until) {
          await (await app.fetch(new Request(`http://x${path}`))).text()
          // A fetch runtime's requests come from the network: let the windows' timers run between them.
          await new Promise((resolve) => setImmediate(resolve))
        }
      }),
    )
  }

  it('backs off while the handlers answer with a drop status, and grows again while they answer 200', async () => {
    const mw = honoSemaphore({ store: createMemoryStore(), adaptive: ADAPTIVE, maxWaitMs: 10_000 })
    const control = mw.adaptive!
    servers.push({ closeAllConnections() {}, close: () => control.close() } as unknown as http.Server)
    const app = new Hono()
    app.use(mw)
    app.get('/ok', async (c) => {
      await sleep(5)
      return c.text('ok')
    })
    app.get('/fail', (c) => c.text('overloaded', 503))
    app.get('/throw', () => {
      throw new Error('boom')
    })
    app.onError((_error, c) => c.text('failed', 500)) // as Hono's own handler answers, without its log
    expect(control.status().limit).toBe(8)
    await run(app, '/fail', 12, 800)
    await eventually(() => control.status().limit <= 2, 2_000)
    await run(app, '/ok', 16, 1_000)
    expect(control.status().limit).toBeGreaterThan(4)
    // A thrown error, answered 500 by the app's onError: a drop under '5xx'.
    const before = control.status().limit
    await run(app, '/throw', 4, 300)
    await eventually(() => control.status().limit < before, 2_000)
  })

  it('a body read slowly is the client’s time: the sample ends when the handler hands over its Response', async () => {
    const mw = honoSemaphore({ store: createMemoryStore(), adaptive: ADAPTIVE, maxWaitMs: 10_000 })
    const control = mw.adaptive!
    servers.push({ closeAllConnections() {}, close: () => control.close() } as unknown as http.Server)
    const app = new Hono()
    app.use(mw)
    // A streamed body of 20 chunks, made as the client asks for them.
    app.get('/stream', (c) => {
      let sent = 0
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent++ === 20) controller.close()
          else controller.enqueue(new Uint8Array(1024))
        },
      })
      return c.body(body)
    })
    const reading = (async () => {
      const reader = (await app.fetch(new Request('http://x/stream'))).body!.getReader()
      while (!(await reader.read()).done) await sleep(50) // ~1 s
    })()
    const seen = await latencies(control, reading)
    expect(seen.length).toBeGreaterThan(0)
    expect(Math.max(...seen), String(seen)).toBeLessThan(300)
  })
})

describe('semaphore({ adaptive }) options', () => {
  it.each([
    [{ adaptive: { max: 8 }, permits: 4 }, 'permits'],
    [{ adaptive: { max: 8 }, key: () => 'a' }, 'key'],
    [{ adaptive: { max: 8 }, weight: () => 2 }, 'weight'],
    [{ adaptive: { max: 8, initial: 9 } }, 'adaptive.initial'],
    [{ adaptive: { max: 8, drops: [200] } }, 'adaptive.drops'],
    [{ adaptive: { max: 8, scope: 'world' } }, 'adaptive.scope'],
    [{ adaptive: { max: 8, speed: 2 } }, 'adaptive.speed'],
    [{ adaptive: { max: 8, dropShare: 1 } }, 'adaptive.dropShare'],
    [{ adaptive: { min: 2 } }, 'adaptive.max'],
  ])('refuses %j naming %s', (options, option) => {
    let thrown: unknown
    try {
      expressSemaphore(options as never)
    } catch (error) {
      thrown = error
    }
    expect(thrown).toBeInstanceOf(ConfigError)
    expect((thrown as ConfigError).option).toBe(option)
  })
})
