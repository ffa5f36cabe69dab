// Reads of /docs/:id share, writes are exclusive per document, across every instance using REDIS_URL
// (or in this process only, without it):
//   npx tsx examples/express-rwlock-docs.ts   then   curl -X PUT localhost:3000/docs/42 & curl localhost:3000/docs/42
import express from 'express'
import { createMemoryStore, createRedisStore } from '../src/index.js'
import { rwlock } from '../src/middleware/express.js'

const store = process.env.REDIS_URL ? createRedisStore(process.env.REDIS_URL) : createMemoryStore()
const docs = new Map<string, string>()
const app = express()
app.use('/docs', rwlock({ store, name: 'docs', maxWaitMs: 5000 }))
app.get('/docs/:id', (req, res) => void res.send(docs.get(req.params.id) ?? ''))
app.put('/docs/:id', express.text(), async (req, res) => {
  await new Promise((resolve) => setTimeout(resolve, 1000)) // a slow write: readers of this doc wait
  docs.set(req.params.id, String(req.body ?? ''))
  res.send(`saved with fencing token ${req.tollgate?.fencingToken}\n`)
})
app.listen(3000, () => console.log('listening on http://localhost:3000'))
