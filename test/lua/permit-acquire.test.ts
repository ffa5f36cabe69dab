// Contract of lua/permit-acquire.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS H Q W M P F; ARGV channel, lease ttl, permits, mode (0 try | 1 queue), waiter ttl, acquisition
// id, tokens... Returns {now, per token {1, fence, expiresAt, holders} | {0, position, nextExpiry}}.
import { describe, expect, it } from 'vitest'
import { registerScripts, type ScriptClient } from '../../src/core/redis/scripts.js'
import { connectCluster } from '../helpers/redis.js'
import {
  grantLine,
  hashTags,
  PermitName,
  serverClock,
  sleep,
  type AcquireRow,
  type Granted,
  type Queued,
} from './support.js'

/** A snapshot without F and M (a resent plain grant gets a fresh fence, kept in M). */
function withoutFenceKeys(snapshot: Record<string, unknown>) {
  const { f: _, m: _m, ...rest } = snapshot
  return rest
}

describe('permit-acquire.lua', () => {
  describe('reply shape and keys', () => {
    it('G9: grants a free permit as {now, {1, fence, now + ttl, 1}} on the server clock', async () => {
      const n = new PermitName()
      const before = await serverClock()
      const [now, row] = await n.acquire('a', { ttl: 10_000 })
      const after = await serverClock()
      expect(now).toBeGreaterThanOrEqual(before.ms)
      expect(now).toBeLessThanOrEqual(after.ms)
      expect(row).toEqual([1, expect.any(Number), now + 10_000, 1])
      const fence = (row as Granted)[1]
      expect(fence).toBeGreaterThanOrEqual(before.us)

      // A plain grant of a free name is a lone holder: F alone, one SET with the lease's expiry.
      expect(await n.parts()).toEqual(['f'])
      expect(await n.redis.get(n.key.f)).toBe(`${fence} ${now + 10_000} a`)
      expect(await n.expireAt('f')).toBe(now + 10_000)
      expect(await n.holders()).toEqual({ a: now + 10_000 })
    })

    it('a grant made at once beside another holder is one ZADD: its fence is in the reply (and F), no hash field per holder', async () => {
      const n = new PermitName()
      const [, x] = await n.acquire('x', { permits: 2 })
      const [now, row] = await n.acquire('a', { ttl: 10_000, permits: 2 })
      const fence = (row as Granted)[1]
      expect(fence).toBeGreaterThan((x as Granted)[1])
      // The lone holder x moved into H (expand), F keeps the last fence alone.
      expect(await n.parts()).toEqual(['f', 'h'])
      expect(await n.zset('h')).toEqual({ x: (x as Granted)[2], a: now + 10_000 })
      expect(await n.redis.get(n.key.f)).toBe(String(fence))
    })

    it('batch: grants made at once write no hash field, however many (M stays absent)', async () => {
      const n = new PermitName()
      await n.acquire('x', { permits: 10 })
      const [, ...rows] = await n.acquire(['a', 'b', 'c', 'd'], { permits: 10 })
      expect(rows.map((row) => row[0])).toEqual([1, 1, 1, 1])
      expect(await n.parts()).toEqual(['f', 'h'])
    })

    it('G2: every key written expires, H and F no earlier than the lease', async () => {
      const n = new PermitName()
      const [now] = await n.acquire('a', { ttl: 10_000 })
      const lease = now + 10_000
      await n.expectExpiresNoEarlierThan('f', lease) // a lone holder
      await n.expectAllExpire()
      await n.acquire('b', { ttl: 20_000, permits: 2 })
      await n.expectExpiresNoEarlierThan('h', now + 20_000)
      await n.expectExpiresNoEarlierThan('f', lease)
      await n.expectAllExpire()
    })

    it('reports the live holders right after the grant', async () => {
      const n = new PermitName()
      const rows: AcquireRow[] = []
      for (const tok of ['a', 'b', 'c']) rows.push((await n.acquire(tok, { permits: 3 }))[1]!)
      expect(rows.map((row) => row[0])).toEqual([1, 1, 1])
      expect(rows.map((row) => (row as Granted)[3])).toEqual([1, 2, 3])
    })

    // Suspected script bug: `holders` is ZCARD H, and expired holders are only purged when they fill the
    // set (count + n > permits), so with room left a lease that ran out but was not purged yet is counted
    // as a live holder. The header promises "live holders of the name right after"; the memory store
    // purges first and reports the live count (G11), and admission.ts derives RateLimit-Remaining from it.
    it('G11: holders counts live holders only, not an expired lease that was not purged yet', async () => {
      const n = new PermitName()
      await n.acquire('x', { permits: 3, ttl: 100 })
      await n.acquire('y', { permits: 3, ttl: 10_000 }) // keeps H alive past x's lease
      await sleep(150)
      const [, a] = await n.acquire('a', { permits: 3 })
      const [live] = await n.inspect()
      expect(live).toBe(2)
      expect(a).toEqual([1, expect.any(Number), expect.any(Number), live])
    })

    it('G5: queues when no permit is free as {0, position, nextExpiry}; Q, W, M expire no earlier than the heartbeat', async () => {
      const n = new PermitName()
      const [, held] = await n.acquire('a', { ttl: 10_000 })
      const leaseA = (held as Granted)[2]
      const [nowB, b] = await n.acquire('b', { ttl: 10_000, waiterTtl: 2_000 })
      const [nowC, c] = await n.acquire('c', { ttl: 10_000, waiterTtl: 3_000 })
      expect(b).toEqual([0, 0, leaseA])
      expect(c).toEqual([0, 1, leaseA])

      expect(await n.parts()).toEqual(['f', 'h', 'm', 'q', 'w'])
      expect(await n.zset('q')).toEqual({ b: 1, c: 2 })
      expect(await n.zset('w')).toEqual({ b: nowB + 2_000, c: nowC + 3_000 })
      // The spec of a waiter: the lease it will be handed, min(ttl, waiter ttl).
      expect(await n.hash('m')).toEqual({
        n: '2',
        't:b': '2000',
        't:c': '3000',
      })
      for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, nowC + 3_000)
      await n.expectExpiresNoEarlierThan('h', leaseA)
      await n.expectAllExpire()
    })

    it('try mode never queues: {0, -1, nextExpiry} and no Q, W or waiter spec', async () => {
      const n = new PermitName()
      const [, held] = await n.acquire('a')
      await n.acquire('x', { mode: 0 }) // refused: the lone holder a is in H from here on
      const before = await n.snapshot()
      const [, row] = await n.acquire('b', { mode: 0 })
      expect(row).toEqual([0, -1, (held as Granted)[2]])
      expect(await n.snapshot()).toEqual(before)
      expect(await n.parts()).toEqual(['f', 'h'])
      expect(await n.holders()).toEqual({ a: (held as Granted)[2] })
    })

    it('a direct grant publishes nothing (only admissions from the queue are announced)', async () => {
      const n = new PermitName()
      const listener = await n.listen()
      try {
        await n.acquire('a', { permits: 2 })
        await n.acquire('b', { permits: 2 })
        expect(await listener.quiet()).toEqual([])
      } finally {
        await listener.close()
      }
    })

    it('the run-time override in P beats the caller’s permits', async () => {
      const n = new PermitName()
      await n.setLimit(2)
      const [, a] = await n.acquire('a', { permits: 1 })
      const [, b] = await n.acquire('b', { permits: 1 })
      const [, c] = await n.acquire('c', { permits: 5, mode: 0 })
      expect([a![0], b![0]]).toEqual([1, 1])
      expect(c).toEqual([0, -1, (a as Granted)[2]])
    })
  })

  describe('G1 safety and G5 FIFO', () => {
    it('G1: never more live holders than permits, whatever mix of single and batch calls', async () => {
      const n = new PermitName()
      let granted = 0
      for (let i = 0; i < 6; i++) {
        const [, ...rows] = await n.acquire([`x${i}`, `y${i}`, `z${i}`], {
          permits: 2,
          mode: i % 2 === 0 ? 0 : 1,
        })
        granted += rows.filter((row) => row[0] === 1).length
        expect(await n.redis.zcard(n.key.h)).toBeLessThanOrEqual(2)
      }
      expect(granted).toBe(2)
    })

    it('G5: a newcomer never overtakes a live waiter; the waiter is admitted first and told by pub/sub', async () => {
      const n = new PermitName()
      await n.acquire('x', { ttl: 100 })
      const [, y] = await n.acquire('y', { ttl: 10_000, waiterTtl: 5_000 })
      expect(y).toEqual([0, 0, expect.any(Number)])
      const listener = await n.listen()
      try {
        await sleep(150) // x's lease runs out (G2); nothing has purged it yet
        const [now, z] = await n.acquire('z', { ttl: 10_000 })
        const [line] = await listener.next(1)
        const grant = grantLine(line!)
        // y is handed min(ttl, waiter ttl) and the next fence; z waits behind it.
        expect(grant).toEqual({ token: 'y', fence: expect.any(Number), expiresAt: now + 5_000, ops: [] })
        expect(z).toEqual([0, 0, now + 5_000])
        expect(await n.zset('h')).toEqual({ y: now + 5_000 })
        expect(await n.members('q')).toEqual(['z'])
        expect((await n.hash('m'))['g:y']).toBe(String(grant.fence))
        await n.expectExpiresNoEarlierThan('h', now + 5_000)
        await n.expectExpiresNoEarlierThan('m', now + 5_000)
        await n.expectAllExpire()
      } finally {
        await listener.close()
      }
    })

    it('G5: a waiter whose heartbeat stopped never blocks the queue', async () => {
      const n = new PermitName()
      await n.acquire('x', { ttl: 10_000 })
      await n.acquire('dead', { waiterTtl: 100 })
      await sleep(150)
      const [, z] = await n.acquire('z', { waiterTtl: 5_000 })
      expect(z).toEqual([0, 0, expect.any(Number)])
      expect(await n.members('q')).toEqual(['z'])
      expect(Object.keys(await n.zset('w'))).toEqual(['z'])
      await n.expectAllExpire()
    })
  })

  describe('G7 fencing', () => {
    it('G7: fencing tokens are > 0 and strictly increase across grants, batches and idle periods', async () => {
      const n = new PermitName()
      const fences: number[] = []
      for (let round = 0; round < 15; round++) {
        const tokens = round % 3 === 0 ? [`s${round}`] : [`a${round}`, `b${round}`, `c${round}`]
        const [, ...rows] = await n.acquire(tokens, { permits: 3 })
        for (const row of rows) {
          expect(row[0]).toBe(1)
          fences.push((row as Granted)[1])
        }
        // Every holder leaves: the name goes idle and its keys (F included) may go.
        expect((await n.release(tokens, 3)).slice(1)).toEqual(tokens.map(() => 1))
      }
      expect(fences[0]).toBeGreaterThan(0)
      for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!)
    })

    it('G7: a waiter admitted later gets a larger fence than every earlier grant', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a', { ttl: 100 })
      await n.acquire('b')
      await sleep(150)
      const listener = await n.listen()
      try {
        const [, c] = await n.acquire('c', { mode: 0 })
        expect(c).toEqual([0, -1, expect.any(Number)])
        const grant = grantLine((await listener.next(1))[0]!)
        expect(grant.token).toBe('b')
        expect(grant.fence).toBeGreaterThan((a as Granted)[1])
      } finally {
        await listener.close()
      }
    })
  })

  describe('G12 exactly-once', () => {
    // A permit granted at once keeps its fence in the reply only (no hash write per grant): its resend
    // (the reply was lost, so nobody saw that fence) holds the same permit and expiry with a fresh fence,
    // which M keeps from then on, so a second resend reports the same one.
    it('G12 G7: a resent acquire holds the same permit and expiry, with a fresh, larger fence kept for it', async () => {
      const n = new PermitName()
      const [, first] = await n.acquire('a', { ttl: 10_000 })
      const [, again] = await n.acquire('a', { ttl: 10_000 })
      expect(again).toEqual([1, expect.any(Number), (first as Granted)[2], 1])
      const fence = (again as Granted)[1]
      expect(fence).toBeGreaterThan((first as Granted)[1])
      // The lone holder is in H now (the resend moved it there), with the same lease.
      expect(await n.zset('h')).toEqual({ a: (first as Granted)[2] })
      expect(await n.lone()).toBeUndefined()
      const before = withoutFenceKeys(await n.snapshot())
      expect(await n.redis.get(n.key.f)).toBe(String(fence))
      expect(await n.hash('m')).toEqual({ 'g:a': String(fence) })
      await n.expectExpiresNoEarlierThan('m', (first as Granted)[2])
      const [, third] = await n.acquire('a', { ttl: 10_000 })
      expect(third).toEqual(again)
      expect(withoutFenceKeys(await n.snapshot())).toEqual(before)
      await n.expectAllExpire()
    })

    it('G12: a resent acquire of one of several holders reports its expiry, a fresh fence, and takes no second permit', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a', { permits: 3 })
      const [, b] = await n.acquire('b', { permits: 3 })
      const before = withoutFenceKeys(await n.snapshot())
      const [, again] = await n.acquire('a', { permits: 3 })
      expect(again).toEqual([1, expect.any(Number), (a as Granted)[2], 2])
      expect((again as Granted)[1]).toBeGreaterThan((b as Granted)[1])
      expect(withoutFenceKeys(await n.snapshot())).toEqual(before)
    })

    it('G12: a resent acquire of a waiter admitted since gets the fence it was admitted with, unchanged', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a', { permits: 1 })
      const [, b] = await n.acquire('b', { permits: 1 })
      expect(b![0]).toBe(0)
      await n.release('a', 1)
      const grant = (await n.hash('m'))['g:b']
      expect(Number(grant)).toBeGreaterThan((a as Granted)[1])
      const before = await n.snapshot()
      const [, again] = await n.acquire('b', { permits: 1 })
      expect(again).toEqual([1, Number(grant), expect.any(Number), 1])
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: a resent acquire of a waiter gets its queue place back, no second ticket', async () => {
      const n = new PermitName()
      await n.acquire('a')
      await n.acquire('b')
      const [, c] = await n.acquire('c')
      const before = await n.snapshot()
      const [, again] = await n.acquire('c')
      expect(again).toEqual(c)
      expect((again as Queued)[1]).toBe(1)
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: with an acquisition id, a new id re-enters the hold and a repeated id does not', async () => {
      const n = new PermitName()
      const [, first] = await n.acquire('o', { op: 'a1', ttl: 1_000 })
      const fence = (first as Granted)[1]
      expect((await n.hash('m'))['a:o']).toBe('a1')

      const before = await n.snapshot()
      const [, resent] = await n.acquire('o', { op: 'a1', ttl: 1_000 })
      expect(resent).toEqual(first)
      expect(await n.snapshot()).toEqual(before)

      // Re-entry: same permit and fence, lease pushed out to now + ttl.
      const [now, reentry] = await n.acquire('o', { op: 'a2', ttl: 10_000 })
      expect(reentry).toEqual([1, fence, now + 10_000, 1])
      // The first acquisition in a:, each later one a member of A (one more costs O(log n)).
      expect(await n.hash('m')).toMatchObject({ 'a:o': 'a1', 'c:o': '1', 'g:o': String(fence) })
      expect(await n.zset('a')).toEqual({ [`a2 ${fence} o`]: now + 10_000 })
      expect(await n.zset('h')).toEqual({ o: now + 10_000 })
      await n.expectExpiresNoEarlierThan('h', now + 10_000)
      await n.expectExpiresNoEarlierThan('m', now + 10_000)

      const after = await n.snapshot()
      const [, resentReentry] = await n.acquire('o', { op: 'a2', ttl: 10_000 })
      expect(resentReentry).toEqual(reentry)
      expect(await n.snapshot()).toEqual(after)
    })

    it('G12: with an acquisition id, a new id joins the owner’s wait once; try mode does not join', async () => {
      const n = new PermitName()
      await n.acquire('x', { ttl: 10_000 })
      const [, w1] = await n.acquire('o', { op: 'a1', ttl: 10_000, waiterTtl: 2_000 })
      expect(w1).toEqual([0, 0, expect.any(Number)])
      expect((await n.hash('m'))['t:o']).toBe('2000 a1')

      const [now2, w2] = await n.acquire('o', { op: 'a2', ttl: 10_000, waiterTtl: 3_000 })
      expect(w2).toEqual(w1)
      expect((await n.hash('m'))['t:o']).toBe('2000 a1 a2')
      expect(await n.zset('w')).toEqual({ o: now2 + 3_000 })
      expect(await n.zset('q')).toEqual({ o: 1 })
      for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, now2 + 3_000)

      const before = await n.snapshot()
      expect((await n.acquire('o', { op: 'a2', ttl: 10_000, waiterTtl: 3_000 }))[1]).toEqual(w1)
      expect((await n.acquire('o', { op: 'a3', mode: 0 }))[1]).toEqual([0, -1, expect.any(Number)])
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: a reentrant owner admitted from the queue gets every waiting acquisition on its grant line', async () => {
      const n = new PermitName()
      await n.acquire('x', { ttl: 100 })
      await n.acquire('o', { op: 'a1', waiterTtl: 2_000 })
      await n.acquire('o', { op: 'a2', waiterTtl: 2_000 })
      await sleep(150)
      const listener = await n.listen()
      try {
        // The owner's own resend serves the queue first and finds its token holding.
        const [now, row] = await n.acquire('o', { op: 'a2', waiterTtl: 2_000 })
        const grant = grantLine((await listener.next(1))[0]!)
        expect(grant).toEqual({
          token: 'o',
          fence: expect.any(Number),
          expiresAt: now + 2_000,
          ops: ['a1', 'a2'],
        })
        expect(row).toEqual([1, grant.fence, now + 2_000, 1])
        // (A second acquisition joining the wait took no ticket of its own: n stays 1.)
        expect(await n.hash('m')).toMatchObject({
          'g:o': String(grant.fence),
          'a:o': 'a1',
          'c:o': '1',
          n: '1',
        })
        expect(await n.zset('a')).toEqual({ [`a2 ${grant.fence} o`]: now + 2_000 })
        expect((await n.hash('m'))['t:o']).toBeUndefined()
        expect(await n.parts()).toEqual(['a', 'f', 'h', 'm'])
        await n.expectAllExpire()
      } finally {
        await listener.close()
      }
    })
  })

  describe('batch form (several tokens in one call)', () => {
    it('grants in order while permits last and queues the rest in order', async () => {
      const n = new PermitName()
      const [now, a, b, c, d] = await n.acquire(['a', 'b', 'c', 'd'], {
        permits: 2,
        ttl: 10_000,
        waiterTtl: 2_000,
      })
      const exp = now + 10_000
      expect(a).toEqual([1, expect.any(Number), exp, 1])
      expect(b).toEqual([1, expect.any(Number), exp, 2])
      expect((b as Granted)[1]).toBeGreaterThan((a as Granted)[1])
      expect(c).toEqual([0, 0, exp])
      expect(d).toEqual([0, 1, exp])

      expect(await n.zset('h')).toEqual({ a: exp, b: exp })
      expect(await n.zset('q')).toEqual({ c: 1, d: 2 })
      expect(await n.zset('w')).toEqual({ c: now + 2_000, d: now + 2_000 })
      expect(await n.hash('m')).toEqual({
        n: '2',
        't:c': '2000',
        't:d': '2000',
      })
      expect(await n.redis.get(n.key.f)).toBe(String((b as Granted)[1]))
      await n.expectExpiresNoEarlierThan('h', exp)
      await n.expectExpiresNoEarlierThan('f', exp)
      // M keeps only the queue's bookkeeping here: it lives as long as the waiters do.
      for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, now + 2_000)
      await n.expectAllExpire()
    })

    it('counts holders from before the call', async () => {
      const n = new PermitName()
      await n.acquire('a', { permits: 3 })
      const [, b, c, d] = await n.acquire(['b', 'c', 'd'], { permits: 3, mode: 0 })
      expect([(b as Granted)[3], (c as Granted)[3]]).toEqual([2, 3])
      expect(d).toEqual([0, -1, expect.any(Number)])
    })

    it('try mode: the tokens that find no permit get {0, -1, nextExpiry} and nothing is queued', async () => {
      const n = new PermitName()
      const [now, a, b, c] = await n.acquire(['a', 'b', 'c'], { permits: 1, mode: 0 })
      expect(a).toEqual([1, expect.any(Number), now + 10_000, 1])
      expect(b).toEqual([0, -1, now + 10_000])
      expect(c).toEqual([0, -1, now + 10_000])
      expect(await n.parts()).toEqual(['f', 'h'])
    })

    it('G12 G7: a resent batch gets each token its own permit (fresh, larger fences) or place back', async () => {
      const n = new PermitName()
      const [, ...first] = await n.acquire(['a', 'b', 'c', 'd'], { permits: 2 })
      const before = withoutFenceKeys(await n.snapshot())
      const mBefore = await n.hash('m')
      const [, ...again] = await n.acquire(['a', 'b', 'c', 'd'], { permits: 2 })
      const [a, b] = first as [Granted, Granted]
      const [a2, b2] = again as [Granted, Granted]
      // Holders are counted right after the call: both grants now see 2.
      expect(again).toEqual([
        [1, expect.any(Number), a[2], 2],
        [1, expect.any(Number), b[2], 2],
        first[2],
        first[3],
      ])
      expect(a2[1]).toBeGreaterThan(b[1])
      expect(b2[1]).toBeGreaterThan(a2[1])
      expect(withoutFenceKeys(await n.snapshot())).toEqual(before)
      // The waiters' bookkeeping as it was, plus the fences now kept for the resent grants.
      expect(await n.hash('m')).toEqual({ ...mBefore, 'g:a': String(a2[1]), 'g:b': String(b2[1]) })
      expect(await n.redis.get(n.key.f)).toBe(String(b2[1]))
    })

    it('G12 G7: a batch mixing a resent token and fresh ones grants only the fresh ones anew, fences in order', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a', { permits: 3 })
      const [, a2, b, c] = await n.acquire(['a', 'b', 'c'], { permits: 3 })
      expect((a2 as Granted).slice(0, 3)).toEqual([1, expect.any(Number), (a as Granted)[2]])
      expect([b![0], c![0]]).toEqual([1, 1])
      const fences = [a, a2, b, c].map((row) => (row as Granted)[1])
      for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!)
      expect(await n.redis.zcard(n.key.h)).toBe(3)
    })

    it('G2: the batch drops expired holders before serving, so it may grant where the lease ran out', async () => {
      const n = new PermitName()
      await n.acquire('x', { ttl: 100 })
      await sleep(150)
      const [now, a, b] = await n.acquire(['a', 'b'], { permits: 1 })
      expect(a).toEqual([1, expect.any(Number), now + 10_000, 1])
      expect(b).toEqual([0, 0, now + 10_000])
      expect(Object.keys(await n.zset('h'))).toEqual(['a'])
      expect((await n.hash('m'))['g:x']).toBeUndefined()
    })
  })

  describe('G8 one hash tag', () => {
    it('G8: every key of the name shares one hash tag', async () => {
      const n = new PermitName(undefined, 'api/{export} x')
      await n.setLimit(2)
      await n.acquire(['a', 'b', 'c'], { permits: 2 })
      const keys = await n.parts()
      expect(keys).toEqual(['f', 'h', 'm', 'p', 'q', 'w'])
      expect(hashTags(n.keys).size).toBe(1)
    })

    it('G8: the script runs on Redis Cluster (no CROSSSLOT): all its keys map to one slot', async () => {
      const cluster = connectCluster()
      registerScripts(cluster)
      const n = new PermitName(undefined, 'orders/42')
      const call = cluster as unknown as ScriptClient
      const reply = (await call.tgPermitAcquire(
        ...n.keys,
        n.channel,
        1_000,
        1,
        1,
        1_000,
        '',
        'a',
        'b',
      )) as unknown[]
      expect(reply[1]).toEqual([1, expect.any(Number), expect.any(Number), 1])
      expect(reply[2]).toEqual([0, 0, expect.any(Number)])
      const released = (await call.tgPermitRelease(...n.keys, n.channel, 1, '', 'a', 'b')) as unknown[]
      expect(released).toEqual(['', 1, 3])
      await cluster.quit()
    })
  })
})
