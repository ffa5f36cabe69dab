// The point of Tollgate: one cap across several app instances (separate processes) sharing Redis.
import { describe, expect, it } from 'vitest'
import { spawnChild } from '../helpers/child.js'
import { connectStandalone, uniquePrefix } from '../helpers/redis.js'

describe.each(['standalone', 'cluster'] as const)('semaphore() across 3 app processes [%s]', (kind) => {
  it('G1: keeps the combined concurrency of the handlers at or under permits', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const permits = 5
    const apps = Array.from({ length: 3 }, () =>
      spawnChild(new URL('../fixtures/app-worker.ts', import.meta.url), [kind, prefix, String(permits)]),
    )
    const urls = await Promise.all(
      apps.map(async (a) => (await a.waitFor<{ type: string; url: string }>('listening', 15_000)).url),
    )
    const statuses = await Promise.all(
      Array.from({ length: 150 }, async (_, i) => (await fetch(`${urls[i % 3]}/work`)).status),
    )
    expect(statuses).toEqual(statuses.map(() => 200))
    const checker = connectStandalone()
    expect(Number(await checker.get(`${prefix}:max`))).toBe(permits)
    expect(Number(await checker.get(`${prefix}:inside`))).toBe(0)
  }, 60_000)
})
