/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
// The admin listener's dashboard (docs/gateway/operate.md, "Dashboard") in a real browser: Debian's Chromium
// driven by playwright-core (no browser is downloaded; scripts/ensure-browser.mjs installs chromium
// where it can, and these tests skip, saying why, where no browser can be had). Against two replicas
// of the real bin on Redis, with requests held by the upstream: the page loads with no console error
// and no CSP violation, its figures match what the upstream and the store report, a limit set from
// the page binds the other replica, and beyond loopback without a token the page is read-only and
// says why. Every text passes WCAG AA contrast, and the controls work from the keyboard.
import { once } from 'node:events'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Browser, chromium, type Page } from 'playwright-core'
import { findChromium } from '../../scripts/ensure-browser.mjs'
import { eventually, sleep } from '../helpers/contract.js'
import {
  baseFlags,
  freshAdminGet,
  type GatewayProcess,
  metric,
  redisUrl,
  spawnGateway,
} from '../helpers/gateway.js'
import { topology, uniquePrefix } from '../helpers/redis.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { startUpstream, type Upstream } from '../helpers/upstream.js'

const executable = findChromium() as string | undefined
/** Where the run's screenshots go (the test output names them). */
const SHOTS = path.join(os.tmpdir(), 'tollgate-dashboard')

let browser: Browser | undefined
beforeAll(async () => {
  if (!executable) return
  browser = await chromium.launch({
    executablePath: executable,
    // As root in a container, and with no network: nothing of Chromium's own reaches out.
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  })
}, 60_000)
afterAll(async () => {
  await browser?.close()
})

/** A page that records console errors, page errors and CSP violations, and the URLs it polled. */
async function open(url: string): Promise<{ page: Page; problems: string[]; polls: string[] }> {
  // 1280 px: a common laptop window, where nothing of the page may be cut off.
  const context = await browser!.newContext({ viewport: { width: 1280, height: 1000 } })
  const page = await context.newPage()
  const problems: string[] = []
  const polls: string[] = []
  page.on('request', (request) => {
    if (request.url().includes('/dashboard/data.json')) polls.push(request.url())
  })
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warning')
      problems.push(`console: ${message.text()}`)
  })
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`))
  page.on('response', (response) => {
    if (response.status() >= 400) problems.push(`${response.status()} for ${response.url()}`)
  })
  await page.exposeFunction('reportViolation', (text: string) => problems.push(`CSP: ${text}`))
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      void (window as unknown as { reportViolation(text: string): void }).reportViolation(
        `${event.violatedDirective} ${event.blockedURI}`,
      )
    })
  })
  await page.goto(url)
  return { page, problems, polls }
}

/** The text of the cell of `route`'s row under the column headed `column`. */
async function cell(page: Page, route: string, column: string): Promise<string> {
  return page.evaluate(
    ([route, column]) => {
      const table = document.querySelector('#routes') as HTMLTableElement
      const headers = [...table.tHead!.rows[0]!.cells].map((th) => th.textContent?.trim())
      const index = headers.indexOf(column)
      const row = [...table.tBodies[0]!.rows].find((tr) => tr.cells[0]?.textContent === route)
      return row?.cells[index]?.textContent ?? ''
    },
    [route, column] as const,
  )
}

/** Every element with text of its own whose contrast against its background is under 4.5:1. */
function lowContrast(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const rgb = (color: string) => (color.match(/[\d.]+/g) ?? []).map(Number)
    const luminance = ([r, g, b]: number[]) => {
      const channel = (c: number) => {
        const s = c / 255
        return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4
      }
      return 0.2126 * channel(r!) + 0.7152 * channel(g!) + 0.0722 * channel(b!)
    }
    const background = (node: Element | null): number[] => {
      for (let e = node; e; e = e.parentElement) {
        const color = rgb(getComputedStyle(e).backgroundColor)
        if (color.length === 3 || (color.length === 4 && color[3]! > 0)) return color.slice(0, 3)
      }
      return [255, 255, 255]
    }
    const low: string[] = []
    for (const node of document.querySelectorAll('body *')) {
      const own = [...node.childNodes].some(
        (child) => child.nodeType === 3 && child.textContent!.trim() !== '',
      )
      if (!own || (node as HTMLElement).offsetParent === null) continue
      const [a, b] = [luminance(rgb(getComputedStyle(node).color)), luminance(background(node))]
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)
      if (ratio < 4.5)
        low.push(`${node.tagName} "${node.textContent!.trim().slice(0, 30)}": ${ratio.toFixed(2)}`)
    }
    return low
  })
}

async function limits(
  gateway: GatewayProcess,
): Promise<{ override: number | null; holders: number; queued: number }> {
  const body = (await (await fetch(`${gateway.adminUrl}/limits/default`)).json()) as {
    buckets: { override: number | null; holders: number; queued: number }[]
  }
  return body.buckets[0]!
}

describe.skipIf(!executable)('the dashboard, in Chromium', () => {
  let upstream: Upstream
  beforeAll(() => {
    if (!executable)
      console.log('dashboard tests skipped: no Chromium (apt-get install chromium, or TOLLGATE_CHROMIUM)')
  })

  it('shows the fleet as the upstream and the store see it, sets a limit for every replica, with no console error or CSP violation', async () => {
    upstream = await startUpstream()
    const flags = [
      ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
      '--redis',
      redisUrl(topology().standalone),
      '--permits',
      '2',
      '--max-wait-ms',
      '30000',
    ]
    const [a, b] = await Promise.all([spawnGateway(flags), spawnGateway(flags)])
    // Five requests, held by the upstream: two in flight, three waiting in the fair queue.
    const held = [a, b, a, b, a].map((g) => fetch(`${g!.url}/hold`).then((r) => r.text()))
    await eventually(() => upstream.probe.inside === 2, 5_000)
    await eventually(async () => (await limits(b!)).queued === 3, 5_000)
    const { page, problems, polls } = await open(`${a!.adminUrl}/dashboard`)
    try {
      await eventually(async () => (await cell(page, 'default', 'Waiting (fleet)')) === '3', 10_000)
      expect(await cell(page, 'default', 'In flight (fleet)')).toBe(String(upstream.probe.inside))
      const store = await limits(b!)
      expect([store.holders, store.queued]).toEqual([2, 3])
      expect(await cell(page, 'default', 'Limit in force')).toBe('2')
      expect(await cell(page, 'default', 'Configured')).toBe('2')
      expect(await page.locator('#store').textContent()).toContain('up')
      // Every route is shown: no note of routes left out.
      expect(await page.locator('#routes-note').isHidden()).toBe(true)

      // Set from the page, with the keyboard: the other replica's /limits shows it, and the upstream
      // gets two more of the waiting requests.
      const input = page.getByLabel('New limit for default')
      await input.focus()
      await page.keyboard.type('4')
      await page.keyboard.press('Enter')
      await eventually(async () => (await limits(b!)).override === 4, 5_000)
      await eventually(() => upstream.probe.inside === 4, 5_000)
      await eventually(async () => (await cell(page, 'default', 'Override')) === '4', 10_000)
      await eventually(
        async () => (await page.locator('#changes').textContent())?.includes('4') ?? false,
        10_000,
      )

      // One change listed, not a change back to the old limit before the store's value is read.
      const changes = await page.locator('#changes tbody tr').allTextContents()
      expect(changes.filter((row) => row.includes('config'))).toEqual([])

      // Nothing wider than the window, the routes table in its scroller included (the limit's field
      // and buttons were cut off at 1280 px before the chart left the table).
      const overflow = await page.evaluate(() =>
        [document.documentElement, ...document.querySelectorAll('.scroll')].map(
          (box) => box.scrollWidth - box.clientWidth,
        ),
      )
      expect(
        overflow.every((extra) => extra <= 0),
        `overflow: ${overflow.join(', ')}`,
      ).toBe(true)

      mkdirSync(SHOTS, { recursive: true })
      const shot = await page.screenshot({ fullPage: true })
      const file = path.join(SHOTS, `dashboard-${process.pid}.png`)
      writeFileSync(file, shot)
      console.log(`dashboard screenshot: ${file}`)
      if (process.env.TOLLGATE_DASHBOARD_SCREENSHOT)
        writeFileSync(process.env.TOLLGATE_DASHBOARD_SCREENSHOT, shot)

      // Reset from the page: the configured 2 applies again.
      await page.getByRole('button', { name: 'Reset', exact: true }).click()
      await eventually(async () => (await limits(a!)).override === null, 5_000)
      // Listed as what it was, when it was (before: a change 'by config' when the next snapshot came).
      await eventually(
        async () =>
          (await page.locator('#changes tbody tr').allTextContents()).some((row) =>
            row.includes('override dropped (this replica)'),
          ),
        5_000,
      )
      expect(await lowContrast(page)).toEqual([])
      expect(problems).toEqual([])

      // The charts' history is sent once: once the page holds a point, every poll names the newest
      // (and is sent the last 10 s), and the page holds exactly the whole history up to its newest
      // point, no point missing or twice, and draws each: checked once it holds more than one poll
      // with since could carry (11 points), so that only merging what it was sent can pass.
      const page1 = async () =>
        (await page.evaluate(
          `[[...histories.values()][0].map((p) => p.t), document.querySelector('svg.chart polyline.fleet').getAttribute('points')]`,
        )) as [number[], string]
      await eventually(async () => (await page1())[0].length >= 14, 20_000, 500)
      await eventually(() => polls.filter((url) => url.includes('since=')).length >= 2, 10_000)
      expect(polls[0]).not.toContain('since=')
      const since = polls.findIndex((url) => url.includes('since='))
      expect(polls.slice(since).filter((url) => !/\?since=\d+$/.test(url))).toEqual([])
      const [times, drawn] = await page1()
      type Whole = { routes: { history: { t: number }[] }[] }
      const whole = ((await (await fetch(`${a!.adminUrl}/dashboard/data.json`)).json()) as Whole).routes[0]!
      expect(times).toEqual(whole.history.map((p) => p.t).filter((t) => t <= times.at(-1)!))
      expect(drawn.trim().split(' ')).toHaveLength(times.length)
    } finally {
      // Release every held request, also those admitted by the releases themselves.
      let settled = false
      void Promise.allSettled(held).then(() => (settled = true))
      await eventually(() => {
        for (const release of upstream.probe.holders.splice(0)) release()
        return settled
      }, 10_000)
      await page.context().close()
    }
  }, 90_000)

  it('beyond loopback without a token: the page is read-only and says why; with a token, it sets limits', async () => {
    upstream = await startUpstream()
    const base = [...baseFlags(upstream.url, uniquePrefix().slice(0, -1)), '--admin-host', '0.0.0.0']
    const open0 = await spawnGateway(base)
    const url = open0.adminUrl!.replace('0.0.0.0', '127.0.0.1')
    const { page, problems } = await open(`${url}/dashboard`)
    try {
      await eventually(
        async () => ((await page.locator('#access-note').textContent()) ?? '').includes('Read-only'),
        10_000,
      )
      expect(await page.locator('#access-note').textContent()).toContain('--admin-token-file')
      expect(await page.getByRole('button', { name: 'Set', exact: true }).isDisabled()).toBe(true)
      expect(await page.locator('#token-form').isHidden()).toBe(true)
      expect(problems).toEqual([])
    } finally {
      await page.context().close()
    }
    // The same listener with a token: the page asks for it, and sets limits with it.
    const dir = path.join(os.tmpdir(), `tollgate-token-${process.pid}`)
    mkdirSync(dir, { recursive: true })
    const tokenFile = path.join(dir, 'token')
    writeFileSync(tokenFile, 'a-token-of-sixteen-chars-or-more\n')
    const guarded = await spawnGateway([...base, '--admin-token-file', tokenFile])
    const second = await open(`${guarded.adminUrl!.replace('0.0.0.0', '127.0.0.1')}/dashboard`)
    try {
      await eventually(() => second.page.locator('#token-form').isVisible(), 10_000)
      expect(await second.page.getByRole('button', { name: 'Set', exact: true }).isDisabled()).toBe(true)
      await second.page.getByLabel('Admin token').fill('a-token-of-sixteen-chars-or-more')
      // Once entered, the page reads its data with it (the busiest buckets' names need it).
      const withToken = second.page.waitForRequest(
        (request) =>
          new URL(request.url()).pathname === '/dashboard/data.json' && // ?since= after the first points
          request.headers().authorization === 'Bearer a-token-of-sixteen-chars-or-more',
        { timeout: 5_000 },
      )
      await second.page.getByRole('button', { name: 'Use this token' }).click()
      await withToken
      await second.page.getByLabel('New limit for default').fill('7')
      await second.page.getByRole('button', { name: 'Set', exact: true }).click()
      await eventually(
        async () => ((await second.page.locator('#result').textContent()) ?? '').includes('limit set to 7'),
        5_000,
      )
      const read = await fetch(`${guarded.adminUrl!.replace('0.0.0.0', '127.0.0.1')}/limits/default`, {
        headers: { authorization: 'Bearer a-token-of-sixteen-chars-or-more' },
      })
      expect(((await read.json()) as { buckets: { override: number }[] }).buckets[0]!.override).toBe(7)
      expect(second.problems).toEqual([])
    } finally {
      await second.page.context().close()
    }
  }, 60_000)
})

// What the page draws, without a browser (these run everywhere): /dashboard/data.json.
describe('the dashboard data', () => {
  it('lists the busiest buckets of a per-tenant route with the fleet figures, to who may read /limits only; a failed reload with its message', async () => {
    const upstream = await startUpstream()
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-dashboard-data-'))
    const file = path.join(dir, 'tenants.yaml')
    const config = (permits: number | string) =>
      `defaults:\n  upstream: ${upstream.url}\n  concurrency: { per: tenant, maxWaitMs: 30000 }\n` +
      `routes:\n  - name: api\n    match: { pathPrefix: / }\n    concurrency: { permits: ${permits} }\n`
    writeFileSync(file, config(1))
    const gateway = await spawnGateway([
      ...['--config', file, '--port', '0', '--admin-port', '0'],
      ...['--redis', redisUrl(topology().standalone), '--prefix', uniquePrefix().slice(0, -1)],
    ])
    // acme: one in flight, two waiting; beta: one in flight; a third tenant sends nothing.
    const tenants = ['acme', 'acme', 'acme', 'beta']
    const held = tenants.map((tenant) =>
      fetch(`${gateway.url}/hold`, { headers: { 'x-tenant-id': tenant } }).then((r) => r.text()),
    )
    type Data = {
      routes: { buckets: { bucket: string; holders: number; queued: number; effective: number }[] }[]
      config: { lastReload: { ok: boolean; message: string } | null }
      access: { bucketsShown: boolean }
    }
    const data = async (headers: Record<string, string> = {}) =>
      (await (await fetch(`${gateway.adminUrl}/dashboard/data.json`, { headers })).json()) as Data
    try {
      await eventually(() => upstream.probe.inside === 2, 5_000)
      await eventually(
        async () => (await data()).routes[0]!.buckets.find((b) => b.bucket === 'acme')?.queued === 2,
        10_000,
      )
      const buckets = (await data()).routes[0]!.buckets
      // The busiest first (acme had three requests, beta one), each with the store's figures.
      expect(buckets.map((b) => b.bucket)).toEqual(['acme', 'beta'])
      expect(buckets).toEqual([
        { bucket: 'acme', holders: 1, queued: 2, effective: 1 },
        { bucket: 'beta', holders: 1, queued: 0, effective: 1 },
      ])
      // Still listed seconds later while they only wait: no new request, the score decays slowly.
      await sleep(2_500)
      expect((await data()).routes[0]!.buckets.map((b) => b.bucket)).toEqual(['acme', 'beta'])
      // Bucket names are request data: a request /limits would refuse (another page's Origin) gets none.
      const foreign = await data({ origin: 'http://attacker.example' })
      expect(foreign.access.bucketsShown).toBe(false)
      expect(foreign.routes[0]!.buckets).toEqual([])

      writeFileSync(file, config('many'))
      gateway.kill('SIGHUP')
      await eventually(async () => (await data()).config.lastReload?.ok === false, 10_000)
      expect((await data()).config.lastReload?.message).toContain('permits')
    } finally {
      let settled = false
      void Promise.allSettled(held).then(() => (settled = true))
      await eventually(() => {
        for (const release of upstream.probe.holders.splice(0)) release()
        return settled
      }, 10_000)
      rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)

  it("shows a read/write-locked route's busiest resources: readers, writer and waiters as the fleet holds them, to who may read /limits only", async () => {
    const upstream = await startUpstream()
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-dashboard-locks-'))
    const file = path.join(dir, 'docs.yaml')
    writeFileSync(
      file,
      `defaults:\n  upstream: ${upstream.url}\n` +
        `routes:\n  - name: docs\n    match: { pathPrefix: /docs }\n` +
        `    rwlock: { resourcePattern: '^/docs/([^/]+)', maxWaitMs: 30000 }\n` +
        `  - name: plain\n    match: { pathPrefix: / }\n`,
    )
    const gateway = await spawnGateway([
      ...['--config', file, '--port', '0', '--admin-port', '0'],
      ...['--redis', redisUrl(topology().standalone), '--prefix', uniquePrefix().slice(0, -1)],
    ])
    type Lock = { resource: string; readers: number | null; writer: boolean | null; queued: number | null }
    type Data = { routes: { name: string; locks: Lock[] | null }[]; access: { bucketsShown: boolean } }
    const data = async (headers: Record<string, string> = {}) =>
      (await (await fetch(`${gateway.adminUrl}/dashboard/data.json`, { headers })).json()) as Data
    const send = (method: string, doc: string) =>
      fetch(`${gateway.url}/docs/${doc}/hold`, { method }).then((r) => r.text())
    // Doc 42: two readers hold it, then a writer waits, and a reader behind the writer (writers are
    // preferred). Doc 7: a writer holds it.
    const held = [send('GET', '42'), send('GET', '42'), send('PUT', '7')]
    const sent: Promise<string>[] = []
    try {
      await eventually(() => upstream.probe.inside === 3, 5_000)
      sent.push(send('PUT', '42'))
      await eventually(
        async () => (await data()).routes[0]!.locks?.find((l) => l.resource === '42')?.queued === 1,
        10_000,
      )
      sent.push(send('GET', '42'))
      await eventually(
        async () => (await data()).routes[0]!.locks?.find((l) => l.resource === '42')?.queued === 2,
        10_000,
      )
      const { routes } = await data()
      // The busiest first (doc 42 had four requests, doc 7 one), each with the store's figures.
      expect(routes[0]!.locks).toEqual([
        { resource: '42', readers: 2, writer: false, queued: 2 },
        { resource: '7', readers: 0, writer: true, queued: 0 },
      ])
      // A route without a read/write lock has none to show.
      expect(routes[1]!.locks).toBeNull()
      // Resources are request paths: a request /limits would refuse (another page's Origin) gets none.
      const foreign = await data({ origin: 'http://attacker.example' })
      expect(foreign.access.bucketsShown).toBe(false)
      expect(foreign.routes[0]!.locks).toEqual([])
      if (browser) {
        // What a person sees: a row per resource, under its route.
        const { page, problems } = await open(`${gateway.adminUrl}/dashboard`)
        try {
          const rows = () =>
            page.evaluate(() =>
              [...document.querySelectorAll('#locks tbody tr')].map((tr) =>
                [...tr.children].map((cell) => cell.textContent),
              ),
            )
          await eventually(async () => (await rows()).length === 2, 10_000)
          expect(await rows()).toEqual([
            ['docs', '42', '2', 'none', '2'],
            ['docs', '7', '0', 'writing', '0'],
          ])
          expect(await page.locator('#locks-section').isVisible()).toBe(true)
          expect(problems).toEqual([])
        } finally {
          await page.context().close()
        }
      }
    } finally {
      let settled = false
      void Promise.allSettled([...held, ...sent]).then(() => (settled = true))
      await eventually(() => {
        for (const release of upstream.probe.holders.splice(0)) release()
        return settled
      }, 10_000)
      rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)
})

// The admin listener's own answers are bounded as the proxy's are, and the page's data is not for
// another site's pages (DNS rebinding).
describe("the admin listener's answers", () => {
  it('a client that never reads its pipelined answers is cut within the send timeout; the others are served', async () => {
    const upstream = await startUpstream()
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
      ...['--send-timeout-ms', '1000'],
    ])
    const { hostname, port } = new URL(gateway.adminUrl!)
    // Before: nothing bounded an answer's sending, so 64 such clients shut everyone out for good.
    const socket = net.connect(Number(port), hostname)
    socket.pause() // reads nothing
    socket.on('error', () => undefined)
    const closed = once(socket, 'close')
    // (The page's script: ~14 KB each, 28 MB in all, more than the sockets' buffers hold; cheap to
    // serve.)
    const answer = await (await fetch(`${gateway.adminUrl}/dashboard/app.js`)).arrayBuffer()
    socket.write(`GET /dashboard/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`.repeat(2_000))
    await sleep(2_500) // past the send timeout, with nothing taken
    socket.resume() // (a paused socket sees no close: reading shows what the server did)
    const resumed = performance.now()
    await closed
    // Cut: it ends at once, with what the buffers held, not the 2,000 answers (nor after the
    // keep-alive time, 5 s, once they were all taken).
    expect(performance.now() - resumed).toBeLessThan(2_000)
    expect(socket.bytesRead).toBeLessThan(2_000 * answer.byteLength)
    expect((await fetch(`${gateway.adminUrl}/readyz`)).status).toBe(200)
  }, 20_000)

  it('on loopback, the dashboard answers only a loopback Host (DNS rebinding); /metrics as before', async () => {
    const upstream = await startUpstream()
    const gateway = await spawnGateway(baseFlags(upstream.url, uniquePrefix().slice(0, -1)))
    const { hostname, port } = new URL(gateway.adminUrl!)
    const status = (path: string, host: string) =>
      new Promise<number>((resolve, reject) =>
        http
          .get({ hostname, port, path, headers: { host } }, (res) => {
            res.resume()
            resolve(res.statusCode ?? 0)
          })
          .on('error', reject),
      )
    for (const path of ['/', '/dashboard', '/dashboard/data.json', '/dashboard/app.js'])
      expect(await status(path, `attacker.example:${port}`), path).toBe(403)
    expect(await status('/dashboard/data.json', `localhost:${port}`)).toBe(200)
    expect(await status('/dashboard/data.json', `127.0.0.1:${port}`)).toBe(200)
    expect(await status('/metrics', `attacker.example:${port}`)).toBe(200)
  })

  it('a Redis that hangs (SIGSTOP) shows as not answering, though not known down yet', async () => {
    const upstream = await startUpstream()
    const redis = await startRedisServer()
    try {
      const gateway = await spawnGateway([
        ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
        ...['--redis', redis.url, '--permits', '4'],
      ])
      type Store = { store: { up: boolean; answering: boolean | null } }
      const store = async () =>
        ((await (await fetch(`${gateway.adminUrl}/dashboard/data.json`)).json()) as Store).store
      expect(await store()).toEqual(expect.objectContaining({ up: true, answering: true }))
      redis.kill('SIGSTOP')
      try {
        // Before: "up" with blank fleet figures, while /readyz said 503.
        await eventually(async () => (await store()).answering === false, 5_000, 250)
      } finally {
        redis.kill('SIGCONT')
      }
      await eventually(async () => (await store()).answering === true, 10_000, 250)
    } finally {
      await redis.stop()
    }
  }, 30_000)
})

describe.skipIf(!executable)('the dashboard in an outage, in Chromium', () => {
  it("outage: share: while Redis is down, the page, /limits and /metrics show this replica's share and what runs on it; back to the fleet's limit after", async () => {
    const upstream = await startUpstream()
    const redis = await startRedisServer()
    try {
      const flags = [
        ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
        ...['--redis', redis.url, '--permits', '4', '--outage', 'share'],
      ]
      const [a, b] = (await Promise.all([spawnGateway(flags), spawnGateway(flags)])) as [
        GatewayProcess,
        GatewayProcess,
      ]
      type Outage = { local: boolean; replicas: number | null; share: number; inMemory: number }
      const outage = async (gateway: GatewayProcess) =>
        ((await (await freshAdminGet(`${gateway.adminUrl}/limits/default`)).json()) as { outage: Outage })
          .outage
      // Both replicas counted on the store before it goes.
      await eventually(async () => (await outage(a)).replicas === 2, 10_000, 250)
      const { page, problems } = await open(`${a.adminUrl}/dashboard`)
      try {
        await eventually(async () => (await cell(page, 'default', 'Limit in force')) === '4', 10_000)
        redis.kill()
        await redis.exited()
        // A request notices the outage; one held here runs on the share meanwhile.
        const held = fetch(`${a.url}/hold`).then((r) => r.text())
        await eventually(() => upstream.probe.inside === 1, 5_000)
        await eventually(async () => (await outage(a)).local, 5_000, 100)
        expect(await outage(a)).toMatchObject({ local: true, replicas: 2, share: 2, inMemory: 1 })
        const text = await (await freshAdminGet(`${a.adminUrl}/metrics`)).text()
        expect(metric(text, 'tollgate_outage_local', { route: 'default' })).toBe(1)
        expect(metric(text, 'tollgate_outage_in_memory', { route: 'default' })).toBe(1)
        expect(metric(text, 'tollgate_outage_replicas', { route: 'default' })).toBe(2)
        await eventually(
          async () =>
            (await cell(page, 'default', 'Limit in force')) ===
            "2 here (store down: this replica's share of 4, 2 replicas; 1 in flight)",
          10_000,
        )
        expect(await page.locator('#status').textContent()).toContain('DOWN')
        for (const release of upstream.probe.holders.splice(0)) release()
        expect(await held).toBe('held')
        await redis.restart()
        await eventually(async () => !(await outage(a)).local, 10_000, 250)
        await eventually(async () => (await cell(page, 'default', 'Limit in force')) === '4', 10_000)
        const after = await (await freshAdminGet(`${a.adminUrl}/metrics`)).text()
        expect(metric(after, 'tollgate_outage_local', { route: 'default' })).toBe(0)
        expect(await lowContrast(page)).toEqual([])
        expect(problems.filter((p) => !p.includes('data.json'))).toEqual([])
      } finally {
        await page.context().close()
      }
      b.kill()
    } finally {
      await redis.stop()
      await upstream.close()
    }
  }, 60_000)
})
