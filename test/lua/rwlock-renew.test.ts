// Contract of lua/rwlock-renew.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS R X Q W M; ARGV channel, mode 'r'|'w', ttl, pairs (token, acquisition id)...
// Returns {now, expiresAt per lease}; 0 for a lease that no longer holds that mode (lost: G4).
import { describe, expect, it } from 'vitest'
import { RwName, serverClock, sleep } from './support.js'

describe('rwlock-renew.lua', () => {
  it('G9: extends a live write lease to now + ttl on the server clock: {now, expiresAt}', async () => {
    const n = new RwName()
    await n.acquire('w1', 'w', 'a', { ttl: 1_000 })
    const before = await serverClock()
    const [now, exp] = await n.renew('w', 10_000, ['w1', 'a'])
    const after = await serverClock()
    expect(now).toBeGreaterThanOrEqual(before.ms)
    expect(now).toBeLessThanOrEqual(after.ms)
    expect(exp).toBe(now! + 10_000)
    expect(await n.zset('x')).toEqual({ w1: exp })
    await n.expectExpiresNoEarlierThan('x', exp!)
    await n.expectExpiresNoEarlierThan('m', exp!)
    await n.expectAllExpire()
  })

  it('renews each reader on its own entry: another reader’s lease is untouched', async () => {
    const n = new RwName()
    await n.acquire('r1', 'r', 'a', { ttl: 1_000 })
    const [, , exp2] = await n.acquire('r2', 'r', 'a', { ttl: 1_000 })
    const [now, exp1] = await n.renew('r', 10_000, ['r1', 'a'])
    expect(exp1).toBe(now! + 10_000)
    expect(await n.zset('r')).toEqual({ r1: exp1, r2: exp2 })
    await n.expectExpiresNoEarlierThan('r', exp1!)
    await n.expectExpiresNoEarlierThan('m', exp1!)
  })

  it('never shortens a lease: a shorter ttl reports the lease as it stands', async () => {
    const n = new RwName()
    const [, , exp] = await n.acquire('r1', 'r', 'a', { ttl: 10_000 })
    const before = await n.snapshot()
    expect((await n.renew('r', 500, ['r1', 'a']))[1]).toBe(exp)
    expect(await n.snapshot()).toEqual(before)
  })

  it('G4: a lease of the other mode is not renewed (0)', async () => {
    const n = new RwName()
    await n.acquire('r1', 'r', 'a')
    const before = await n.snapshot()
    expect((await n.renew('w', 10_000, ['r1', 'a']))[1]).toBe(0)
    expect(await n.snapshot()).toEqual(before)
  })

  it('G4: a lease that ran out is lost (0) and not revived; no key is left', async () => {
    const n = new RwName()
    await n.acquire('w1', 'w', 'a', { ttl: 100 })
    await sleep(150)
    expect((await n.renew('w', 10_000, ['w1', 'a']))[1]).toBe(0)
    expect(await n.parts()).toEqual([])
  })

  it('G4: an expired reader is not revived while another reader keeps R alive', async () => {
    const n = new RwName()
    const [, , exp1] = await n.acquire('r1', 'r', 'a', { ttl: 100 })
    await n.acquire('r2', 'r', 'a', { ttl: 10_000 })
    await sleep(150)
    expect((await n.renew('r', 10_000, ['r1', 'a']))[1]).toBe(0)
    expect((await n.zset('r'))['r1']).toBe(exp1)
  })

  it('G4: renewed only through an acquisition still holding', async () => {
    const n = new RwName()
    await n.acquire('t', 'w', 'a1', { ttl: 1_000 })
    await n.acquire('t', 'w', 'a2', { ttl: 1_000 })
    expect(await n.release('t', 'w', 'a1')).toBe(2)
    const before = await n.snapshot()
    expect((await n.renew('w', 9_000, ['t', 'a1']))[1]).toBe(0)
    expect((await n.renew('w', 9_000, ['t', 'never']))[1]).toBe(0)
    expect(await n.snapshot()).toEqual(before)
    const [now, exp] = await n.renew('w', 9_000, ['t', 'a2'])
    expect(exp).toBe(now! + 9_000)
  })

  it('G4: one batch of a reentrant owner’s leases, the hold read once: each renewed only through an acquisition still holding', async () => {
    const n = new RwName()
    for (const op of ['a1', 'a2', 'a3']) await n.acquire('t', 'r', op, { ttl: 1_000 })
    await n.acquire('u', 'r', 'b1', { ttl: 1_000 })
    expect(await n.release('t', 'r', 'a1')).toBe(2)
    const [now, ...exps] = await n.renew(
      'r',
      8_000,
      ['t', 'a1'],
      ['t', 'a2'],
      ['t', 'a1'],
      ['t', 'never'],
      ['u', 'b1'],
      ['t', 'a3'],
      ['ghost', 'a2'],
    )
    const exp = now! + 8_000
    expect(exps).toEqual([0, exp, 0, 0, exp, exp, 0])
    expect(await n.zset('r')).toEqual({ t: exp, u: exp })
  })

  it('G3: a token that never held gets 0, and renewing an idle lock creates no key', async () => {
    const n = new RwName()
    expect((await n.renew('r', 10_000, ['ghost', 'a']))[1]).toBe(0)
    expect((await n.renew('w', 10_000, ['ghost', 'a']))[1]).toBe(0)
    expect(await n.parts()).toEqual([])
  })

  it('G12: a resent renewal extends to now + ttl once more, still one entry', async () => {
    const n = new RwName()
    await n.acquire('w1', 'w', 'a', { ttl: 1_000 })
    const [now1, exp1] = await n.renew('w', 5_000, ['w1', 'a'])
    const [now2, exp2] = await n.renew('w', 5_000, ['w1', 'a'])
    expect(exp1).toBe(now1! + 5_000)
    expect(exp2).toBe(Math.max(exp1!, now2! + 5_000))
    expect(await n.zset('x')).toEqual({ w1: exp2 })
  })

  // A member of A is due once its score passes; a renewal that left the scores behind made every
  // member of a live hold due one ttl later, and each later call re-scored 100 of them (issue 37).
  it('moves the renewed acquisitions’ members of A to the hold’s new expiry; others keep theirs, a released one stays out', async () => {
    const n = new RwName()
    for (const op of ['a1', 'a2', 'a3', 'a4']) await n.acquire('t', 'r', op, { ttl: 1_000 })
    expect(await n.release('t', 'r', 'a4')).toBe(2)
    const before = await n.zset('a')
    const [now, ...exps] = await n.renew('r', 8_000, ['t', 'a1'], ['t', 'a2'], ['t', 'a4'])
    const exp = now! + 8_000
    expect(exps).toEqual([exp, exp, 0])
    expect(await n.zset('a')).toEqual({ 'a2 a1 rt': exp, 'a3 a1 rt': before['a3 a1 rt'] })
    await n.expectExpiresNoEarlierThan('a', exp)
  })

  it('G2: the acquisitions of a renewed hold stay while it lives and are swept once it ran out (its owner died)', async () => {
    const n = new RwName()
    for (const op of ['a1', 'a2', 'a3']) await n.acquire('t', 'r', op, { ttl: 100 })
    const [, exp] = await n.renew('r', 600, ['t', 'a1'], ['t', 'a2'], ['t', 'a3'])
    await sleep(200) // past the first ttl, not the renewed one
    // Another reader's acquire and release: the release runs the general path, which sweeps A.
    const other = async () => {
      await n.acquire('u', 'r', 'b1')
      expect(await n.release('u', 'r', 'b1')).toBe(1)
    }
    await other()
    expect(await n.zset('a')).toEqual({ 'a2 a1 rt': exp, 'a3 a1 rt': exp })
    expect((await serverClock()).ms).toBeLessThan(exp!) // the hold still lived during the call
    while ((await serverClock()).ms <= exp!) await sleep(20)
    await other()
    expect(await n.parts()).toEqual([])
  })

  it('batch: one expiry per pair, in order, 0 for the lost ones; waiters untouched', async () => {
    const n = new RwName()
    await n.acquire('r1', 'r', 'a', { ttl: 1_000 })
    await n.acquire('r2', 'r', 'a', { ttl: 1_000 })
    await n.acquire('r3', 'r', 'a', { ttl: 1_000 })
    await n.acquire('w1', 'w', 'a', { waiterTtl: 2_000 })
    expect(await n.release('r2', 'r', 'a')).toBe(1)
    const queue = [await n.zset('q'), await n.zset('w')]
    const [now, ...exps] = await n.renew('r', 8_000, ['r1', 'a'], ['r2', 'a'], ['r3', 'a'], ['w1', 'a'])
    expect(exps).toEqual([now! + 8_000, 0, now! + 8_000, 0])
    expect(await n.zset('r')).toEqual({ r1: now! + 8_000, r3: now! + 8_000 })
    expect([await n.zset('q'), await n.zset('w')]).toEqual(queue)
    await n.expectExpiresNoEarlierThan('r', now! + 8_000)
    await n.expectExpiresNoEarlierThan('m', now! + 8_000)
    await n.expectAllExpire()
  })
})
