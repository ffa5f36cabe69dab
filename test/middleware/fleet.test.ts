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

describe('unnamed middlewares across processes', () => {
  it('G1: two processes that create their unnamed middlewares in opposite orders share one cap', async () => {
    // Names used to go by creation order: the global semaphore was 'default' in one process and
    // 'default-2' in the other, two buckets, twice the cap.
    const prefix = uniquePrefix().slice(0, -1)
    const permits = 3
    const apps = ['tenant-first', 'global-first'].map((order) =>
      spawnChild(new URL('../fixtures/app-worker.ts', import.meta.url), [
        'standalone',
        prefix,
        String(permits),
        order,
      ]),
    )
    const urls = await Promise.all(
      apps.map(async (a) => (await a.waitFor<{ type: string; url: string }>('listening', 15_000)).url),
    )
    const answers = await Promise.all(
      Array.from({ length: 60 }, async (_, i) => {
        const response = await fetch(`${urls[i % 2]}/work`)
        return [response.status, response.headers.get('ratelimit-policy')]
      }),
    )
    expect(answers).toEqual(answers.map(() => [200, `"default";q=${permits};qu="concurrent-requests"`]))
    const checker = connectStandalone()
    expect(Number(await checker.get(`${prefix}:max`))).toBe(permits)
    expect(Number(await checker.get(`${prefix}:inside`))).toBe(0)
  }, 60_000)
})
