// What only Hono has: runtimes without Node's response (app.fetch() called directly, as Bun, Deno and
// workers do), and its router's patterns. The shared behaviour (on @hono/node-server) is in
// adapters.test.ts.
import { once } from 'node:events'
import type http from 'node:http'
import { createAdaptorServer } from '@hono/node-server'
import { Hono } from 'hono'
import { afterEach, describe, expect, it } from 'vitest'
import { createMemoryStore } from '../../src/index.js'
import { byRoute, rwlock, semaphore } from '../../src/middleware/hono.js'
import { eventually, sleep } from '../helpers/contract.js'
import { bucketStats, stealLeases, testStore } from './support/contract.js'

const servers: http.Server[] = []
afterEach(async () => {
  await Promise.all(
    servers.splice(0).map(async (server) => {
      server.closeAllConnections()
      server.close()
      await once(server, 'close')
    }),
  )
})

async function listen(app: Hono): Promise<string> {
  const server = createAdaptorServer({ fetch: app.fetch }) as http.Server
  servers.push(server)
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`
}

function holdable() {
  const holders: (() => void)[] = []
  const hold = () => new Promise<void>((resolve) => holders.push(resolve))
  return { holders, hold, release: () => holders.splice(0).forEach((r) => r()) }
}

describe('tollgate/hono without Node’s response (app.fetch)', () => {
  function app(options: Record<string, unknown> = {}) {
    const ts = testStore('memory')
    const limiter = semaphore({ permits: 1, maxWaitMs: 5000, name: 'fetch', store: ts.store, ...options })
    const { holders, hold, release } = holdable()
    const h = new Hono()
    h.onError((_error, c) => c.text('boom', 500))
    h.use(limiter)
    h.get('/text', (c) => c.text('hello'))
    h.get('/empty', (c) => c.body(null, 204))
    h.get('/boom', () => {
      throw new Error('handler failed')
    })
    h.get('/hold', async (c) => {
      await hold()
      return c.text('held')
    })
    h.get('/stream', () => {
      let sent = 0
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          await sleep(5)
          controller.enqueue(new TextEncoder().encode(`chunk ${sent}\n`))
          if (++sent === 50) controller.close()
        },
      })
      return new Response(body)
    })
    const request = (path: string, signal?: AbortSignal) =>
      Promise.resolve(h.fetch(new Request(`http://local${path}`, { signal })))
    return { limiter, request, holders, release, ts }
  }

  it('holds the permit until the body has been read, then releases it once', async () => {
    const { limiter, request } = app()
    const response = await request('/text')
    expect(response.headers.get('ratelimit')).toBe('"fetch";r=0')
    expect(limiter.counters.inFlight).toBe(1) // the body is not sent yet
    expect(await response.text()).toBe('hello')
    await eventually(() => limiter.counters.inFlight === 0)
    await sleep(10)
    expect(limiter.counters.inFlight).toBe(0)
  })

  it('releases when the body is cancelled (the runtime saw the client leave mid-response)', async () => {
    const { limiter, request, ts } = app()
    const response = await request('/stream')
    const reader = response.body!.getReader()
    await reader.read()
    await reader.cancel()
    await eventually(
      async () => limiter.counters.inFlight === 0 && (await bucketStats(ts, 'fetch')).holders === 0,
    )
  })

  it('releases at once for a response without a body, and after an error response', async () => {
    const { limiter, request } = app()
    expect((await request('/empty')).status).toBe(204)
    await eventually(() => limiter.counters.inFlight === 0)
    const failed = await request('/boom')
    expect([failed.status, failed.headers.get('ratelimit')]).toEqual([500, '"fetch";r=0'])
    await failed.text()
    await eventually(() => limiter.counters.inFlight === 0)
  })

  it('a request whose signal aborts while queued leaves the queue; one aborting while held releases', async () => {
    const { limiter, request, holders, release, ts } = app()
    const leaving = new AbortController()
    const held = request('/hold', leaving.signal)
    await eventually(() => holders.length === 1)
    const queuedLeaving = new AbortController()
    const queued = request('/text', queuedLeaving.signal)
    await eventually(() => limiter.counters.queued === 1)
    queuedLeaving.abort()
    expect((await queued).status).toBe(499) // nobody reads it
    expect(limiter.counters.queued).toBe(0)
    leaving.abort() // the holder's client leaves before its response: the permit comes back now
    await eventually(
      async () => limiter.counters.inFlight === 0 && (await bucketStats(ts, 'fetch')).holders === 0,
    )
    release()
    await held
    await sleep(10)
    expect(limiter.counters.inFlight).toBe(0)
  })

  it("a lost lease with onLost 'abort' errors the body", async () => {
    const { limiter, request, ts } = app({ ttlMs: 300, onLost: 'abort' })
    const response = await request('/stream')
    await stealLeases(ts, 'fetch')
    await expect(response.text()).rejects.toThrow()
    expect(limiter.counters.lost).toBe(1)
    await eventually(() => limiter.counters.inFlight === 0)
  })
})

describe('tollgate/hono on @hono/node-server', () => {
  it('byRoute() from app.use() buckets by the pattern of the route that matched', async () => {
    const h = new Hono()
    const { holders, hold, release } = holdable()
    h.use(semaphore({ permits: 1, maxWaitMs: 0, key: byRoute(), store: createMemoryStore() }))
    h.get('/docs/:id', async (c) => {
      await hold()
      return c.text('doc')
    })
    h.get('/users/:id', (c) => c.text('user'))
    const url = await listen(h)
    const held = fetch(`${url}/docs/1`)
    await eventually(() => holders.length === 1)
    expect((await fetch(`${url}/docs/2`)).status).toBe(429)
    expect((await fetch(`${url}/users/2`)).status).toBe(200)
    release()
    expect((await held).status).toBe(200)
  })

  it('rwlock(): GETs of a resource overlap, a PUT excludes them', async () => {
    const h = new Hono()
    let inside = 0
    let max = 0
    let writers = 0
    let overlapWithWriter = 0
    h.use(rwlock({ maxWaitMs: 5000, store: createMemoryStore() }))
    h.on(['GET', 'PUT'], '/docs/:id', async (c) => {
      inside++
      if (c.req.method === 'PUT') writers++
      if (writers > 0 && inside > 1) overlapWithWriter++
      max = Math.max(max, inside)
      await sleep(30)
      if (c.req.method === 'PUT') writers--
      inside--
      return c.text('ok')
    })
    const url = await listen(h)
    const reads = await Promise.all(Array.from({ length: 4 }, () => fetch(`${url}/docs/1`)))
    expect(reads.map((r) => r.status)).toEqual([200, 200, 200, 200])
    expect(max).toBeGreaterThan(1)
    const mixed = await Promise.all(
      Array.from({ length: 9 }, (_, i) => fetch(`${url}/docs/1`, { method: i % 3 === 0 ? 'PUT' : 'GET' })),
    )
    expect(mixed.map((r) => r.status)).toEqual(mixed.map(() => 200))
    expect(overlapWithWriter).toBe(0)
  })
})
