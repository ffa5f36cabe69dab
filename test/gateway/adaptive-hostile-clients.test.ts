// What one client can make the upstream answer must not set the fleet's adaptive limit (issue 37,
// docs/adaptive.md, "What a client cannot do"): two replicas of the real bin on one Redis (the
// second without the lean paths), an upstream that answers in 20 ms far below its capacity (a process
// of its own), 8 well-behaved clients, each from an address of its own (127.0.0.10-17; the attackers
// from others). With no attack the limit sits at or near its max (16). One fleet meets every attack
// in turn, and during each the limit's lowest value stays within 25 % of its value without one:
//   1. a request per window to a path answered 503 or 429;
//   2. three clients reading a 16 MB response slowly (the gateway holds the upstream back);
//   3. one client with six 64 KB uploads at a time, each body sent in 1.5 s (the upstream answers
//      20 ms after the body's end);
//   4. one client sending 30 requests a second (~8 % of the traffic) to a path answered 503;
//   5. one user running six 1 s queries at a time (a legitimately slow endpoint, far below capacity).
// Then one client sends cheap requests at up to 800 a second (to dilute the drops), and the upstream
// sheds 10 % of the good clients' requests with 503 (a real overload): the limit backs off.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { spawnChild } from '../helpers/child.js'
import { sleep } from '../helpers/contract.js'
import { type GatewayProcess, redisUrl, spawnGateway } from '../helpers/gateway.js'
import { topology, uniquePrefix } from '../helpers/redis.js'

const MAX = 16
const GOOD_CLIENTS = 8
const WINDOW_MS = 250
/** A slow reader takes 128 KB every 32 ms: 4 MB/s, 4 s per 16 MB response (the upstream's 20 ms x
 * 200). The socket buffers between the upstream and the reader hold a few MB of it: the gateway holds
 * the upstream back for most of those 4 s. */
const READ_CHUNK = 128 * 1024
const READ_TICK_MS = 32

/** A client address of its own (every 127.0.0.0/8 address is this machine's). */
const address = (n: number) => `127.0.0.${n}`

/** Loops that run `once` until stopped; stop() waits for the last. */
function loops(count: number, once: (i: number) => Promise<unknown>, staggerMs = 0) {
  let running = true
  const all = Array.from({ length: count }, async (_, i) => {
    await sleep(i * staggerMs)
    while (running) await once(i)
  })
  return {
    get running() {
      return running
    },
    async stop() {
      running = false
      await Promise.all(all)
    },
  }
}

/** GET `url` on `agent`; resolves with the status (0 on an error) once the body is read. */
function get(url: string, agent: http.Agent): Promise<number> {
  return new Promise((resolve) => {
    http
      .get(url, { agent }, (res) =>
        res
          .resume()
          .on('end', () => resolve(res.statusCode ?? 0))
          .on('error', () => resolve(0)),
      )
      .on('error', () => resolve(0))
  })
}

/** The good clients: closed loops of GET `path()` over the replicas, each from its own address;
 * counts the 200s. */
function goodClients(gateways: readonly GatewayProcess[], path: () => string) {
  let ok = 0
  const agents = Array.from(
    { length: GOOD_CLIENTS },
    (_, i) => new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: address(10 + i) }),
  )
  const running = loops(GOOD_CLIENTS, async (i) => {
    if ((await get(`${gateways[i % gateways.length]!.url}${path()}`, agents[i]!)) === 200) ok++
  })
  return {
    ok: () => ok,
    async stop() {
      await running.stop()
      for (const agent of agents) agent.destroy()
    },
  }
}

/** A raw request from `from` on a connection of its own: `head`, then `body` bytes in 16 pieces over
 * `bodyMs`, reading the response at `readBytesPerS` (or as it comes); resolves once closed. */
function raw(
  gateway: GatewayProcess,
  from: string,
  head: string,
  options: { body?: number; bodyMs?: number; readBytesPerS?: number } = {},
): Promise<void> {
  const { hostname, port } = new URL(gateway.url)
  return new Promise((resolve) => {
    const socket = net.connect({ port: Number(port), host: hostname, localAddress: from })
    const timers: NodeJS.Timeout[] = []
    socket.on('error', () => undefined)
    socket.on('data', (chunk: Buffer) => {
      if (!options.readBytesPerS) return
      socket.pause()
      timers.push(setTimeout(() => socket.resume(), (1000 * chunk.length) / options.readBytesPerS))
    })
    socket.once('close', () => {
      for (const timer of timers) clearTimeout(timer)
      resolve()
    })
    socket.write(head)
    const { body = 0, bodyMs = 0 } = options
    for (let i = 0; i < 16 && body > 0; i++)
      timers.push(setTimeout(() => socket.write(Buffer.alloc(body / 16, 0x62)), ((i + 1) * bodyMs) / 16))
  })
}

/** The lowest adaptive limit either replica reports, polled every 50 ms until stop(). */
function watchLimit(gateways: readonly GatewayProcess[]) {
  const seen: number[] = []
  const polling = loops(1, async () => {
    const limits = await Promise.all(
      gateways.map(async (g) => {
        const body = (await (await fetch(`${g.adminUrl}/limits/api`)).json()) as {
          buckets: { adaptive: { limit: number } }[]
        }
        return body.buckets[0]!.adaptive.limit
      }),
    )
    seen.push(Math.min(...limits))
    await sleep(50)
  })
  return {
    async stop(): Promise<number[]> {
      await polling.stop()
      return seen
    },
  }
}

let dir: string | undefined
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true })
  dir = undefined
})

/** Two replicas (the second without the lean paths) with an adaptive limit of max 16, initial 16, no
 * probes of the baseline (a probe runs below the limit on purpose), windows of 250 ms, and
 * latency up to 1.5 x the baseline counted as unloaded (so that the delays of a machine shared with
 * other work do not move the limit by themselves). */
async function fleet() {
  // (A child process, stopped by its PID after the test.)
  const up = await spawnChild(new URL('../fixtures/adaptive-upstream.ts', import.meta.url)).waitFor<{
    type: 'ready'
    url: string
  }>('ready', 15_000)
  dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-adaptive-hostile-'))
  const config = path.join(dir, 'gateway.json')
  const adaptive = { max: MAX, initial: MAX, probeEvery: 1_000_000, windowMs: WINDOW_MS, tolerance: 1.5 }
  writeFileSync(
    config,
    JSON.stringify({
      routes: [
        {
          name: 'api',
          match: { pathPrefix: '/' },
          upstream: up.url,
          concurrency: { per: 'route', maxWaitMs: 10_000, maxQueue: 1000, adaptive },
        },
      ],
    }),
  )
  const flags = [
    '--config',
    config,
    '--port',
    '0',
    '--admin-port',
    '0',
    '--prefix',
    uniquePrefix().slice(0, -1),
    '--redis',
    redisUrl(topology().standalone),
  ]
  return Promise.all([spawnGateway(flags), spawnGateway([...flags, '--lean', 'off'])])
}

/** The limit's lowest value and median over `ms`, and the good clients' 200s per second. */
async function phase(gateways: readonly GatewayProcess[], good: { ok(): number }, ms: number) {
  const watch = watchLimit(gateways)
  const before = good.ok()
  const started = performance.now()
  await sleep(ms)
  const okPerS = Math.round(((good.ok() - before) * 1000) / (performance.now() - started))
  const limits = await watch.stop()
  const median = (of: number[]) => [...of].sort((a, b) => a - b)[Math.floor(of.length / 2)]!
  return { min: Math.min(...limits), median: median(limits), okPerS }
}

describe('an adaptive limit and what one client makes the upstream answer [2 replicas on Redis]', () => {
  it('no attack moves the limit by more than 25 %; a real overload backs it off, also diluted by one client', async () => {
    const gateways = await fleet()
    const [lean, undici] = gateways as [GatewayProcess, GatewayProcess]
    let goodPath = '/work'
    const good = goodClients(gateways, () => goodPath)
    const seen: string[] = []
    try {
      await sleep(1_000)
      const quiet = await phase(gateways, good, 2_000)
      seen.push(`quiet: limit ${quiet.median} (lowest ${quiet.min}), ${quiet.okPerS} ok/s`)
      // Without an attack the limit sits near its max: the upstream is far from its capacity.
      expect(quiet.median, seen.join('\n')).toBeGreaterThanOrEqual(0.75 * MAX)

      const attacks: [string, number, () => { stop(): Promise<void> }][] = [
        [
          '1. a 503 or 429 per window',
          2_000,
          () => {
            const agent = new http.Agent({ keepAlive: true, localAddress: address(200) })
            let n = 0
            const attack = loops(1, async () => {
              await get(`${lean.url}/${n++ % 2 === 0 ? 503 : 429}`, agent)
              await sleep(WINDOW_MS)
            })
            return { stop: () => attack.stop().then(() => agent.destroy()) }
          },
        ],
        [
          '2. three slow readers of 16 MB',
          5_000,
          () => {
            const head = 'GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'
            const readBytesPerS = (1000 * READ_CHUNK) / READ_TICK_MS
            // Started 500 ms apart: their responses end in different windows.
            const readers = loops(
              3,
              (i) => raw(i === 0 ? lean : undici, address(201 + i), head, { readBytesPerS }),
              500,
            )
            return readers
          },
        ],
        [
          '3. six slow uploads of 64 KB at a time',
          4_000,
          () => {
            const head = `POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: ${64 * 1024}\r\nconnection: close\r\n\r\n`
            const upload = (i: number) =>
              raw(gateways[i % 2]!, address(204), head, { body: 64 * 1024, bodyMs: 1_500 })
            return loops(6, upload, WINDOW_MS)
          },
        ],
        [
          '4. one client sending 30 requests a second to a 503 path',
          3_000,
          () => {
            const agent = new http.Agent({ keepAlive: true, maxSockets: 4, localAddress: address(205) })
            const attack = loops(1, async () => {
              void get(`${lean.url}/503`, agent)
              await sleep(1000 / 30)
            })
            return { stop: () => attack.stop().then(() => agent.destroy()) }
          },
        ],
        [
          "5. one user's six 1 s queries at a time",
          4_000,
          () => {
            const agent = new http.Agent({ keepAlive: true, localAddress: address(206) })
            const user = loops(6, () => get(`${lean.url}/slow?ms=1000`, agent))
            return { stop: () => user.stop().then(() => agent.destroy()) }
          },
        ],
      ]
      const lowest: number[] = []
      for (const [name, ms, start] of attacks) {
        const attack = start()
        const attacked = await phase(gateways, good, ms)
        await attack.stop()
        lowest.push(attacked.min)
        seen.push(`${name}: lowest ${attacked.min} (median ${attacked.median}), ${attacked.okPerS} ok/s`)
        await sleep(500) // what is in flight ends
      }
      for (const min of lowest) expect(min, seen.join('\n')).toBeGreaterThanOrEqual(0.75 * quiet.median)

      // A real overload: the upstream sheds 10 % of the good clients' requests, while one client sends
      // cheap requests at up to 800 a second (none dropped: 3 % of all the requests are drops).
      const agent = new http.Agent({ keepAlive: true, maxSockets: 8, localAddress: address(207) })
      const diluter = loops(1, async () => {
        void get(`${lean.url}/fast`, agent)
        await sleep(1000 / 800)
      })
      await sleep(500)
      goodPath = '/overload?p=0.1'
      const shedding = await phase(gateways, good, 4_000)
      await diluter.stop()
      agent.destroy()
      seen.push(`shedding 10 %, diluted: lowest ${shedding.min} (median ${shedding.median})`)
      // Backed off at least three windows running (x 0.9 each: 16 -> 11.7): before, diluted to 3 % of
      // the requests, the drops never backed it off (16 throughout). Not where it settles: between
      // back-offs the gradient climbs again, faster or slower with the machine's load.
      expect(shedding.min, seen.join('\n')).toBeLessThan(0.75 * MAX)
    } finally {
      await good.stop()
    }
  }, 90_000)
})
