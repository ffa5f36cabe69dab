// At most 10 requests in flight in this process (the in-memory default store):
//   npx tsx examples/express-global-cap.ts   then   curl -i localhost:3000/export
import express from 'express'
import { semaphore } from '../src/middleware/express.js'

const app = express()
app.use(semaphore({ permits: 10, maxWaitMs: 2000, name: 'api' }))
app.get('/export', async (req, res) => {
  await new Promise((resolve) => setTimeout(resolve, 500)) // pretend to work
  res.json({ ok: true, fencingToken: req.tollgate?.fencingToken })
})
app.listen(3000, () => console.log('listening on http://localhost:3000'))
