// When nothing has to wait (no `skip` option, a store that answers at once: the memory store with a
// permit free), Express's and Fastify's middleware hand the request on in the same call: no promise
// and no microtask per request. Anything that waits (a Redis store, a `skip` option) goes through a
// promise, as before. Either way a throwing key() is the framework's 500, and nothing is taken.
//
// How "in the same call" is seen: the hook before ours sets a flag and clears it in a microtask; the
// hook after ours reads it. A promise between them (the old path) runs that microtask first.
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import type http from 'node:http'
import express from 'express'
import Fastify from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { createMemoryStore, createRedisStore, type Store } from '../../src/index.js'
import * as tgExpress from '../../src/middleware/express.js'
import * as tgFastify from '../../src/middleware/fastify.js'
import { type Watched, whenWatched } from '../../src/middleware/lifecycle.js'
import { get } from '../helpers/apps.js'
import { whilePromiseReplaced } from '../helpers/foreign-promise.js'
import { eventually } from '../helpers/contract.js'
import { connectStandalone, uniquePrefix } from '../helpers/redis.js'

const stops: (() => Promise<unknown>)[] = []
afterEach(async () => {
  await Promise.all(stops.splice(0).map((stop) => stop()))
})

type StoreKind = 'memory' | 'redis'
const storeOf = (kind: StoreKind): Store =>
  kind === 'memory'
    ? createMemoryStore()
    : createRedisStore(connectStandalone(), { prefix: uniquePrefix().slice(0, -1) })

interface Served {
  url: string
  counters: { admitted: number; inFlight: number }
}

/** Express 5: before / tollgate / after, the handler answers whether `after` ran in the same call.
 * `foreign`: the global Promise is replaced while the middleware runs. */
async function expressApp(options: Record<string, unknown>, foreign = false): Promise<Served> {
  const tollgate = tgExpress.semaphore(options as tgExpress.ExpressSemaphoreOptions)
  const app = express()
  app.use((req, res, next) => {
    res.locals.inCall = true
    queueMicrotask(() => (res.locals.inCall = false))
    if (foreign) whilePromiseReplaced(next)
    else next()
  })
  app.use(tollgate)
  app.use((req, res, next) => {
    res.locals.sawInCall = res.locals.inCall as boolean
    next()
  })
  app.get('/', (req, res) => {
    res.send(String(res.locals.sawInCall))
  })
  const server: http.Server = app.listen(0, '127.0.0.1')
  await once(server, 'listening')
  stops.push(async () => {
    server.closeAllConnections()
    server.close()
    await once(server, 'close').catch(() => {})
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, counters: tollgate.counters }
}

/** Fastify 5: the same, with onRequest hooks around the plugin's. */
async function fastifyApp(options: Record<string, unknown>, foreign = false): Promise<Served> {
  const tollgate = tgFastify.semaphore(options as tgFastify.FastifySemaphoreOptions)
  const app = Fastify()
  const inCall = new WeakMap<object, boolean>()
  const sawInCall = new WeakMap<object, boolean>()
  app.addHook('onRequest', (request, reply, done) => {
    inCall.set(request, true)
    queueMicrotask(() => inCall.set(request, false))
    if (foreign) whilePromiseReplaced(done)
    else done()
  })
  await app.register(tollgate)
  app.addHook('onRequest', (request, reply, done) => {
    sawInCall.set(request, inCall.get(request) === true)
    done()
  })
  app.get('/', async (request) => String(sawInCall.get(request)))
  await app.listen({ port: 0, host: '127.0.0.1' })
  stops.push(() => app.close())
  return {
    url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
    counters: tollgate.counters,
  }
}

describe('whenWatched()', () => {
  const admitted: Watched = { outcome: 'skipped' }

  it('acts in the same call on a synchronous outcome', () => {
    const seen: unknown[] = []
    whenWatched(
      () => admitted,
      (w) => seen.push(w),
      (e) => seen.push(e),
    )
    expect(seen).toEqual([admitted])
  })

  it('hands a throw, or a rejection, to `failed` and never acts', async () => {
    const error = new Error('bug')
    const seen: unknown[] = []
    whenWatched(
      () => {
        throw error
      },
      (w) => seen.push(w),
      (e) => seen.push(e),
    )
    expect(seen).toEqual([error])
    whenWatched(
      () => Promise.reject(error),
      (w) => seen.push(w),
      (e) => seen.push(e),
    )
    whenWatched(
      () => Promise.resolve(admitted),
      (w) => seen.push(w),
      (e) => seen.push(e),
    )
    expect(seen).toEqual([error])
    await eventually(() => seen.length === 3)
    expect(seen).toEqual([error, error, admitted])
  })
})

const FRAMEWORKS = { express: expressApp, fastify: fastifyApp }

for (const [framework, start] of Object.entries(FRAMEWORKS)) {
  describe(`admission at once [${framework}]`, () => {
    it('memory store, a permit free: the next hook runs in the same call as the middleware', async () => {
      const app = await start({ permits: 2, store: storeOf('memory') })
      for (let i = 0; i < 3; i++) {
        const answer = await get(app.url)
        expect([answer.status, answer.body]).toEqual([200, 'true'])
      }
      expect(app.counters.admitted).toBe(3)
      await eventually(() => app.counters.inFlight === 0)
    })

    it('a Redis store, or a skip option: admitted through a promise, as before', async () => {
      const onRedis = await start({ permits: 2, store: storeOf('redis') })
      const withSkip = await start({ permits: 2, store: storeOf('memory'), skip: () => false })
      for (const app of [onRedis, withSkip]) {
        const answer = await get(app.url)
        expect([answer.status, answer.body]).toEqual([200, 'false'])
        expect(app.counters.admitted).toBe(1)
        await eventually(() => app.counters.inFlight === 0)
      }
    })

    it('an app that replaced the global Promise: a request that waits for a promise is admitted', async () => {
      for (const options of [{ skip: () => false }, { store: storeOf('redis') }]) {
        const app = await start({ permits: 2, store: storeOf('memory'), ...options }, true)
        const answer = await get(app.url)
        expect([answer.status, answer.body]).toEqual([200, 'false'])
        expect(app.counters.admitted).toBe(1)
        await eventually(() => app.counters.inFlight === 0)
      }
    })

    it('a throwing key(): the default bucket and a warning, as before, in the same call', async () => {
      const warnings: string[] = []
      const logger = { warn: (message: string) => warnings.push(message), error: () => {}, info: () => {} }
      let calls = 0
      const app = await start({
        permits: 1,
        store: storeOf('memory'),
        logger,
        key: () => {
          if (++calls === 1) throw new Error('key failed')
          return 'k'
        },
      })
      for (let i = 0; i < 2; i++) {
        const answer = await get(app.url)
        expect([answer.status, answer.body]).toEqual([200, 'true'])
        await eventually(() => app.counters.inFlight === 0)
      }
      expect(warnings).toEqual(['tollgate: key() threw; using the default bucket'])
      expect(app.counters.admitted).toBe(2)
    })
  })
}
