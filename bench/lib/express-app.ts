// An Express 5 app for the middleware benchmark, one variant per process:
//   node --import tsx bench/lib/express-app.ts <variant> [redis url]
// (variants: bare, rate-limit, semaphore, semaphore-redis, semaphore-otel-absent, semaphore-otel)
// prints "listening on <url>". The handler answers a few bytes at once: what is measured is the cost
// of the middleware in front of it.
import { register } from 'node:module'
import type { AddressInfo } from 'node:net'
import express from 'express'
import { rateLimit } from 'express-rate-limit'

const [variant, redisUrl] = process.argv.slice(2)
if (variant === 'semaphore-otel-absent') {
  // As where @opentelemetry/api is not installed: resolving it fails (before the library loads).
  const hook = `export async function resolve(specifier, context, next) {
    if (specifier === '@opentelemetry/api') throw Object.assign(new Error('absent'), { code: 'ERR_MODULE_NOT_FOUND' })
    return next(specifier, context)
  }`
  register(`data:text/javascript,${encodeURIComponent(hook)}`)
} else if (variant === 'semaphore-otel') {
  // The SDK's providers registered, as an application that exports its telemetry has them: spans
  // sampled and processed in batches (to an exporter that drops them), metrics aggregated (and
  // never collected here).
  const { metrics, trace } = await import('@opentelemetry/api')
  const { BasicTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-base')
  const { MeterProvider } = await import('@opentelemetry/sdk-metrics')
  const dropped = {
    export: (_spans: unknown, done: (result: { code: 0 }) => void) => done({ code: 0 }),
    shutdown: async () => {},
  }
  trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropped)] }),
  )
  metrics.setGlobalMeterProvider(new MeterProvider())
}

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
