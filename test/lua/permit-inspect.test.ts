// Contract of lua/permit-inspect.lua, called directly: a read-only look at one name.
// KEYS H Q W M P F; ARGV channel. Returns {holders, queued, permits override (0 = none), now}.
import { describe, expect, it } from 'vitest'
import { PermitName, serverClock, sleep } from './support.js'

describe('permit-inspect.lua', () => {
  it('G9: an idle name: {0, 0, 0, now} on the server clock, and no key is created', async () => {
    const n = new PermitName()
    const before = await serverClock()
    const [holders, queued, override, now] = await n.inspect()
    const after = await serverClock()
    expect([holders, queued, override]).toEqual([0, 0, 0])
    expect(now).toBeGreaterThanOrEqual(before.ms)
    expect(now).toBeLessThanOrEqual(after.ms)
    expect(await n.parts()).toEqual([])
  })

  it('counts live holders and waiters, and reports the override', async () => {
    const n = new PermitName()
    await n.acquire(['a', 'b', 'c', 'd', 'e'], { permits: 2 })
    expect((await n.inspect()).slice(0, 3)).toEqual([2, 3, 0])
    await n.redis.set(n.key.p, '7')
    expect((await n.inspect()).slice(0, 3)).toEqual([2, 3, 7])
  })

  it('G2: expired holders and waiters whose heartbeat lapsed are not counted', async () => {
    const n = new PermitName()
    await n.acquire('a', { permits: 2, ttl: 100 })
    await n.acquire('b', { permits: 2, ttl: 10_000 })
    await n.acquire('c', { permits: 2, waiterTtl: 100 })
    await n.acquire('d', { permits: 2, waiterTtl: 5_000 })
    await sleep(150)
    expect((await n.inspect()).slice(0, 3)).toEqual([1, 1, 0])
  })

  it('is read-only: keys, values and expiries unchanged, nothing published, nothing purged', async () => {
    const n = new PermitName()
    await n.acquire('a', { permits: 2, ttl: 100 })
    await n.acquire(['b', 'c', 'd'], { permits: 2 })
    await sleep(150)
    const before = await n.snapshot()
    const listener = await n.listen()
    try {
      await n.inspect()
      expect(await n.snapshot()).toEqual(before)
      expect(await listener.quiet()).toEqual([])
    } finally {
      await listener.close()
    }
  })
})
