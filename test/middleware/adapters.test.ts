// The adapter contract: the same cases, run against every adapter (Express 5 and 4, Koa 3 and 2,
// Fastify 5, Hono 4 on @hono/node-server) and both stores, so the adapters cannot drift. Each case
// ends with settled(): the store holds and queues nothing for the policy, the middleware's in-flight
// count is back to 0 (and stays there: a second release would take it below), and every lease taken
// was given back once (counted on the library's diagnostics channels).
import { describe, expect, it } from 'vitest'
import { ADAPTERS, type AdapterApp, type AppSetup, startAdapterApp } from './support/adapter-apps.js'
import {
  type Answer,
  bucketStats,
  get,
  LeaseLedger,
  openRequest,
  STORE_KINDS,
  stealLeases,
  testStore,
  type TestStore,
} from './support/contract.js'
import { eventually, sleep } from '../helpers/contract.js'

let policies = 0

/** The Retry-After, RateLimit and framing headers and the body of an answer, as one comparable value. */
function shape(answer: Answer) {
  const h = answer.headers
  return {
    status: answer.status,
    retryAfter: h.get('retry-after'),
    contentType: h.get('content-type'),
    contentLength: h.get('content-length'),
    transferEncoding: h.get('transfer-encoding'),
    policy: h.get('ratelimit-policy'),
    ratelimit: h.get('ratelimit'),
    body: JSON.parse(answer.body) as unknown,
  }
}

const rejection = (policy: string, status: number, reason: string, retryAfterSeconds = 1) => {
  const body = { error: 'too_many_concurrent_requests', reason, retryAfterSeconds }
  return {
    status,
    retryAfter: String(retryAfterSeconds),
    contentType: 'application/json; charset=utf-8',
    contentLength: String(JSON.stringify(body).length),
    transferEncoding: null,
    policy: `"${policy}";q=1;qu="concurrent-requests"`,
    ratelimit: `"${policy}";r=0`,
    body,
  }
}

for (const adapter of ADAPTERS) {
  for (const storeKind of STORE_KINDS) {
    describe(`adapter contract [${adapter}, ${storeKind}]`, () => {
      /** A fresh policy name per test, an app, its store and a ledger of its leases. */
      async function start(options: Record<string, unknown>, setup: Omit<AppSetup, 'options'> = {}) {
        const policy = `p${++policies}`
        const ts = testStore(storeKind)
        const ledger = new LeaseLedger(policy)
        const app = await startAdapterApp(adapter, {
          ...setup,
          options: { name: policy, store: ts.store, ...options },
          outer: setup.outer && { store: ts.store, ...setup.outer },
        })
        return { app, ts, policy, ledger }
      }

      /** Nothing held or queued anywhere, every admission released exactly once. */
      async function settled(app: AdapterApp, ts: TestStore, policy: string, ledger: LeaseLedger) {
        await eventually(async () => {
          const stats = await bucketStats(ts, policy)
          return (
            stats.holders === 0 &&
            stats.queued === 0 &&
            app.counters.inFlight === 0 &&
            app.counters.queued === 0 &&
            ledger.released === ledger.acquired
          )
        }, 3000)
        await sleep(30) // a late second release would show now
        expect(app.counters.inFlight).toBe(0)
        expect(ledger.acquired).toBe(app.counters.admitted)
        expect(ledger.released).toBe(ledger.acquired)
      }

      const releaseHolders = (app: AdapterApp) => app.probe.holders.splice(0).forEach((release) => release())

      it('G1: admits at most `permits` handlers among 40 concurrent clients', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 4, maxWaitMs: 10_000 })
        const answers = await Promise.all(Array.from({ length: 40 }, () => get(`${app.url}/fast?ms=10`)))
        expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200))
        expect(app.probe.max).toBe(4)
        expect(app.probe.entered).toBe(40)
        expect(new Set(app.probe.fences).size).toBe(40) // each admission had its own fencing token
        await settled(app, ts, policy, ledger)
      })

      it('G5: admits queued requests in arrival order within maxWaitMs', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 10_000 })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const queued: Promise<Answer>[] = []
        for (let i = 0; i < 5; i++) {
          queued.push(get(`${app.url}/fast?id=${i}&ms=1`))
          await eventually(() => app.counters.queued === i + 1)
        }
        releaseHolders(app)
        const answers = await Promise.all([holder, ...queued])
        expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200])
        expect(app.probe.order).toEqual(['0', '1', '2', '3', '4'])
        await settled(app, ts, policy, ledger)
      })

      it('rejects past maxWaitMs with the same status, Retry-After, RateLimit headers and body', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 150 })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const started = Date.now()
        const rejected = await get(`${app.url}/fast`)
        expect(Date.now() - started).toBeGreaterThanOrEqual(130)
        expect(shape(rejected)).toEqual(rejection(policy, 503, 'timeout'))
        expect(app.rejectedHook).toBe(1)
        expect(app.counters.rejected.timeout).toBe(1)
        releaseHolders(app)
        const held = await holder
        expect(held.headers.get('ratelimit-policy')).toBe(`"${policy}";q=1;qu="concurrent-requests"`)
        expect(held.headers.get('ratelimit')).toBe(`"${policy}";r=0`)
        await settled(app, ts, policy, ledger)
      })

      it('rejects at once past maxQueue, with 429 for a keyed cap', async () => {
        const { app, ts, policy, ledger } = await start({
          permits: 1,
          maxWaitMs: 5000,
          maxQueue: 1,
          key: 'tenant',
        })
        const tenant = { 'x-tenant': 't' }
        const holder = get(`${app.url}/hold`, tenant)
        await eventually(() => app.probe.holders.length === 1)
        const queued = get(`${app.url}/fast?ms=1`, tenant)
        await eventually(() => app.counters.queued === 1)
        const started = Date.now()
        const rejected = await get(`${app.url}/fast`, tenant)
        expect(Date.now() - started).toBeLessThan(500)
        expect(shape(rejected)).toEqual(rejection(policy, 429, 'queue_full', 5))
        releaseHolders(app)
        expect((await Promise.all([holder, queued])).map((a) => a.status)).toEqual([200, 200])
        await settled(app, ts, policy, ledger)
        // The keyed bucket is not the global one settled() looked at: ask it too.
        expect(app.counters.inFlight).toBe(0)
      })

      it('sends the same RateLimit headers on plain, streamed and failing responses', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 3, maxWaitMs: 0 })
        const expected = { policy: `"${policy}";q=3;qu="concurrent-requests"`, ratelimit: `"${policy}";r=2` }
        const headersOf = (a: Answer) => ({
          policy: a.headers.get('ratelimit-policy'),
          ratelimit: a.headers.get('ratelimit'),
        })
        const fast = await get(`${app.url}/fast`)
        expect([fast.status, headersOf(fast)]).toEqual([200, expected])
        const streamed = await get(`${app.url}/stream?chunks=2&every=5`)
        expect([streamed.status, headersOf(streamed)]).toEqual([200, expected])
        const failed = await get(`${app.url}/boom`)
        expect([failed.status, headersOf(failed)]).toEqual([500, expected])
        await settled(app, ts, policy, ledger)
      })

      it('G3: releases exactly once when the handler throws', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0 })
        expect((await get(`${app.url}/boom`)).status).toBe(500)
        await settled(app, ts, policy, ledger)
        expect((await get(`${app.url}/fast`)).status).toBe(200) // maxWaitMs 0: only if the permit is back
        await settled(app, ts, policy, ledger)
      })

      it('G3: holds the permit until the last byte of a streamed response, then releases it once', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0 })
        const streaming = get(`${app.url}/stream?chunks=5&every=25`)
        await eventually(() => app.probe.entered === 1)
        await sleep(50) // mid-stream: every middleware has returned, the body is still flowing
        expect((await get(`${app.url}/fast`)).status).toBe(503)
        expect((await streaming).body.split('\n').filter(Boolean)).toHaveLength(5)
        await settled(app, ts, policy, ledger)
        expect((await get(`${app.url}/fast`)).status).toBe(200)
      })

      it('G3 G5: a client that leaves while queued leaves the queue, unanswered and unrejected', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 10_000 })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const leaving = openRequest(`${app.url}/fast`)
        await eventually(() => app.counters.queued === 1)
        leaving.destroy()
        await eventually(
          async () => app.counters.queued === 0 && (await bucketStats(ts, policy)).queued === 0,
        )
        releaseHolders(app)
        expect((await holder).status).toBe(200)
        expect(app.probe.entered).toBe(1) // the one that left never reached its handler
        expect(app.rejectedHook).toBe(0)
        await settled(app, ts, policy, ledger)
      })

      it('a client that leaves while its rejection is being decided is not rejected (abort before reject)', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0 })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        ts.pause()
        const closed = app.probe.socketsClosed
        const leaving = openRequest(`${app.url}/fast`)
        await eventually(() => ts.pendingAcquires === 1)
        leaving.destroy()
        await eventually(() => app.probe.socketsClosed === closed + 1) // the server saw it leave
        ts.resume() // the store answers "busy": a rejection for a client that is gone
        await eventually(() => app.counters.rejected.busy === 1)
        await sleep(20)
        expect(app.rejectedHook).toBe(0) // not reported as rejected, nothing written
        expect((await leaving.done).complete).toBe(false)
        releaseHolders(app)
        await holder
        await settled(app, ts, policy, ledger)
      })

      it('a client that leaves while its permit is being granted gives it back at once (abort before admit)', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0 })
        ts.pause()
        const closed = app.probe.socketsClosed
        const leaving = openRequest(`${app.url}/fast`)
        await eventually(() => ts.pendingAcquires === 1)
        leaving.destroy()
        await eventually(() => app.probe.socketsClosed === closed + 1)
        ts.resume() // the store grants the permit to a client that is gone
        await eventually(() => app.counters.admitted === 1)
        await settled(app, ts, policy, ledger)
        expect(app.probe.entered).toBe(0)
        expect((await get(`${app.url}/fast`)).status).toBe(200)
      })

      it('a client that left before the middleware ran takes no permit', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0 })
        const closed = app.probe.socketsClosed
        const leaving = openRequest(`${app.url}/fast?pre=150`) // another middleware first waits 150 ms
        await sleep(30)
        leaving.destroy()
        await eventually(() => app.probe.socketsClosed === closed + 1)
        await sleep(200) // past the other middleware: Tollgate has seen the request by now
        expect(app.counters.admitted).toBe(0)
        expect(app.probe.entered).toBe(0)
        await settled(app, ts, policy, ledger)
        expect((await get(`${app.url}/fast`)).status).toBe(200)
      })

      it('G3: releases at once when a holding client leaves before the first byte', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0 })
        const leaving = openRequest(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        leaving.destroy()
        await eventually(() => app.counters.inFlight === 0, 1000, 1)
        expect((await get(`${app.url}/fast`)).status).toBe(200) // while the first handler still runs
        releaseHolders(app) // it answers a response that is gone: no second release
        await settled(app, ts, policy, ledger)
      })

      it('G3: releases at once when the client leaves mid-response', async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0 })
        const leaving = openRequest(`${app.url}/stream-hold`)
        expect((await leaving.head).status).toBe(200)
        await leaving.received('start\n')
        leaving.destroy()
        await eventually(
          async () => app.counters.inFlight === 0 && (await bucketStats(ts, policy)).holders === 0,
        )
        expect(app.probe.inside).toBe(1) // the handler is still writing
        expect((await get(`${app.url}/fast`)).status).toBe(200)
        releaseHolders(app) // it writes the rest to a response that is gone
        await settled(app, ts, policy, ledger)
      })

      it("G4: a lost lease with onLost 'abort' cuts the response and releases once", async () => {
        const { app, ts, policy, ledger } = await start({
          permits: 1,
          maxWaitMs: 0,
          ttlMs: 300,
          onLost: 'abort',
        })
        const streaming = openRequest(`${app.url}/stream-hold`)
        await streaming.received('start\n')
        await stealLeases(ts, policy)
        const done = await streaming.done // cut by the server once the renewal finds the lease gone
        expect(done).toEqual({ complete: false, body: 'start\n' })
        expect(app.counters.lost).toBe(1)
        releaseHolders(app)
        await settled(app, ts, policy, ledger)
        expect((await get(`${app.url}/fast`)).status).toBe(200)
      })

      it("G4: a lost lease with onLost 'log' is counted and the response completes", async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0, ttlMs: 300 })
        const streaming = openRequest(`${app.url}/stream-hold`)
        await streaming.received('start\n')
        await stealLeases(ts, policy)
        await eventually(() => app.counters.lost === 1, 3000)
        releaseHolders(app)
        expect(await streaming.done).toEqual({ complete: true, body: 'start\nend\n' })
        await settled(app, ts, policy, ledger)
      })

      it("maxWaitMs 0: rejected at once as 'busy' (nothing waited), in the body, the counters and the hook", async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0 })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const rejected = await get(`${app.url}/fast`)
        expect(shape(rejected)).toEqual(rejection(policy, 503, 'busy'))
        expect(app.hookReasons).toEqual(['busy'])
        expect(app.counters.rejected).toMatchObject({ busy: 1, timeout: 0 })
        releaseHolders(app)
        expect((await holder).status).toBe(200)
        await settled(app, ts, policy, ledger)
      })

      it("onRejected answers the framework's way, and its answer is the response", async () => {
        const { app, ts, policy, ledger } = await start({ permits: 1, maxWaitMs: 0, onRejected: 'answer' })
        const holder = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const rejected = await get(`${app.url}/fast`)
        expect([rejected.status, rejected.body]).toEqual([420, 'hook:busy'])
        expect(app.rejectedHook).toBe(1)
        releaseHolders(app)
        expect((await holder).status).toBe(200)
        await settled(app, ts, policy, ledger)
      })

      it("G1: unnamed middlewares of several apps on one store share the bucket 'default'", async () => {
        // express-rate-limit's "should refuse additional connections once the max is reached", across
        // app instances of one fleet: names went by creation order ('default-2', ...), a cap per app.
        const ts = testStore(storeKind)
        const ledger = new LeaseLedger('default')
        const apps: AdapterApp[] = []
        for (let i = 0; i < 3; i++)
          apps.push(
            await startAdapterApp(adapter, { options: { permits: 1, maxWaitMs: 0, store: ts.store } }),
          )
        const [first, ...others] = apps as [AdapterApp, ...AdapterApp[]]
        const holder = get(`${first.url}/hold`)
        await eventually(() => first.probe.holders.length === 1)
        for (const other of others)
          expect(shape(await get(`${other.url}/fast`))).toEqual(rejection('default', 503, 'busy'))
        releaseHolders(first)
        const held = await holder
        expect(held.headers.get('ratelimit-policy')).toBe('"default";q=1;qu="concurrent-requests"')
        await eventually(
          async () =>
            (await bucketStats(ts, 'default')).holders === 0 &&
            apps.every((app) => app.counters.inFlight === 0) &&
            ledger.released === ledger.acquired,
        )
        expect(ledger.acquired).toBe(1)
      })

      it('stacked unnamed middlewares: one name in the store, two entries in the headers', async () => {
        const ts = testStore(storeKind)
        const app = await startAdapterApp(adapter, {
          options: { permits: 1, maxWaitMs: 0, store: ts.store, key: 'tenant' },
          outer: { permits: 10, maxWaitMs: 0, store: ts.store },
        })
        const holder = get(`${app.url}/hold`, { 'x-tenant': 'acme' })
        await eventually(() => app.probe.holders.length === 1)
        // In the store: the outer policy's global bucket and the inner one's tenant bucket, both 'default'.
        expect((await bucketStats(ts, 'default')).holders).toBe(1)
        expect((await bucketStats(ts, 'default', 'acme')).holders).toBe(1)
        releaseHolders(app)
        const answer = await holder
        expect(answer.status).toBe(200)
        expect(answer.headers.get('ratelimit-policy')).toBe(
          '"default";q=10;qu="concurrent-requests", "default-2";q=1;qu="concurrent-requests"',
        )
        expect(answer.headers.get('ratelimit')).toBe('"default";r=9, "default-2";r=0')
        await eventually(
          async () => app.counters.inFlight === 0 && (await bucketStats(ts, 'default', 'acme')).holders === 0,
        )
      })

      it('stacked middlewares list both policies, the outer one first', async () => {
        const outer = `outer-${policies}`
        const { app, ts, policy, ledger } = await start(
          { permits: 1, maxWaitMs: 0 },
          { outer: { permits: 10, maxWaitMs: 0, name: outer } },
        )
        const held = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        const rejected = await get(`${app.url}/fast`)
        expect(rejected.status).toBe(503)
        expect(rejected.headers.get('ratelimit-policy')).toBe(
          `"${outer}";q=10;qu="concurrent-requests", "${policy}";q=1;qu="concurrent-requests"`,
        )
        expect(rejected.headers.get('ratelimit')).toBe(`"${outer}";r=8, "${policy}";r=0`)
        releaseHolders(app)
        expect((await held).status).toBe(200)
        const admitted = await get(`${app.url}/fast`)
        expect(admitted.headers.get('ratelimit-policy')).toBe(
          `"${outer}";q=10;qu="concurrent-requests", "${policy}";q=1;qu="concurrent-requests"`,
        )
        expect(admitted.headers.get('ratelimit')).toBe(`"${outer}";r=9, "${policy}";r=0`)
        await settled(app, ts, policy, ledger)
      })
    })
  }
}

// The options every adapter reads (skip, message, handler, requestPropertyName, standardHeaders):
// framework-independent behaviour, on the memory store only.
for (const adapter of ADAPTERS) {
  describe(`adapter options [${adapter}]`, () => {
    async function start(options: Record<string, unknown>, setup: Omit<AppSetup, 'options'> = {}) {
      const policy = `p${++policies}`
      const ts = testStore('memory')
      const ledger = new LeaseLedger(policy)
      const app = await startAdapterApp(adapter, {
        ...setup,
        options: { name: policy, store: ts.store, ...options },
        outer: setup.outer && { store: ts.store, ...setup.outer },
      })
      /** Hold the only permit; returns the held request (in an object: not awaited). */
      const saturate = async () => {
        const held = get(`${app.url}/hold`)
        await eventually(() => app.probe.holders.length === 1)
        return { held }
      }
      const done = async ({ held }: { held: Promise<Answer> }) => {
        app.probe.holders.splice(0).forEach((release) => release())
        expect((await held).status).toBe(200)
        await eventually(() => app.counters.inFlight === 0 && ledger.released === ledger.acquired)
      }
      return { app, policy, saturate, done }
    }

    it('skip: a skipped request takes no permit and gets no RateLimit headers', async () => {
      const { app, saturate, done } = await start({ permits: 1, maxWaitMs: 0, skip: 'x-skip' })
      const held = await saturate()
      const skipped = await get(`${app.url}/fast`, { 'x-skip': '1' })
      expect([
        skipped.status,
        skipped.headers.get('ratelimit'),
        skipped.headers.get('ratelimit-policy'),
      ]).toEqual([200, null, null])
      expect((await get(`${app.url}/fast`)).status).toBe(503)
      expect(app.counters.admitted).toBe(1)
      await done(held)
    })

    it('message: a string is sent as text/plain, an object as JSON, with the same headers', async () => {
      const text = await start({ permits: 1, maxWaitMs: 0, message: 'busy, retry later' })
      let held = await text.saturate()
      const plain = await get(`${text.app.url}/fast`)
      expect([plain.status, plain.body, plain.headers.get('content-type')]).toEqual([
        503,
        'busy, retry later',
        'text/plain; charset=utf-8',
      ])
      expect(plain.headers.get('content-length')).toBe('17')
      expect(plain.headers.get('retry-after')).toBe('1')
      expect(plain.headers.get('ratelimit')).toBe(`"${text.policy}";r=0`)
      await text.done(held)

      const json = await start({
        permits: 1,
        maxWaitMs: 0,
        message: (_req: unknown, rejection: { reason: string }) => ({ busy: true, why: rejection.reason }),
      })
      held = await json.saturate()
      const object = await get(`${json.app.url}/fast`)
      expect([object.status, JSON.parse(object.body), object.headers.get('content-type')]).toEqual([
        503,
        { busy: true, why: 'busy' },
        'application/json; charset=utf-8',
      ])
      await json.done(held)
    })

    it('handler: answers the rejection in the framework’s own way, after onRejected', async () => {
      const { app, saturate, done } = await start({ permits: 1, maxWaitMs: 0, handler: 'teapot' })
      const held = await saturate()
      const custom = await get(`${app.url}/fast`)
      expect([custom.status, custom.body]).toEqual([418, 'custom:busy'])
      expect(app.rejectedHook).toBe(1)
      await done(held)
    })

    it('weight: a request of weight 2 takes both permits; the RateLimit header counts permits', async () => {
      const { app, saturate, done } = await start({ permits: 2, maxWaitMs: 0, weight: 'x-weight' })
      const light = await saturate() // one of two permits held
      const heavy = await get(`${app.url}/fast`, { 'x-weight': '2' })
      expect([heavy.status, JSON.parse(heavy.body).reason]).toEqual([503, 'busy'])
      await done(light)
      const held = get(`${app.url}/hold`, { 'x-weight': '2' })
      await eventually(() => app.probe.holders.length === 1)
      expect((await get(`${app.url}/fast`)).status).toBe(503) // both permits are the heavy one's
      app.probe.holders.splice(0).forEach((release) => release())
      const answer = await held
      expect(answer.headers.get('ratelimit')).toMatch(/;r=0$/)
      // A weight above the permits counts as all of them; a bad one as 1.
      expect((await get(`${app.url}/fast`, { 'x-weight': '9' })).headers.get('ratelimit')).toMatch(/;r=0$/)
      expect((await get(`${app.url}/fast`, { 'x-weight': 'x' })).headers.get('ratelimit')).toMatch(/;r=1$/)
    })

    it('requestPropertyName: the handler finds the lease info under that name', async () => {
      const { app } = await start({ permits: 1, requestPropertyName: 'limits' })
      expect((await get(`${app.url}/fast`)).status).toBe(200)
      expect(app.probe.fences).toHaveLength(1) // the route read info.fencingToken from req.limits
    })

    it("standardHeaders 'draft-7': one unnamed policy, the outer one's when stacked", async () => {
      const { app, saturate, done } = await start(
        { permits: 1, maxWaitMs: 0, standardHeaders: 'draft-7' },
        { outer: { permits: 10, maxWaitMs: 0, name: `outer-${policies + 1}`, standardHeaders: 'draft-7' } },
      )
      const held = await saturate()
      const rejected = await get(`${app.url}/fast`)
      expect([
        rejected.status,
        rejected.headers.get('ratelimit-policy'),
        rejected.headers.get('ratelimit'),
      ]).toEqual([503, '10', 'limit=10, remaining=8, reset=0'])
      await done(held)
      const alone = await start({ permits: 2, standardHeaders: 'draft-7' })
      const admitted = await get(`${alone.app.url}/fast`)
      expect([admitted.headers.get('ratelimit-policy'), admitted.headers.get('ratelimit')]).toEqual([
        '2',
        'limit=2, remaining=1, reset=0',
      ])
    })

    it('standardHeaders false: no RateLimit headers, Retry-After still on rejections', async () => {
      const { app, saturate, done } = await start({ permits: 1, maxWaitMs: 0, standardHeaders: false })
      const held = await saturate()
      const rejected = await get(`${app.url}/fast`)
      expect([
        rejected.status,
        rejected.headers.get('retry-after'),
        rejected.headers.get('ratelimit'),
      ]).toEqual([503, '1', null])
      await done(held)
      const admitted = await get(`${app.url}/fast`)
      expect([admitted.headers.get('ratelimit-policy'), admitted.headers.get('ratelimit')]).toEqual([
        null,
        null,
      ])
    })
  })
}
