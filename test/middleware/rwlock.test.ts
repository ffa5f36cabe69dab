import { describe, expect, it } from 'vitest'
import { ConfigError, createMemoryStore, createRedisStore, type Store } from '../../src/index.js'
import { rwlock } from '../../src/middleware/express.js'
import { normalizePath } from '../../src/admission/keys.js'
import { CURRENT, get, startApp } from '../helpers/apps.js'
import { sleep } from '../helpers/contract.js'
import { connectStandalone, uniquePrefix } from '../helpers/redis.js'

const freshStore = (kind: 'memory' | 'redis'): Store =>
  kind === 'memory'
    ? createMemoryStore()
    : createRedisStore(connectStandalone(), { prefix: uniquePrefix().slice(0, -1) })

for (const framework of CURRENT) {
  for (const storeKind of ['memory', 'redis'] as const) {
    describe(`rwlock() [${framework}, ${storeKind}]`, () => {
      it('G1: lets GETs of one resource overlap', async () => {
        const app = await startApp(framework, { store: freshStore(storeKind), maxWaitMs: 5000 }, 'rwlock')
        const responses = await Promise.all(Array.from({ length: 8 }, () => get(`${app.url}/docs/1?ms=60`)))
        expect(responses.map((r) => r.status)).toEqual(responses.map(() => 200))
        expect(app.probe.max).toBeGreaterThanOrEqual(4)
      })

      it('G1: makes a PUT exclusive of GETs and other PUTs on the same resource only', async () => {
        const app = await startApp(framework, { store: freshStore(storeKind), maxWaitMs: 10_000 }, 'rwlock')
        const mixed = Array.from({ length: 30 }, (_, i) =>
          get(`${app.url}/docs/7?ms=${5 + (i % 4) * 5}`, {}, i % 3 === 0 ? 'PUT' : 'GET'),
        )
        const responses = await Promise.all(mixed)
        expect(responses.map((r) => r.status)).toEqual(responses.map(() => 200))
        expect(app.probe.writerOverlaps).toBe(0)
        // Another resource is not blocked by a writer on /docs/7.
        const slowWrite = get(`${app.url}/docs/7?ms=300`, {}, 'PUT')
        await sleep(50)
        const started = Date.now()
        expect((await get(`${app.url}/docs/8?ms=1`)).status).toBe(200)
        expect(Date.now() - started).toBeLessThan(250)
        await slowWrite
      })

      it('G6: does not starve a waiting PUT behind a stream of GETs', async () => {
        const app = await startApp(framework, { store: freshStore(storeKind), maxWaitMs: 10_000 }, 'rwlock')
        let stop = false
        const readers = Array.from({ length: 6 }, async () => {
          while (!stop) await get(`${app.url}/docs/3?ms=40`)
        })
        await sleep(100)
        const started = Date.now()
        const write = await get(`${app.url}/docs/3?ms=1`, {}, 'PUT')
        const waited = Date.now() - started
        stop = true
        await Promise.all(readers)
        expect(write.status).toBe(200)
        // Writer preference: it waits for the readers inside (one 40 ms hold), not for the stream.
        expect(waited).toBeLessThan(40 * 5)
      })
    })
  }
}

describe('rwlock() options and resources', () => {
  it('validates its options', () => {
    expect(() => rwlock({ readMethods: 'GET' as never })).toThrow(ConfigError)
    expect(() => rwlock({ resource: 'x' as never })).toThrow('"resource"')
    expect(() => rwlock({ maxWaitMs: -1 })).toThrow('"maxWaitMs"')
  })

  it('normalises paths into one resource name', () => {
    expect(normalizePath('/docs//42/')).toBe('/docs/42')
    expect(normalizePath('/docs/x/../42')).toBe('/docs/42')
    expect(normalizePath('//evil/x')).toBe('/evil/x')
    expect(normalizePath('/')).toBe('/')
    expect(normalizePath(`/${'a'.repeat(5000)}`)).toMatch(/^sha256:/)
  })
})
