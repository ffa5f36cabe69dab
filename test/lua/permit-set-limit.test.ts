// Contract of lua/permit-set-limit.lua, called directly: the reply, the keys it leaves and their expiry.
// KEYS H Q W M P F; ARGV channel, new permits (0 = drop the override), the caller's own permits.
// Returns {live holders, now}.
// P is the one key that persists while idle: it is configuration, not state.
import { describe, expect, it } from 'vitest'
import { grantLine, PermitName, serverClock, sleep } from './support.js'

describe('permit-set-limit.lua', () => {
  it('G9: on an idle name: {0, now}; only P is written, and it persists (no TTL)', async () => {
    const n = new PermitName()
    const before = await serverClock()
    const [holders, now] = await n.setLimit(3)
    const after = await serverClock()
    expect(holders).toBe(0)
    expect(now).toBeGreaterThanOrEqual(before.ms)
    expect(now).toBeLessThanOrEqual(after.ms)
    expect(await n.parts()).toEqual(['p'])
    expect(await n.redis.get(n.key.p)).toBe('3')
    expect(await n.pttl('p')).toBe(-1)
  })

  it('0 drops the override; an idle name then leaves no key at all', async () => {
    const n = new PermitName()
    await n.setLimit(3)
    expect((await n.setLimit(0))[0]).toBe(0)
    expect(await n.parts()).toEqual([])
    expect((await n.setLimit(0))[0]).toBe(0)
    expect(await n.parts()).toEqual([])
  })

  it('G5: raising the limit admits queued waiters at once, in queue order, and publishes their grants', async () => {
    const n = new PermitName()
    const [nowA] = await n.acquire(['a', 'b', 'c', 'd'], { permits: 1, ttl: 10_000, waiterTtl: 2_000 })
    const listener = await n.listen()
    try {
      const [holders, now] = await n.setLimit(3)
      expect(holders).toBe(3)
      const lines = (await listener.next(1))[0]!.split('\n').map(grantLine)
      expect(lines.map((line) => line.token)).toEqual(['b', 'c'])
      for (const line of lines) expect(line.expiresAt).toBe(now + 2_000)
      expect(lines[1]!.fence).toBeGreaterThan(lines[0]!.fence)
      expect(Object.keys(await n.zset('h')).sort()).toEqual(['a', 'b', 'c'])
      expect(await n.members('q')).toEqual(['d'])
      await n.expectExpiresNoEarlierThan('h', nowA + 10_000)
      await n.expectExpiresNoEarlierThan('m', now + 2_000)
      await n.expectAllExpire(['p'])
    } finally {
      await listener.close()
    }
  })

  it('G1: lowering the limit evicts no holder and stops admissions until the holders drain below it', async () => {
    const n = new PermitName()
    await n.acquire(['a', 'b', 'c'], { permits: 3 })
    const before = await n.zset('h')
    const [holders] = await n.setLimit(1)
    expect(holders).toBe(3)
    expect(await n.zset('h')).toEqual(before)
    // Callers still say 3: the override wins.
    expect((await n.acquire('d', { permits: 3 }))[1]).toEqual([0, 0, expect.any(Number)])
    expect(await n.release('a', 3)).toEqual(['', 1])
    expect(await n.release('b', 3)).toEqual(['', 1])
    expect(await n.members('q')).toEqual(['d'])
    const [grants] = await n.release('c', 3)
    expect(grantLine(grants).token).toBe('d')
  })

  it('dropping the override lets the callers’ own permits apply again', async () => {
    const n = new PermitName()
    await n.setLimit(1)
    await n.acquire('a', { permits: 2 })
    expect((await n.acquire('b', { permits: 2, mode: 0 }))[1]).toEqual([0, -1, expect.any(Number)])
    expect(await n.setLimit(0)).toEqual([1, expect.any(Number), 1])
    expect(await n.redis.exists(n.key.p)).toBe(0)
    expect((await n.acquire('b', { permits: 2, mode: 0 }))[1]).toEqual([
      1,
      expect.any(Number),
      expect.any(Number),
      2,
    ])
  })

  it('G5: dropping an override below the caller’s permits admits the waiters they have room for', async () => {
    const n = new PermitName()
    await n.setLimit(1)
    await n.acquire(['a', 'b', 'c', 'd'], { permits: 3, waiterTtl: 2_000 })
    expect(await n.members('q')).toEqual(['b', 'c', 'd'])
    const listener = await n.listen()
    try {
      expect((await n.setLimit(0, 3))[0]).toBe(3)
      const lines = (await listener.next(1))[0]!.split('\n').map(grantLine)
      expect(lines.map((line) => line.token)).toEqual(['b', 'c'])
      expect(await n.members('q')).toEqual(['d'])
      expect(await n.redis.exists(n.key.p)).toBe(0)
    } finally {
      await listener.close()
    }
  })

  it('G2: expired holders are purged before admitting', async () => {
    const n = new PermitName()
    await n.acquire('x', { permits: 2, ttl: 100 })
    await n.acquire('y', { permits: 2, ttl: 10_000 })
    await n.acquire('b', { permits: 2 })
    await sleep(150)
    const [holders] = await n.setLimit(2)
    expect(holders).toBe(2)
    expect(Object.keys(await n.zset('h')).sort()).toEqual(['b', 'y'])
  })

  it('G12: setting the same limit twice has the effect of once (nothing more admitted or published)', async () => {
    const n = new PermitName()
    await n.acquire(['a', 'b', 'c'], { permits: 1 })
    await n.setLimit(2)
    const before = await n.snapshot()
    const listener = await n.listen()
    try {
      expect((await n.setLimit(2))[0]).toBe(2)
      expect(await n.snapshot()).toEqual(before)
      expect(await listener.quiet()).toEqual([])
    } finally {
      await listener.close()
    }
  })
})
