// Per-tenant caps shared by every instance through Redis: each tenant at most 5 in flight,
// tenant "big" 20. Run several copies on different PORTs against the same REDIS_URL.
//   REDIS_URL=redis://127.0.0.1:6379 PORT=3000 npx tsx examples/express-tenants-redis.ts
import express from 'express'
import { Redis } from 'ioredis'
import { createRedisStore } from '../src/index.js'
import { byHeader, semaphore } from '../src/middleware/express.js'

const store = createRedisStore(new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'), {
  commandTimeoutMs: 500, // fail fast (503, or pass with failOpen) when Redis hangs
})
const app = express()
app.use(
  semaphore({
    permits: 5,
    store,
    key: byHeader('x-tenant-id'), // missing header -> the shared '-' bucket
    permitsFor: (tenant) => (tenant === 'big' ? 20 : undefined),
    maxWaitMs: 1000,
  }),
)
app.get('/report', (_req, res) => void setTimeout(() => res.send('done\n'), 300))
app.listen(Number(process.env.PORT ?? 3000))
