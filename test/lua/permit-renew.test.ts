// Contract of lua/permit-renew.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS H Q W M P F; ARGV channel, ttl, pairs (token, acquisition id)...
// Returns {now, expiresAt per lease}; 0 for a lease that no longer holds a permit (lost: G4).
import { describe, expect, it } from 'vitest'
import { PermitName, serverClock, sleep, type Granted } from './support.js'

describe('permit-renew.lua', () => {
  it('G9: extends a live lease to now + ttl on the server clock: {now, expiresAt}', async () => {
    const n = new PermitName()
    await n.acquire('a', { ttl: 1_000 })
    const before = await serverClock()
    const [now, exp] = await n.renew(10_000, ['a', ''])
    const after = await serverClock()
    expect(now).toBeGreaterThanOrEqual(before.ms)
    expect(now).toBeLessThanOrEqual(after.ms)
    expect(exp).toBe(now! + 10_000)
    expect(await n.holders()).toEqual({ a: exp })
    expect(await n.expireAt('f')).toBe(exp) // a lone holder: F's value and expiry
    await n.acquire('b', { permits: 2, ttl: 1_000 }) // moves it into H
    const [now2, expA, expB] = await n.renew(20_000, ['a', ''], ['b', ''])
    expect([expA, expB]).toEqual([now2! + 20_000, now2! + 20_000])
    expect(await n.zset('h')).toEqual({ a: expA, b: expB })
  })

  it('G2: H and M expire no earlier than the renewed lease; every key still expires', async () => {
    const n = new PermitName()
    await n.acquire('a', { ttl: 1_000, permits: 2 })
    // A reentrant owner's hold keeps its fence and acquisitions in M, which must outlive its lease.
    await n.acquire('o', { ttl: 1_000, permits: 2, op: 'o1' })
    const [, expA, expO] = await n.renew(10_000, ['a', ''], ['o', 'o1'])
    expect(expO).toBe(expA)
    await n.expectExpiresNoEarlierThan('h', expA!)
    await n.expectExpiresNoEarlierThan('m', expA!)
    await n.expectAllExpire()
    expect(await n.parts()).toEqual(['f', 'h', 'm'])
  })

  it('G2: renewing plain grants extends H and creates no M', async () => {
    const n = new PermitName()
    await n.acquire('a', { ttl: 1_000 })
    const [, exp] = await n.renew(10_000, ['a', ''])
    await n.expectExpiresNoEarlierThan('f', exp!) // a lone holder
    await n.expectAllExpire()
    expect(await n.parts()).toEqual(['f'])
    await n.acquire('b', { ttl: 1_000, permits: 2 })
    const [, expA] = await n.renew(20_000, ['a', ''], ['b', ''])
    await n.expectExpiresNoEarlierThan('h', expA!)
    await n.expectAllExpire()
    expect(await n.parts()).toEqual(['f', 'h'])
  })

  it('never shortens a lease: a shorter ttl reports the lease as it stands', async () => {
    const n = new PermitName()
    const [, a] = await n.acquire('a', { ttl: 10_000 })
    const before = await n.snapshot()
    const [, exp] = await n.renew(500, ['a', ''])
    expect(exp).toBe((a as Granted)[2])
    expect(await n.snapshot()).toEqual(before)
  })

  it('G4: a lease that ran out is lost (0) and not revived; no key is left', async () => {
    const n = new PermitName()
    await n.acquire('a', { ttl: 100 })
    await sleep(150)
    const [, exp] = await n.renew(10_000, ['a', ''])
    expect(exp).toBe(0)
    expect(await n.parts()).toEqual([])
  })

  it('G4: an expired lease is not revived while another holder keeps H alive', async () => {
    const n = new PermitName()
    const [, a] = await n.acquire('a', { permits: 2, ttl: 100 })
    await n.acquire('b', { permits: 2, ttl: 10_000 })
    await sleep(150)
    const [, lostA] = await n.renew(10_000, ['a', ''])
    expect(lostA).toBe(0)
    expect((await n.zset('h'))['a']).toBe((a as Granted)[2])
  })

  it('G3: a token that never held gets 0, and renewing on an idle name creates no key', async () => {
    const n = new PermitName()
    expect((await n.renew(10_000, ['ghost', '']))[1]).toBe(0)
    expect(await n.parts()).toEqual([])
    await n.acquire('a')
    const before = await n.snapshot()
    expect((await n.renew(10_000, ['ghost', '']))[1]).toBe(0)
    expect(await n.snapshot()).toEqual(before)
  })

  it('G12: a resent renewal extends to the same deadline (now + ttl) once more, still one entry', async () => {
    const n = new PermitName()
    await n.acquire('a', { ttl: 1_000 })
    const [now1, exp1] = await n.renew(5_000, ['a', ''])
    const [now2, exp2] = await n.renew(5_000, ['a', ''])
    expect(exp1).toBe(now1! + 5_000)
    expect(exp2).toBe(Math.max(exp1!, now2! + 5_000))
    expect(await n.holders()).toEqual({ a: exp2 })
    expect(await n.redis.zcard(n.key.h)).toBe(0) // one entry: the lone holder in F
  })

  it('G4: a reentrant owner’s lease is renewed only through an acquisition still holding', async () => {
    const n = new PermitName()
    await n.acquire('o', { op: 'a1', ttl: 1_000 })
    await n.acquire('o', { op: 'a2', ttl: 1_000 })
    const [now, viaA1] = await n.renew(5_000, ['o', 'a1'])
    expect(viaA1).toBe(now! + 5_000)
    expect(await n.release('o', 1, 'a1')).toEqual(['', 2])
    const before = await n.snapshot()
    expect((await n.renew(9_000, ['o', 'a1']))[1]).toBe(0)
    expect((await n.renew(9_000, ['o', 'never']))[1]).toBe(0)
    expect(await n.snapshot()).toEqual(before)
    const [now2, viaA2] = await n.renew(9_000, ['o', 'a2'])
    expect(viaA2).toBe(now2! + 9_000)
  })

  it('G4: one batch of a reentrant owner’s leases, the hold read once: each renewed only through an acquisition still holding', async () => {
    const n = new PermitName()
    for (const op of ['a1', 'a2', 'a3']) await n.acquire('o', { op, ttl: 1_000 })
    await n.acquire('p', { ttl: 1_000, permits: 2 })
    expect(await n.release('o', 1, 'a1')).toEqual(['', 2])
    // The released a1 (twice, and after the hold was read through a2), a never-held id, the owner's
    // token as its own lease (no id), another holder, a token that never held.
    const [now, ...exps] = await n.renew(
      8_000,
      ['o', 'a1'],
      ['o', 'a2'],
      ['o', 'a1'],
      ['o', 'never'],
      ['p', ''],
      ['o', 'a3'],
      ['ghost', 'a2'],
    )
    const exp = now! + 8_000
    expect(exps).toEqual([0, exp, 0, 0, exp, exp, 0])
    expect(await n.zset('h')).toEqual({ o: exp, p: exp })
  })

  // A member of A is due once its score passes; a renewal that left the scores behind made every
  // member of a live hold due one ttl later, and each later call re-scored 100 of them (issue 37).
  // A renewal moves a member that is behind the hold's new expiry one ttl past it, and leaves one
  // at or past it: a re-score every third renewal or so, not every one.
  it('moves a renewed acquisition’s member of A that is behind the hold’s new expiry one ttl past it, leaves one ahead; others keep theirs, a released one stays out', async () => {
    const n = new PermitName()
    const [, first] = await n.acquire('o', { op: 'a1', ttl: 1_000 })
    const fence = (first as Granted)[1]
    for (const op of ['a2', 'a3', 'a4']) await n.acquire('o', { op, ttl: 1_000 })
    expect(await n.release('o', 1, 'a4')).toEqual(['', 2])
    const before = await n.zset('a')
    const [now, ...exps] = await n.renew(8_000, ['o', 'a1'], ['o', 'a2'], ['o', 'a4'])
    const exp = now! + 8_000
    expect(exps).toEqual([exp, exp, 0])
    const a3 = { [`a3 ${fence} o`]: before[`a3 ${fence} o`] }
    expect(await n.zset('a')).toEqual({ [`a2 ${fence} o`]: exp + 8_000, ...a3 })
    await n.expectExpiresNoEarlierThan('a', exp)
    // Ahead of the next renewal's expiry: left where it is (a re-score would move it to now2 + 24 s).
    const [now2, exp2] = await n.renew(12_000, ['o', 'a2'])
    expect(exp2).toBe(now2! + 12_000)
    expect(await n.zset('a')).toEqual({ [`a2 ${fence} o`]: exp + 8_000, ...a3 })
    // Behind it: moved one ttl past it.
    const [now3, exp3] = await n.renew(20_000, ['o', 'a2'])
    expect(exp3).toBe(now3! + 20_000)
    expect(await n.zset('a')).toEqual({ [`a2 ${fence} o`]: exp3! + 20_000, ...a3 })
    await n.expectExpiresNoEarlierThan('a', exp3!)
  })

  it('G12: a resent renewal of a reentrant owner’s lease extends the hold once more and leaves its member of A as the first left it', async () => {
    const n = new PermitName()
    const [, first] = await n.acquire('o', { op: 'a1', ttl: 1_000 })
    const fence = (first as Granted)[1]
    await n.acquire('o', { op: 'a2', ttl: 1_000 })
    const [now1, exp1] = await n.renew(5_000, ['o', 'a2'])
    expect(exp1).toBe(now1! + 5_000)
    const members = await n.zset('a')
    expect(members).toEqual({ [`a2 ${fence} o`]: exp1! + 5_000 })
    const [now2, exp2] = await n.renew(5_000, ['o', 'a2'])
    expect(exp2).toBe(Math.max(exp1!, now2! + 5_000))
    expect(await n.zset('h')).toEqual({ o: exp2 })
    expect(await n.zset('a')).toEqual(members)
  })

  it('G2: the acquisitions of a renewed hold stay while it lives and are swept once it ran out (its owner died)', async () => {
    const n = new PermitName()
    for (const op of ['a1', 'a2', 'a3']) await n.acquire('o', { op, ttl: 100, permits: 2 })
    const [, exp] = await n.renew(600, ['o', 'a1'], ['o', 'a2'], ['o', 'a3'])
    await sleep(200) // past the first ttl, not the renewed one
    // Another holder's acquire and release: the release runs the general path, which sweeps A.
    const other = async () => {
      await n.acquire('p', { permits: 2 })
      expect(await n.release('p', 2)).toEqual(['', 1])
    }
    await other()
    const members = await n.zset('a')
    expect(Object.values(members)).toEqual([exp! + 600, exp! + 600])
    expect((await serverClock()).ms).toBeLessThan(exp!) // the hold still lived during the call
    while ((await serverClock()).ms <= exp!) await sleep(20)
    await other()
    expect(await n.parts()).toEqual([])
  })

  // The price of re-scoring one ttl ahead: a dead owner's members outlive its hold by up to one ttl.
  it('G2: a dead owner’s permit is free at its hold’s expiry; its members of A count for no later hold and are swept within one ttl after', async () => {
    const n = new PermitName()
    const TTL = 500
    // Another owner's hold keeps A alive, so the dead owner's members must be swept, not expire with A.
    for (const op of ['k1', 'k2']) await n.acquire('k', { op, ttl: 10_000, permits: 2 })
    const keeper = await n.zset('a')
    const [, first] = await n.acquire('o', { op: 'a1', ttl: 100, permits: 2 })
    const fence = (first as Granted)[1]
    for (const op of ['a2', 'a3']) await n.acquire('o', { op, ttl: 100, permits: 2 })
    const [, exp] = await n.renew(TTL, ['o', 'a1'], ['o', 'a2'], ['o', 'a3'])
    const dead = { [`a2 ${fence} o`]: exp! + TTL, [`a3 ${fence} o`]: exp! + TTL }
    expect(await n.zset('a')).toEqual({ ...keeper, ...dead }) // at most one ttl past the hold's expiry
    // The owner stops renewing. While its hold lives, the name is full; once it ran out, it is not.
    const tryTake = async () => ((await n.acquire('x', { permits: 2, mode: 0 }))[1] as Granted)[0]
    expect(await tryTake()).toBe(0)
    expect((await serverClock()).ms).toBeLessThan(exp!) // refused while the hold lived
    while ((await serverClock()).ms <= exp!) await sleep(20)
    expect(await tryTake()).toBe(1)
    expect(await n.release('x', 2)).toEqual(['', 1]) // the general path: it sweeps A, none of them due yet
    expect(await n.zset('a')).toEqual({ ...keeper, ...dead })
    // A later hold of the same token has a new fence: the old members hold nothing through it.
    const [, again] = await n.acquire('o', { op: 'b1', ttl: 10_000, permits: 2 })
    expect((again as Granted)[1]).toBeGreaterThan(fence)
    expect((await n.renew(10_000, ['o', 'a2'], ['o', 'a3'])).slice(1)).toEqual([0, 0])
    expect(await n.zset('a')).toEqual({ ...keeper, ...dead }) // nothing re-scored, nothing added
    expect(await n.release('o', 2, 'a3')).toEqual(['', 0])
    expect(await n.release('o', 2, 'b1')).toEqual(['', 1])
    // Once the clock passed one ttl after the hold ran out, the next sweep takes them.
    while ((await serverClock()).ms <= exp! + TTL) await sleep(20)
    expect(await tryTake()).toBe(1)
    expect(await n.release('x', 2)).toEqual(['', 1])
    expect(await n.zset('a')).toEqual(keeper)
  })

  it('batch: one expiry per pair, in order, 0 for the lost ones', async () => {
    const n = new PermitName()
    await n.acquire(['a', 'b', 'c'], { permits: 3, ttl: 1_000 })
    await n.release('b', 3)
    const [now, a, b, c, d] = await n.renew(8_000, ['a', ''], ['b', ''], ['c', ''], ['d', ''])
    expect([a, b, c, d]).toEqual([now! + 8_000, 0, now! + 8_000, 0])
    expect(await n.zset('h')).toEqual({ a: now! + 8_000, c: now! + 8_000 })
    await n.expectExpiresNoEarlierThan('h', now! + 8_000)
    expect(await n.parts()).toEqual(['f', 'h'])
  })

  it('leaves the queue alone: renewing a waiter’s token gets 0 and changes nothing', async () => {
    const n = new PermitName()
    await n.acquire('a')
    await n.acquire('w', { waiterTtl: 2_000 })
    const before = await n.snapshot()
    expect((await n.renew(5_000, ['w', '']))[1]).toBe(0)
    expect(await n.snapshot()).toEqual(before)
  })
})
