// A semaphore's `overload` option (issue 38, design 3.4 and 4.1), on the client side: what the store
// is asked (recorded by a wrapper around the real memory store), the options' errors, and how a
// shed answer (a reply, a "<token> x" line, a re-check state) ends an acquire exactly once. The
// stores' own fair queues are tested with them (test/unit/fair-*.test.ts, test/lua/permit-fair*).
import { afterEach, describe, expect, it } from 'vitest'
import {
  AcquireTimeoutError,
  ConfigError,
  createMemoryStore,
  createMutex,
  createReadWriteLock,
  createSemaphore,
  ShedError,
} from '../../src/index.js'
import { flowId, parseFairToken } from '../../src/core/fair.js'
import { keySpace } from '../../src/core/keys.js'
import type { AcquireRequest } from '../../src/core/protocol/store.js'
import { type RecordingStore, recordingStore } from '../helpers/recording-store.js'

const stores: RecordingStore[] = []
afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()))
})
function recorded(options?: { inspectFair?: boolean }): RecordingStore {
  const store = recordingStore(createMemoryStore(), options)
  stores.push(store)
  return store
}
const space = (store: RecordingStore, name: string) => keySpace(store.prefix, 'sem', name)
const requests = (store: RecordingStore) => store.of('acquire').map((c) => c.args[0] as AcquireRequest)

/** Recorded calls with each token replaced by T<n> in order of appearance (its weight suffix kept). */
function normalised(store: RecordingStore): unknown[] {
  const names = new Map<string, string>()
  const token = (t: string) => {
    const [id, rest] = t.split('*') as [string, string | undefined]
    if (!names.has(id)) names.set(id, `T${names.size + 1}`)
    return names.get(id)! + (rest === undefined ? '' : `*${rest}`)
  }
  const walk = (value: unknown, key?: string): unknown => {
    if (typeof value === 'string' && (key === 'token' || key === 'arg0')) return token(value)
    if (Array.isArray(value)) return value.map((v) => walk(v))
    if (value && typeof value === 'object')
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v, k)]))
    return value
  }
  return store.calls.map(({ method, args }) => ({
    method,
    args: args.map((a, i) =>
      method === 'release' || method === 'releaseNow' ? walk(a, `arg${i}`) : walk(a),
    ),
    count: args.length,
  }))
}

describe('a semaphore without overload', () => {
  it('asks the store exactly what it asked before fair queues (must not change)', async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'plain', { permits: 2, waiterTtlMs: 300 })
    const a = await sem.acquire()
    const b = await sem.acquire({ weight: 1 })
    const c = sem.acquire({ timeoutMs: 5000 }) // queues, is handed b's permit
    await new Promise((r) => setTimeout(r, 150)) // one re-check (waiterTtlMs / 3)
    await b.release()
    await (await c).release()
    expect(await sem.tryAcquire({ weight: 2 })).toBeUndefined()
    await a.release()
    await (await sem.tryAcquire({ weight: 2 }))!.release()
    await sem.setPermits(3)
    await sem.resetPermits()
    await sem.stats()
    const calls = normalised(store)
    const plainRequest = (token: string, enqueue: boolean) => ({
      method: 'acquire',
      args: [{ token, ttlMs: 30000, permits: 2, enqueue, waiterTtlMs: 300 }],
      count: 1,
    })
    expect(calls.filter((c) => (c as { method: string }).method !== 'recheck')).toEqual([
      plainRequest('T1', true),
      plainRequest('T2', true),
      plainRequest('T3', true),
      { method: 'releaseNow', args: ['T2', 2, undefined], count: 3 },
      { method: 'releaseNow', args: ['T3', 2, undefined], count: 3 },
      plainRequest('T4*2', false),
      { method: 'releaseNow', args: ['T1', 2, undefined], count: 3 },
      plainRequest('T5*2', false),
      { method: 'releaseNow', args: ['T5*2', 2, undefined], count: 3 },
      { method: 'setLimit', args: [3, 2], count: 2 },
      { method: 'setLimit', args: [undefined, 2], count: 2 },
      { method: 'inspect', args: [], count: 0 },
    ])
    for (const call of store.of('recheck')) expect(call.args).toHaveLength(3)
    // No `fair` key at all in a plain request (not even undefined).
    for (const request of requests(store)) expect(Object.keys(request)).not.toContain('fair')
  })

  it('refuses priority and flow, naming the fix', async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'api', { permits: 1 })
    const fix =
      "priority needs the `overload` option on the semaphore; set it on every process that shares 'api'"
    expect(() => sem.acquire({ priority: 'critical' })).toThrow(ConfigError)
    expect(() => sem.acquire({ priority: 'critical' })).toThrow(fix)
    await expect(sem.withLease(() => 1, { priority: 2 })).rejects.toThrow(/priority needs the `overload`/)
    expect(() => sem.tryAcquire({ flow: 'acme' })).toThrow(/flow needs the `overload` option/)
    await expect(sem.flow('acme')).rejects.toThrow(/flow needs the `overload` option/)
    expect(store.of('acquire')).toHaveLength(0)
  })

  it('mutexes and read/write locks take no priority nor flow', async () => {
    const store = recorded()
    const mutex = createMutex(store, 'm')
    expect(() => mutex.acquire({ priority: 'critical' } as never)).toThrow(
      /only a semaphore made with the `overload` option takes a `priority`/,
    )
    const rw = createReadWriteLock(store, 'rw')
    expect(() => rw.read.acquire({ flow: 'acme' } as never)).toThrow(/`overload` option takes a `flow`/)
  })
})

describe('a semaphore with overload', () => {
  it('sends the fair call on every store call, and tokens that carry class, flow, weight and cap', async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'api', {
      permits: 5,
      waiterTtlMs: 300,
      overload: { flowWeights: { acme: 3 }, flowMax: { free: 2 }, maxQueued: 50 },
    })
    const a = await sem.acquire({ priority: 'critical', flow: 'acme', weight: 2 })
    const b = await sem.acquire({ flow: '  free  ' })
    const c = await sem.acquire({ priority: 1, flow: '' })
    const d = await sem.tryAcquire({ priority: 'sheddable', flow: 'other' })
    const queued = sem.acquire({ priority: 7, timeoutMs: 5000 })
    await new Promise((r) => setTimeout(r, 150)) // one re-check
    await a.release()
    await (await queued).release()
    for (const lease of [b, c, d]) await lease!.release()
    await sem.setPermits(6)
    await sem.resetPermits()
    const tokens = requests(store).map((r) => parseFairToken(r.token))
    expect(tokens).toEqual([
      expect.objectContaining({ weight: 2, priority: 6, flow: flowId('acme'), flowWeight: 3, flowMax: 0 }),
      expect.objectContaining({ weight: 1, priority: 4, flow: flowId('free'), flowWeight: 1, flowMax: 2 }),
      expect.objectContaining({ weight: 1, priority: 1, flow: '-', flowWeight: 1, flowMax: 0 }),
      expect.objectContaining({ weight: 1, priority: 2, flow: flowId('other'), flowWeight: 1, flowMax: 0 }),
      expect.objectContaining({ weight: 1, priority: 7, flow: '-', flowWeight: 1, flowMax: 0 }),
    ])
    const fair = { maxQueued: 50 }
    for (const request of requests(store)) expect(request.fair).toEqual(fair)
    for (const call of store.of('recheck')) expect(call.args[3]).toEqual(fair)
    expect(store.of('recheck').length).toBeGreaterThan(0)
    for (const call of [...store.of('release'), ...store.of('releaseNow')]) expect(call.args[3]).toEqual(fair)
    expect(store.of('release').length + store.of('releaseNow').length).toBe(5)
    expect(store.of('setLimit').map((c) => c.args)).toEqual([
      [6, 5, undefined, fair],
      [undefined, 5, undefined, fair],
    ])
  })

  it('a flow weight or cap from a function; maxQueued 0 when unset', async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'fn', {
      permits: 2,
      overload: {
        flowWeights: (flow) => (flow === 'abcde' ? 5 : 1),
        flowMax: (flow) => (flow === 'capped' ? 1 : undefined),
      },
    })
    await (await sem.acquire({ flow: 'abcde' })).release()
    await (await sem.acquire({ flow: 'capped' })).release()
    const [first, second] = requests(store)
    expect(parseFairToken(first!.token)).toMatchObject({ flowWeight: 5, flowMax: 0 })
    expect(parseFairToken(second!.token)).toMatchObject({ flowWeight: 1, flowMax: 1 })
    expect(first!.fair).toEqual({ maxQueued: 0 })
    // The function's bad answer is a ConfigError naming the option, at the call.
    const bad = createSemaphore(store, 'fn2', { permits: 2, overload: { flowWeights: () => 0 } })
    expect(() => bad.acquire({ flow: 'x' })).toThrow(/overload\.flowWeights\("x"\)/)
  })

  it('bad options and values are ConfigErrors naming the option; unknown keys are refused', async () => {
    const store = recorded()
    const make = (overload: unknown) => () => createSemaphore(store, 'bad', { permits: 4, overload } as never)
    const cases: [unknown, RegExp][] = [
      [null, /"overload": expected an options object/],
      [[], /"overload": expected an options object/],
      [{ maxQueued: 0 }, /"overload\.maxQueued": expected an integer from 1/],
      [{ maxQueued: 1.5 }, /"overload\.maxQueued"/],
      [{ flowWeights: { acme: 101 } }, /"overload\.flowWeights\.acme": expected an integer from 1 to 100/],
      [{ flowWeights: { acme: 0 } }, /"overload\.flowWeights\.acme"/],
      [{ flowWeights: 3 }, /"overload\.flowWeights": expected an object by flow name/],
      [{ flowWeights: { '  ': 2 } }, /"overload\.flowWeights": expected flow names/],
      [{ flowMax: 0 }, /"overload\.flowMax": expected an integer from 1/],
      [{ flowMax: { free: -1 } }, /"overload\.flowMax\.free"/],
      [{ flowMax: 'x' }, /"overload\.flowMax": expected a number, an object/],
      [{ maxQueue: 5 }, /Unknown option "maxQueue": the fleet-wide bound is `maxQueued`/],
      [{ flowWeight: { a: 1 } }, /Unknown option "flowWeight": did you mean "flowWeights"\?/],
      [{ flowmax: 1 }, /did you mean "flowMax"\?/],
    ]
    for (const [overload, message] of cases) {
      expect(make(overload)).toThrow(ConfigError)
      expect(make(overload)).toThrow(message)
    }
    const sem = createSemaphore(store, 'ok', { permits: 4, overload: { flowMax: { free: 2 } } })
    const calls: [unknown, RegExp][] = [
      [
        { priority: 'urgent' },
        /"priority": expected 'critical', 'standard', 'sheddable' or an integer from 0 to 7/,
      ],
      [{ priority: 8 }, /"priority"/],
      [{ priority: 2.5 }, /"priority"/],
      [{ flow: 42 }, /"flow": expected a string of at most 256 characters/],
      [{ flow: 'x'.repeat(257) }, /"flow": expected a string of at most 256/],
      [
        { flow: 'free', weight: 3 },
        /"weight": expected an integer from 1 to 2 \(overload\.flowMax of flow "free"\)/,
      ],
      [{ flows: 'a' }, /Unknown option "flows": did you mean "flow"\?/],
    ]
    for (const [options, message] of calls) {
      expect(() => sem.acquire(options as never)).toThrow(message)
      expect(() => sem.tryAcquire(options as never)).toThrow(message)
    }
    expect(store.of('acquire')).toHaveLength(0)
    // 256 characters (after trimming) is a flow name.
    await (await sem.acquire({ flow: ` ${'y'.repeat(256)} ` }))!.release()
  })

  it('needs a store that can run a fair queue, and says so at construction', () => {
    const store = recorded({ inspectFair: false })
    expect(() => createSemaphore(store, 'x', { permits: 1, overload: {} })).toThrow(
      /this store cannot run a fair queue \(its permits have no inspectFair\)/,
    )
  })

  it('a shed reply rejects with ShedError at once: nothing queued, nothing to give back', async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'shed', { permits: 1, overload: { maxQueued: 1 } })
    store.acquireReplies.push({ granted: false, shed: 'queue-full', now: Date.now() })
    const error = await sem.acquire({ priority: 'sheddable' }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ShedError)
    expect(error).toMatchObject({ code: 'ERR_TOLLGATE_SHED', reason: 'queue-full', key: 'shed' })
    store.acquireReplies.push({ granted: false, shed: 'evicted', now: Date.now() })
    await expect(sem.acquire()).rejects.toMatchObject({ reason: 'evicted' })
    expect(store.of('acquire')).toHaveLength(2)
    expect(store.of('release')).toHaveLength(0)
    expect(store.of('recheck')).toHaveLength(0)
  })

  it('a "<token> x" line settles the waiter as shed once: ShedError, no second queueing, no release', async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'line', {
      permits: 1,
      waiterTtlMs: 60_000,
      overload: { maxQueued: 5 },
    })
    const held = await sem.acquire({ priority: 'critical' })
    const waiting = sem.acquire({ priority: 'sheddable', timeoutMs: 5000 })
    const outcome = waiting.catch((e: unknown) => e)
    await eventuallyQueued(sem)
    const token = requests(store)[1]!.token
    await store.shedLine(space(store, 'line'), token)
    await store.shedLine(space(store, 'line'), token) // a second copy settles nothing
    const error = await outcome
    expect(error).toBeInstanceOf(ShedError)
    expect(error).toMatchObject({ reason: 'evicted' })
    expect(store.of('acquire')).toHaveLength(2) // never queued again
    expect(store.of('release')).toHaveLength(0)
    await held.release()
    expect(await sem.stats()).toMatchObject({ holders: 0, queued: 0 })
  })

  it('a line that arrives before its waiter registers is kept for it', async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'early', { permits: 1, waiterTtlMs: 60_000, overload: {} })
    const held = await sem.acquire()
    // A first waiter makes this process subscribe to the name.
    const first = sem.acquire({ timeoutMs: 5000 })
    await eventuallyQueued(sem)
    // The second waiter's eviction line overtakes the reply that queued it.
    store.beforeAcquire = async (request) => {
      store.beforeAcquire = undefined
      await new Promise((r) => setTimeout(r, 0))
      queueMicrotask(() => void store.shedLine(space(store, 'early'), request.token))
    }
    const started = performance.now()
    const error = await sem.acquire({ priority: 'sheddable', timeoutMs: 2000 }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ShedError)
    expect(performance.now() - started).toBeLessThan(1000) // not the timeout, nor a re-check
    await held.release()
    await (await first).release()
  })

  it("a re-check's state 'shed' settles the waiter too (pub/sub lost the line)", async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'recheck', { permits: 1, waiterTtlMs: 300, overload: {} })
    const held = await sem.acquire()
    const outcome = sem.acquire({ priority: 'sheddable', timeoutMs: 5000 }).catch((e: unknown) => e)
    await eventuallyQueued(sem)
    await store.markShed(space(store, 'recheck'), requests(store)[1]!.token)
    const error = await outcome
    expect(error).toBeInstanceOf(ShedError)
    expect(error).not.toBeInstanceOf(AcquireTimeoutError)
    expect(store.of('recheck').length).toBeGreaterThan(0)
    expect(store.of('acquire')).toHaveLength(2)
    expect(store.of('release')).toHaveLength(0)
    await held.release()
  })

  it('stats() names the classes; flow(name) asks for that flow id', async () => {
    const store = recorded()
    const sem = createSemaphore(store, 'stats', { permits: 3, overload: { maxQueued: 9 } })
    store.fairFigures = {
      classes: { 6: 2, 4: 1, 5: 3 },
      parked: 1,
      evicted: { 2: 4 },
      saturated: [2],
      mixed: true,
      flows: { [flowId('acme')]: { waiting: 2, held: 1, parked: 1 } },
    }
    expect(await sem.stats()).toEqual({
      holders: 0,
      queued: 0,
      limit: 3,
      override: undefined,
      classes: { critical: { waiting: 2 }, standard: { waiting: 1 }, p5: { waiting: 3 } },
      parked: 1,
      evicted: { sheddable: 4 },
      saturated: ['sheddable'],
      mixed: true,
    })
    expect(await sem.flow('acme')).toEqual({ waiting: 2, held: 1, parked: 1 })
    expect(await sem.flow('nobody')).toEqual({ waiting: 0, held: 0, parked: 0 })
    expect(store.of('inspectFair').map((c) => c.args)).toEqual([
      [{ maxQueued: 9 }],
      [{ maxQueued: 9 }, [flowId('acme')]],
      [{ maxQueued: 9 }, [flowId('nobody')]],
    ])
    expect(store.of('inspect')).toHaveLength(0)
  })
})

async function eventuallyQueued(sem: { stats(): Promise<{ queued: number }> }): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if ((await sem.stats()).queued > 0) return
    await new Promise((r) => setTimeout(r, 5))
  }
  throw new Error('never queued')
}
