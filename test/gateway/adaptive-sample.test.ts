// What the gateway's adaptive sample of one request is (docs/adaptive.md, "What a client
// cannot do"): the upstream's own time, whatever the client does around it. One request alone in its
// window (windows of 100 ms, scope 'local'), on the lean upstream path and on undici's, in-process.
import { once } from 'node:events'
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createGateway, type Gateway, resolveConfig, validateConfigFile } from '../../src/gateway/index.js'
import { sleep } from '../helpers/contract.js'
import { freshAdminGet } from '../helpers/gateway.js'

/** The upstream: far below its capacity whatever a client does.
 *   GET /work                  200 after 20 ms
 *   GET /trickle?size=B        200, 5 chunks of B bytes 200 ms apart (1 s to make its body)
 *   GET /slow                  200 after 2 s
 *   POST /upload               reads the whole body, then 200 20 ms later */
const upstream = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://x')
  if (url.pathname === '/trickle') {
    const size = Number(url.searchParams.get('size'))
    res.writeHead(200, { 'content-length': 5 * size })
    let sent = 0
    const next = () => {
      if (res.destroyed) return
      res.write(Buffer.alloc(size, 0x63))
      if (++sent === 5) return void res.end()
      setTimeout(next, 200)
    }
    return void setTimeout(next, 200)
  }
  if (url.pathname === '/upload') {
    req.resume()
    return void req.on('end', () => setTimeout(() => res.end('ok'), 20))
  }
  setTimeout(() => res.end('ok'), url.pathname === '/slow' ? 2000 : 20)
})

const gateways: Gateway[] = []
let lean: { url: string; adminUrl: string }
let undici: { url: string; adminUrl: string }

beforeAll(async () => {
  upstream.listen(0, '127.0.0.1')
  await once(upstream, 'listening')
  const start = async (leanPaths: boolean) => {
    const config = resolveConfig(
      validateConfigFile({
        lean: leanPaths,
        admin: { port: 0 },
        routes: [
          {
            name: 'api',
            match: { pathPrefix: '/' },
            upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
            concurrency: {
              per: 'route',
              maxWaitMs: 5000,
              adaptive: { max: 16, initial: 16, windowMs: 100, scope: 'local', probeEvery: 1_000_000 },
            },
          },
        ],
      }),
    )
    const gateway = createGateway(
      { ...config, port: 0 },
      { logger: pino({ level: 'silent' }), processMetrics: false },
    )
    gateways.push(gateway)
    const { url, adminUrl } = await gateway.listen()
    return { url, adminUrl: adminUrl as string }
  }
  lean = await start(true)
  undici = await start(false)
})

afterAll(async () => {
  await Promise.all(gateways.map((gateway) => gateway.close()))
  upstream.closeAllConnections()
  upstream.close()
})

interface Status {
  rttMs?: number
  minRttMs?: number
  reason?: string
  requests: number
}

async function status(adminUrl: string): Promise<Status> {
  const body = (await (await freshAdminGet(`${adminUrl}/limits/api`)).json()) as {
    buckets: { adaptive: Status }[]
  }
  return body.buckets[0]!.adaptive
}

/** GET `path`, read as fast as it comes; then the window that held it is stepped. */
async function lone(url: string, path: string): Promise<void> {
  await new Promise<void>((resolve, reject) =>
    http.get(`${url}${path}`, { agent: false }, (res) => res.resume().on('end', resolve)).on('error', reject),
  )
  await sleep(250)
}

/** A raw POST of a 64 KB body sent in 16 pieces over `ms`; resolves with the status (0: none). */
function slowUpload(url: string, ms: number): Promise<number> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), hostname)
    let got = ''
    const timers: NodeJS.Timeout[] = []
    socket.on('error', () => undefined)
    socket.on('data', (chunk: Buffer) => (got += chunk.toString('latin1')))
    socket.once('close', () => {
      for (const timer of timers) clearTimeout(timer)
      resolve(Number(/^HTTP\/1\.1 (\d+)/.exec(got)?.[1] ?? 0))
    })
    socket.write(
      `POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: ${64 * 1024}\r\nconnection: close\r\n\r\n`,
    )
    for (let i = 0; i < 16; i++)
      timers.push(setTimeout(() => socket.write(Buffer.alloc(4096, 0x62)), ((i + 1) * ms) / 16))
  })
}

describe("the gateway's adaptive sample of one request", () => {
  it('an upstream that makes its body in 1 s (64 KB chunks), read by a fast client: ~1 s on both upstream paths, not the time between chunks', async () => {
    const seen: string[] = []
    for (const [name, gateway] of [
      ['lean', lean],
      ['undici', undici],
    ] as const) {
      await lone(gateway.url, '/trickle?size=65536')
      seen.push(`${name} ${(await status(gateway.adminUrl)).rttMs}`)
    }
    // (Before: the lean path's writes of 64 KB said false, and each hold ran to the upstream's next
    // chunk: ~200 ms left of 1 s.)
    for (const line of seen) expect(Number(line.split(' ')[1]), seen.join(', ')).toBeGreaterThan(800)
  })

  it('a body sent in 1 s to an upstream that answers 20 ms after it: the sample is the 20 ms', async () => {
    expect(await slowUpload(undici.url, 1000)).toBe(200)
    await sleep(250)
    const { rttMs } = await status(undici.adminUrl)
    expect(rttMs).toBeLessThan(300)
  })

  it('clients that leave after 500 ms of a 2 s upstream: their time so far counts, so the limit sees the queue', async () => {
    await lone(lean.url, '/work')
    expect((await status(lean.adminUrl)).rttMs).toBeLessThan(200)
    await Promise.all(
      Array.from(
        { length: 4 },
        () =>
          new Promise<void>((resolve) => {
            const req = http.get(`${lean.url}/slow`, { agent: false })
            req.on('error', () => resolve())
            setTimeout(() => {
              req.destroy()
              resolve()
            }, 500)
          }),
      ),
    )
    await sleep(250)
    // (Before: no sample at all; the limit saw an idle upstream.)
    expect((await status(lean.adminUrl)).rttMs).toBeGreaterThan(400)
  })

  it('clients that leave at once count for nothing: the upstream does not look faster', async () => {
    await lone(undici.url, '/work')
    const before = (await status(undici.adminUrl)).rttMs as number
    await Promise.all(
      Array.from(
        { length: 8 },
        () =>
          new Promise<void>((resolve) => {
            const req = http.get(`${undici.url}/work`, { agent: false })
            req.on('error', () => resolve())
            setTimeout(() => {
              req.destroy()
              resolve()
            }, 2)
          }),
      ),
    )
    await sleep(250)
    expect((await status(undici.adminUrl)).rttMs).toBeGreaterThanOrEqual(before * 0.5)
  })
})
