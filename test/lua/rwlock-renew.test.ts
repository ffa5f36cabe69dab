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
  // A renewal moves a member that is behind the hold's new expiry one ttl past it, and leaves one
  // at or past it: a re-score every third renewal or so, not every one.
  it('moves a renewed acquisition’s member of A that is behind the hold’s new expiry one ttl past it, leaves one ahead; others keep theirs, a released one stays out', async () => {
    const n = new RwName()
    for (const op of ['a1', 'a2', 'a3', 'a4']) await n.acquire('t', 'r', op, { ttl: 1_000 })
    expect(await n.release('t', 'r', 'a4')).toBe(2)
    const before = await n.zset('a')
    const [now, ...exps] = await n.renew('r', 8_000, ['t', 'a1'], ['t', 'a2'], ['t', 'a4'])
    const exp = now! + 8_000
    expect(exps).toEqual([exp, exp, 0])
    const a3 = { 'a3 a1 rt': before['a3 a1 rt'] }
    expect(await n.zset('a')).toEqual({ 'a2 a1 rt': exp + 8_000, ...a3 })
    await n.expectExpiresNoEarlierThan('a', exp)
    // Ahead of the next renewal's expiry: left where it is (a re-score would move it to now2 + 24 s).
    const [now2, exp2] = await n.renew('r', 12_000, ['t', 'a2'])
    expect(exp2).toBe(now2! + 12_000)
    expect(await n.zset('a')).toEqual({ 'a2 a1 rt': exp + 8_000, ...a3 })
    // Behind it: moved one ttl past it.
    const [now3, exp3] = await n.renew('r', 20_000, ['t', 'a2'])
    expect(exp3).toBe(now3! + 20_000)
    expect(await n.zset('a')).toEqual({ 'a2 a1 rt': exp3! + 20_000, ...a3 })
    await n.expectExpiresNoEarlierThan('a', exp3!)
  })

  it('G12: a resent renewal of a reentrant owner’s lease extends the hold once more and leaves its member of A as the first left it', async () => {
    const n = new RwName()
    for (const op of ['a1', 'a2']) await n.acquire('t', 'r', op, { ttl: 1_000 })
    const [now1, exp1] = await n.renew('r', 5_000, ['t', 'a2'])
    expect(exp1).toBe(now1! + 5_000)
    const members = await n.zset('a')
    expect(members).toEqual({ 'a2 a1 rt': exp1! + 5_000 })
    const [now2, exp2] = await n.renew('r', 5_000, ['t', 'a2'])
    expect(exp2).toBe(Math.max(exp1!, now2! + 5_000))
    expect(await n.zset('r')).toEqual({ t: exp2 })
    expect(await n.zset('a')).toEqual(members)
  })

  // Once its first acquisition is released, a hold's a<mode>: field keeps its name after a space
  // (hold_id): the re-score must name the member by the hold, or ZADD XX would move nothing.
  it('re-scores the member of a hold whose first acquisition was released; resent after the last release, renews and adds nothing', async () => {
    const n = new RwName()
    for (const op of ['a1', 'a2']) await n.acquire('t', 'r', op, { ttl: 1_000 })
    expect(await n.release('t', 'r', 'a1')).toBe(2)
    const [now, exp] = await n.renew('r', 9_000, ['t', 'a2'])
    expect(exp).toBe(now! + 9_000)
    expect(await n.zset('a')).toEqual({ 'a2 a1 rt': exp! + 9_000 })
    expect(await n.release('t', 'r', 'a2')).toBe(1)
    expect((await n.renew('r', 9_000, ['t', 'a2'], ['t', 'a1'])).slice(1)).toEqual([0, 0])
    expect(await n.parts()).toEqual([])
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
    expect(await n.zset('a')).toEqual({ 'a2 a1 rt': exp! + 600, 'a3 a1 rt': exp! + 600 })
    expect((await serverClock()).ms).toBeLessThan(exp!) // the hold still lived during the call
    while ((await serverClock()).ms <= exp!) await sleep(20)
    await other()
    expect(await n.parts()).toEqual([])
  })

  // The price of re-scoring one ttl ahead: a dead owner's members outlive its hold by up to one ttl.
  it('G2: a dead reader’s hold is gone at its expiry; its members of A count for no later hold and are swept within one ttl after', async () => {
    const n = new RwName()
    const TTL = 500
    // Another reader's hold keeps A alive, so the dead owner's members must be swept, not expire with A.
    for (const op of ['k1', 'k2']) await n.acquire('k', 'r', op, { ttl: 10_000 })
    const keeper = await n.zset('a')
    for (const op of ['a1', 'a2', 'a3']) await n.acquire('t', 'r', op, { ttl: 100 })
    const [, exp] = await n.renew('r', TTL, ['t', 'a1'], ['t', 'a2'], ['t', 'a3'])
    const dead = { 'a2 a1 rt': exp! + TTL, 'a3 a1 rt': exp! + TTL }
    expect(await n.zset('a')).toEqual({ ...keeper, ...dead }) // at most one ttl past the hold's expiry
    // The owner stops renewing. Its hold counts while it lives, and not once it ran out.
    expect((await n.inspect())[0]).toBe(2)
    expect((await serverClock()).ms).toBeLessThan(exp!)
    while ((await serverClock()).ms <= exp!) await sleep(20)
    expect((await n.inspect())[0]).toBe(1)
    expect((await n.renew('r', TTL, ['t', 'a2']))[1]).toBe(0)
    // Another reader's acquire and release: the general path sweeps A, none of them due yet.
    const other = async () => {
      await n.acquire('u', 'r', 'b1')
      expect(await n.release('u', 'r', 'b1')).toBe(1)
    }
    await other()
    expect(await n.zset('a')).toEqual({ ...keeper, ...dead })
    // A later hold of the same token is named by its own first acquisition: the old members hold
    // nothing through it.
    await n.acquire('t', 'r', 'c1', { ttl: 10_000 })
    expect((await n.renew('r', 10_000, ['t', 'a2'], ['t', 'a3'])).slice(1)).toEqual([0, 0])
    expect(await n.zset('a')).toEqual({ ...keeper, ...dead }) // nothing re-scored, nothing added
    expect(await n.release('t', 'r', 'a3')).toBe(0)
    expect(await n.release('t', 'r', 'c1')).toBe(1)
    // Once the clock passed one ttl after the hold ran out, the next sweep takes them.
    while ((await serverClock()).ms <= exp! + TTL) await sleep(20)
    await other()
    expect(await n.zset('a')).toEqual(keeper)
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
