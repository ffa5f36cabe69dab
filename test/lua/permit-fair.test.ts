// The fair queue of the permit scripts (lua/lib/fair.lua), through the Redis store's permit family with
// `fair` calls (11 KEYS): strict priority between classes, start-time fair queuing between the flows
// of a class, flow weights, work conservation, per-flow caps by parking, eviction under maxQueued with
// its shed answer exactly once, and the refund of a flow that gave up. Real Redis: the standalone
// server of the global setup, and the Cluster harness (one bucket, one slot).
import { Cluster, type Redis } from 'ioredis'
import { afterAll, describe, expect, it } from 'vitest'
import { fairToken, flowId } from '../../src/core/fair.js'
import { keySpace, type KeySpace } from '../../src/core/keys.js'
import type { AcquireReply, FairCall, PermitFamily } from '../../src/core/protocol/store.js'
import { parseMessage } from '../../src/core/protocol/store.js'
import { fairKeys } from '../../src/core/redis/call-keys.js'
import { scriptArg, scriptSource } from '../../src/core/redis/scripts.js'
import { createRedisStore } from '../../src/index.js'
import { NODE_REDIS, nodeRedisOf } from '../helpers/node-redis.js'
import { connectCluster, connectStandalone, uniquePrefix } from '../helpers/redis.js'

interface Tok {
  w?: number
  p?: number
  flow?: string
  fw?: number
  max?: number
}

function tok(id: string, o: Tok = {}): string {
  return fairToken(id, o.w ?? 1, {
    priority: o.p ?? 4,
    flow: o.flow === undefined ? '-' : flowId(o.flow),
    flowWeight: o.fw ?? 1,
    flowMax: o.max ?? 0,
  })
}

class Bucket {
  readonly space: KeySpace
  constructor(
    readonly redis: Redis | Cluster,
    readonly permits: PermitFamily,
    readonly limit: number,
    readonly fair: FairCall = { maxQueued: 0 },
  ) {
    this.space = keySpace(uniquePrefix().slice(0, -1), 'sem', 'fair')
  }
  acquire(token: string, enqueue = true, ttlMs = 10_000, waiterTtlMs = 5_000): Promise<AcquireReply> {
    return this.permits.acquire(this.space, {
      token,
      ttlMs,
      permits: this.limit,
      enqueue,
      waiterTtlMs,
      fair: this.fair,
    })
  }
  release(token: string) {
    return this.permits.release(this.space, token, this.limit, undefined, this.fair)
  }
  recheck(...tokens: string[]) {
    return this.permits.recheck(
      this.space,
      this.limit,
      5_000,
      tokens.map((token) => ({ token })),
      this.fair,
    )
  }
  /** Q in order. */
  queue(): Promise<string[]> {
    return this.redis.zrange(this.space.key('q'), 0, -1)
  }
  async holders(): Promise<string[]> {
    const h = await this.redis.zrange(this.space.key('h'), 0, -1)
    const lone = (await this.redis.get(this.space.key('f')))?.split(' ')[2]
    return [...h.filter((m) => !m.includes('#')), ...(lone ? [lone] : [])].sort()
  }
}

const stores: { close(): Promise<void> }[] = []
afterAll(async () => {
  await Promise.all(stores.map((s) => s.close()))
})

/** The store of a bucket: on `redis`, or under TOLLGATE_TEST_CLIENT=node-redis on a node-redis client
 * of the same kind (`redis` then only looks at the keys). */
function bucket(redis: Redis | Cluster, limit: number, fair?: FairCall): Bucket {
  const own = NODE_REDIS ? nodeRedisOf(redis instanceof Cluster ? 'cluster' : 'standalone') : redis
  const store = createRedisStore(own)
  stores.push(store)
  return new Bucket(redis, store.permits, limit, fair)
}

const granted = (r: AcquireReply) => r.granted
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const position = (r: AcquireReply) => ('position' in r ? r.position : undefined)

describe.each([
  ['standalone', () => connectStandalone()],
  ['cluster', () => connectCluster()],
] as const)('fair queue on %s', (_topology, connect) => {
  it('strict priority: a critical request queued last is served before every sheddable one', async () => {
    const b = bucket(connect(), 1)
    expect(granted(await b.acquire(tok('h0')))).toBe(true)
    for (const id of ['s1', 's2', 's3'])
      expect(position(await b.acquire(tok(id, { p: 2 })))).toBeGreaterThanOrEqual(0)
    const critical = await b.acquire(tok('c1', { p: 6 }))
    expect(position(critical)).toBe(0)
    expect(await b.queue()).toEqual([
      tok('c1', { p: 6 }),
      tok('s1', { p: 2 }),
      tok('s2', { p: 2 }),
      tok('s3', { p: 2 }),
    ])
    await b.release(tok('h0'))
    expect(await b.holders()).toEqual([tok('c1', { p: 6 })])
  })
})

describe('fair queue (standalone)', () => {
  it('a quiet flow waits behind at most one request per flow while a noisy flow has 300 queued', async () => {
    const b = bucket(connectStandalone(), 1)
    await b.acquire(tok('h0'))
    await Promise.all(Array.from({ length: 300 }, (_, i) => b.acquire(tok(`noisy${i}`, { flow: 'noisy' }))))
    for (let q = 0; q < 9; q++) {
      const reply = await b.acquire(tok(`quiet${q}`, { flow: `quiet${q}` }))
      // Flows active ahead of it: the noisy one, and the quiet ones before it.
      expect(position(reply)).toBeLessThanOrEqual(q + 1)
    }
    // Served in that order: the nine quiet requests are among the first ten grants.
    const order = (await b.queue()).slice(0, 10)
    expect(order.filter((t) => t.startsWith('quiet'))).toHaveLength(9)
  })

  it('flow weights: a flow of weight 2 gets twice the grants of a flow of weight 1 while both are backlogged', async () => {
    const b = bucket(connectStandalone(), 1)
    await b.acquire(tok('h0'))
    const heavy = Array.from({ length: 40 }, (_, i) => tok(`a${i}`, { flow: 'a', fw: 2 }))
    const light = Array.from({ length: 40 }, (_, i) => tok(`b${i}`, { flow: 'b', fw: 1 }))
    await Promise.all([...heavy, ...light].map((t) => b.acquire(t)))
    const first30 = (await b.queue()).slice(0, 30)
    expect(first30.filter((t) => t.startsWith('a')).length).toBe(20)
    // FIFO inside a flow.
    expect(first30.filter((t) => t.startsWith('a'))).toEqual(heavy.slice(0, 20))
  })

  it('start tags less than one step (32 units) apart are served in arrival order, never by token bytes', async () => {
    const b = bucket(connectStandalone(), 1)
    const t = (id: string, flow: string) => tok(id, { flow })
    await b.acquire(t('h0', 'z'))
    await b.acquire(t('b1', 'b')) // ticket 1, S 0
    await b.acquire(t('c1', 'c')) // ticket 2, S 0
    await b.release(t('h0', 'z')) // b1 in
    await b.acquire(t('a1', 'a')) // ticket 3, S = V (it carries b1's ticket part): F(a) = 4097
    await b.release(t('b1', 'b')) // c1 in
    await b.release(t('c1', 'c')) // a1 in
    // S 4097 (ticket 4) and S 4096 (ticket 5): as S + ticket mod 32 both scored 4101, and the tokens'
    // bytes put x-b2 first; in one step, arrival decides.
    await b.acquire(t('y-a2', 'a'))
    await b.acquire(t('x-b2', 'b'))
    expect(await b.queue()).toEqual([t('y-a2', 'a'), t('x-b2', 'b')])
  })

  it('work-conserving: a lone flow takes every permit', async () => {
    const b = bucket(connectStandalone(), 5)
    const replies = await Promise.all(
      Array.from({ length: 8 }, (_, i) => b.acquire(tok(`x${i}`, { flow: 'alone' }))),
    )
    expect(replies.filter(granted)).toHaveLength(5)
    await b.release(tok('x0', { flow: 'alone' }))
    expect(await b.holders()).toHaveLength(5)
  })

  it('a capped flow holds at most its cap, parks the rest, and unparks one per release; other flows go on', async () => {
    const b = bucket(connectStandalone(), 5)
    const capped = Array.from({ length: 4 }, (_, i) => tok(`c${i}`, { flow: 'free', max: 2 }))
    const replies = []
    for (const t of capped) replies.push(await b.acquire(t))
    expect(replies.map(granted)).toEqual([true, true, false, false])
    // Another flow is not held up: it takes a free permit at once (and the call parks c2, c3).
    expect(granted(await b.acquire(tok('o1', { flow: 'other' })))).toBe(true)
    expect(await b.queue()).toEqual([])
    expect(await b.redis.zcard(b.space.key('k'))).toBe(2)
    const stats = await b.permits.inspectFair!(b.space, b.fair, [flowId('free')])
    expect(stats.parked).toBe(2)
    expect(stats.flows[flowId('free')]).toEqual({ waiting: 2, held: 2, parked: 2 })
    // A parked waiter is still waiting for a re-check.
    const [state] = (await b.recheck(capped[2]!)).states
    expect(state).toEqual({ state: 'queued', position: 0 })
    // One release of the flow: its oldest parked waiter gets the permit, the other stays parked.
    await b.release(capped[0]!)
    expect(await b.holders()).toEqual([capped[1], capped[2], tok('o1', { flow: 'other' })].sort())
    expect(await b.redis.zcard(b.space.key('k'))).toBe(1)
    await b.release(capped[1]!)
    expect(await b.holders()).toEqual([capped[2], capped[3], tok('o1', { flow: 'other' })].sort())
  })

  it("a capped flow's count goes down on release when nobody of it is parked", async () => {
    const b = bucket(connectStandalone(), 5)
    const [c0, c1, c2] = ['c0', 'c1', 'c2'].map((id) => tok(id, { flow: 'free', max: 1 }))
    expect(granted(await b.acquire(tok('o', { flow: 'other' })))).toBe(true) // keeps the bucket busy
    expect(granted(await b.acquire(c0!))).toBe(true)
    await b.release(c0!)
    expect(granted(await b.acquire(c1!))).toBe(true)
    expect(granted(await b.acquire(c2!))).toBe(false)
  })

  it('a resent acquire of a waiter its own call parks answers its place, and does not queue it twice', async () => {
    const b = bucket(connectStandalone(), 5)
    const [c0, c1] = ['c0', 'c1'].map((id) => tok(id, { flow: 'free', max: 1 }))
    expect(granted(await b.acquire(c0!))).toBe(true)
    expect(position(await b.acquire(c1!))).toBe(0) // queued: parked by the next call that admits
    expect(position(await b.acquire(c1!))).toBe(0)
    expect(await b.queue()).toEqual([])
    expect(await b.redis.zcard(b.space.key('k'))).toBe(1)
  })

  it("a capped holder whose lease ran out gives its flow's place to a parked waiter", async () => {
    for (const keepBusy of [true, false]) {
      // Busy: another holder keeps H, and the purge of the expired one unparks. Idle: H itself ran
      // out, every count is stale, and the re-check unparks.
      const b = bucket(connectStandalone(), 5)
      if (keepBusy) await b.acquire(tok('o', { flow: 'other' }))
      const [c0, c1] = ['c0', 'c1'].map((id) => tok(id, { flow: 'free', max: 1 }))
      expect(granted(await b.acquire(c0!, true, 200))).toBe(true)
      await b.acquire(c1!)
      await b.acquire(c1!) // parks it
      expect(await b.redis.zcard(b.space.key('k'))).toBe(1)
      await sleep(300)
      const [state] = (await b.recheck(c1!)).states
      expect(state).toMatchObject({ state: 'granted' })
      expect(await b.redis.zcard(b.space.key('k'))).toBe(0)
    }
  })

  it('a dead waiter leaves its counts, and its flow gets the refund', async () => {
    const b = bucket(connectStandalone(), 1)
    await b.acquire(tok('h0'))
    const dead = Array.from({ length: 5 }, (_, i) => tok(`d${i}`, { flow: 'd' }))
    for (const t of dead) await b.acquire(t, true, 10_000, 200)
    await b.acquire(tok('live', { flow: 'l' }))
    await sleep(300)
    await b.recheck(tok('live', { flow: 'l' }))
    const stats = await b.permits.inspectFair!(b.space, b.fair, [flowId('d'), flowId('l')])
    expect(stats.classes).toEqual({ 4: 1 })
    expect(stats.flows[flowId('d')]).toEqual({ waiting: 0, held: 0, parked: 0 })
    expect(await b.redis.zscore(b.space.key('t'), `4:${flowId('d')}`)).toBeNull()
  })

  it('a plain call never grants a disciplined waiter (it stops at it; the fair calls admit it)', async () => {
    const b = bucket(connectStandalone(), 1)
    await b.acquire(tok('h0'))
    await b.acquire(tok('w1', { flow: 'x' }))
    // A process without `overload` releases the holder: no grant, the waiter stays queued.
    await b.permits.release(b.space, tok('h0'), 1)
    expect(await b.holders()).toEqual([])
    const [state] = (await b.recheck(tok('w1', { flow: 'x' }))).states
    expect(state).toMatchObject({ state: 'granted' })
  })

  it('a waiter evicted by a later token of its own call answers shed and leaves no heartbeat, spec, count or tag', async () => {
    const b = bucket(connectStandalone(), 1, { maxQueued: 2 })
    await b.acquire(tok('h0'))
    const n1 = tok('n1')
    const s1 = tok('s1', { p: 2, flow: 'b' })
    const c1 = tok('c1', { p: 6 })
    await b.acquire(n1)
    // This version sends a fair queue's acquires one call each (script-calls.ts); an older replica of a
    // rolling deploy merges a turn's: s1 and c1 in one call. s1 joins (2 waiters), then c1 finds Q
    // full and evicts it.
    const merged = (await (b.redis as Redis).eval(
      scriptSource('tgPermitAcquire'),
      11,
      ...fairKeys(b.space),
      b.space.channel,
      10_000,
      b.limit,
      1,
      5_000,
      '',
      b.fair.maxQueued,
      s1,
      c1,
      scriptArg('tgPermitAcquire'),
    )) as unknown[]
    expect(merged[1]).toEqual([0, -2, expect.any(Number)])
    expect((merged[2] as number[])[1]).toBe(0)
    expect(await b.queue()).toEqual([c1, n1])
    expect(await b.redis.zscore(b.space.key('w'), s1)).toBeNull()
    expect(await b.redis.hget(b.space.key('m'), `t:${s1}`)).toBeNull()
    expect(await b.redis.zscore(b.space.key('t'), `2:${flowId('b')}`)).toBeNull()
    const stats = await b.permits.inspectFair!(b.space, b.fair, [flowId('b')])
    expect(stats.queued).toBe(2)
    expect(stats.flows[flowId('b')]).toEqual({ waiting: 0, held: 0, parked: 0 })
  })

  it('eviction: a critical arrival sheds the newest sheddable once; its resend and re-check answer shed; no grant names it', async () => {
    const b = bucket(connectStandalone(), 1, { maxQueued: 2 })
    const sub = b.redis.duplicate()
    const messages: string[] = []
    sub.on('message', (_c: string, m: string) => messages.push(m))
    await sub.subscribe(b.space.channel)
    try {
      await b.acquire(tok('h0'))
      const s1 = tok('s1', { p: 2 })
      const s2 = tok('s2', { p: 2 })
      await b.acquire(s1)
      await b.acquire(s2)
      const c1 = tok('c1', { p: 6 })
      expect(position(await b.acquire(c1))).toBe(0)
      expect(await b.queue()).toEqual([c1, s1])
      // The victim: resend and re-check answer shed, and it does not queue again.
      expect(await b.acquire(s2)).toEqual({ granted: false, shed: 'evicted', now: expect.any(Number) })
      expect((await b.recheck(s2)).states).toEqual([{ state: 'shed' }])
      expect(await b.queue()).toEqual([c1, s1])
      // A resend of the critical's call evicts nobody else.
      expect(position(await b.acquire(c1))).toBe(0)
      expect(await b.queue()).toEqual([c1, s1])
      // Full of its class or higher: a sheddable arrival is refused, and so is a third critical
      // once the second evicted s1.
      expect(await b.acquire(tok('s3', { p: 2 }))).toMatchObject({ shed: 'queue-full' })
      expect(position(await b.acquire(tok('c2', { p: 6 })))).toBe(1)
      expect(await b.acquire(tok('c3', { p: 6 }))).toMatchObject({ shed: 'queue-full' })
      // Twenty hand-overs: no grant names a shed token.
      let holder = tok('h0')
      for (let i = 0; i < 20; i++) {
        await b.release(holder)
        const [next] = await b.holders()
        if (!next) break
        holder = next
        if (i < 18) await b.acquire(tok(`f${i}`, { p: 4 }))
      }
      await sleep(50)
      const { grants, shed } = messages
        .map(parseMessage)
        .reduce((all, m) => ({ grants: [...all.grants, ...m.grants], shed: [...all.shed, ...m.shed] }), {
          grants: [] as { token: string }[],
          shed: [] as string[],
        })
      expect(shed.sort()).toEqual([s1, s2].sort())
      expect(grants.map((g) => g.token)).not.toContain(s1)
      expect(grants.map((g) => g.token)).not.toContain(s2)
      const stats = await b.permits.inspectFair!(b.space, b.fair)
      expect(stats.evicted).toEqual({ 2: 2 })
    } finally {
      sub.disconnect()
    }
  })

  it('a full queue keeps who would be served first: a quiet flow evicts the noisy tail of its class; the noisy flow is refused', async () => {
    const b = bucket(connectStandalone(), 1, { maxQueued: 3 })
    await b.acquire(tok('h0', { flow: 'noisy' }))
    const noisy = ['n1', 'n2', 'n3'].map((id) => tok(id, { flow: 'noisy' }))
    for (const t of noisy) await b.acquire(t)
    // (Before: only a strictly lower class was evicted, so a flow filling the queue kept every other
    // flow of its class out: "queue-full".)
    // The quiet flow starts at the class clock, as the noisy flow's first waiter did: behind it only.
    const quiet = tok('q1', { flow: 'quiet' })
    expect(position(await b.acquire(quiet))).toBe(1)
    expect(await b.queue()).toEqual([noisy[0], quiet, noisy[1]])
    expect((await b.recheck(noisy[2]!)).states).toEqual([{ state: 'shed' }])
    // The noisy flow's own arrival would be served after its tail: refused, nobody evicted.
    expect(await b.acquire(tok('n4', { flow: 'noisy' }))).toMatchObject({ shed: 'queue-full' })
    expect(await b.queue()).toEqual([noisy[0], quiet, noisy[1]])
  })

  it('refund: a flow whose waiters all gave up starts again at the class clock, not behind its old backlog', async () => {
    const b = bucket(connectStandalone(), 1)
    await b.acquire(tok('h0'))
    const flood = Array.from({ length: 50 }, (_, i) => tok(`a${i}`, { flow: 'a' }))
    await Promise.all(flood.map((t) => b.acquire(t)))
    await b.acquire(tok('b0', { flow: 'b' }))
    await Promise.all(flood.map((t) => b.release(t)))
    expect(await b.redis.zscore(b.space.key('t'), `4:${flowId('a')}`)).toBeNull()
    // a's next request is as early as b's second one would be: second in the queue, not 51st.
    await b.acquire(tok('b1', { flow: 'b' }))
    expect(position(await b.acquire(tok('a50', { flow: 'a' })))).toBe(1)
  })
})
