// The middleware's `adaptive` option: the limit learns from the responses the handlers send (their
// status decides the drops, README "Adaptive limits"), in Express and Koa alike; a client that leaves
// before its response is not counted; and the option refuses what would not be one limit.
import http from 'node:http'
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

/** An app with the adaptive middleware (a store of its own: one name in one store is one limit, for
 * every middleware using it): GET /ok answers 200 after 5 ms, GET /fail 503, GET /late 200 once the
 * client has left (to nobody). */
async function app(framework: 'express' | 'koa') {
  const store = createMemoryStore()
  let middleware: { adaptive: { status(): { limit: number }; close(): void } | undefined }
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
