// An Express 5 app for the middleware benchmark, one variant per process:
//   node --import tsx bench/lib/express-app.ts <variant> [redis url]
// (variants: bare, rate-limit, semaphore, semaphore-redis, semaphore-otel-absent, semaphore-otel)
// prints "listening on <url>". The handler answers a few bytes at once: what is measured is the cost
// of the middleware in front of it.
import type { AddressInfo } from 'node:net'
import express from 'express'
import { rateLimit } from 'express-rate-limit'
import { withOpenTelemetryProviders, withoutOpenTelemetry } from './otel-conditions.js'

const [variant, redisUrl] = process.argv.slice(2)
if (variant === 'semaphore-otel-absent') withoutOpenTelemetry()
else if (variant === 'semaphore-otel') await withOpenTelemetryProviders()

// The library as it ships (dist/, built by prebench), not src/ through tsx, whose transform adds its
// own per-call cost; express-rate-limit runs from its published JavaScript too. A path in a variable:
// type-checking needs no build.
const dist = (path: string) => new URL(`../../dist/${path}`, import.meta.url).href
const { createRedisStore } = (await import(dist('index.js'))) as typeof import('../../src/index.js')
const { semaphore } = (await import(
  dist('middleware/express.js')
)) as typeof import('../../src/middleware/express.js')

const app = express()
if (variant === 'rate-limit') {
  // express-rate-limit as its README recommends (memory store, draft-8 headers), with a limit that is
  // never reached: the cost of counting, not of rejecting.
  app.use(
    rateLimit({ windowMs: 60_000, limit: 1_000_000_000, standardHeaders: 'draft-8', legacyHeaders: false }),
  )
} else if (variant === 'semaphore' || variant === 'semaphore-otel-absent' || variant === 'semaphore-otel') {
  app.use(semaphore({ permits: 1000 }))
} else if (variant === 'semaphore-redis') {
  if (!redisUrl) throw new Error('semaphore-redis needs a redis:// URL')
  app.use(semaphore({ permits: 1000, store: createRedisStore(redisUrl, { prefix: 'bench-mw' }) }))
} else if (variant !== 'bare') {
  process.stderr.write(
    'usage: express-app.ts <bare|rate-limit|semaphore|semaphore-redis|semaphore-otel-absent|semaphore-otel> [redis url]\n',
  )
  process.exit(2)
}
app.get('/', (_req, res) => {
  res.send('ok')
})
const server = app.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`)
})
server.keepAliveTimeout = 60_000
process.on('SIGTERM', () => process.exit(0))
