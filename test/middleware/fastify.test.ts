// What only Fastify has: encapsulation, a route-level hook, its router's patterns, trustProxy, and the
// rwlock() plugin. The shared behaviour is in adapters.test.ts.
import Fastify, { type FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { ConfigError, createMemoryStore } from '../../src/index.js'
import { byIp, byRoute, rwlock, semaphore } from '../../src/middleware/fastify.js'
import { eventually, sleep } from '../helpers/contract.js'

const apps: FastifyInstance[] = []
afterEach(async () => {
  await Promise.all(
    apps.splice(0).map(async (app) => {
      app.server.closeAllConnections()
      await app.close()
    }),
  )
})

async function listen(app: FastifyInstance): Promise<string> {
  apps.push(app)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address() as { port: number }
  return `http://127.0.0.1:${address.port}`
}

/** A route handler that waits until the test lets it go. */
function holdable() {
  const holders: (() => void)[] = []
  const hold = async () => {
    await new Promise<void>((resolve) => holders.push(resolve))
    return 'held'
  }
  return { holders, hold, release: () => holders.splice(0).forEach((r) => r()) }
}

describe('tollgate/fastify', () => {
  it('registered in an encapsulated plugin, limits that plugin’s routes only', async () => {
    const app = Fastify()
    const { holders, hold, release } = holdable()
    const limiter = semaphore({ permits: 1, maxWaitMs: 0, name: 'scoped', store: createMemoryStore() })
    await app.register(async (scope) => {
      await scope.register(limiter)
      scope.get('/limited', hold)
    })
    app.get('/free', async () => 'free')
    const url = await listen(app)
    const held = fetch(`${url}/limited`)
    await eventually(() => holders.length === 1)
    expect((await fetch(`${url}/limited`)).status).toBe(503)
    const free = await fetch(`${url}/free`)
    expect([free.status, free.headers.get('ratelimit')]).toEqual([200, null])
    release()
    expect((await held).status).toBe(200)
    await eventually(() => limiter.counters.inFlight === 0)
  })

  it('limits one route through its onRequest hook, without registering the plugin', async () => {
    const app = Fastify()
    const { holders, hold, release } = holdable()
    const limiter = semaphore({ permits: 1, maxWaitMs: 0, name: 'route', store: createMemoryStore() })
    app.get('/export', { onRequest: limiter.onRequest }, async (request) => {
      await hold()
      return { fencingToken: request.tollgate?.fencingToken }
    })
    app.get('/other', async () => 'other')
    const url = await listen(app)
    const held = fetch(`${url}/export`)
    await eventually(() => holders.length === 1)
    const rejected = await fetch(`${url}/export`)
    expect([rejected.status, rejected.headers.get('ratelimit')]).toEqual([503, '"route";r=0'])
    expect((await fetch(`${url}/other`)).status).toBe(200)
    release()
    const answer = await held
    expect(typeof ((await answer.json()) as { fencingToken: unknown }).fencingToken).toBe('number')
    await eventually(() => limiter.counters.inFlight === 0)
  })

  it('byRoute() buckets by the matched pattern; unmatched requests share one bucket', async () => {
    const app = Fastify()
    const { holders, hold, release } = holdable()
    const limiter = semaphore({ permits: 1, maxWaitMs: 0, key: byRoute(), store: createMemoryStore() })
    await app.register(limiter)
    app.get('/docs/:id', hold)
    app.get('/users/:id', async () => 'user')
    const url = await listen(app)
    const held = fetch(`${url}/docs/1`)
    await eventually(() => holders.length === 1)
    expect((await fetch(`${url}/docs/2`)).status).toBe(429) // the same pattern: one bucket (keyed: 429)
    expect((await fetch(`${url}/users/2`)).status).toBe(200)
    expect((await fetch(`${url}/nowhere`)).status).toBe(404) // 'unmatched' is a bucket of its own
    release()
    await held
  })

  it('byIp() reads request.ip, which honours trustProxy', async () => {
    const app = Fastify({ trustProxy: true })
    const { holders, hold, release } = holdable()
    await app.register(semaphore({ permits: 1, maxWaitMs: 0, key: byIp(), store: createMemoryStore() }))
    app.get('/', hold)
    const url = await listen(app)
    const held = fetch(url, { headers: { 'x-forwarded-for': '203.0.113.1' } })
    await eventually(() => holders.length === 1)
    expect((await fetch(url, { headers: { 'x-forwarded-for': '203.0.113.1' } })).status).toBe(429)
    const other = fetch(url, { headers: { 'x-forwarded-for': '203.0.113.2' } })
    await eventually(() => holders.length === 2) // another client: its own bucket
    release()
    expect((await Promise.all([held, other])).map((r) => r.status)).toEqual([200, 200])
  })

  it('rwlock(): GETs of a resource overlap, a PUT excludes them', async () => {
    const app = Fastify()
    let inside = 0
    let max = 0
    let overlapWithWriter = 0
    let writers = 0
    const work = async (request: { method: string }) => {
      inside++
      if (request.method === 'PUT') writers++
      if (writers > 0 && inside > 1) overlapWithWriter++
      max = Math.max(max, inside)
      await sleep(30)
      if (request.method === 'PUT') writers--
      inside--
      return 'ok'
    }
    await app.register(rwlock({ maxWaitMs: 5000, store: createMemoryStore() }))
    app.get('/docs/:id', work)
    app.put('/docs/:id', work)
    const url = await listen(app)
    const reads = await Promise.all(Array.from({ length: 4 }, () => fetch(`${url}/docs/1`)))
    expect(reads.map((r) => r.status)).toEqual([200, 200, 200, 200])
    expect(max).toBeGreaterThan(1)
    const mixed = await Promise.all(
      Array.from({ length: 9 }, (_, i) => fetch(`${url}/docs/1`, { method: i % 3 === 0 ? 'PUT' : 'GET' })),
    )
    expect(mixed.map((r) => r.status)).toEqual(mixed.map(() => 200))
    expect(overlapWithWriter).toBe(0)
  })

  it('validates options at construction, naming the option', () => {
    expect(() => semaphore({ permits: 0 })).toThrow(ConfigError)
    expect(() => semaphore({ permits: 1, keyGenerator: () => 'x' } as never)).toThrow('keyGenerator')
  })
})
