// express-rate-limit's conventions where they fit a concurrency cap, in the engine every adapter
// shares: unknown options are errors naming them, distinct default names, skip, message, the draft-7
// and draft-8 RateLimit headers (stacked entries appended), metrics on a prom-client registry, the
// effective limit in stats(), and NODE_DEBUG traces.
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { rwlockAdmission, semaphoreAdmission } from '../../src/admission/buckets.js'
import { policyHeaders } from '../../src/admission/response.js'
import { closestName } from '../../src/core/options.js'
import {
  ConfigError,
  createMemoryStore,
  createMutex,
  createReadWriteLock,
  createRedisStore,
  createRedlock,
  createReentrantMutex,
  createSemaphore,
} from '../../src/index.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const shape = { method: () => 'GET', path: () => '/x' }
const never = new AbortController().signal

describe('options', () => {
  it.each([
    [{ permits: 1, keyGenerator: () => 'k' }, 'keyGenerator', 'tollgate calls it `key`'],
    [{ permits: 1, windowMs: 60_000 }, 'windowMs', 'there is no window'],
    [{ permits: 1, max: 5 }, 'max', '`permits`'],
    [{ permits: 1, legacyHeaders: false }, 'legacyHeaders', 'standardHeaders'],
    [{ permits: 1, sikp: () => true }, 'sikp', 'did you mean "skip"?'],
    [{ permits: 1, limit: 5 }, 'limit', '`permits`'],
    [{ permits: 1, color: 'red' }, 'color', 'the options are store, name, maxWaitMs'],
  ])('an unknown option is a ConfigError naming it: %j', (options, option, hint) => {
    let error: unknown
    try {
      semaphoreAdmission(options as never)
    } catch (caught) {
      error = caught
    }
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as ConfigError).option).toBe(option)
    expect((error as Error).message).toContain(hint)
  })

  it('rwlock() rejects unknown options too, and semaphore-only ones', () => {
    expect(() => rwlockAdmission({ permits: 3 } as never, shape)).toThrow('"permits"')
    expect(() => semaphoreAdmission({ permits: 1, readMethods: ['GET'] } as never)).toThrow('"readMethods"')
  })

  it.each([
    [{ standardHeaders: 'draft-6' }, 'standardHeaders'],
    [{ standardHeaders: 'draft-8', headers: true }, 'headers'],
    [{ skip: true }, 'skip'],
    [{ handler: 'x' }, 'handler'],
    [{ message: 42 }, 'message'],
    [{ requestPropertyName: 'a-b' }, 'requestPropertyName'],
    // Names a request already has would be overwritten (or, for getters, throw per request).
    [{ requestPropertyName: '__proto__' }, 'requestPropertyName'],
    [{ requestPropertyName: 'constructor' }, 'requestPropertyName'],
    [{ requestPropertyName: 'ip' }, 'requestPropertyName'],
    [{ requestPropertyName: 'headers' }, 'requestPropertyName'],
    [{ requestPropertyName: 'socket' }, 'requestPropertyName'],
    [{ standardHeaders: true }, 'standardHeaders'],
    [{ metrics: { registry: {} } }, 'metrics'],
  ])('validates %j', (extra, option) => {
    expect(() => semaphoreAdmission({ permits: 1, ...extra } as never)).toThrow(`"${option}"`)
  })

  it("every unnamed instance is 'default' (never numbered by creation order); a second one on a store warns once", async () => {
    const warnings: Error[] = []
    const onWarning = (warning: Error) => warnings.push(warning)
    process.on('warning', onWarning)
    try {
      const store = createMemoryStore()
      const names = [1, 2, 3].map(
        () => semaphoreAdmission({ permits: 1, store: createMemoryStore() }).config.name,
      )
      expect(names).toEqual(['default', 'default', 'default'])
      expect(semaphoreAdmission({ permits: 1, name: 'api' }).config).toMatchObject({
        name: 'api',
        named: true,
      })
      semaphoreAdmission({ permits: 1, store })
      rwlockAdmission({ store }, { method: () => 'GET', path: () => '/' }) // another kind: other keys
      await new Promise((resolve) => setImmediate(resolve)) // warnings are emitted on the next tick
      expect(warnings.filter((w) => (w as { code?: string }).code === 'TOLLGATE_UNNAMED_POLICY')).toEqual([])
      semaphoreAdmission({ permits: 2, store })
      semaphoreAdmission({ permits: 3, store })
      await new Promise((resolve) => setImmediate(resolve))
      const said = warnings.filter((w) => (w as { code?: string }).code === 'TOLLGATE_UNNAMED_POLICY')
      expect(said).toHaveLength(1)
      expect(said[0]!.message).toContain('share one store')
    } finally {
      process.off('warning', onWarning)
    }
  })

  it("a client's key '*' gets its own bucket, not the unkeyed one of the same name", async () => {
    const store = createMemoryStore()
    const global = semaphoreAdmission<string>({ permits: 1, store, name: 'shared', maxWaitMs: 0 })
    const keyed = semaphoreAdmission<string>({
      permits: 1,
      store,
      name: 'shared',
      maxWaitMs: 0,
      key: (k) => k,
    })
    const held = await global.admit('x', never)
    expect(held.outcome).toBe('admitted')
    expect((await keyed.admit('*', never)).outcome).toBe('admitted')
    await store.close()
  })
})

describe('primitive and store options', () => {
  const store = createMemoryStore()
  // Stores on clients that never connect (lazyConnect): RedLock checks its stores before its options.
  const idle = () => createRedisStore(new Redis({ lazyConnect: true }))
  const cases: [string, () => unknown, string, string][] = [
    ['createMutex', () => createMutex(store, 'x', { ttl: 1000 } as never), 'ttl', '`ttlMs`'],
    [
      'createMutex',
      () => createMutex(store, 'x', { owner: 'job' } as never),
      'owner',
      'createReentrantMutex()',
    ],
    ['createMutex', () => createMutex(store, 'x', { permits: 2 } as never), 'permits', 'createSemaphore()'],
    [
      'createReentrantMutex',
      () => createReentrantMutex(store, 'x', { leaseTime: 5 } as never),
      'leaseTime',
      '`ttlMs`',
    ],
    [
      'createSemaphore',
      () => createSemaphore(store, 'x', { permits: 2, retryInterval: 5 } as never),
      'retryInterval',
      'notification',
    ],
    [
      'createReadWriteLock',
      () => createReadWriteLock(store, 'x', { waiterTtl: 5 } as never),
      'waiterTtl',
      '`waiterTtlMs`',
    ],
    [
      'createReadWriteLock',
      () => createReadWriteLock(store, 'x', { ttlms: 5 } as never),
      'ttlms',
      'did you mean "ttlMs"?',
    ],
    ['acquire()', () => createMutex(store, 'x').acquire({ timeout: 5 } as never), 'timeout', '`timeoutMs`'],
    ['createMemoryStore', () => createMemoryStore({ keyPrefix: 'a' } as never), 'keyPrefix', '`prefix`'],
    [
      'createRedisStore',
      () => createRedisStore('redis://127.0.0.1:1', { commandTimeout: 5 } as never),
      'commandTimeout',
      '`commandTimeoutMs`',
    ],
    [
      'createRedlock',
      () => createRedlock([idle(), idle(), idle()], 'x', { retryDelay: 5 } as never),
      'retryDelay',
      '`retryDelayMs`',
    ],
  ]
  it.each(cases.map(([factory, make, option, hint]) => ({ factory, make, option, hint })))(
    '$factory refuses an unknown option, naming it with a hint: $option',
    ({ make, option, hint }) => {
      let error: unknown
      try {
        const result = make()
        if (result instanceof Promise) result.catch(() => {})
      } catch (caught) {
        error = caught
      }
      expect(error).toBeInstanceOf(ConfigError)
      expect((error as ConfigError).option).toBe(option)
      expect((error as Error).message).toContain(hint)
    },
  )
})

describe('factory arguments: the first thing wrong is named, in the order the user wrote them', () => {
  const store = createMemoryStore()
  const idle = () => createRedisStore(new Redis({ lazyConnect: true }))
  const nodes = [idle(), idle(), idle()]
  /** The ConfigError `make` throws (or its promise rejects with: none here). */
  function refusal(make: () => unknown): ConfigError {
    try {
      make()
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError)
      return error as ConfigError
    }
    throw new Error('no error thrown')
  }

  it('createSemaphore(store, name, { limit: 5 }) names `limit` as unknown and suggests `permits`', () => {
    const error = refusal(() => createSemaphore(store, 'x', { limit: 5 } as never))
    expect(error.option).toBe('limit')
    expect(error.message).toBe('Unknown option "limit": did you mean "permits"? (received 5).')
    // Also beside the permits, and beside an adaptive limit (checked before the adaptive options).
    expect(refusal(() => createSemaphore(store, 'y', { permits: 2, limit: 5 } as never)).option).toBe('limit')
    expect(
      refusal(() => createSemaphore(store, 'z', { adaptive: { max: 5, mni: 1 }, limit: 5 } as never)).option,
    ).toBe('limit')
  })

  it.each([
    [
      'createSemaphore(store, name, options)',
      () => createSemaphore(store, { permits: 5 } as never, undefined as never),
    ],
    [
      'createSemaphore(store, name, options)',
      () => createSemaphore(store, { adaptive: { max: 5 } } as never, undefined as never),
    ],
    ['createMutex(store, name, options)', () => createMutex(store, { ttlMs: 1000 } as never)],
    [
      'createReentrantMutex(store, name, options)',
      () => createReentrantMutex(store, { owner: 'job' } as never),
    ],
    [
      'createReadWriteLock(store, name, options)',
      () => createReadWriteLock(store, { owner: 'job' } as never),
    ],
    ['createRedlock(stores, name, options)', () => createRedlock(nodes, { ttlMs: 1000 } as never)],
  ])('%s without its name says the name argument is missing', (call, make) => {
    const error = refusal(make)
    expect(error.option).toBe('name')
    expect(error.message).toBe(
      `${call}: expected a name string as the second argument, before the options (received object).`,
    )
  })

  it('names the other misplaced arguments: a store, a non-string name, the options', () => {
    const noStore = refusal(() =>
      createSemaphore('jobs' as never, { permits: 5 } as never, undefined as never),
    )
    expect(noStore.option).toBe('store')
    expect(noStore.message).toBe(
      'createSemaphore(store, name, options): expected a store from createRedisStore() or createMemoryStore() as the first argument (received "jobs").',
    )
    const client = new Redis({ lazyConnect: true })
    expect(refusal(() => createMutex(client as never, 'x')).message).toContain(
      'an ioredis client goes in createRedisStore(client) first',
    )
    client.disconnect()
    expect(refusal(() => createMutex(store, 42 as never)).message).toBe(
      'createMutex(store, name, options): expected a name string as the second argument (received 42).',
    )
    expect(refusal(() => createMutex(store, '')).message).toContain('a name of 1 to 65536 characters')
    expect(refusal(() => createSemaphore(store, 'x', 5 as never)).message).toBe(
      'createSemaphore(store, name, options): expected an options object as the third argument, e.g. { permits: 5 } (received 5).',
    )
    expect(refusal(() => createSemaphore(store, 'x', undefined as never)).option).toBe('options')
    // Accepted and ignored before: a reentrant mutex's options that are no object.
    expect(refusal(() => createReentrantMutex(store, 'x', 5 as never)).option).toBe('options')
    expect(refusal(() => createRedlock(nodes, 'x', 5 as never)).option).toBe('options')
    // A semaphore without a cap says what it needs.
    expect(refusal(() => createSemaphore(store, 'x', {})).message).toBe(
      'Invalid option "permits": expected an integer from 1 to 1000000 (required unless "adaptive" is given) (received undefined).',
    )
  })

  it.each([
    ['createSemaphore', () => createSemaphore(store, 'x', { permit: 5 } as never), 'permit', 'permits'],
    ['createMutex', () => createMutex(store, 'x', { ttlMS: 5 } as never), 'ttlMS', 'ttlMs'],
    ['createMutex', () => createMutex(store, 'x', { autorenew: false } as never), 'autorenew', 'autoRenew'],
    ['createReentrantMutex', () => createReentrantMutex(store, 'x', { ownr: 'a' } as never), 'ownr', 'owner'],
    ['createReadWriteLock', () => createReadWriteLock(store, 'x', { onwer: 'a' } as never), 'onwer', 'owner'],
    ['createRedlock', () => createRedlock(nodes, 'x', { retryCont: 5 } as never), 'retryCont', 'retryCount'],
    ['createMemoryStore', () => createMemoryStore({ prefx: 'a' } as never), 'prefx', 'prefix'],
    ['acquire()', () => createMutex(store, 'y').acquire({ timeoutMS: 5 } as never), 'timeoutMS', 'timeoutMs'],
    [
      'tryAcquire()',
      () => createSemaphore(store, 'z', { permits: 2 }).tryAcquire({ wieght: 2 } as never),
      'wieght',
      'weight',
    ],
    [
      'adaptive',
      () => createSemaphore(store, 'w', { adaptive: { max: 5, mni: 1 } } as never),
      'adaptive.mni',
      'adaptive.min',
    ],
    ['semaphore()', () => semaphoreAdmission({ permits: 1, maxWait: 5 } as never), 'maxWait', 'maxWaitMs'],
  ])('%s suggests the option a typo was meant to be', (_factory, make, option, meant) => {
    const error = refusal(make)
    expect(error.option).toBe(option)
    expect(error.message).toContain(`Unknown option "${option}": did you mean "${meant}"?`)
  })

  it('lists the options when nothing is close, and suggests nothing far', () => {
    expect(refusal(() => createMutex(store, 'x', { colour: 1 } as never)).message).toBe(
      'Unknown option "colour": the options are ttlMs, autoRenew, acquireTimeoutMs, waiterTtlMs, onLost (received 1).',
    )
    expect(closestName('ttl', ['ttlMs'])).toBeUndefined() // two edits on a short name: a hint's job
    expect(closestName('permitz', ['permits', 'owner'])).toBe('permits')
    expect(closestName('x'.repeat(10_000), ['permits'])).toBeUndefined()
  })

  it('what must not change: right calls construct, and a bad value keeps its message', () => {
    expect(createSemaphore(store, 'ok', { permits: 5, ttlMs: 1000 }).permits).toBe(5)
    expect(createReentrantMutex(store, 'ok-r', { owner: 'job' }).name).toBe('ok-r')
    expect(createReadWriteLock(store, 'ok-rw').name).toBe('ok-rw')
    expect(refusal(() => createMutex(store, 'bad', { ttlMs: 0 })).message).toBe(
      'Invalid option "ttlMs": expected an integer from 1 to 86400000 (received 0).',
    )
  })
})

describe('RateLimit headers and rejections', () => {
  it('draft-8 names the policy; draft-7 has one unnamed policy', () => {
    expect(policyHeaders('api', 10, 3, 'draft-8')).toEqual({
      'RateLimit-Policy': '"api";q=10;qu="concurrent-requests"',
      RateLimit: '"api";r=3',
    })
    expect(policyHeaders('api', 10, 3, 'draft-7')).toEqual({
      'RateLimit-Policy': '10',
      RateLimit: 'limit=10, remaining=3, reset=0',
    })
    expect(policyHeaders('api', 10, 3, false)).toEqual({})
  })

  it('message: a string is text/plain, an object JSON, a function sees the request and the rejection', async () => {
    const store = createMemoryStore()
    const make = (message: unknown) =>
      semaphoreAdmission<string>({
        permits: 1,
        store,
        name: `m${Math.random()}`.replace('.', ''),
        maxWaitMs: 0,
        message,
      } as never)
    for (const [message, type, body] of [
      ['busy, try later', 'text/plain; charset=utf-8', 'busy, try later'],
      [{ code: 'BUSY' }, 'application/json; charset=utf-8', '{"code":"BUSY"}'],
      [(req: string, r: { reason: string }) => `${req}:${r.reason}`, 'text/plain; charset=utf-8', 'me:busy'],
    ] as const) {
      const admission = make(message)
      await admission.admit('me', never)
      const rejected = await admission.admit('me', never)
      if (rejected.outcome !== 'rejected') throw new Error('expected a rejection')
      const answer = admission.rejectionResponse(rejected.rejection, 'me')
      expect(answer.headers['Content-Type']).toBe(type)
      expect(answer.body).toBe(body)
      expect(answer.headers['Retry-After']).toBe('1')
    }
    await store.close()
  })

  it('an async message function is a mistake: the default body is sent and the error logged', async () => {
    const errors: unknown[] = []
    const logger = { warn() {}, error: (_m: string, meta?: unknown) => errors.push(meta) }
    const store = createMemoryStore()
    const admission = semaphoreAdmission<string>({
      permits: 1,
      store,
      name: 'async-message',
      maxWaitMs: 0,
      logger,
      message: (async () => 'later') as never,
    })
    await admission.admit('a', never)
    const rejected = await admission.admit('b', never)
    if (rejected.outcome !== 'rejected') throw new Error('expected a rejection')
    const answer = admission.rejectionResponse(rejected.rejection, 'b')
    expect(JSON.parse(answer.body)).toMatchObject({ reason: 'busy' })
    expect(errors).toHaveLength(1)
    await store.close()
  })

  it('stacked draft-7 and draft-8 never make one invalid header: the outer value stays', async () => {
    const { mergeHeaders } = await import('../../src/middleware/lifecycle.js')
    const outer7 = () => 'limit=5, remaining=4, reset=0'
    expect(mergeHeaders({ RateLimit: '"inner";r=0' }, outer7, 'draft-8')).toEqual({ RateLimit: outer7() })
    const outer8 = () => '"outer";r=4'
    expect(mergeHeaders({ RateLimit: 'limit=1, remaining=0, reset=0' }, outer8, 'draft-7')).toEqual({
      RateLimit: '"outer";r=4',
    })
    expect(mergeHeaders({ RateLimit: '"inner";r=0' }, outer8, 'draft-8')).toEqual({
      RateLimit: '"outer";r=4, "inner";r=0',
    })
  })

  it('skip: true skips, a throwing skip limits as usual', async () => {
    const errors: unknown[] = []
    const logger = { warn() {}, error: (_m: string, meta?: unknown) => errors.push(meta) }
    const skipping = semaphoreAdmission<string>({ permits: 1, skip: async (req) => req === 'health', logger })
    expect(await skipping.skips('health')).toBe(true)
    expect(await skipping.skips('api')).toBe(false)
    const truthy = semaphoreAdmission<string>({ permits: 1, skip: (() => 1) as never, logger })
    expect(await truthy.skips('x')).toBe(true) // any truthy value, as in express-rate-limit
    const throwing = semaphoreAdmission<string>({
      permits: 1,
      logger,
      skip: () => {
        throw new Error('boom')
      },
    })
    expect(await throwing.skips('x')).toBe(false)
    expect(errors).toHaveLength(1)
  })
})

describe('metrics on a prom-client registry', () => {
  it('counts admissions and rejections by policy, read at scrape time', async () => {
    const registry = new Registry()
    const store = createMemoryStore()
    const a = semaphoreAdmission<string>({
      permits: 1,
      store,
      name: 'exports',
      maxWaitMs: 0,
      metrics: { registry },
    })
    const b = semaphoreAdmission<string>({ permits: 5, store, name: 'search', metrics: { registry } })
    const held = await a.admit('r', never)
    await a.admit('r', never) // rejected: busy (maxWaitMs 0: nothing waited)
    await b.admit('r', never)
    await new Promise((resolve) => setTimeout(resolve, 50)) // prom-client is imported on first use
    const text = await registry.metrics()
    expect(text).toContain('tollgate_policy_admitted_total{policy="exports"} 1')
    expect(text).toContain('tollgate_policy_admitted_total{policy="search"} 1')
    expect(text).toContain('tollgate_policy_rejected_total{policy="exports",reason="busy"} 1')
    expect(text).toContain('tollgate_policy_rejected_total{policy="exports",reason="timeout"} 0')
    expect(text).toContain('tollgate_policy_in_flight{policy="exports"} 1')
    if (held.outcome === 'admitted') await a.release(held.info)
    expect(await registry.metrics()).toContain('tollgate_policy_in_flight{policy="exports"} 0')
    await store.close()
  })
})

describe('metrics: the wait histogram', () => {
  it("tollgate_policy_wait_seconds: every admitted request, by policy, with the gateway's buckets", async () => {
    const registry = new Registry()
    const store = createMemoryStore()
    const a = semaphoreAdmission<string>({
      permits: 1,
      store,
      name: 'waits',
      maxWaitMs: 5000,
      metrics: { registry },
    })
    const first = await a.admit('r', never)
    const second = a.admit('r', never) // waits for the first one's permit
    await new Promise((resolve) => setTimeout(resolve, 120))
    if (first.outcome === 'admitted') await a.release(first.info)
    const admitted = await second
    await new Promise((resolve) => setTimeout(resolve, 50)) // prom-client is imported on first use
    const text = await registry.metrics()
    expect(text).toContain('# TYPE tollgate_policy_wait_seconds histogram')
    // The first did not wait (its time is wall time: a loaded machine may make it a few ms), the
    // second waited ~120 ms.
    expect(text).toContain('tollgate_policy_wait_seconds_bucket{le="0.1",policy="waits"} 1')
    expect(text).toContain('tollgate_policy_wait_seconds_bucket{le="0.25",policy="waits"} 2')
    expect(text).toContain('tollgate_policy_wait_seconds_bucket{le="+Inf",policy="waits"} 2')
    expect(text).toContain('tollgate_policy_wait_seconds_count{policy="waits"} 2')
    const { WAIT_BUCKETS } = await import('../../src/admission/histogram.js')
    for (const le of WAIT_BUCKETS)
      expect(text).toContain(`tollgate_policy_wait_seconds_bucket{le="${le}",policy="waits"}`)
    if (admitted.outcome === 'admitted') await a.release(admitted.info)
    await store.close()
  })
})

describe('metrics: never a crash', () => {
  it('a registry that already has one of the names gets a warning, not an unhandled error', async () => {
    const { Counter } = await import('prom-client')
    const registry = new Registry()
    new Counter({ name: 'tollgate_policy_admitted_total', help: 'someone else', registers: [registry] })
    const warnings: Error[] = []
    const onWarning = (warning: Error) => warnings.push(warning)
    process.on('warning', onWarning)
    try {
      semaphoreAdmission({ permits: 1, name: 'clash', metrics: { registry } })
      await new Promise((resolve) => setTimeout(resolve, 50))
      expect(warnings.map((w) => w.message).join()).toContain('already has tollgate_policy_admitted_total')
    } finally {
      process.off('warning', onWarning)
    }
  })

  it('two middlewares of one name add up in the gauges as in the counters', async () => {
    const registry = new Registry()
    const store = createMemoryStore()
    const a = semaphoreAdmission<string>({ permits: 5, store, name: 'twice', metrics: { registry } })
    const b = semaphoreAdmission<string>({ permits: 5, store, name: 'twice', metrics: { registry } })
    await a.admit('r', never)
    await a.admit('r', never)
    await b.admit('r', never)
    await new Promise((resolve) => setTimeout(resolve, 50))
    const text = await registry.metrics()
    expect(text).toContain('tollgate_policy_admitted_total{policy="twice"} 3')
    expect(text).toContain('tollgate_policy_in_flight{policy="twice"} 3')
    await store.close()
  })
})

describe('Semaphore.stats()', () => {
  it('limit is the limit in force: its own permits, or the fleet-wide override while one is set', async () => {
    const store = createMemoryStore()
    const semaphore = createSemaphore(store, 'stats', { permits: 4 })
    expect(await semaphore.stats()).toEqual({ holders: 0, queued: 0, limit: 4, override: undefined })
    await semaphore.setPermits(2)
    expect(await semaphore.stats()).toMatchObject({ limit: 2, override: 2 })
    await semaphore.resetPermits()
    expect(await semaphore.stats()).toMatchObject({ limit: 4, override: undefined })
    expect(semaphore.permits).toBe(4)
    await store.close()
  })
})

describe('NODE_DEBUG=tollgate*', () => {
  it('traces acquire, wait, release and renew', () => {
    const script = `
      import { createMemoryStore, createSemaphore } from './src/index.ts'
      const store = createMemoryStore()
      const s = createSemaphore(store, 'traced', { permits: 1, ttlMs: 300 })
      const a = await s.acquire()
      const waiting = s.acquire()
      await new Promise((r) => setTimeout(r, 250))
      await a.release()
      const b = await waiting
      await b.release()
      const keyed = createSemaphore(store, 'api:Bearer sk_live_SECRET', { permits: 1 })
      await (await keyed.acquire()).release()
      await store.close()
    `
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      env: { ...process.env, NODE_DEBUG: 'tollgate*' },
      encoding: 'utf8',
      timeout: 20_000,
    })
    expect(run.status, run.stderr).toBe(0)
    const lines = run.stderr.split('\n')
    const has = (pattern: RegExp) =>
      expect(
        lines.some((line) => pattern.test(line)),
        String(pattern),
      ).toBe(true)
    has(/^TOLLGATE:ACQUIRE \d+: acquire sem "traced" acquired after \d+ ms$/)
    has(/^TOLLGATE:ACQUIRE \d+: wait sem "traced": queued$/)
    has(/^TOLLGATE:RELEASE \d+: release sem "traced"$/)
    has(/^TOLLGATE:RENEW \d+: renew sem "traced"/)
    // A bucket's key (request data: a header, a tenant, an address) is traced as a digest only.
    has(/^TOLLGATE:ACQUIRE \d+: acquire sem "api:#[0-9a-f]{8}" acquired/)
    expect(run.stderr).not.toContain('SECRET')
  })
})

describe('byIp() and X-Forwarded-For', () => {
  it('warns once per framework when requests carry X-Forwarded-For but the app trusts no proxy', async () => {
    const { default: express } = await import('express')
    const { default: request } = await import('supertest')
    const { byIp } = await import('../../src/middleware/express.js')
    const warnings: Error[] = []
    const onWarning = (warning: Error) => warnings.push(warning)
    process.on('warning', onWarning)
    try {
      const key = byIp()
      const seen: string[] = []
      const app = express()
      app.get('/', (req, res) => {
        seen.push(key(req))
        res.end()
      })
      await request(app).get('/') // no header: nothing to say
      await new Promise((resolve) => setImmediate(resolve))
      expect(warnings).toEqual([])
      await request(app).get('/').set('x-forwarded-for', '203.0.113.7')
      await request(app).get('/').set('x-forwarded-for', '203.0.113.8')
      await new Promise((resolve) => setImmediate(resolve))
      expect(warnings.map((w) => (w as NodeJS.ErrnoException).code)).toEqual([
        'TOLLGATE_UNTRUSTED_X_FORWARDED_FOR',
      ])
      expect(warnings[0]?.message).toContain("Express's 'trust proxy' is off or does not trust this proxy")
      // The bucket stays the connection's address: the header is not trusted.
      expect(new Set(seen).size).toBe(1)

      const trusting = express()
      trusting.set('trust proxy', true)
      trusting.get('/', (req, res) => res.end(key(req)))
      const trusted = await request(trusting).get('/').set('x-forwarded-for', '203.0.113.9')
      expect(trusted.text).toBe('203.0.113.9')
      expect(warnings).toHaveLength(1)

      // Fastify: trustProxy on takes the header, so no warning; off, one.
      const { default: Fastify } = await import('fastify')
      const { byIp: fastifyIp } = await import('../../src/middleware/fastify.js')
      const fastifyKey = fastifyIp()
      for (const trustProxy of [true, false]) {
        const app = Fastify({ trustProxy })
        app.get('/', (req) => fastifyKey(req))
        const reply = await app.inject({ url: '/', headers: { 'x-forwarded-for': '203.0.113.10' } })
        expect(reply.body).toBe(trustProxy ? '203.0.113.10' : '127.0.0.1')
        await app.close()
        await new Promise((resolve) => setImmediate(resolve))
        expect(warnings.length).toBe(trustProxy ? 1 : 2)
      }
    } finally {
      process.off('warning', onWarning)
    }
  })
})

describe('handler option (Express)', () => {
  it('an async handler that rejects answers 500 through Express, never an unhandled rejection', async () => {
    const { default: express } = await import('express')
    const { default: request } = await import('supertest')
    const { semaphore } = await import('../../src/middleware/express.js')
    let release: () => void = () => {}
    const held = new Promise<void>((resolve) => (release = resolve))
    const app = express()
    app.use(
      semaphore({
        permits: 1,
        name: 'async-handler',
        maxWaitMs: 0,
        handler: async () => {
          throw new Error('boom')
        },
      }),
    )
    app.get('/', async (_req, res) => {
      await held
      res.end('ok')
    })
    const first = request(app)
      .get('/')
      .then((r) => r)
    await new Promise((resolve) => setTimeout(resolve, 100))
    const second = await request(app).get('/')
    expect(second.status).toBe(500)
    release()
    expect((await first).text).toBe('ok')
  })
})

describe("a keyed admission's buckets (the dashboard's busiest buckets)", () => {
  it('counts nothing per bucket until asked (the middleware, nobody asks); then arrivals, and what is in flight or waiting for as long as it is', async () => {
    const store = createMemoryStore()
    const admission = semaphoreAdmission<string>({ permits: 1, store, name: 'present', key: (k) => k })
    try {
      const before = await admission.admit('early', never)
      expect(admission.arrivals.take()).toEqual(new Map()) // not tracked before this first call
      const first = await admission.admit('hog', never)
      const waiting = admission.admit('hog', never) // waits behind it
      await new Promise((resolve) => setTimeout(resolve, 20))
      expect(admission.arrivals.take()).toEqual(new Map([['hog', 2]]))
      // Nothing new arrived, but hog has one in flight and one waiting: it is present.
      expect(admission.arrivals.take()).toEqual(new Map())
      expect(admission.arrivals.present()).toEqual(new Map([['hog', 2]]))
      if (first.outcome !== 'admitted' || before.outcome !== 'admitted') throw new Error('not admitted')
      await admission.release(first.info)
      const second = await waiting
      if (second.outcome !== 'admitted') throw new Error('not admitted')
      expect(admission.arrivals.present()).toEqual(new Map([['hog', 1]]))
      await admission.release(second.info)
      await admission.release(before.info)
      expect(admission.arrivals.present()).toEqual(new Map())
    } finally {
      await store.close()
    }
  })
})
