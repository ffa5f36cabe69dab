// The middleware's `adaptive` option: the limit learns from the responses the handlers send (their
// status decides the drops, docs/adaptive.md), in Express and Koa alike; a client that leaves
// before its response is not counted; a client that reads slowly is not a slow handler (the sample
// ends when the handler ends its response); and the option refuses what would not be one limit.
import { createReadStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import { createAdaptorServer } from '@hono/node-server'
import express from 'express'
import Fastify from 'fastify'
import Koa from 'koa'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { ConfigError, createMemoryStore } from '../../src/index.js'
import { semaphore as expressSemaphore } from '../../src/middleware/express.js'
import { semaphore as fastifySemaphore } from '../../src/middleware/fastify.js'
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
  // (The latency shown when it starts is an earlier window's.)
  const earlier = adaptive.status().rttMs
  let until = Number.POSITIVE_INFINITY
  void during.finally(() => (until = Date.now() + 300))
  while (Date.now() < until) {
    const rtt = adaptive.status().rttMs
    if (rtt !== undefined && rtt !== earlier && seen.at(-1) !== rtt) seen.push(rtt)
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

// What a client does around a response is not the handler's time, on every adapter on Node: a
// pipelined response waiting behind one the client reads slowly (Node emits its 'prefinish' only once
// that one is done: the sample is taken at the handler's end() call), a streamed body the client
// reads slowly (the time its writes were held back is left out), and a body the client sends slowly
// (the sample starts at its last byte). Each against a handler that takes no time: before, each
// sample was the client's ~1 s.
describe.each(['express', 'koa', 'fastify', 'hono-node'] as const)(
  'semaphore({ adaptive }): the client’s time is no handler time [%s]',
  (framework) => {
    it('a pipelined response behind a slow read, a streamed file read slowly, a body sent slowly: each sample is the handler’s', async () => {
      const { url, adaptive } = await nodeApp(framework)
      const found: string[] = []
      // ~1 s to read /big; /ok's handler answers at once, but its response waits behind /big's.
      const pipelined = rawSlowRead(
        url,
        'GET /big HTTP/1.1\r\nhost: x\r\n\r\nGET /ok HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n',
        16 * 1024 * 1024,
      )
      found.push(`pipelined ${Math.max(...(await latencies(adaptive, pipelined)))}`)
      expect(await pipelined).toBeGreaterThan(BIG.length)
      const streamed = rawSlowRead(
        url,
        'GET /file HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n',
        16 * 1024 * 1024,
      )
      found.push(`streamed ${Math.max(...(await latencies(adaptive, streamed)))}`)
      expect(await streamed).toBeGreaterThan(BIG.length)
      const uploading = slowUpload(url, 1000)
      found.push(`upload ${Math.max(...(await latencies(adaptive, uploading)))}`)
      for (const line of found) expect(Number(line.split(' ')[1]), found.join(', ')).toBeLessThan(400)
    })
  },
)

let bigFile: string | undefined
afterAll(() => {
  if (bigFile) rmSync(path.dirname(bigFile), { recursive: true, force: true })
})

/** An app on Node with the adaptive middleware: /ok at once; /big 16 MB in one end(); /file the same
 * 16 MB streamed from a file; POST /upload reads the body, then answers. */
async function nodeApp(framework: 'express' | 'koa' | 'fastify' | 'hono-node') {
  if (!bigFile) {
    bigFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'tollgate-mw-')), 'big.bin')
    writeFileSync(bigFile, BIG)
  }
  const file = bigFile
  const store = createMemoryStore()
  const options = { store, adaptive: { ...ADAPTIVE, drops: [] }, maxWaitMs: 10_000 }
  let adaptive: { status(): { rttMs?: number | undefined }; close(): void }
  let server: http.Server
  if (framework === 'express') {
    const mw = expressSemaphore(options)
    adaptive = mw.adaptive!
    const a = express()
    a.use(mw)
    a.get('/ok', (_req, res) => void res.send('ok'))
    a.get('/big', (_req, res) => void res.send(BIG))
    a.get('/file', (_req, res) => res.sendFile(file))
    a.post('/upload', express.raw({ type: () => true, limit: '1mb' }), (_req, res) => void res.send('ok'))
    server = http.createServer(a)
  } else if (framework === 'koa') {
    const mw = koaSemaphore(options)
    adaptive = mw.adaptive!
    const a = new Koa()
    a.use(mw)
    a.use(async (ctx) => {
      if (ctx.path === '/big') ctx.body = BIG
      else if (ctx.path === '/file') ctx.body = createReadStream(file)
      else if (ctx.path === '/upload') {
        for await (const _ of ctx.req) void _
        ctx.body = 'ok'
      } else ctx.body = 'ok'
    })
    server = http.createServer(a.callback())
  } else if (framework === 'fastify') {
    const plugin = fastifySemaphore(options)
    adaptive = plugin.adaptive!
    const f = Fastify()
    await f.register(plugin)
    f.get('/ok', async () => 'ok')
    f.get('/big', async (_req, reply) => reply.send(BIG))
    f.get('/file', async (_req, reply) => reply.send(createReadStream(file)))
    f.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body))
    f.post('/upload', async () => 'ok')
    await f.ready()
    server = f.server
  } else {
    const mw = honoSemaphore(options)
    adaptive = mw.adaptive!
    const a = new Hono()
    a.use(mw)
    a.get('/ok', (c) => c.text('ok'))
    a.get('/big', (c) => c.body(new Uint8Array(BIG)))
    a.get('/file', (c) => c.body(Readable.toWeb(createReadStream(file)) as ReadableStream))
    a.post('/upload', async (c) => {
      await c.req.arrayBuffer()
      return c.text('ok')
    })
    server = createAdaptorServer({ fetch: a.fetch }) as http.Server
  }
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  servers.push({ closeAllConnections() {}, close: () => adaptive.close() } as unknown as http.Server)
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, adaptive }
}

/** Write `raw` on a socket of its own and read what comes at about `bytesPerS`; resolves with the
 * bytes read once the server closes it. */
function rawSlowRead(url: string, raw: string, bytesPerS: number): Promise<number> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), hostname)
    socket.write(raw)
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

/** A raw POST /upload of 64 KB sent in 16 pieces over `ms`; resolves once the server closes. */
function slowUpload(url: string, ms: number): Promise<void> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), hostname)
    socket.on('error', () => undefined)
    socket.write(
      'POST /upload HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\n' +
        `content-length: ${64 * 1024}\r\nconnection: close\r\n\r\n`,
    )
    let sent = 0
    const timer = setInterval(() => {
      socket.write(Buffer.alloc(4096, 0x62))
      if (++sent === 16) clearInterval(timer)
    }, ms / 16)
    socket.resume()
    socket.once('close', () => {
      clearInterval(timer)
      resolve()
    })
  })
}

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
