// Contract of lua/rwlock-acquire.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS R X Q W M; ARGV channel, token, mode 'r'|'w', lease ttl, enqueue (0 try | 1 queue), waiter ttl,
// acquisition id. Returns {1, fence, expiresAt, now} held | {0, position, nextExpiry, now} queued
// (-1 = not queued) | {-1, 0, 0, now} upgrade refused | {-2, 0, 0, now} waits in the other mode.
import { describe, expect, it } from 'vitest'
import { registerScripts, type ScriptClient } from '../../src/core/redis/scripts.js'
import { connectCluster } from '../helpers/redis.js'
import { grantLine, hashTags, RwName, serverClock, sleep } from './support.js'

describe('rwlock-acquire.lua', () => {
  describe('reply shape and keys', () => {
    it('G9: a free lock grants a read as {1, fence, now + ttl, now} on the server clock', async () => {
      const n = new RwName()
      const before = await serverClock()
      const [code, fence, exp, now] = await n.acquire('r1', 'r', 'a1', { ttl: 10_000 })
      const after = await serverClock()
      expect(code).toBe(1)
      expect(now).toBeGreaterThanOrEqual(before.ms)
      expect(now).toBeLessThanOrEqual(after.ms)
      expect(exp).toBe(now + 10_000)
      expect(fence).toBeGreaterThanOrEqual(before.us)

      expect(await n.parts()).toEqual(['m', 'r'])
      expect(await n.zset('r')).toEqual({ r1: exp })
      // The fence, the hold's fence and first acquisition (one HSET on a lock with no M left).
      expect(await n.hash('m')).toEqual({
        f: String(fence),
        'gr:r1': String(fence),
        'ar:r1': 'a1',
      })
      await n.expectExpiresNoEarlierThan('r', exp)
      await n.expectExpiresNoEarlierThan('m', exp)
      await n.expectAllExpire()
    })

    it('G9: a free lock grants a write as {1, fence, now + ttl, now}; X and M expire no earlier than the lease', async () => {
      const n = new RwName()
      const [code, fence, exp, now] = await n.acquire('w1', 'w', 'a1', { ttl: 10_000 })
      expect([code, exp]).toEqual([1, now + 10_000])
      expect(fence).toBeGreaterThan(0)
      expect(await n.parts()).toEqual(['m', 'x'])
      expect(await n.zset('x')).toEqual({ w1: exp })
      expect(await n.hash('m')).toEqual({
        f: String(fence),
        'gw:w1': String(fence),
        'aw:w1': 'a1',
      })
      await n.expectExpiresNoEarlierThan('x', exp)
      await n.expectExpiresNoEarlierThan('m', exp)
      await n.expectAllExpire()
    })

    it('readers share the lock, each on its own entry and lease', async () => {
      const n = new RwName()
      const r1 = await n.acquire('r1', 'r', 'a', { ttl: 10_000 })
      const r2 = await n.acquire('r2', 'r', 'a', { ttl: 5_000 })
      expect([r1[0], r2[0]]).toEqual([1, 1])
      expect(await n.zset('r')).toEqual({ r1: r1[2], r2: r2[2] })
      await n.expectExpiresNoEarlierThan('r', r1[2])
      await n.expectExpiresNoEarlierThan('m', r1[2])
    })

    it('G1: a writer waits for the readers: {0, 0, nextExpiry, now}; Q, W, M expire no earlier than the heartbeat', async () => {
      const n = new RwName()
      const [, rFence, rExp] = await n.acquire('r1', 'r', 'a', { ttl: 10_000 })
      const [code, position, next, now] = await n.acquire('w1', 'w', 'b', { ttl: 10_000, waiterTtl: 2_000 })
      expect([code, position, next]).toEqual([0, 0, rExp])
      expect(await n.parts()).toEqual(['m', 'q', 'r', 'w'])
      expect(await n.zset('q')).toEqual({ w1: 1 })
      expect(await n.zset('w')).toEqual({ w1: now + 2_000 })
      // The spec: mode, the lease it will be handed (min(ttl, waiter ttl)), the waiting acquisitions.
      expect(await n.hash('m')).toEqual({
        f: String(rFence),
        'gr:r1': String(rFence),
        'ar:r1': 'a',
        n: '1',
        'q:w1': 'w:2000 b',
      })
      for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, now + 2_000)
      await n.expectExpiresNoEarlierThan('r', rExp)
      await n.expectAllExpire()
    })

    it('G1: a reader waits for the writer; try mode gets {0, -1, nextExpiry, now} and changes nothing', async () => {
      const n = new RwName()
      const [, , wExp] = await n.acquire('w1', 'w', 'a')
      const before = await n.snapshot()
      const tried = await n.acquire('r1', 'r', 'b', { mode: 0 })
      expect(tried).toEqual([0, -1, wExp, expect.any(Number)])
      expect(await n.snapshot()).toEqual(before)
      const [code, position, next] = await n.acquire('r1', 'r', 'b', { waiterTtl: 3_000, ttl: 1_000 })
      expect([code, position, next]).toEqual([0, 0, wExp])
      expect((await n.hash('m'))['q:r1']).toBe('r:1000 b')
    })

    it('G1: a second writer waits for the first', async () => {
      const n = new RwName()
      await n.acquire('w1', 'w', 'a')
      expect((await n.acquire('w2', 'w', 'b'))[0]).toBe(0)
      expect(Object.keys(await n.zset('x'))).toEqual(['w1'])
    })

    it('an upgrade (read -> write by the same token) is refused, never waited for: {-1, 0, 0, now}', async () => {
      const n = new RwName()
      await n.acquire('t', 'r', 'a1')
      const before = await n.snapshot()
      expect(await n.acquire('t', 'w', 'a2')).toEqual([-1, 0, 0, expect.any(Number)])
      expect(await n.snapshot()).toEqual(before)
    })

    it('a token waiting in one mode is refused the other: {-2, 0, 0, now}', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a')
      await n.acquire('t', 'w', 'a1')
      const before = await n.snapshot()
      expect(await n.acquire('t', 'r', 'a2')).toEqual([-2, 0, 0, expect.any(Number)])
      expect(await n.snapshot()).toEqual(before)
    })

    it('a downgrade (write -> read by the same token) is granted at once, whoever waits, with the write’s fence', async () => {
      const n = new RwName()
      const [, wFence] = await n.acquire('t', 'w', 'a1')
      await n.acquire('r2', 'r', 'b')
      const [code, fence, exp, now] = await n.acquire('t', 'r', 'a2', { ttl: 4_000 })
      expect([code, fence, exp]).toEqual([1, wFence, now + 4_000])
      expect(await n.zset('r')).toEqual({ t: exp })
      expect(await n.hash('m')).toMatchObject({ 'gr:t': String(wFence), 'ar:t': 'a2', 'aw:t': 'a1' })
      expect(await n.members('q')).toEqual(['r2'])
      await n.expectExpiresNoEarlierThan('r', exp)
      await n.expectAllExpire()
    })
  })

  describe('G6 writer preference and G5 FIFO', () => {
    it('G6: once a writer waits, a new reader queues behind it even though readers hold', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a')
      await n.acquire('w1', 'w', 'a')
      const [code, position] = await n.acquire('r2', 'r', 'a')
      expect([code, position]).toEqual([0, 1])
      expect(Object.keys(await n.zset('r'))).toEqual(['r1'])
      expect(await n.members('q')).toEqual(['w1', 'r2'])
    })

    it('G5: the head of the queue is admitted before a newcomer; a run of readers enters together up to the first writer', async () => {
      const n = new RwName()
      await n.acquire('w0', 'w', 'a', { ttl: 100 })
      await n.acquire('r1', 'r', 'o1', { waiterTtl: 2_000 })
      await n.acquire('r2', 'r', 'o2', { waiterTtl: 2_000 })
      await n.acquire('w1', 'w', 'o3', { waiterTtl: 2_000 })
      await n.acquire('r3', 'r', 'o4', { waiterTtl: 2_000 })
      const listener = await n.listen()
      try {
        await sleep(150) // w0's lease runs out (G2)
        const [code, position, , now] = await n.acquire('z', 'r', 'o5')
        const lines = (await listener.next(1))[0]!.split('\n').map(grantLine)
        expect(lines).toEqual([
          { token: 'r1', fence: expect.any(Number), expiresAt: now + 2_000, ops: ['o1'] },
          { token: 'r2', fence: expect.any(Number), expiresAt: now + 2_000, ops: ['o2'] },
        ])
        expect(lines[1]!.fence).toBeGreaterThan(lines[0]!.fence)
        expect([code, position]).toEqual([0, 2])
        expect(await n.members('q')).toEqual(['w1', 'r3', 'z'])
        expect(await n.zset('r')).toEqual({ r1: now + 2_000, r2: now + 2_000 })
        expect(await n.redis.exists(n.key.x)).toBe(0)
        await n.expectExpiresNoEarlierThan('r', now + 2_000)
        await n.expectAllExpire()
      } finally {
        await listener.close()
      }
    })

    it('G5: a waiter whose heartbeat stopped never blocks the queue', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a')
      await n.acquire('dead', 'w', 'a', { waiterTtl: 100 })
      await sleep(150)
      // The dead writer no longer holds readers back (G6 only for live writers).
      expect((await n.acquire('r2', 'r', 'a'))[0]).toBe(1)
      const [code, position] = await n.acquire('w2', 'w', 'a')
      expect([code, position]).toEqual([0, 0])
      expect(await n.members('q')).toEqual(['w2'])
      // Q and W expired as keys with the dead heartbeat, so its spec may linger in M: the token's next
      // call must find its old wait over (not refused as waiting in the other mode) and drop the spec.
      expect((await n.acquire('dead', 'r', 'b')).slice(0, 2)).toEqual([0, 1])
      expect((await n.hash('m'))['q:dead']).toBe('r:5000 b')
    })
  })

  describe('G7 fencing', () => {
    it('G7: fencing tokens are > 0 and strictly increase across both modes, admissions and idle periods', async () => {
      const n = new RwName()
      const fences: number[] = []
      for (let round = 0; round < 8; round++) {
        const w = await n.acquire(`w${round}`, 'w', 'a')
        fences.push(w[1])
        await n.acquire(`r${round}a`, 'r', 'a')
        await n.acquire(`r${round}b`, 'r', 'a')
        // The writer's release admits both readers in one call.
        expect(await n.release(`w${round}`, 'w', 'a')).toBe(1)
        for (const tok of [`r${round}a`, `r${round}b`]) {
          const [, , row] = (await n.recheck(1_000, [tok, 'a'])) as [number, number, number[]]
          expect(row[0]).toBe(1)
          fences.push(row[1]!)
        }
        await n.release(`r${round}a`, 'r', 'a')
        await n.release(`r${round}b`, 'r', 'a')
        expect(await n.parts()).toEqual([])
      }
      expect(fences[0]).toBeGreaterThan(0)
      for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!)
    })
  })

  describe('G12 exactly-once', () => {
    it('G12: a resent acquire gets its own grant back, unchanged', async () => {
      const n = new RwName()
      const first = await n.acquire('t', 'w', 'a1')
      const before = await n.snapshot()
      const again = await n.acquire('t', 'w', 'a1')
      expect(again.slice(0, 3)).toEqual(first.slice(0, 3))
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: a resent acquire of a waiter gets its queue place back, no second ticket', async () => {
      const n = new RwName()
      await n.acquire('w0', 'w', 'a')
      await n.acquire('r1', 'r', 'a')
      const first = await n.acquire('t', 'r', 'a1')
      const before = await n.snapshot()
      const again = await n.acquire('t', 'r', 'a1')
      expect(again.slice(0, 3)).toEqual(first.slice(0, 3))
      expect(again[1]).toBe(1)
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: a new acquisition id re-enters the hold (same fence, lease pushed out); a repeated one does not', async () => {
      for (const mode of ['r', 'w'] as const) {
        const n = new RwName()
        const [, fence] = await n.acquire('t', mode, 'a1', { ttl: 1_000 })
        const [code, fence2, exp, now] = await n.acquire('t', mode, 'a2', { ttl: 10_000 })
        expect([code, fence2, exp]).toEqual([1, fence, now + 10_000])
        // The first acquisition in a<mode>:, each later one a member of A (O(log n) each).
        expect(await n.hash('m')).toMatchObject({ [`a${mode}:t`]: 'a1', [`c${mode}:t`]: '1' })
        expect(Object.keys(await n.zset('a'))).toEqual([`a2 a1 ${mode}t`])
        const key = mode === 'r' ? 'r' : 'x'
        expect(await n.zset(key)).toEqual({ t: exp })
        await n.expectExpiresNoEarlierThan(key, exp)
        await n.expectExpiresNoEarlierThan('m', exp)

        const before = await n.snapshot()
        expect((await n.acquire('t', mode, 'a2', { ttl: 10_000 })).slice(0, 3)).toEqual([1, fence, exp])
        expect((await n.acquire('t', mode, 'a1', { ttl: 10_000 })).slice(0, 3)).toEqual([1, fence, exp])
        expect(await n.snapshot()).toEqual(before)
      }
    })

    it('G12: a new acquisition id joins the token’s wait once; try mode does not join', async () => {
      const n = new RwName()
      await n.acquire('r0', 'r', 'a')
      await n.acquire('t', 'w', 'a1', { waiterTtl: 2_000 })
      const [code, position, , now] = await n.acquire('t', 'w', 'a2', { waiterTtl: 3_000 })
      expect([code, position]).toEqual([0, 0])
      expect((await n.hash('m'))['q:t']).toBe('w:2000 a1 a2')
      expect(await n.zset('q')).toEqual({ t: 1 })
      expect(await n.zset('w')).toEqual({ t: now + 3_000 })
      for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, now + 3_000)

      const before = await n.snapshot()
      expect((await n.acquire('t', 'w', 'a2', { waiterTtl: 3_000 })).slice(0, 2)).toEqual([0, 0])
      expect((await n.acquire('t', 'w', 'a3', { mode: 0 })).slice(0, 2)).toEqual([0, -1])
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: a token admitted from the queue is announced with every acquisition that waited on it', async () => {
      const n = new RwName()
      await n.acquire('r0', 'r', 'a', { ttl: 100 })
      await n.acquire('t', 'w', 'a1', { waiterTtl: 2_000 })
      await n.acquire('t', 'w', 'a2', { waiterTtl: 2_000 })
      await sleep(150)
      const listener = await n.listen()
      try {
        // The owner's own resend first admits its wait, then finds its acquisition holding.
        const [code, fence, exp, now] = await n.acquire('t', 'w', 'a2')
        const grant = grantLine((await listener.next(1))[0]!)
        expect(grant).toEqual({ token: 't', fence, expiresAt: now + 2_000, ops: ['a1', 'a2'] })
        expect([code, exp]).toEqual([1, now + 2_000])
        expect(await n.hash('m')).toMatchObject({ 'gw:t': String(fence), 'aw:t': 'a1', 'cw:t': '1' })
        expect(await n.zset('a')).toEqual({ 'a2 a1 wt': now + 2_000 })
        expect((await n.hash('m'))['q:t']).toBeUndefined()
        expect(await n.parts()).toEqual(['a', 'm', 'x'])
        await n.expectAllExpire()
      } finally {
        await listener.close()
      }
    })
  })

  describe('G8 one hash tag', () => {
    it('G8: every key of the lock shares one hash tag', async () => {
      const n = new RwName(undefined, 'orders/{42} x')
      await n.acquire('r1', 'r', 'a')
      await n.acquire('w1', 'w', 'a')
      expect(await n.parts()).toEqual(['m', 'q', 'r', 'w'])
      expect(hashTags(n.keys).size).toBe(1)
    })

    it('G8: the script runs on Redis Cluster (no CROSSSLOT): all its keys map to one slot', async () => {
      const cluster = connectCluster()
      registerScripts(cluster)
      const n = new RwName(undefined, 'orders/42')
      const call = cluster as unknown as ScriptClient
      const reply = (await call.tgRwAcquire(...n.keys, n.channel, 't', 'w', 1_000, 1, 1_000, 'a')) as number[]
      expect(reply[0]).toBe(1)
      expect(await call.tgRwRelease(...n.keys, n.channel, 't', 'w', 'a')).toBe(1)
      await cluster.quit()
    })
  })
})
