// Contract of lua/permit-release.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS H Q W M P F; ARGV channel, permits, acquisition id, tokens...
// Returns {grants, per token a code}: 1 freed, 2 one acquisition dropped, 3 left the queue, 0 nothing
// to give back; grants = the message published for the permits handed on ('' for none).
import { describe, expect, it } from 'vitest'
import { grantLine, PermitName, serverClock, sleep, type Granted } from './support.js'

describe('permit-release.lua', () => {
  describe('reply shape and keys', () => {
    it('frees a held permit as {"", 1}; an idle name leaves no keys', async () => {
      const n = new PermitName()
      await n.acquire('a')
      expect(await n.release('a')).toEqual(['', 1])
      expect(await n.parts()).toEqual([])
    })

    it('frees one of several holders and pulls H and M in to the last lease still held', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a', { permits: 2, ttl: 10_000 })
      // A reentrant owner's hold keeps its fence and acquisitions in M (a plain grant writes no field).
      const [, b] = await n.acquire('b', { permits: 2, ttl: 3_000, op: 'b1' })
      const leaseB = (b as Granted)[2]
      expect(await n.release('a', 2)).toEqual(['', 1])
      expect(await n.zset('h')).toEqual({ b: leaseB })
      expect(await n.hash('m')).toEqual({ 'g:b': String((b as Granted)[1]), 'a:b': 'b1' })
      expect(await n.expireAt('h')).toBe(leaseB)
      expect(await n.expireAt('m')).toBe(leaseB)
      // F keeps the last fence at least while the lease that got it runs.
      expect(await n.redis.get(n.key.f)).toBe(String((b as Granted)[1]))
      await n.expectExpiresNoEarlierThan('f', leaseB)
      expect((a as Granted)[1]).toBeLessThan((b as Granted)[1])
      await n.expectAllExpire()
    })

    it('G5: a waiter leaves the queue with code 3; Q, W and its spec go, M is pulled in to the leases', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a', { ttl: 1_000 })
      await n.acquire('b', { waiterTtl: 5_000 })
      expect(await n.release('b')).toEqual(['', 3])
      expect(await n.parts()).toEqual(['f', 'h', 'm'])
      // (n, the last ticket, stays while the name lives: tickets keep increasing.)
      expect(await n.hash('m')).toEqual({ n: '1' })
      expect(await n.expireAt('h')).toBe((a as Granted)[2])
      expect(await n.expireAt('m')).toBe((a as Granted)[2])
    })

    it('G5: a waiter leaving the middle of the queue keeps the others in order; their keys still outlive their heartbeats', async () => {
      const n = new PermitName()
      await n.acquire('a')
      await n.acquire('b', { waiterTtl: 2_000 })
      await n.acquire('c', { waiterTtl: 2_000 })
      const [nowD] = await n.acquire('d', { waiterTtl: 2_000 })
      expect(await n.release('c')).toEqual(['', 3])
      expect(await n.members('q')).toEqual(['b', 'd'])
      expect(Object.keys(await n.zset('w')).sort()).toEqual(['b', 'd'])
      expect((await n.hash('m'))['t:c']).toBeUndefined()
      for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, nowD + 2_000)
      await n.expectAllExpire()
    })

    it('hands the freed permit to the head of the queue: the grant line is the reply and is published', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a', { ttl: 10_000 })
      await n.acquire('b', { ttl: 10_000, waiterTtl: 2_000 })
      const [nowC] = await n.acquire('c', { ttl: 10_000, waiterTtl: 3_000 })
      const listener = await n.listen()
      try {
        const before = await serverClock()
        const [grants, code] = await n.release('a')
        const after = await serverClock()
        expect(code).toBe(1)
        const grant = grantLine(grants)
        expect(grant.token).toBe('b')
        expect(grant.ops).toEqual([])
        expect(grant.fence).toBeGreaterThan((a as Granted)[1])
        // The lease handed over is min(ttl, waiter ttl), on the server clock (G9).
        expect(grant.expiresAt).toBeGreaterThanOrEqual(before.ms + 2_000)
        expect(grant.expiresAt).toBeLessThanOrEqual(after.ms + 2_000)
        expect(await listener.next(1)).toEqual([grants])

        expect(await n.zset('h')).toEqual({ b: grant.expiresAt })
        expect(await n.members('q')).toEqual(['c'])
        const meta = await n.hash('m')
        expect(meta).toMatchObject({ 'g:b': String(grant.fence), 't:c': '3000' })
        expect(meta['g:a']).toBeUndefined()
        expect(meta['t:b']).toBeUndefined()
        expect(await n.redis.get(n.key.f)).toBe(String(grant.fence))
        await n.expectExpiresNoEarlierThan('h', grant.expiresAt)
        await n.expectExpiresNoEarlierThan('f', grant.expiresAt)
        for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, nowC + 3_000)
        await n.expectAllExpire()
      } finally {
        await listener.close()
      }
    })

    it('hands several permits on at once (expired holders purged), one line per grant, in queue order', async () => {
      const n = new PermitName()
      await n.acquire('x', { permits: 2, ttl: 100 })
      await n.acquire('a', { permits: 2, ttl: 10_000 })
      await n.acquire(['b', 'c', 'd'], { permits: 2 })
      await sleep(150)
      const listener = await n.listen()
      try {
        const [grants, code] = await n.release('a', 2)
        expect(code).toBe(1)
        const lines = grants.split('\n').map(grantLine)
        expect(lines.map((line) => line.token)).toEqual(['b', 'c'])
        expect(lines[1]!.fence).toBeGreaterThan(lines[0]!.fence)
        expect(await listener.next(1)).toEqual([grants])
        expect(Object.keys(await n.zset('h')).sort()).toEqual(['b', 'c'])
        expect(await n.members('q')).toEqual(['d'])
      } finally {
        await listener.close()
      }
    })
  })

  describe('G7 fencing across idle periods', () => {
    it('G7: once idle, F goes when the clock has passed the last fence, so the next grant is still larger', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a')
      expect(await n.release('a')).toEqual(['', 1])
      expect(await n.parts()).toEqual([])
      const [, b] = await n.acquire('b')
      expect((b as Granted)[1]).toBeGreaterThan((a as Granted)[1])
    })

    it('G7: a last fence still ahead of the clock (a burst) outlives the idle name until the clock passes it', async () => {
      const n = new PermitName()
      const [, a] = await n.acquire('a') // a lone holder: F is "<fence> <expiresAt> a"
      const { us } = await serverClock()
      const ahead = us + 200_000 // as if a burst had run 200 ms ahead of the clock
      await n.redis.set(n.key.f, `${ahead} ${(a as Granted)[2]} a`, 'KEEPTTL')
      expect(await n.release('a')).toEqual(['', 1])
      expect(await n.parts()).toEqual(['f'])
      expect(await n.expireAt('f')).toBe(Math.floor(ahead / 1000) + 2)
      const [, b] = await n.acquire('b')
      expect((b as Granted)[1]).toBe(ahead + 1)
    })
  })

  describe('G2, G3', () => {
    it('G3: a release never frees another token’s permit', async () => {
      const n = new PermitName()
      await n.acquire('a')
      await n.acquire('b', { mode: 1 })
      const before = await n.snapshot()
      expect(await n.release('stranger')).toEqual(['', 0])
      expect(await n.snapshot()).toEqual(before)
    })

    it('G2: a lease that ran out is not given back (0), and leaves no key behind', async () => {
      const n = new PermitName()
      await n.acquire('a', { ttl: 100 })
      await sleep(150)
      expect(await n.release('a')).toEqual(['', 0])
      expect(await n.parts()).toEqual([])
    })

    it('G2: an expired lease is not given back while another holder keeps the name alive', async () => {
      const n = new PermitName()
      await n.acquire('a', { permits: 2, ttl: 100 })
      const [, b] = await n.acquire('b', { permits: 2, ttl: 10_000 })
      await sleep(150)
      const [grants, code] = await n.release('a', 2)
      expect([grants, code]).toEqual(['', 0])
      expect((await n.zset('h'))['b']).toBe((b as Granted)[2])
      await n.expectExpiresNoEarlierThan('h', (b as Granted)[2])
      await n.expectAllExpire()
    })

    it('G5: a waiter whose heartbeat lapsed has nothing to give back (0)', async () => {
      const n = new PermitName()
      await n.acquire('a')
      await n.acquire('b', { waiterTtl: 100 })
      await n.acquire('c', { waiterTtl: 5_000 })
      await sleep(150)
      expect(await n.release('b')).toEqual(['', 0])
      expect(await n.members('q')).toEqual(['c'])
    })
  })

  describe('G12 exactly-once', () => {
    it('G12: a resent release returns 0 and changes nothing', async () => {
      const n = new PermitName()
      await n.acquire('a', { permits: 2 })
      await n.acquire('b', { permits: 2 })
      expect(await n.release('a', 2)).toEqual(['', 1])
      const before = await n.snapshot()
      expect(await n.release('a', 2)).toEqual(['', 0])
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: a resent release after the name went idle returns 0 and creates no key', async () => {
      const n = new PermitName()
      await n.acquire('a')
      await n.release('a')
      expect(await n.release('a')).toEqual(['', 0])
      expect(await n.parts()).toEqual([])
    })

    it('G12: a resent release of a waiter that left returns 0', async () => {
      const n = new PermitName()
      await n.acquire('a')
      await n.acquire('b')
      await n.acquire('c')
      expect(await n.release('b')).toEqual(['', 3])
      const before = await n.snapshot()
      expect(await n.release('b')).toEqual(['', 0])
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: a resent release that handed a permit on does not hand on a second one', async () => {
      const n = new PermitName()
      await n.acquire('a')
      await n.acquire(['b', 'c'])
      const [grants] = await n.release('a')
      expect(grantLine(grants).token).toBe('b')
      const before = await n.snapshot()
      expect(await n.release('a')).toEqual(['', 0])
      expect(await n.snapshot()).toEqual(before)
      expect(await n.members('q')).toEqual(['c'])
    })

    it('G12: an acquisition of an earlier hold of the token (it ran out) gives back nothing of a later hold', async () => {
      const n = new PermitName()
      await n.acquire('o', { op: 'old1', ttl: 100 })
      await n.acquire('o', { op: 'old2', ttl: 100 })
      await sleep(150) // the hold ran out; nothing swept it yet
      await n.acquire('o', { op: 'new1' })
      await n.acquire('o', { op: 'new2' })
      // old2's member of A names the old hold's fence: it is not one of the new hold's.
      expect(await n.release('o', 1, 'old2')).toEqual(['', 0])
      expect(await n.release('o', 1, 'new1')).toEqual(['', 2])
      expect(Object.keys(await n.zset('h'))).toEqual(['o']) // new2 still holds
      expect(await n.release('o', 1, 'new2')).toEqual(['', 1])
    })

    it('a hold renewed through its first acquisition only keeps its other acquisitions (A lives as long as the hold)', async () => {
      const n = new PermitName()
      await n.acquire('o', { op: 'a1', ttl: 300 })
      await n.acquire('o', { op: 'a2', ttl: 300 })
      const [, extended] = await n.renew(3_000, ['o', 'a1'])
      expect(extended).toBeGreaterThan(0)
      await sleep(400) // past the first ttl: A must not have run out under the live hold
      expect((await n.renew(3_000, ['o', 'a2']))[1]).toBeGreaterThan(0)
      expect(await n.release('o', 1, 'a2')).toEqual(['', 2])
      expect(await n.release('o', 1, 'a1')).toEqual(['', 1])
    })

    it('G12: with acquisition ids, each acquisition is given back once (2), the last frees the permit (1)', async () => {
      const n = new PermitName()
      await n.acquire('o', { op: 'a1' })
      await n.acquire('o', { op: 'a2' })
      expect(await n.release('o', 1, 'a1')).toEqual(['', 2])
      // The first acquisition is marked given back; the other still holds (a member of A).
      expect(await n.hash('m')).toMatchObject({ 'a:o': '', 'c:o': '1' })
      expect(Object.keys(await n.zset('a'))).toEqual([`a2 ${(await n.hash('m'))['g:o']} o`])
      expect(Object.keys(await n.zset('h'))).toEqual(['o'])

      let before = await n.snapshot()
      expect(await n.release('o', 1, 'a1')).toEqual(['', 0])
      expect(await n.snapshot()).toEqual(before)

      expect(await n.release('o', 1, 'a2')).toEqual(['', 1])
      expect(await n.parts()).toEqual([])
      before = await n.snapshot()
      expect(await n.release('o', 1, 'a2')).toEqual(['', 0])
      expect(await n.snapshot()).toEqual(before)
    })

    it('G3: an acquisition id the owner’s hold does not carry frees nothing', async () => {
      const n = new PermitName()
      await n.acquire('o', { op: 'a1' })
      const before = await n.snapshot()
      expect(await n.release('o', 1, 'zz')).toEqual(['', 0])
      expect(await n.snapshot()).toEqual(before)
    })

    it('G12: with acquisition ids, a waiting acquisition leaves once (3) and the token keeps its place for the others', async () => {
      const n = new PermitName()
      await n.acquire('x')
      await n.acquire('o', { op: 'a1', waiterTtl: 2_000 })
      await n.acquire('o', { op: 'a2', waiterTtl: 2_000 })
      await n.acquire('p')
      expect(await n.release('o', 1, 'a1')).toEqual(['', 3])
      expect(await n.members('q')).toEqual(['o', 'p'])
      expect((await n.hash('m'))['t:o']).toBe('2000 a2')

      const before = await n.snapshot()
      expect(await n.release('o', 1, 'a1')).toEqual(['', 0])
      expect(await n.snapshot()).toEqual(before)

      expect(await n.release('o', 1, 'a2')).toEqual(['', 3])
      expect(await n.members('q')).toEqual(['p'])
      expect((await n.hash('m'))['t:o']).toBeUndefined()
      expect(await n.release('o', 1, 'a2')).toEqual(['', 0])
    })
  })

  describe('batch form (several tokens in one call)', () => {
    it('one code per token, in order: freed, freed, nothing, left the queue; idle afterwards', async () => {
      const n = new PermitName()
      await n.acquire(['a', 'b', 'w'], { permits: 2 })
      expect(await n.release(['a', 'b', 'x', 'w'], 2)).toEqual(['', 1, 1, 0, 3])
      expect(await n.parts()).toEqual([])
    })

    it('waiters that give up leave before the freed permits are handed on', async () => {
      const n = new PermitName()
      await n.acquire(['a', 'b', 'c'], { permits: 1 })
      const listener = await n.listen()
      try {
        const [grants, ...codes] = await n.release(['a', 'b'])
        expect(codes).toEqual([1, 3])
        expect(grantLine(grants).token).toBe('c')
        expect(await listener.next(1)).toEqual([grants])
        expect(Object.keys(await n.zset('h'))).toEqual(['c'])
        expect(await n.parts()).toEqual(['f', 'h', 'm'])
        await n.expectAllExpire()
      } finally {
        await listener.close()
      }
    })

    it('G12: a resent batch release returns 0 for every token and changes nothing', async () => {
      const n = new PermitName()
      await n.acquire(['a', 'b', 'c', 'd'], { permits: 2 })
      const [grants, ...codes] = await n.release(['a', 'c'], 2)
      expect(codes).toEqual([1, 3])
      expect(grantLine(grants).token).toBe('d')
      const before = await n.snapshot()
      expect(await n.release(['a', 'c'], 2)).toEqual(['', 0, 0])
      expect(await n.snapshot()).toEqual(before)
    })
  })
})
