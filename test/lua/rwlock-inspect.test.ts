// Contract of lua/rwlock-inspect.lua, called directly: a read-only look at one lock.
// KEYS R X Q W M; ARGV channel. Returns {readers, writers (0 or 1), queued, now}.
import { describe, expect, it } from 'vitest'
import { RwName, serverClock, sleep } from './support.js'

describe('rwlock-inspect.lua', () => {
  it('G9: an idle lock: {0, 0, 0, now} on the server clock, and no key is created', async () => {
    const n = new RwName()
    const before = await serverClock()
    const [readers, writers, queued, now] = await n.inspect()
    const after = await serverClock()
    expect([readers, writers, queued]).toEqual([0, 0, 0])
    expect(now).toBeGreaterThanOrEqual(before.ms)
    expect(now).toBeLessThanOrEqual(after.ms)
    expect(await n.parts()).toEqual([])
  })

  it('counts live readers, the writer and the waiters', async () => {
    const n = new RwName()
    await n.acquire('r1', 'r', 'a')
    await n.acquire('r2', 'r', 'a')
    await n.acquire('w1', 'w', 'a')
    await n.acquire('r3', 'r', 'a')
    expect((await n.inspect()).slice(0, 3)).toEqual([2, 0, 2])
    const m = new RwName()
    await m.acquire('w1', 'w', 'a')
    await m.acquire('w2', 'w', 'a')
    expect((await m.inspect()).slice(0, 3)).toEqual([0, 1, 1])
  })

  it('G2: expired holders and waiters whose heartbeat lapsed are not counted', async () => {
    const n = new RwName()
    await n.acquire('r1', 'r', 'a', { ttl: 100 })
    await n.acquire('r2', 'r', 'a', { ttl: 10_000 })
    await n.acquire('w1', 'w', 'a', { waiterTtl: 100 })
    await n.acquire('w2', 'w', 'a', { waiterTtl: 5_000 })
    await sleep(150)
    expect((await n.inspect()).slice(0, 3)).toEqual([1, 0, 1])
  })

  it('is read-only: keys, values and expiries unchanged, nothing published, nothing purged', async () => {
    const n = new RwName()
    await n.acquire('w0', 'w', 'a', { ttl: 100 })
    await n.acquire('r1', 'r', 'a')
    await n.acquire('w1', 'w', 'a')
    await sleep(150)
    const before = await n.snapshot()
    const listener = await n.listen()
    try {
      expect((await n.inspect()).slice(0, 3)).toEqual([0, 0, 2])
      expect(await n.snapshot()).toEqual(before)
      expect(await listener.quiet()).toEqual([])
    } finally {
      await listener.close()
    }
  })
})
