// Contract of lua/adaptive-*.lua and of permit-set-limit.lua's adaptive mode, called directly: the
// reports of a window add up across replicas, leadership is a lease that a silent leader loses (or
// gives up when it leaves), a report of a window the server's clock is not at (a replica whose clock
// estimate is off) counts for nothing, one step per window is saved and only over the state it was
// computed from, and the fleet's limit in P never replaces an override nor a later step's limit.
import { beforeAll, describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import { functionName, loadLibraries } from '../../src/core/redis/scripts.js'
import { uniquePrefix } from '../helpers/redis.js'
import { client, connected, fcall, PermitName, serverClock, sleep } from './support.js'

const WINDOW_MS = 100
const LEADER_TTL = 300

/** The window running on the server's clock, as an index (the scripts get its start: index x
 * WINDOW_MS). */
async function current(): Promise<number> {
  return Math.floor((await serverClock()).ms / WINDOW_MS)
}

function fleet() {
  const redis = client()
  const space = keySpace(uniquePrefix().slice(0, -1), 'sem', 'route:*')
  // A window is named by its start, ms.
  const at = (window: number) => window * WINDOW_MS
  const keys = (window: number) => [
    space.key('as'),
    space.key('ar'),
    space.key(`aw${at(window)}`),
    space.key(`aw${at(window - 1)}`),
  ]
  const run = async (
    script: 'tgAdaptiveReport' | 'tgAdaptiveCommit',
    window: number,
    ...argv: (string | number)[]
  ) => {
    await loadLibraries(redis)
    return fcall(redis, functionName(script), keys(window), space.channel, ...argv)
  }
  const report = (
    replica: string,
    window: number,
    n = 0,
    d = 0,
    latencyUs = 0,
    most = 0,
    leave = '0',
    /** Clients (units), those over the share, and latency buckets [bucket, count, sum µs]. */
    clients: [units: number, over: number, buckets: number[][]] = [0, 0, []],
  ) =>
    run(
      'tgAdaptiveReport',
      window,
      replica,
      at(window),
      n,
      d,
      latencyUs,
      most,
      WINDOW_MS,
      LEADER_TTL,
      60_000,
      leave,
      clients[0],
      clients[1],
      ...clients[2].flat(),
    ) as Promise<(number | string)[]>
  return {
    redis,
    space,
    report,
    leave: (replica: string, window: number) => report(replica, window, 0, 0, 0, 0, '1'),
    join: (replica: string, window: number) => report(replica, window, 0, 0, 0, 0, '2'),
    /** Step `window` from the state read when `based` was the last window stepped. */
    commit: (window: number, state: string, based: number) =>
      run(
        'tgAdaptiveCommit',
        window,
        at(window),
        state,
        60_000,
        based === -1 ? -1 : at(based),
        WINDOW_MS,
      ) as Promise<number>,
  }
}

// The tests read the server's clock, then report for that window (100 ms): the libraries loaded and
// the script client connected before, not between (a first call that connects on a loaded machine
// took longer than a window).
beforeAll(async () => {
  await loadLibraries(client())
  await connected(client())
})

describe('adaptive-report.lua and adaptive-commit.lua', () => {
  it('the first replica to report leads, renews its lease with each report, and is told the window before to step', async () => {
    const f = fleet()
    const w = (await current()) - 1 // the window that just ended
    const [, leadsA, replicas, stepped, state] = await f.report('a', w, 5, 0, 50_000, 3, '0', [
      2,
      0,
      [
        [40, 3, 30_000],
        [41, 2, 20_000],
      ],
    ])
    expect([leadsA, replicas, stepped, state]).toEqual([1, 1, -1, ''])
    const b = await f.report('b', w, 7, 1, 70_000, 4, '0', [
      3,
      1,
      [
        [12, 1, 20],
        [41, 5, 60_000],
      ],
    ])
    expect(b.slice(1, 3)).toEqual([0, 2]) // b does not lead while a's lease runs
    // a reports window w + 1 (the one running now, or just ended): it is told window w's reports,
    // added up across replicas: the counts, the clients, and the latency histogram bucket by bucket.
    const a = await f.report('a', w + 1)
    expect(a[1]).toBe(1)
    expect(a[5]).toBe(1) // the window before the reported one: a lag of 1
    expect(a.slice(6)).toEqual([12, 1, 120_000, 7, 5, 1, 12, 1, 20, 40, 3, 30_000, 41, 7, 80_000])
  })

  it('a leader that stops reporting loses its lease, and another replica leads from then on', async () => {
    const f = fleet()
    await f.report('a', await current())
    expect((await f.report('b', await current()))[1]).toBe(0)
    await sleep(LEADER_TTL + 50)
    expect((await f.report('b', await current()))[1]).toBe(1)
    expect((await f.report('a', await current()))[1]).toBe(0) // a is back, but b leads now
  })

  it('a leader that leaves gives up its lease: another leads at its next report, and the leaver is no longer counted', async () => {
    const f = fleet()
    await f.report('a', await current())
    expect((await f.report('b', await current())).slice(1, 3)).toEqual([0, 2])
    const left = await f.leave('a', await current())
    expect(left.slice(1, 3)).toEqual([0, 1])
    expect((await f.report('b', await current())).slice(1, 3)).toEqual([1, 1]) // not 3 windows later
    // A replica that leaves while another leads changes nothing of the lease.
    await f.report('c', await current())
    await f.leave('c', await current())
    expect((await f.report('b', await current()))[1]).toBe(1)
  })

  it('a report of a window the server is not at (a clock not corrected yet) adds nothing and does not lead', async () => {
    const f = fleet()
    const now = await current()
    for (const window of [now + 50, now - 50]) {
      const reply = await f.report('skewed', window, 9, 9, 9_000, 9)
      expect(reply[1], `window ${window - now}`).toBe(0)
      expect(reply).toHaveLength(5) // no window to step either
      expect(await f.redis.exists(f.space.key(`aw${window * WINDOW_MS}`))).toBe(0)
      // Its `now` is the server's: the replica corrects its estimate from it.
      expect(Math.floor((reply[0] as number) / WINDOW_MS)).toBeGreaterThanOrEqual(now)
    }
    // Nobody leads yet: the next timely report does.
    expect((await f.report('b', (await current()) - 1))[1]).toBe(1)
  })

  it('exactly one step per window, none lost: a window stepped already (or an older one) is refused, and so is a step from a state replaced since it was read', async () => {
    const f = fleet()
    const w = (await current()) - 2
    expect(await f.commit(w, '{"limit":3}', -1)).toBe(1)
    expect(await f.commit(w, '{"limit":9}', -1)).toBe(0) // that window again
    expect(await f.commit(w - 1, '{"limit":9}', -1)).toBe(0) // an older one
    // A leader paused past its lease read the state before w was stepped (based -1): its step of
    // w + 1 would save over w's step, computed without it. Refused; from the state after w, saved.
    expect(await f.commit(w + 1, '{"limit":7}', -1)).toBe(0)
    const reply = await f.report('a', w + 1)
    expect(reply.slice(3, 5)).toEqual([w * WINDOW_MS, '{"limit":3}'])
    expect(await f.commit(w + 1, '{"limit":4}', w)).toBe(1)
  })

  it('a report sent again (its reply lost, the call resent) counts once; a step sent again after it was saved is saved, not refused', async () => {
    const f = fleet()
    const w = (await current()) - 1
    await f.report('a', w, 5, 1, 50_000, 3)
    await f.report('a', w, 5, 1, 50_000, 3) // the same report again
    await f.report('b', w, 7, 0, 70_000, 4)
    const a = await f.report('a', w + 1)
    expect(a.slice(5)).toEqual([1, 12, 1, 120_000, 7, 0, 0]) // not 17, 2, 170_000, 10
    expect(await f.commit(w, '{"limit":3}', -1)).toBe(1)
    // Its reply lost, the leader's commit is sent again: saved (1), so the leader applies its step.
    expect(await f.commit(w, '{"limit":3}', -1)).toBe(1)
    expect(await f.commit(w, '{"limit":4}', -1)).toBe(0) // another step of that window: refused
  })

  it("a window that has not ended on the server's clock, or ended more than 3 windows ago, is not stepped", async () => {
    const f = fleet()
    const now = await current()
    expect(await f.commit(now + 1, '{"limit":3}', -1)).toBe(0)
    expect(await f.commit(now + 10_000, '{"limit":3}', -1)).toBe(0) // would block every later step
    expect(await f.commit(now - 10, '{"limit":3}', -1)).toBe(0)
    expect(await f.redis.exists(f.space.key('as'))).toBe(0)
  })

  it('a window is stepped once every replica alive reported it: the report that completes it gets its sums back (lag 0), leader or not; an idle replica’s empty report counts', async () => {
    const f = fleet()
    const w = (await current()) - 1
    for (const replica of ['a', 'b', 'c']) await f.join(replica, w)
    expect(await f.commit(w - 1, '{"limit":3}', -1)).toBe(1) // the window before is stepped
    const a = await f.report('a', w, 5, 0, 50_000, 3, '0', [2, 0, [[40, 5, 50_000]]])
    expect(a.slice(1, 3)).toEqual([1, 3])
    expect(a).toHaveLength(5) // a leads, but the window is not complete: nothing to step yet
    expect(await f.report('b', w, 7, 1, 70_000, 4, '0', [3, 1, [[41, 6, 70_000]]])).toHaveLength(5)
    // c had no request (an idle replica): its empty report completes the window, and c, which does
    // not lead, is told it to step at once.
    const c = await f.report('c', w)
    expect(c[1]).toBe(0)
    expect(c[5]).toBe(0) // the window reported: a lag of 0
    expect(c.slice(6)).toEqual([12, 1, 120_000, 7, 5, 1, 40, 5, 50_000, 41, 6, 70_000])
    expect(await f.commit(w, '{"limit":6}', w - 1)).toBe(1)
    // The leader's next report has nothing left to step (the window before it was stepped), and the
    // same report sent again does not hand the window out twice.
    expect(await f.report('c', w)).toHaveLength(5)
    expect(await f.report('a', w + 1)).toHaveLength(5)
  })

  it('a silent replica holds the window back: nobody steps it at once, the leader steps it from its report of the next window (lag 1)', async () => {
    const f = fleet()
    const w = (await current()) - 1
    await f.join('a', w)
    await f.join('b', w) // joins, then is silent
    expect(await f.commit(w - 1, '{"limit":3}', -1)).toBe(1)
    expect(await f.report('a', w, 5, 0, 50_000, 3)).toHaveLength(5)
    const next = await f.report('a', w + 1)
    expect(next.slice(1, 3)).toEqual([1, 2])
    expect(next.slice(5, 12)).toEqual([1, 5, 0, 50_000, 3, 0, 0])
  })

  it('a replica that joins is counted and reads the saved state, and reports nothing', async () => {
    const f = fleet()
    const w = (await current()) - 1
    expect(await f.commit(w, '{"limit":24}', -1)).toBe(1)
    const joined = await f.join('x', w + 1)
    expect(joined.slice(1)).toEqual([0, 1, w * WINDOW_MS, '{"limit":24}'])
    expect(await f.redis.exists(f.space.key(`aw${(w + 1) * WINDOW_MS}`))).toBe(0)
    expect(await f.redis.exists(f.space.key('as'), f.space.key('ar'))).toBe(2)
  })

  it('replicas silent for 3 windows are no longer counted; every key it writes expires', async () => {
    const f = fleet()
    const w = await current()
    await f.report('a', w, 1, 0, 1000, 1)
    await f.report('b', w)
    await sleep(3 * WINDOW_MS + 50)
    expect((await f.report('a', await current()))[2]).toBe(1)
    for (const part of ['as', 'ar', `aw${w * WINDOW_MS}`])
      expect(await f.redis.pttl(f.space.key(part)), part).toBeGreaterThan(0)
  })
})

describe('permit-set-limit.lua, adaptive', () => {
  it("the fleet's limit is kept with its expiry and version, counts as the limit in force, and inspect tells it apart from an override", async () => {
    const n = new PermitName()
    expect(await n.run('tgPermitSetLimit', 3, 3, 'a', 5_000, 12)).toEqual([0, expect.any(Number), 1])
    expect(await n.redis.get(n.key.p)).toBe('3a12')
    expect(await n.pttl('p')).toBeGreaterThan(4_000)
    expect(await n.inspect()).toEqual([0, 0, 0, expect.any(Number), 3])
    const [, ...rows] = await n.acquire(['a', 'b', 'c', 'd'], { permits: 10, mode: 0 })
    expect(rows.map((row) => row[0])).toEqual([1, 1, 1, 0]) // 3 in force, not the caller's 10
  })

  it("a step's limit never replaces a later step's (a leader that paused between its step and this call)", async () => {
    const n = new PermitName()
    await n.run('tgPermitSetLimit', 8, 8, 'a', 5_000, 20)
    expect(await n.run('tgPermitSetLimit', 30, 30, 'a', 5_000, 19)).toEqual([0, expect.any(Number), 0])
    expect(await n.run('tgPermitSetLimit', 30, 30, 'a', 5_000, 20)).toEqual([0, expect.any(Number), 0])
    expect(await n.redis.get(n.key.p)).toBe('8a20')
    expect(await n.run('tgPermitSetLimit', 9, 9, 'a', 5_000, 21)).toEqual([0, expect.any(Number), 1])
    expect(await n.redis.get(n.key.p)).toBe('9a21')
  })

  it('an override wins: the adaptive limit never replaces it, and it replaces the adaptive limit; dropping an override leaves an adaptive limit alone', async () => {
    const n = new PermitName()
    await n.run('tgPermitSetLimit', 3, 3, 'a', 5_000, 1)
    await n.setLimit(0) // no override to drop: the adaptive limit stays
    expect(await n.redis.get(n.key.p)).toBe('3a1')
    await n.setLimit(7) // an operator's override
    expect(await n.redis.get(n.key.p)).toBe('7')
    expect(await n.pttl('p')).toBe(-1)
    expect(await n.run('tgPermitSetLimit', 4, 4, 'a', 5_000, 2)).toEqual([0, expect.any(Number), 0])
    expect(await n.redis.get(n.key.p)).toBe('7')
    expect(await n.inspect()).toEqual([0, 0, 7, expect.any(Number), 0])
    await n.setLimit(0) // dropped: the next adaptive step writes again
    expect(await n.redis.exists(n.key.p)).toBe(0)
    expect(await n.run('tgPermitSetLimit', 4, 4, 'a', 5_000, 3)).toEqual([0, expect.any(Number), 1])
    expect(await n.redis.get(n.key.p)).toBe('4a3')
  })

  it('raising the adaptive limit admits waiters at once', async () => {
    const n = new PermitName()
    await n.run('tgPermitSetLimit', 1, 1, 'a', 5_000, 1)
    await n.acquire('x', { permits: 1 })
    const [, queued] = await n.acquire('y', { permits: 1 })
    expect((queued as number[])[0]).toBe(0)
    const listener = await n.listen()
    try {
      await n.run('tgPermitSetLimit', 2, 2, 'a', 5_000, 2)
      expect((await listener.next(1))[0]).toMatch(/^y /)
    } finally {
      await listener.close()
    }
  })
})
