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

  it('G13: names a resource as the gateway does: every spelling Express decodes to one id is one lock', async () => {
    // A hostile review: the middleware kept /docs/4%32 and /docs/42 apart (a read ran during the
    // write), while the gateway joined them; and neither decoded %40 or %3A, which Express does.
    const { canonicalTarget, resourceOf } = await import('../../src/gateway/http/target.js')
    const gateway = (path: string) => {
      const target = canonicalTarget(path, 'GET')
      if (target.kind !== 'path') throw new Error(`not a path: ${path}`)
      return resourceOf(target.match)
    }
    const same = [
      ['/docs/42', '/docs/4%32', '/docs/%34%32/', '/docs//42', '/docs/x/../42/'],
      ['/users/bob@x.org', '/users/bob%40x.org', '/users/bob%40x.org/'],
      ['/keys/a:b', '/keys/a%3Ab', '/keys/a%3ab'],
      ['/docs/a+b', '/docs/a%2Bb'],
      ['/d/%C3%A9', '/d/%c3%a9'],
    ]
    for (const spellings of same) {
      const names = new Set(spellings.flatMap((s) => [normalizePath(s), gateway(s)]))
      expect([...names], spellings.join(' ')).toHaveLength(1)
    }
    // What would change the path stays escaped: an encoded slash is not a separator.
    expect(normalizePath('/a%2Fb')).not.toBe(normalizePath('/a/b'))
    expect(normalizePath('/a%25b')).toBe('/a%25b')
  })
})
