// Koa: at most 10 requests in flight; streamed bodies keep their permit until the last byte.
//   npx tsx examples/koa-global-cap.ts   then   curl -i localhost:3000/
import { PassThrough } from 'node:stream'
import Koa from 'koa'
import { semaphore } from '../src/middleware/koa.js'

const app = new Koa()
app.use(semaphore({ permits: 10, maxWaitMs: 2000 }))
app.use((ctx) => {
  const body = new PassThrough()
  ctx.body = body
  let n = 0
  const timer = setInterval(() => {
    body.write(`chunk ${n}\n`)
    if (++n === 5) {
      clearInterval(timer)
      body.end()
    }
  }, 100)
})
app.listen(3000, () => console.log('listening on http://localhost:3000'))
