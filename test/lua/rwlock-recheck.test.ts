// Contract of lua/rwlock-recheck.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS R X Q W M; ARGV channel, waiter ttl, pairs (token, acquisition id)...
// Returns {now, nextExpiry, per wait {1, fence, expiresAt} | {0, position} | {-1}}.
import { describe, expect, it } from 'vitest'
import { grantLine, RwName, serverClock, sleep } from './support.js'

describe('rwlock-recheck.lua', () => {
  it('G9: a queued wait: {now, nextExpiry, {0, position}}; its heartbeat moves to now + waiter ttl', async () => {
    const n = new RwName()
    const [, , wExp] = await n.acquire('w0', 'w', 'a', { ttl: 10_000 })
    await n.acquire('r1', 'r', 'o1', { waiterTtl: 1_000 })
    await n.acquire('r2', 'r', 'o2', { waiterTtl: 1_000 })
    const before = await serverClock()
    const [now, next, r1, r2] = (await n.recheck(4_000, ['r1', 'o1'], ['r2', 'o2'])) as [
      number,
      number,
      ...unknown[],
    ]
    const after = await serverClock()
    expect(now).toBeGreaterThanOrEqual(before.ms)
    expect(now).toBeLessThanOrEqual(after.ms)
    expect(next).toBe(wExp)
    expect([r1, r2]).toEqual([
      [0, 0],
      [0, 1],
    ])
    expect(await n.zset('w')).toEqual({ r1: now + 4_000, r2: now + 4_000 })
    for (const part of ['q', 'w', 'm'] as const) await n.expectExpiresNoEarlierThan(part, now + 4_000)
    await n.expectExpiresNoEarlierThan('x', wExp)
    await n.expectAllExpire()
  })

  it('never shortens a heartbeat: a shorter waiter ttl leaves W and the keys’ expiry as they stand', async () => {
    const n = new RwName()
    await n.acquire('w0', 'w', 'a')
    const [, , , now] = await n.acquire('w1', 'w', 'b', { waiterTtl: 5_000 })
    const before = await n.snapshot()
    expect((await n.recheck(500, ['w1', 'b']))[2]).toEqual([0, 0])
    expect(await n.zset('w')).toEqual({ w1: now + 5_000 })
    expect(await n.snapshot()).toEqual(before)
  })

  it('G2: the fallback for a lost wake-up: admits who may enter once the lease ran out, publishes and reports it', async () => {
    const n = new RwName()
    const [, wFence] = await n.acquire('w0', 'w', 'a', { ttl: 100 })
    await n.acquire('r1', 'r', 'o1', { ttl: 10_000, waiterTtl: 2_000 })
    await sleep(150)
    const listener = await n.listen()
    try {
      const [now, next, row] = (await n.recheck(2_000, ['r1', 'o1'])) as [number, number, number[]]
      const grant = grantLine((await listener.next(1))[0]!)
      expect(grant).toEqual({ token: 'r1', fence: expect.any(Number), expiresAt: now + 2_000, ops: ['o1'] })
      expect(grant.fence).toBeGreaterThan(wFence)
      expect(row).toEqual([1, grant.fence, now + 2_000])
      expect(next).toBe(now + 2_000)
      expect(await n.parts()).toEqual(['m', 'r'])
      await n.expectExpiresNoEarlierThan('r', now + 2_000)
      await n.expectExpiresNoEarlierThan('m', now + 2_000)
      await n.expectAllExpire()
    } finally {
      await listener.close()
    }
  })

  it('reports a grant made earlier (by a release) with its own fence and expiry', async () => {
    const n = new RwName()
    await n.acquire('w0', 'w', 'a')
    await n.acquire('w1', 'w', 'b')
    const listener = await n.listen()
    try {
      await n.release('w0', 'w', 'a')
      const grant = grantLine((await listener.next(1))[0]!)
      expect((await n.recheck(1_000, ['w1', 'b']))[2]).toEqual([1, grant.fence, grant.expiresAt])
    } finally {
      await listener.close()
    }
  })

  it('a downgraded owner’s waits are reported by the mode each acquisition holds', async () => {
    const n = new RwName()
    const [, fence, wExp] = await n.acquire('t', 'w', 'a1')
    const [, , rExp] = await n.acquire('t', 'r', 'a2', { ttl: 3_000 })
    const [, , viaW, viaR] = await n.recheck(1_000, ['t', 'a1'], ['t', 'a2'])
    expect(viaW).toEqual([1, fence, wExp])
    expect(viaR).toEqual([1, fence, rExp])
  })

  it('G5: a waiter whose heartbeat lapsed is unknown (-1) and purged; the one behind moves up', async () => {
    const n = new RwName()
    await n.acquire('w0', 'w', 'a')
    await n.acquire('dead', 'w', 'a', { waiterTtl: 100 })
    await n.acquire('c', 'w', 'a', { waiterTtl: 5_000 })
    await sleep(150)
    const [, , dead, c] = await n.recheck(5_000, ['dead', 'a'], ['c', 'a'])
    expect(dead).toEqual([-1])
    expect(c).toEqual([0, 0])
    expect(await n.members('q')).toEqual(['c'])
    expect((await n.hash('m'))['q:dead']).toBeUndefined()
  })

  it('G2: an expired, not yet purged lease is no grant (-1) and is purged', async () => {
    const n = new RwName()
    await n.acquire('r1', 'r', 'a', { ttl: 100 })
    const [, , exp2] = await n.acquire('r2', 'r', 'a', { ttl: 10_000 })
    await sleep(150)
    const [, next, row] = await n.recheck(1_000, ['r1', 'a'])
    expect(row).toEqual([-1])
    expect(next).toBe(exp2)
    expect(Object.keys(await n.zset('r'))).toEqual(['r2'])
    expect((await n.hash('m'))['gr:r1']).toBeUndefined()
    expect(await n.expireAt('r')).toBe(exp2)
  })

  it('an unknown token is -1; on an idle lock the re-check leaves no key', async () => {
    const n = new RwName()
    const [now, next, row] = (await n.recheck(1_000, ['ghost', 'a'])) as [number, number, unknown]
    expect(now).toBeGreaterThan(0)
    expect(next).toBe(0)
    expect(row).toEqual([-1])
    expect(await n.parts()).toEqual([])
  })

  it('a lock whose last lease ran out leaves no key after a re-check', async () => {
    const n = new RwName()
    await n.acquire('r1', 'r', 'a', { ttl: 100 })
    await n.acquire('r2', 'r', 'a', { ttl: 150 })
    await sleep(200)
    expect((await n.recheck(1_000, ['r1', 'a'], ['r2', 'a'])).slice(2)).toEqual([[-1], [-1]])
    expect(await n.parts()).toEqual([])
  })

  it('G12: a wait is granted only when its own acquisition holds, never through an earlier one of the owner', async () => {
    const n = new RwName()
    const [, fence, exp] = await n.acquire('t', 'r', 'a1')
    const [, , other, own] = await n.recheck(1_000, ['t', 'a2'], ['t', 'a1'])
    expect(other).toEqual([-1])
    expect(own).toEqual([1, fence, exp])
  })

  it('G12: a waiting acquisition is queued only while it is on the token’s wait', async () => {
    const n = new RwName()
    await n.acquire('w0', 'w', 'a')
    await n.acquire('t', 'r', 'a1')
    const [, , other, own] = await n.recheck(1_000, ['t', 'a2'], ['t', 'a1'])
    expect(other).toEqual([-1])
    expect(own).toEqual([0, 0])
  })

  it('G12: a resent re-check reports the same grant and changes nothing more', async () => {
    const n = new RwName()
    await n.acquire('w0', 'w', 'a', { ttl: 100 })
    await n.acquire('w1', 'w', 'b', { waiterTtl: 2_000 })
    await n.acquire('w2', 'w', 'c', { waiterTtl: 2_000 })
    await sleep(150)
    const [, , first] = await n.recheck(2_000, ['w1', 'b'])
    expect((first as number[])[0]).toBe(1)
    const before = await n.snapshot()
    const [, , again] = await n.recheck(2_000, ['w1', 'b'])
    expect(again).toEqual(first)
    expect(await n.snapshot()).toEqual(before)
    expect(await n.members('q')).toEqual(['w2'])
  })
})
