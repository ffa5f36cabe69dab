// Redis stops mid-life: failOpen decides, nobody hangs, and admission recovers with no stuck permits.
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createRedisStore } from '../../src/index.js'
import { CURRENT, get, startApp } from '../helpers/apps.js'
import { eventually } from '../helpers/contract.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

const STORE_TIMEOUT_MS = 300
let server: RedisServerHandle
const clients: Redis[] = []
beforeAll(async () => {
  server = await startRedisServer()
})
afterAll(async () => {
  for (const c of clients) c.disconnect()
  await server.stop()
})

for (const framework of CURRENT) {
  describe(`store down [${framework}]`, () => {
    it('G2 G14: fails open or closed within the store timeout, then recovers with no stuck permits', async () => {
      const client = new Redis({ host: server.host, port: server.port, retryStrategy: () => 50 })
      client.on('error', () => {})
      clients.push(client)
      const store = createRedisStore(client, {
        prefix: `down-${framework}`,
        commandTimeoutMs: STORE_TIMEOUT_MS,
      })
      const open = await startApp(framework, { permits: 2, store, failOpen: true, name: 'open' })
      const closed = await startApp(framework, { permits: 2, store, failOpen: false, name: 'closed' })
      expect((await get(`${closed.url}/work?ms=1`)).status).toBe(200)

      await server.stop()
      const started = Date.now()
      const [passed, refused] = await Promise.all([
        get(`${open.url}/work?ms=1`),
        get(`${closed.url}/work?ms=1`),
      ])
      expect(Date.now() - started).toBeLessThan(STORE_TIMEOUT_MS + 1000)
      expect(passed.status).toBe(200)
      expect(refused.status).toBe(503)
      expect(JSON.parse(refused.body).reason).toBe('store_unavailable')
      expect(open.counters.failedOpen).toBe(1)
      expect(closed.counters.rejected.store_unavailable).toBe(1)

      await server.restart()
      await eventually(async () => (await get(`${closed.url}/work?ms=1`)).status === 200, 10_000, 100)
      // Both permits are free again: two requests run side by side.
      const both = await Promise.all([get(`${closed.url}/work?ms=50`), get(`${closed.url}/work?ms=50`)])
      expect(both.map((r) => r.status)).toEqual([200, 200])
      expect(closed.probe.max).toBe(2)
      await store.close()
    }, 30_000)
  })
}
