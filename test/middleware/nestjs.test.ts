// The NestJS example (examples/nestjs/app.ts): Nest 11 on the Express platform, Tollgate mounted with
// app.use() (global cap) and a module's MiddlewareConsumer (1 report at a time), on port 0.
import type { INestApplication } from '@nestjs/common'
import { afterEach, describe, expect, it } from 'vitest'
import type { Store } from '../../src/index.js'
import { eventually } from '../helpers/contract.js'
import { STORE_KINDS, testStore } from './support/contract.js'

// Imported by a computed URL: the example needs experimentalDecorators (its own tsconfig.json), which
// the root program, that type-checks this file, does not set. Vitest compiles it with that tsconfig.
const example = new URL('../../examples/nestjs/app.ts', import.meta.url).href
const { createApp } = (await import(example)) as {
  createApp(options: { store?: Store; logger?: false }): Promise<INestApplication>
}

const apps: INestApplication[] = []
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()))
})

for (const storeKind of STORE_KINDS) {
  describe(`NestJS example [${storeKind}]`, () => {
    it('enforces the per-route limit with both policies in the headers, and gives the permit back', async () => {
      const app = await createApp({ store: testStore(storeKind).store, logger: false })
      apps.push(app)
      await app.listen(0, '127.0.0.1')
      const { port } = app.getHttpServer().address() as { port: number }
      const base = `http://127.0.0.1:${port}`

      const slow = fetch(`${base}/reports/1?ms=400`)
      await new Promise((resolve) => setTimeout(resolve, 100))
      const second = await fetch(`${base}/reports/2?ms=1`)
      expect(second.status).toBe(503)
      expect(second.headers.get('retry-after')).toBe('1')
      expect(second.headers.get('ratelimit-policy')).toBe(
        '"global";q=100;qu="concurrent-requests", "reports";q=1;qu="concurrent-requests"',
      )
      expect(await second.json()).toMatchObject({ reason: 'busy' })
      // Other routes are under the global cap only.
      const health = await fetch(`${base}/health`)
      expect([health.status, health.headers.get('ratelimit')]).toEqual([200, '"global";r=98'])

      const first = await slow
      expect(first.status).toBe(200)
      const body = (await first.json()) as { id: string; fencingToken: unknown }
      expect(body.id).toBe('1')
      expect(typeof body.fencingToken).toBe('number') // req.tollgate reached the controller
      // The permit is back once the first response closed.
      await eventually(async () => (await fetch(`${base}/reports/3?ms=1`)).status === 200, 2000)
    })
  })
}
