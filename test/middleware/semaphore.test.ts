import http from 'node:http'
import { describe, expect, it } from 'vitest'
import { createMemoryStore, createRedisStore, type Store } from '../../src/index.js'
import { byHeader } from '../../src/middleware/express.js'
import { byHeader as koaByHeader } from '../../src/middleware/koa.js'
import { CURRENT, type Framework, get, startApp } from '../helpers/apps.js'
import { eventually, sleep } from '../helpers/contract.js'
import { connectStandalone, uniquePrefix } from '../helpers/redis.js'

type StoreKind = 'memory' | 'redis'
const freshStore = (kind: StoreKind): Store =>
  kind === 'memory'
    ? createMemoryStore()
    : createRedisStore(connectStandalone(), { prefix: uniquePrefix().slice(0, -1) })
const tenantKey = (fw: Framework) =>
  fw.startsWith('express') ? byHeader('x-tenant') : koaByHeader('x-tenant')

for (const framework of CURRENT) {
  for (const storeKind of ['memory', 'redis'] as const) {
    describe(`semaphore() [${framework}, ${storeKind}]`, () => {
      it('G1: never lets more than `permits` handlers run: 50 parallel requests', async () => {
        const app = await startApp(framework, { permits: 4, store: freshStore(storeKind), maxWaitMs: 10_000 })
        const responses = await Promise.all(Array.from({ length: 50 }, () => get(`${app.url}/work?ms=15`)))
        expect(responses.map((r) => r.status)).toEqual(responses.map(() => 200))
        expect(app.probe.max).toBe(4)
        expect(app.probe.entered).toBe(50)
        // The fencing token reaches the handler and increases per admission.
        expect(app.probe.fences).toHaveLength(50)
        expect(new Set(app.probe.fences).size).toBe(50)
        await eventually(() => app.counters.inFlight === 0)
      })

      it('isolates tenants: a saturated tenant does not slow another', async () => {
        const app = await startApp(framework, {
          permits: 1,
          store: freshStore(storeKind),
          key: tenantKey(framework),
          maxWaitMs: 5000,
        })
        const saturating = get(`${app.url}/hold`, { 'x-tenant': 'a' })
        await eventually(() => app.probe.holders.length === 1)
        const started = Date.now()
        const other = await get(`${app.url}/work?ms=1`, { 'x-tenant': 'b' })
        expect(other.status).toBe(200)
        expect(Date.now() - started).toBeLessThan(500)
        app.probe.holders.shift()?.()
        expect((await saturating).status).toBe(200)
      })

      it('queues up to maxWaitMs, then rejects with status, Retry-After and RateLimit headers', async () => {
        const app = await startApp(framework, {
          permits: 1,
          store: freshStore(storeKind),
          maxWaitMs: 200,
          name: 'api',
        })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const started = Date.now()
        const rejected = await get(`${app.url}/work`)
        const waited = Date.now() - started
        expect(rejected.status).toBe(503) // global cap
        expect(waited).toBeGreaterThanOrEqual(180)
        expect(waited).toBeLessThan(1500)
        expect(rejected.headers.get('retry-after')).toBe('1')
        expect(rejected.headers.get('ratelimit-policy')).toBe('"api";q=1;qu="concurrent-requests"')
        expect(rejected.headers.get('ratelimit')).toBe('"api";r=0')
        expect(JSON.parse(rejected.body)).toMatchObject({
          error: 'too_many_concurrent_requests',
          reason: 'timeout',
        })
        expect(app.counters.rejected.timeout).toBe(1)
        app.probe.holders.shift()?.()
        const ok = await holder
        expect(ok.headers.get('ratelimit-policy')).toBe('"api";q=1;qu="concurrent-requests"')
      })

      it('reports the permits left after admission in the RateLimit header', async () => {
        const app = await startApp(framework, { permits: 3, store: freshStore(storeKind), name: 'api' })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const second = await get(`${app.url}/work?ms=1`)
        expect(second.headers.get('ratelimit')).toBe('"api";r=1') // 3 permits - (holder + itself)
        app.probe.holders.shift()?.()
        expect((await holder).headers.get('ratelimit')).toBe('"api";r=2')
      })

      it('rejects at once past maxQueue, with 429 for a keyed cap', async () => {
        const app = await startApp(framework, {
          permits: 1,
          store: freshStore(storeKind),
          maxWaitMs: 5000,
          maxQueue: 2,
          key: tenantKey(framework),
        })
        const holder = get(`${app.url}/hold`, { 'x-tenant': 't' })
        await eventually(() => app.probe.holders.length === 1)
        const queued = [
          get(`${app.url}/work?ms=1`, { 'x-tenant': 't' }),
          get(`${app.url}/work?ms=1`, { 'x-tenant': 't' }),
        ]
        await eventually(() => app.counters.queued === 2)
        const started = Date.now()
        const third = await get(`${app.url}/work`, { 'x-tenant': 't' })
        expect(third.status).toBe(429)
        expect(Date.now() - started).toBeLessThan(300)
        expect(JSON.parse(third.body).reason).toBe('queue_full')
        app.probe.holders.shift()?.()
        expect((await Promise.all([holder, ...queued])).map((r) => r.status)).toEqual([200, 200, 200])
      })

      it('G3: gives the permit back at once when a holding client aborts', async () => {
        const app = await startApp(framework, { permits: 1, store: freshStore(storeKind), maxWaitMs: 0 })
        const controller = new AbortController()
        const aborted = fetch(`${app.url}/hold`, { signal: controller.signal }).catch(() => 'aborted')
        await eventually(() => app.probe.holders.length === 1)
        controller.abort()
        expect(await aborted).toBe('aborted')
        // maxWaitMs 0: the next request is admitted only if the permit is already back.
        await eventually(() => app.counters.inFlight === 0, 1000, 1)
        expect((await get(`${app.url}/work?ms=1`)).status).toBe(200)
        app.probe.holders.shift()?.()
      })

      it('G3 G5: leaves the queue at once when a queued client aborts', async () => {
        const app = await startApp(framework, { permits: 1, store: freshStore(storeKind), maxWaitMs: 10_000 })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const controller = new AbortController()
        const queued = fetch(`${app.url}/work`, { signal: controller.signal }).catch(() => 'aborted')
        await eventually(() => app.counters.queued === 1)
        controller.abort()
        expect(await queued).toBe('aborted')
        await eventually(() => app.counters.queued === 0, 1000, 1)
        app.probe.holders.shift()?.()
        expect((await holder).status).toBe(200)
        expect(app.probe.entered).toBe(1) // the aborted request never reached its handler
      })

      it('G3: gives the permit back when the handler throws', async () => {
        const app = await startApp(framework, { permits: 1, store: freshStore(storeKind), maxWaitMs: 0 })
        expect((await get(`${app.url}/boom`)).status).toBe(500)
        await eventually(() => app.counters.inFlight === 0, 1000, 1)
        expect((await get(`${app.url}/work?ms=1`)).status).toBe(200)
      })

      it('G3: holds the permit until the last byte of a streamed response', async () => {
        const app = await startApp(framework, { permits: 1, store: freshStore(storeKind), maxWaitMs: 0 })
        const streaming = get(`${app.url}/stream?chunks=6&every=25`)
        await eventually(() => app.probe.entered === 1)
        await sleep(60) // mid-stream: the middleware chain has returned, the body is still flowing
        expect((await get(`${app.url}/work?ms=1`)).status).toBe(503)
        const streamed = await streaming
        expect(streamed.body.split('\n').filter(Boolean)).toHaveLength(6)
        await eventually(() => app.counters.inFlight === 0, 1000, 1)
        expect((await get(`${app.url}/work?ms=1`)).status).toBe(200)
      })

      it('G8: keeps hostile tenant ids out of keys and headers', async () => {
        const store = freshStore(storeKind)
        const app = await startApp(framework, { permits: 1, store, key: tenantKey(framework), maxWaitMs: 0 })
        // Header values can carry braces, percent signs and long runs (control bytes cannot be sent as
        // header values at all; normalizeKey's unit test covers them).
        const hostile = ['{a}', '}{', 'x'.repeat(12 * 1024), '%7B', '  ', '', '{}{}{}']
        for (const tenant of hostile) {
          const response = await rawGet(app.url, '/work?ms=1', { 'x-tenant': tenant })
          expect(response.status).toBe(200)
          expect(JSON.stringify(response.headers)).not.toContain('{a}')
        }
        // A 64 kB value is refused by Node's header limit before it reaches any middleware.
        expect((await rawGet(app.url, '/work?ms=1', { 'x-tenant': 'y'.repeat(64 * 1024) })).status).toBe(431)
        await eventually(() => app.counters.inFlight === 0)
        expect(app.probe.entered).toBe(hostile.length)
      })

      it('answers 500 instead of hanging when a permitsFor() result is invalid', async () => {
        const app = await startApp(framework, {
          permits: 1,
          store: freshStore(storeKind),
          key: tenantKey(framework),
          permitsFor: (tenant: string) => (({ constructor: Object }) as Record<string, unknown>)[tenant],
        })
        const started = Date.now()
        const response = await get(`${app.url}/work?ms=1`, { 'x-tenant': 'constructor' })
        expect(response.status).toBe(500)
        expect(Date.now() - started).toBeLessThan(1000)
        expect((await get(`${app.url}/work?ms=1`, { 'x-tenant': 'other' })).status).toBe(200)
      })

      it('dryRun reports but never rejects', async () => {
        const app = await startApp(framework, {
          permits: 1,
          store: freshStore(storeKind),
          maxWaitMs: 0,
          dryRun: true,
          name: 'dry', // default names count instances ('default', 'default-2', ...)
        })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const passed = await get(`${app.url}/work?ms=1`)
        expect(passed.status).toBe(200)
        expect(passed.headers.get('ratelimit')).toBe('"dry";r=0')
        expect(app.counters.dryRunRejected).toBe(1)
        app.probe.holders.shift()?.()
        await holder
      })
    })
  }
}

/** A raw request (fetch refuses some hostile header bytes; the server must still cope). */
function rawGet(
  base: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: http.IncomingHttpHeaders }> {
  const { hostname, port } = new URL(base)
  return new Promise((resolve, reject) => {
    const request = http.request({ hostname, port, path, headers, insecureHTTPParser: true }, (response) => {
      response.resume()
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers }))
    })
    request.on('error', reject)
    request.end()
  })
}
