// What data.json carries, beyond what the browser test sees. The charts cost their 5 minutes once per
// page: a poll that names the newest point it holds (data.json?since=) is sent each route's last 10 s
// only, when they cover all the page lacks; otherwise, and without since, the whole history. A bad
// since is refused in words. Routes past the cap of 50 are counted, so the page can say so. Fake
// time: the Dashboard samples once a second, so 30 s of history is 30 fake seconds.
import type http from 'node:http'
import pino from 'pino'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import type { StoreHealth } from '../../src/admission/store-health.js'
import type { GatewayConfig } from '../../src/gateway/config/index.js'
import { type Access, Dashboard } from '../../src/gateway/ops/dashboard.js'
import { sinceOf } from '../../src/gateway/ops/dashboard-http.js'
import { HttpError } from '../../src/gateway/ops/http-error.js'
import { createMetrics } from '../../src/gateway/ops/metrics.js'
import type { LiveRoute } from '../../src/gateway/routes.js'

const ROUTES = ['a', 'b']
/** More routes than the dashboard shows (50). */
const MANY = Array.from({ length: 60 }, (_, i) => `r${i}`)
const access: Access = { authorized: true, canWrite: false, tokenRequired: false, note: '' }

type Data = {
  at: number
  historySince: number | null
  routes: { name: string; history: { t: number }[] }[]
  config: { routes: number }
  replica: { pid: number; boot: string }
}

/** A Dashboard over unlimited routes (no store read), and a GET of data.json. */
function dashboard(names = ROUTES) {
  const board = new Dashboard({
    metrics: createMetrics(names),
    logger: pino({ enabled: false }),
    version: 'test',
    config: () => ({ store: { kind: 'memory' }, routes: names }) as unknown as GatewayConfig,
    routes: () =>
      names.map(
        (name) => ({ config: { name }, admissions: [], concurrency: undefined }) as unknown as LiveRoute,
      ),
    health: { down: false, onChange: () => () => undefined } as unknown as StoreHealth,
    reloads: () => ({ loadedAt: 0, last: undefined }),
  })
  const get = async (url: string): Promise<Data> => {
    let body = ''
    const res = {
      writeHead: () => res,
      end: (chunk?: string) => {
        body = chunk ?? ''
      },
    } as unknown as http.ServerResponse
    const req = { method: 'GET', url, headers: {} } as http.IncomingMessage
    expect(await board.serve(req, res, url.split('?')[0]!, access)).toBe(true)
    return JSON.parse(body) as Data
  }
  return { board, get }
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'setTimeout', 'Date', 'performance'] })
})
afterEach(() => {
  vi.useRealTimers()
})

describe('data.json history', () => {
  it('whole without since; the last 10 s after a recent since, covering every point after it; whole again after an old one', async () => {
    const { board, get } = dashboard()
    try {
      await vi.advanceTimersByTimeAsync(30_000)
      const whole = await get('/dashboard/data.json')
      expect(whole.historySince).toBeNull()
      for (const route of whole.routes) expect(route.history).toHaveLength(30)
      const held = whole.routes[0]!.history.at(-1)!.t

      await vi.advanceTimersByTimeAsync(3_000)
      const recent = await get(`/dashboard/data.json?since=${held}`)
      expect(recent.historySince).toBe(recent.at - 10_000)
      for (const route of recent.routes) {
        expect(route.history.length).toBeLessThanOrEqual(10)
        // Every point after the one the page held is there: merged, the history has no hole.
        const after = route.history.filter((p) => p.t > held).map((p) => p.t)
        expect(after).toEqual([held + 1_000, held + 2_000, held + 3_000])
      }

      // A since past the snapshot (the wall clock stepped back since the page's newest point) gets it
      // all: recent points would all be older than what the page holds, and it would draw none.
      const ahead = await get(`/dashboard/data.json?since=${recent.at + 5_000}`)
      expect(ahead.historySince).toBeNull()

      // A page that held nothing newer than 10 s ago (a tab in the background) gets it all.
      await vi.advanceTimersByTimeAsync(15_000)
      const stale = await get(`/dashboard/data.json?since=${held}`)
      expect(stale.historySince).toBeNull()
      for (const route of stale.routes) expect(route.history).toHaveLength(48)
    } finally {
      board.close()
    }
  })

  it('names the process it comes from (boot): the same for every poll, another for another process, whatever its pid', async () => {
    const first = dashboard()
    const second = dashboard()
    try {
      await vi.advanceTimersByTimeAsync(2_000)
      const [a, b] = [await first.get('/dashboard/data.json'), await first.get('/dashboard/data.json')]
      const c = await second.get('/dashboard/data.json')
      expect(a.replica.boot).toMatch(/^[0-9a-f-]{36}$/)
      expect(b.replica.boot).toBe(a.replica.boot)
      expect(c.replica.pid).toBe(a.replica.pid)
      expect(c.replica.boot).not.toBe(a.replica.boot)
    } finally {
      first.board.close()
      second.board.close()
    }
  })

  it('shows the first 50 routes and says how many there are (the page notes the rest)', async () => {
    const { board, get } = dashboard(MANY)
    try {
      await vi.advanceTimersByTimeAsync(2_000)
      const data = await get('/dashboard/data.json')
      expect(data.routes.map((route) => route.name)).toEqual(MANY.slice(0, 50))
      expect(data.config.routes).toBe(60)
    } finally {
      board.close()
    }
  })

  it('a since that is not a whole number of ms is refused with a 400 in words; other parameters are ignored', () => {
    expect(sinceOf('/dashboard/data.json')).toBeUndefined()
    expect(sinceOf('/dashboard/data.json?_=1')).toBeUndefined()
    expect(sinceOf('/dashboard/data.json?since=1795851406000')).toBe(1795851406000)
    for (const bad of ['', '-1', '1.5', '1e3', 'abc', '9'.repeat(16), '1&since=2x']) {
      const refusal = (() => {
        try {
          sinceOf(`/dashboard/data.json?since=${bad}`)
        } catch (error) {
          return error
        }
      })()
      expect(refusal, bad).toBeInstanceOf(HttpError)
      expect((refusal as HttpError).status).toBe(400)
      expect((refusal as HttpError).message).toContain('since must be')
    }
  })
})
