// Contract of lua/adaptive-*.lua and of permit-set-limit.lua's adaptive mode, called directly: the
// reports of a window add up across replicas, leadership is a lease that a silent leader loses, one
// step per window is saved whoever tries, and the fleet's limit in P never replaces an override.
import { describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import { functionName, loadLibraries } from '../../src/core/redis/scripts.js'
import { uniquePrefix } from '../helpers/redis.js'
import { client, PermitName, sleep } from './support.js'

const WINDOW_MS = 100
const LEADER_TTL = 300

function fleet() {
  const redis = client()
  const space = keySpace(uniquePrefix().slice(0, -1), 'sem', 'route:*')
  const keys = (window: number) => [
    space.key('as'),
    space.key('ar'),
    space.key(`aw${window}`),
    space.key(`aw${window - 1}`),
  ]
  const run = async (
    script: 'tgAdaptiveReport' | 'tgAdaptiveCommit',
    window: number,
    ...argv: (string | number)[]
  ) => {
    await loadLibraries(redis)
    return redis.fcall(functionName(script), 4, ...keys(window), space.channel, ...argv)
  }
  return {
    redis,
    space,
    report: (replica: string, window: number, n = 0, d = 0, latencyUs = 0, most = 0) =>
      run(
        'tgAdaptiveReport',
        window,
        replica,
        window,
        n,
        d,
        latencyUs,
        most,
        WINDOW_MS,
        LEADER_TTL,
        60_000,
      ) as Promise<(number | string)[]>,
    commit: (window: number, state: string) =>
      run('tgAdaptiveCommit', window, window, state, 60_000) as Promise<number>,
  }
}

describe('adaptive-report.lua and adaptive-commit.lua', () => {
  it('the first replica to report leads, renews its lease with each report, and is told the window before to step', async () => {
    const f = fleet()
    const [, leadsA, replicas, stepped, state] = await f.report('a', 10, 5, 0, 50_000, 3)
    expect([leadsA, replicas, stepped, state]).toEqual([1, 1, -1, ''])
    const b = await f.report('b', 10, 7, 1, 70_000, 4)
    expect(b.slice(1, 3)).toEqual([0, 2]) // b does not lead while a's lease runs
    // a reports window 11: it is told window 10's reports, added up across replicas.
    const a = await f.report('a', 11)
    expect(a[1]).toBe(1)
    expect(a.slice(5)).toEqual([12, 1, 120_000, 7])
  })

  it('a leader that stops reporting loses its lease, and another replica leads from then on', async () => {
    const f = fleet()
    await f.report('a', 1)
    expect((await f.report('b', 1))[1]).toBe(0)
    await sleep(LEADER_TTL + 50)
    expect((await f.report('b', 2))[1]).toBe(1)
    expect((await f.report('a', 2))[1]).toBe(0) // a is back, but b leads now
  })

  it('exactly one step per window: a window stepped already (or an older one) is refused, whoever asks', async () => {
    const f = fleet()
    expect(await f.commit(5, '{"limit":3}')).toBe(1)
    expect(await f.commit(5, '{"limit":9}')).toBe(0)
    expect(await f.commit(4, '{"limit":9}')).toBe(0)
    const reply = await f.report('a', 6)
    expect(reply.slice(3, 5)).toEqual([5, '{"limit":3}'])
    // Window 5 was stepped: the leader is not asked to step it again.
    expect(reply).toHaveLength(5)
    expect(await f.commit(6, '{"limit":4}')).toBe(1)
  })

  it('replicas silent for 3 windows are no longer counted; every key it writes expires', async () => {
    const f = fleet()
    await f.report('a', 1, 1, 0, 1000, 1)
    await f.report('b', 1)
    await sleep(3 * WINDOW_MS + 50)
    expect((await f.report('a', 5))[2]).toBe(1)
    for (const part of ['as', 'ar', 'aw1'])
      expect(await f.redis.pttl(f.space.key(part)), part).toBeGreaterThan(0)
  })
})

describe('permit-set-limit.lua, adaptive', () => {
  it("the fleet's limit is kept with its expiry, counts as the limit in force, and inspect tells it apart from an override", async () => {
    const n = new PermitName()
    expect(await n.run('tgPermitSetLimit', 3, 3, 'a', 5_000)).toEqual([0, expect.any(Number), 1])
    expect(await n.redis.get(n.key.p)).toBe('3a')
    expect(await n.pttl('p')).toBeGreaterThan(4_000)
    expect(await n.inspect()).toEqual([0, 0, 0, expect.any(Number), 3])
    const [, ...rows] = await n.acquire(['a', 'b', 'c', 'd'], { permits: 10, mode: 0 })
    expect(rows.map((row) => row[0])).toEqual([1, 1, 1, 0]) // 3 in force, not the caller's 10
  })

  it('an override wins: the adaptive limit never replaces it, and it replaces the adaptive limit', async () => {
    const n = new PermitName()
    await n.run('tgPermitSetLimit', 3, 3, 'a', 5_000)
    await n.setLimit(7) // an operator's override
    expect(await n.redis.get(n.key.p)).toBe('7')
    expect(await n.pttl('p')).toBe(-1)
    expect(await n.run('tgPermitSetLimit', 4, 4, 'a', 5_000)).toEqual([0, expect.any(Number), 0])
    expect(await n.redis.get(n.key.p)).toBe('7')
    expect(await n.inspect()).toEqual([0, 0, 7, expect.any(Number), 0])
    await n.setLimit(0) // dropped: the next adaptive step writes again
    expect(await n.run('tgPermitSetLimit', 4, 4, 'a', 5_000)).toEqual([0, expect.any(Number), 1])
    expect(await n.redis.get(n.key.p)).toBe('4a')
  })

  it('raising the adaptive limit admits waiters at once', async () => {
    const n = new PermitName()
    await n.run('tgPermitSetLimit', 1, 1, 'a', 5_000)
    await n.acquire('x', { permits: 1 })
    const [, queued] = await n.acquire('y', { permits: 1 })
    expect((queued as number[])[0]).toBe(0)
    const listener = await n.listen()
    try {
      await n.run('tgPermitSetLimit', 2, 2, 'a', 5_000)
      expect((await listener.next(1))[0]).toMatch(/^y /)
    } finally {
      await listener.close()
    }
  })
})
