// Contract of lua/permit-recheck.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS H Q W M P F; ARGV channel, permits, waiter ttl, pairs (token, acquisition id)...
// Returns {now, nextExpiry, per wait {1, fence, expiresAt} | {0, position} | {-1}}.
import { describe, expect, it } from 'vitest'
import { grantLine, PermitName, serverClock, sleep, type Granted } from './support.js'

describe('permit-recheck.lua', () => {
  it('G9: a queued wait: {now, nextExpiry, {0, position}}; its heartbeat moves to now + waiter ttl', async () => {
    const n = new PermitName()
    const [, a] = await n.acquire('a', { ttl: 10_000 })
    await n.acquire('b', { waiterTtl: 1_000 })
    const before = await serverClock()
    const [now, next, row] = (await n.recheck(1, 4_000, ['b', ''])) as [number, number, unknown]
    const after = await serverClock()
    expect(now).toBeGreaterThanOrEqual(before.ms)
    expect(now).toBeLessThanOrEqual(after.ms)
    expect(next).toBe((a as Granted)[2])
    expect(row).toEqual([0, 0])
    expect(await n.zset('w')).toEqual({ b: now + 4_000 })
    for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, now + 4_000)
    await n.expectExpiresNoEarlierThan('h', (a as Granted)[2])
    await n.expectAllExpire()
  })

  // A permit granted at once keeps its fence in its reply only. A re-check that finds the token holding
  // comes from a caller that never saw that reply: it gets a fresh fence, kept from then on (found by a
  // review: the re-check fell back to the name's last fence, another holder's, or 0 once F expired).
  it('G7 G12: a re-check of a permit granted at once gets a fresh fence of its own, the same every time', async () => {
    const n = new PermitName()
    const [, a] = await n.acquire('a', { permits: 2, ttl: 60_000 })
    const [, b] = await n.acquire('b', { permits: 2, ttl: 300 })
    const [, , first] = (await n.recheck(2, 2_000, ['a', ''])) as [number, number, Granted]
    expect(first).toEqual([1, expect.any(Number), (a as Granted)[2]])
    expect(first[1]).toBeGreaterThan((b as Granted)[1])
    await sleep(400) // b's lease, and with it F's hold on the last fence, ran out
    const [, , again] = (await n.recheck(2, 2_000, ['a', ''])) as [number, number, Granted]
    expect(again).toEqual(first)
    await n.expectExpiresNoEarlierThan('m', (a as Granted)[2])
    await n.expectAllExpire()
  })

  it('never shortens a heartbeat: a shorter waiter ttl leaves W as it stands', async () => {
    const n = new PermitName()
    await n.acquire('a')
    const [nowB] = await n.acquire('b', { waiterTtl: 5_000 })
    const before = await n.snapshot()
    const [, , row] = await n.recheck(1, 500, ['b', ''])
    expect(row).toEqual([0, 0])
    expect(await n.zset('w')).toEqual({ b: nowB + 5_000 })
    expect(await n.snapshot()).toEqual(before)
  })

  it('G2: the fallback for a lost wake-up: admits the head once the lease ran out, publishes and reports the grant', async () => {
    const n = new PermitName()
    const [, x] = await n.acquire('x', { ttl: 100 })
    await n.acquire('b', { ttl: 10_000, waiterTtl: 2_000 })
    await sleep(150)
    const listener = await n.listen()
    try {
      const [now, next, row] = (await n.recheck(1, 2_000, ['b', ''])) as [number, number, Granted]
      const grant = grantLine((await listener.next(1))[0]!)
      expect(grant).toEqual({ token: 'b', fence: expect.any(Number), expiresAt: now + 2_000, ops: [] })
      expect(grant.fence).toBeGreaterThan((x as Granted)[1])
      expect(row).toEqual([1, grant.fence, now + 2_000])
      expect(next).toBe(now + 2_000)
      expect(await n.parts()).toEqual(['f', 'h', 'm'])
      await n.expectExpiresNoEarlierThan('h', now + 2_000)
      await n.expectExpiresNoEarlierThan('m', now + 2_000)
      await n.expectAllExpire()
    } finally {
      await listener.close()
    }
  })

  it('reports a grant made earlier (by a release) with its own fence and expiry', async () => {
    const n = new PermitName()
    await n.acquire('a')
    await n.acquire('b')
    const [grants] = await n.release('a')
    const grant = grantLine(grants)
    const [, , row] = await n.recheck(1, 2_000, ['b', ''])
    expect(row).toEqual([1, grant.fence, grant.expiresAt])
  })

  it('G5: a waiter whose heartbeat lapsed is unknown (-1) and purged; the one behind moves up', async () => {
    const n = new PermitName()
    await n.acquire('a')
    await n.acquire('dead', { waiterTtl: 100 })
    await n.acquire('c', { waiterTtl: 5_000 })
    await sleep(150)
    const [, , dead, c] = await n.recheck(1, 5_000, ['dead', ''], ['c', ''])
    expect(dead).toEqual([-1])
    expect(c).toEqual([0, 0])
    expect(await n.members('q')).toEqual(['c'])
    expect((await n.hash('m'))['t:dead']).toBeUndefined()
  })

  it('G2: an expired, not yet purged lease is no grant (-1) and is purged', async () => {
    const n = new PermitName()
    await n.acquire('a', { permits: 2, ttl: 100 })
    const [, b] = await n.acquire('b', { permits: 2, ttl: 10_000 })
    await sleep(150)
    const [, next, row] = await n.recheck(2, 1_000, ['a', ''])
    expect(row).toEqual([-1])
    expect(next).toBe((b as Granted)[2])
    expect(Object.keys(await n.zset('h'))).toEqual(['b'])
    expect((await n.hash('m'))['g:a']).toBeUndefined()
    expect(await n.expireAt('h')).toBe((b as Granted)[2])
  })

  it('an unknown token is -1; on an idle name the re-check leaves no key', async () => {
    const n = new PermitName()
    const [now, next, row] = (await n.recheck(1, 1_000, ['ghost', ''])) as [number, number, unknown]
    expect(now).toBeGreaterThan(0)
    expect(next).toBe(0)
    expect(row).toEqual([-1])
    expect(await n.parts()).toEqual([])
  })

  it('a name whose last lease ran out leaves no key after a re-check', async () => {
    const n = new PermitName()
    await n.acquire('a', { permits: 2, ttl: 100 })
    await n.acquire('b', { permits: 2, ttl: 150 })
    await sleep(200)
    expect((await n.recheck(2, 1_000, ['a', ''], ['b', ''])).slice(2)).toEqual([[-1], [-1]])
    expect(await n.parts()).toEqual([])
  })

  it('G12: a wait is granted only when its own acquisition holds, never through an earlier one of the owner', async () => {
    const n = new PermitName()
    const [, o] = await n.acquire('o', { op: 'a1' })
    const [, , other, own] = await n.recheck(1, 1_000, ['o', 'a2'], ['o', 'a1'])
    expect(other).toEqual([-1])
    expect(own).toEqual([1, (o as Granted)[1], (o as Granted)[2]])
  })

  it('G12: a waiting acquisition is queued only while it is on the token’s wait', async () => {
    const n = new PermitName()
    await n.acquire('x')
    await n.acquire('o', { op: 'a1' })
    const [, , other, own] = await n.recheck(1, 1_000, ['o', 'a2'], ['o', 'a1'])
    expect(other).toEqual([-1])
    expect(own).toEqual([0, 0])
  })

  it('G12: a resent re-check reports the same grant and changes nothing more', async () => {
    const n = new PermitName()
    await n.acquire('x', { ttl: 100 })
    await n.acquire('b', { waiterTtl: 2_000 })
    await sleep(150)
    const [, , first] = await n.recheck(1, 2_000, ['b', ''])
    const before = await n.snapshot()
    const [, , again] = await n.recheck(1, 2_000, ['b', ''])
    expect(again).toEqual(first)
    expect(await n.snapshot()).toEqual(before)
  })

  it('batch: one row per wait, in order; the run-time override in P beats the permits argument', async () => {
    const n = new PermitName()
    await n.acquire(['a', 'b', 'c', 'd'], { permits: 1 })
    await n.redis.set(n.key.p, '3')
    const [, , b, c, d, ghost] = await n.recheck(1, 2_000, ['b', ''], ['c', ''], ['d', ''], ['ghost', ''])
    expect(b).toEqual([1, expect.any(Number), expect.any(Number)])
    expect(c).toEqual([1, expect.any(Number), expect.any(Number)])
    expect(d).toEqual([0, 0])
    expect(ghost).toEqual([-1])
    expect(await n.redis.zcard(n.key.h)).toBe(3)
    await n.expectAllExpire(['p'])
  })
})
