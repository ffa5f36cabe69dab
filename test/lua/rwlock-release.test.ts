// Contract of lua/rwlock-release.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS R X Q W M; ARGV channel, token, mode 'r'|'w', acquisition id.
// Returns 1 the hold of that mode was freed, 2 only this acquisition was dropped, 3 the acquisition
// was waiting and left the queue, 0 nothing to give back (never another's hold, nor the other mode's).
import { describe, expect, it } from 'vitest'
import { grantLine, RwName, serverClock, sleep } from './support.js'

describe('rwlock-release.lua', () => {
  describe('reply shape and keys', () => {
    it('frees a read hold (1); an idle lock leaves no keys', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a')
      expect(await n.release('r1', 'r', 'a')).toBe(1)
      expect(await n.parts()).toEqual([])
    })

    it('frees a write hold (1); an idle lock leaves no keys', async () => {
      const n = new RwName()
      await n.acquire('w1', 'w', 'a')
      expect(await n.release('w1', 'w', 'a')).toBe(1)
      expect(await n.parts()).toEqual([])
    })

    it('frees one reader and pulls R and M in to the last lease still held', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a', { ttl: 10_000 })
      const [, f2, exp2] = await n.acquire('r2', 'r', 'a', { ttl: 3_000 })
      expect(await n.release('r1', 'r', 'a')).toBe(1)
      expect(await n.zset('r')).toEqual({ r2: exp2 })
      expect(await n.hash('m')).toEqual({ f: String(f2), 'gr:r2': String(f2), 'ar:r2': 'a' })
      expect(await n.expireAt('r')).toBe(exp2)
      expect(await n.expireAt('m')).toBe(exp2)
      await n.expectAllExpire()
    })

    it('G5: a waiter leaves the queue (3); Q and W go, M is pulled in to the leases', async () => {
      const n = new RwName()
      const [, , exp] = await n.acquire('r1', 'r', 'a', { ttl: 1_000 })
      await n.acquire('w1', 'w', 'b', { waiterTtl: 5_000 })
      expect(await n.release('w1', 'w', 'b')).toBe(3)
      expect(await n.parts()).toEqual(['m', 'r'])
      expect((await n.hash('m'))['q:w1']).toBeUndefined()
      expect(await n.expireAt('r')).toBe(exp)
      expect(await n.expireAt('m')).toBe(exp)
    })

    it('G5: a waiter leaving the middle of the queue keeps the others in order; keys outlive their heartbeats', async () => {
      const n = new RwName()
      await n.acquire('w0', 'w', 'a')
      await n.acquire('r1', 'r', 'a', { waiterTtl: 2_000 })
      await n.acquire('w1', 'w', 'a', { waiterTtl: 2_000 })
      const [, , , now] = await n.acquire('r2', 'r', 'a', { waiterTtl: 2_000 })
      expect(await n.release('w1', 'w', 'a')).toBe(3)
      expect(await n.members('q')).toEqual(['r1', 'r2'])
      for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, now + 2_000)
      await n.expectAllExpire()
    })
  })

  describe('handing the lock on', () => {
    it('G6: a writer’s release admits the run of readers at the head, up to the next writer, and publishes it', async () => {
      const n = new RwName()
      const [, wFence] = await n.acquire('w0', 'w', 'a')
      await n.acquire('r1', 'r', 'o1', { ttl: 10_000, waiterTtl: 2_000 })
      await n.acquire('r2', 'r', 'o2', { ttl: 10_000, waiterTtl: 2_000 })
      const [, , , nowW] = await n.acquire('w1', 'w', 'o3', { waiterTtl: 2_000 })
      await n.acquire('r3', 'r', 'o4', { waiterTtl: 2_000 })
      const listener = await n.listen()
      try {
        const before = await serverClock()
        expect(await n.release('w0', 'w', 'a')).toBe(1)
        const after = await serverClock()
        const lines = (await listener.next(1))[0]!.split('\n').map(grantLine)
        expect(lines.map((line) => [line.token, line.ops])).toEqual([
          ['r1', ['o1']],
          ['r2', ['o2']],
        ])
        for (const line of lines) {
          expect(line.fence).toBeGreaterThan(wFence)
          // min(ttl, waiter ttl), on the server clock (G9).
          expect(line.expiresAt).toBeGreaterThanOrEqual(before.ms + 2_000)
          expect(line.expiresAt).toBeLessThanOrEqual(after.ms + 2_000)
        }
        expect(lines[1]!.fence).toBeGreaterThan(lines[0]!.fence)
        expect(await n.zset('r')).toEqual({ r1: lines[0]!.expiresAt, r2: lines[1]!.expiresAt })
        expect(await n.members('q')).toEqual(['w1', 'r3'])
        expect(await n.redis.exists(n.key.x)).toBe(0)
        const meta = await n.hash('m')
        expect(meta).toMatchObject({ 'gr:r1': String(lines[0]!.fence), 'ar:r1': 'o1', 'q:w1': 'w:2000 o3' })
        expect(meta['gw:w0']).toBeUndefined()
        expect(meta['q:r1']).toBeUndefined()
        await n.expectExpiresNoEarlierThan('r', lines[1]!.expiresAt)
        for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, nowW + 2_000)
        await n.expectAllExpire()
      } finally {
        await listener.close()
      }
    })

    it('G1: the last reader’s release admits the queued writer with a larger fence', async () => {
      const n = new RwName()
      const [, f1] = await n.acquire('r1', 'r', 'a')
      const [, f2] = await n.acquire('r2', 'r', 'a')
      await n.acquire('w1', 'w', 'o', { waiterTtl: 2_000 })
      const listener = await n.listen()
      try {
        expect(await n.release('r1', 'r', 'a')).toBe(1)
        expect(await n.redis.exists(n.key.x)).toBe(0)
        expect(await n.release('r2', 'r', 'a')).toBe(1)
        const grant = grantLine((await listener.next(1))[0]!)
        expect(grant.token).toBe('w1')
        expect(grant.ops).toEqual(['o'])
        expect(grant.fence).toBeGreaterThan(Math.max(f1, f2))
        expect(listener.messages).toHaveLength(1)
        expect(await n.zset('x')).toEqual({ w1: grant.expiresAt })
        expect(await n.parts()).toEqual(['m', 'x'])
        await n.expectExpiresNoEarlierThan('x', grant.expiresAt)
        await n.expectExpiresNoEarlierThan('m', grant.expiresAt)
      } finally {
        await listener.close()
      }
    })
  })

  describe('G2, G3', () => {
    it('G3: a release never frees another token’s hold', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a')
      await n.acquire('w1', 'w', 'a')
      const before = await n.snapshot()
      expect(await n.release('stranger', 'r', 'a')).toBe(0)
      expect(await n.release('stranger', 'w', 'a')).toBe(0)
      expect(await n.snapshot()).toEqual(before)
    })

    it('G3: a release of one mode never frees the token’s hold of the other', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a')
      const before = await n.snapshot()
      expect(await n.release('r1', 'w', 'a')).toBe(0)
      expect(await n.snapshot()).toEqual(before)
    })

    it('G3: after a downgrade, releasing the read leaves the write held (and the other way round)', async () => {
      const n = new RwName()
      const [, fence] = await n.acquire('t', 'w', 'a1')
      await n.acquire('t', 'r', 'a2')
      expect(await n.release('t', 'r', 'a2')).toBe(1)
      expect(Object.keys(await n.zset('x'))).toEqual(['t'])
      expect(await n.redis.exists(n.key.r)).toBe(0)
      expect((await n.hash('m'))['gw:t']).toBe(String(fence))
      await n.acquire('t', 'r', 'a3')
      expect(await n.release('t', 'w', 'a1')).toBe(1)
      expect(Object.keys(await n.zset('r'))).toEqual(['t'])
      expect(await n.redis.exists(n.key.x)).toBe(0)
    })

    it('G3: an acquisition id the hold does not carry frees nothing', async () => {
      const n = new RwName()
      await n.acquire('t', 'w', 'a1')
      const before = await n.snapshot()
      expect(await n.release('t', 'w', 'zz')).toBe(0)
      expect(await n.snapshot()).toEqual(before)
    })

    it('G2: a lease that ran out is not given back (0), and no key is left', async () => {
      const n = new RwName()
      await n.acquire('w1', 'w', 'a', { ttl: 100 })
      await sleep(150)
      expect(await n.release('w1', 'w', 'a')).toBe(0)
      expect(await n.parts()).toEqual([])
    })

    it('G2: an expired reader is not given back while another reader keeps the lock', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a', { ttl: 100 })
      const [, , exp2] = await n.acquire('r2', 'r', 'a', { ttl: 10_000 })
      await sleep(150)
      expect(await n.release('r1', 'r', 'a')).toBe(0)
      expect(await n.zset('r')).toEqual({ r2: exp2 })
      expect(await n.expireAt('r')).toBe(exp2)
    })
  })

  it('G2 G3: a count an earlier hold of the token left in M (its lease ran out unpurged) does not keep the next hold after its last release', async () => {
    const n = new RwName()
    // As if a hold of r1 with more acquisitions had run out while M lived on (a dead waiter's
    // heartbeat kept it): R is gone, the count is still there.
    await n.redis.hset(n.key.m, 'cr:r1', '5', 'f', '1')
    await n.redis.pexpire(n.key.m, 60_000)
    expect((await n.acquire('r1', 'r', 'a'))[0]).toBe(1)
    expect(await n.release('r1', 'r', 'a')).toBe(1) // freed, not "2: others still hold"
    expect(await n.parts()).toEqual([])
  })

  describe('G7 fencing across idle periods', () => {
    it('G7: a last fence still ahead of the clock (a run of readers) outlives the idle lock until the clock passes it', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a')
      const { us } = await serverClock()
      const ahead = us + 200_000
      await n.redis.hset(n.key.m, 'f', String(ahead))
      expect(await n.release('r1', 'r', 'a')).toBe(1)
      expect(await n.parts()).toEqual(['m'])
      expect(await n.hash('m')).toEqual({ f: String(ahead) })
      const at = await n.expireAt('m')
      expect(at).toBeGreaterThanOrEqual(Math.floor(ahead / 1000))
      expect(at).toBeLessThanOrEqual(Math.floor(ahead / 1000) + 3)
      const [, fence] = await n.acquire('r2', 'r', 'a')
      expect(fence).toBe(ahead + 1)
    })
  })

  it('G1 G3 G4: an acquisition of a read hold that ran out counts for nothing in a later read hold inside the same write hold (same fence)', async () => {
    const n = new RwName()
    await n.acquire('t', 'w', 'w1', { ttl: 60_000 })
    await n.acquire('t', 'w', 'w2', { ttl: 60_000 }) // keeps A alive
    await n.acquire('t', 'r', 'r1', { ttl: 300 }) // a downgrade: the write's fence
    await n.acquire('t', 'r', 'r2', { ttl: 300 })
    await sleep(400) // the read hold ran out
    await n.acquire('t', 'r', 'r3', { ttl: 60_000 }) // a new read hold, the same fence
    await n.acquire('t', 'r', 'r4', { ttl: 60_000 })
    expect((await n.renew('r', 60_000, ['t', 'r2']))[1]).toBe(0) // lost, never renewed (G4)
    expect(await n.release('t', 'r', 'r2')).toBe(0) // gives back nothing (G3)
    expect(await n.release('t', 'r', 'r3')).toBe(2) // r4 still reads ...
    await n.release('t', 'w', 'w2')
    await n.release('t', 'w', 'w1')
    expect((await n.acquire('u', 'w', 'u1', { mode: 0 }))[0]).toBe(0) // ... so no writer (G1)
    expect(await n.release('t', 'r', 'r4')).toBe(1)
  })

  describe('G12 exactly-once', () => {
    it('G12: a resent release returns 0 and changes nothing', async () => {
      const n = new RwName()
      await n.acquire('r1', 'r', 'a')
      await n.acquire('r2', 'r', 'a')
      expect(await n.release('r1', 'r', 'a')).toBe(1)
      const before = await n.snapshot()
      expect(await n.release('r1', 'r', 'a')).toBe(0)
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: a resent release after the lock went idle returns 0 and creates no key', async () => {
      const n = new RwName()
      await n.acquire('w1', 'w', 'a')
      await n.release('w1', 'w', 'a')
      expect(await n.release('w1', 'w', 'a')).toBe(0)
      expect(await n.parts()).toEqual([])
    })

    it('G12: a resent release that handed the lock on does not hand it on again', async () => {
      const n = new RwName()
      await n.acquire('w0', 'w', 'a')
      await n.acquire('w1', 'w', 'a')
      await n.acquire('w2', 'w', 'a')
      expect(await n.release('w0', 'w', 'a')).toBe(1)
      const before = await n.snapshot()
      expect(await n.release('w0', 'w', 'a')).toBe(0)
      expect(await n.snapshot()).toEqual(before)
      expect(Object.keys(await n.zset('x'))).toEqual(['w1'])
      expect(await n.members('q')).toEqual(['w2'])
    })

    it('G12: each acquisition of a hold is given back once (2), the last frees it (1)', async () => {
      for (const mode of ['r', 'w'] as const) {
        const n = new RwName()
        await n.acquire('t', mode, 'a1')
        await n.acquire('t', mode, 'a2')
        expect(await n.release('t', mode, 'a1')).toBe(2)
        // The first acquisition is marked given back; the other still holds (a member of A).
        expect(await n.hash('m')).toMatchObject({ [`a${mode}:t`]: ' a1', [`c${mode}:t`]: '1' })
        expect(Object.keys(await n.zset('a'))).toEqual([`a2 a1 ${mode}t`])
        const before = await n.snapshot()
        expect(await n.release('t', mode, 'a1')).toBe(0)
        expect(await n.snapshot()).toEqual(before)
        expect(await n.release('t', mode, 'a2')).toBe(1)
        expect(await n.parts()).toEqual([])
        expect(await n.release('t', mode, 'a2')).toBe(0)
      }
    })

    it('G12: a waiting acquisition leaves once (3); the token keeps its place for the others', async () => {
      const n = new RwName()
      await n.acquire('w0', 'w', 'a')
      await n.acquire('t', 'r', 'a1', { waiterTtl: 2_000 })
      await n.acquire('t', 'r', 'a2', { waiterTtl: 2_000 })
      await n.acquire('p', 'r', 'a')
      expect(await n.release('t', 'r', 'a1')).toBe(3)
      expect(await n.members('q')).toEqual(['t', 'p'])
      expect((await n.hash('m'))['q:t']).toBe('r:2000 a2')
      const before = await n.snapshot()
      expect(await n.release('t', 'r', 'a1')).toBe(0)
      expect(await n.release('t', 'w', 'a2')).toBe(0) // wrong mode: not this wait
      expect(await n.snapshot()).toEqual(before)
      expect(await n.release('t', 'r', 'a2')).toBe(3)
      expect(await n.members('q')).toEqual(['p'])
      expect((await n.hash('m'))['q:t']).toBeUndefined()
      expect(await n.release('t', 'r', 'a2')).toBe(0)
    })
  })
})
