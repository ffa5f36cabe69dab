// A mutex and a semaphore on the in-memory store, or on Redis when REDIS_URL is set:
//   npm run example            REDIS_URL=redis://127.0.0.1:6379 npm run example
import { createMemoryStore, createMutex, createRedisStore, createSemaphore } from '../src/index.js'

const store = process.env.REDIS_URL ? createRedisStore(process.env.REDIS_URL) : createMemoryStore()
const invoice = createMutex(store, 'invoice:42', { ttlMs: 10_000 })
const exports = createSemaphore(store, 'exports', { permits: 2 })

await invoice.withLease(async (lease) => {
  console.log(`holding invoice:42 with fencing token ${lease.fencingToken}`)
  console.log('tryAcquire while held ->', await invoice.tryAcquire()) // undefined: contention is not an error
})

const jobs = Array.from({ length: 6 }, (_, i) =>
  exports.withLease(async () => {
    console.log(`export ${i} running; ${JSON.stringify(await exports.stats())}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }),
)
await Promise.all(jobs)
console.log('all exports done, at most 2 at a time')
await store.close()
