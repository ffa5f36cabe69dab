// What one client can make the upstream answer must not set the fleet's adaptive limit (issue 37,
// README "Adaptive limits"): two replicas of the real bin on one Redis, an upstream that answers in
// 20 ms far below its capacity (a process of its own), 8 well-behaved clients. With no attack the
// limit sits at or near its max (16).
// Attack 1: one request per window to a path the upstream answers 503 (or 429). Attack 2: three
// clients reading a 16 MB response slowly, so that the gateway holds the upstream back (one replica
// on the lean upstream path, the other on undici's). Either way the limit's lowest value during the
// attack stays within 25 % of its value without it.
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
/** A slow reader takes this many bytes per tick of READ_TICK_MS: 4 MB/s, 4 s per 16 MB response (the
 * upstream's 20 ms x 200). The socket buffers between the upstream and the reader hold a few MB of
 * it: the gateway holds the upstream back for most of those 4 s. */
const READ_CHUNK = 128 * 1024
const BIG_BYTES = 16 * 1024 * 1024
const READ_TICK_MS = 32

/** Closed loops of GET /work over the gateways, each on its own keep-alive socket; counts the 200s. */
function goodClients(gateways: readonly GatewayProcess[]) {
  let running = true
  let ok = 0
  const agent = new http.Agent({ keepAlive: true, maxSockets: GOOD_CLIENTS })
  const get = (url: string) =>
    new Promise<void>((resolve) => {
      http
        .get(url, { agent }, (res) => {
          if (res.statusCode === 200) ok++
          res
            .resume()
            .on('end', resolve)
            .on('error', () => resolve())
        })
        .on('error', () => resolve())
    })
  const loops = Array.from({ length: GOOD_CLIENTS }, async (_, i) => {
    while (running) await get(`${gateways[i % gateways.length]!.url}/work`)
  })
  return {
    ok: () => ok,
    async stop() {
      running = false
      await Promise.all(loops)
      agent.destroy()
    },
  }
}

/** A client that asks for /big over and over (from `afterMs` on) and reads it slowly; counts the
 * responses it read to their end. */
function slowReader(gateway: GatewayProcess, afterMs: number) {
  let running = true
  let completed = 0
  let socket: net.Socket | undefined
  const { hostname, port } = new URL(gateway.url)
  const once = () =>
    new Promise<void>((resolve) => {
      const s = (socket = net.connect(Number(port), hostname))
      s.write('GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n')
      let timer: NodeJS.Timeout | undefined
      let read = 0
      s.on('data', (chunk: Buffer) => {
        read += chunk.length
        s.pause()
        timer = setTimeout(() => s.resume(), (READ_TICK_MS * chunk.length) / READ_CHUNK)
      })
      s.on('error', () => undefined)
      s.once('close', () => {
        clearTimeout(timer)
        if (read > BIG_BYTES) completed++ // (its head is a few hundred bytes more)
        resolve()
      })
    })
  const loop = (async () => {
    await sleep(afterMs)
    while (running) await once()
  })()
  return {
    completed: () => completed,
    async stop() {
      running = false
      socket?.destroy()
      await loop
    },
  }
}

/** The lowest adaptive limit either replica reports, polled every 50 ms until stop(). */
function watchLimit(gateways: readonly GatewayProcess[]) {
  const seen: number[] = []
  let running = true
  const loop = (async () => {
    while (running) {
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
    }
  })()
  return {
    async stop(): Promise<number[]> {
      running = false
      await loop
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
 * probes of the baseline (a probe runs at a quarter of the limit on purpose) and `adaptive`, and 8
 * good clients running. */
async function fleet(adaptive: Record<string, unknown>) {
  // (A child process, stopped by its PID after the test.)
  const up = await spawnChild(new URL('../fixtures/adaptive-upstream.ts', import.meta.url)).waitFor<{
    type: 'ready'
    url: string
  }>('ready', 15_000)
  dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-adaptive-hostile-'))
  const config = path.join(dir, 'gateway.json')
  writeFileSync(
    config,
    JSON.stringify({
      routes: [
        {
          name: 'api',
          match: { pathPrefix: '/' },
          upstream: up.url,
          concurrency: {
            per: 'route',
            maxWaitMs: 10_000,
            maxQueue: 1000,
            adaptive: { max: MAX, initial: MAX, probeEvery: 1_000_000, ...adaptive },
          },
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
  const gateways = await Promise.all([spawnGateway(flags), spawnGateway([...flags, '--lean', 'off'])])
  return { gateways, good: goodClients(gateways) }
}

/** The limit's lowest value and median over `ms`, and the good clients' 200s per second. */
async function phase(gateways: readonly GatewayProcess[], good: { ok(): number }, ms: number) {
  const watch = watchLimit(gateways)
  const before = good.ok()
  const started = performance.now()
  await sleep(ms)
  const okPerS = ((good.ok() - before) * 1000) / (performance.now() - started)
  const limits = await watch.stop()
  const sorted = limits.sort((a, b) => a - b)
  return { min: sorted[0]!, median: sorted[Math.floor(sorted.length / 2)]!, okPerS }
}

describe('an adaptive limit and what one client makes the upstream answer [2 replicas on Redis]', () => {
  it('one request per window to a path answered 503 or 429 does not move the limit', async () => {
    // AIMD: only drops move it down, so what a loaded machine does to latency cannot blur the result.
    const windowMs = 250
    const { gateways, good } = await fleet({ algorithm: 'aimd', windowMs })
    try {
      await sleep(1_000)
      const quiet = await phase(gateways, good, 1_500)
      // Without an attack the limit sits near its max: the upstream is far from its capacity.
      expect(quiet.median).toBeGreaterThanOrEqual(0.75 * MAX)
      let attacking = true
      const attack = (async () => {
        for (let i = 0; attacking; i++) {
          await fetch(`${gateways[0]!.url}/${i % 2 === 0 ? 503 : 429}`).then((r) => r.text())
          await sleep(windowMs)
        }
      })()
      const attacked = await phase(gateways, good, 3_000)
      attacking = false
      await attack
      const seen = `limit ${quiet.median} -> lowest ${attacked.min}; ok/s ${quiet.okPerS.toFixed(0)} -> ${attacked.okPerS.toFixed(0)}`
      expect(attacked.min, seen).toBeGreaterThanOrEqual(0.75 * quiet.median)
    } finally {
      await good.stop()
    }
  }, 30_000)

  it('three clients reading a 16 MB response slowly do not move the limit (lean and undici paths)', async () => {
    // The gradient: latency moves it. Windows of 250 ms hold ~75 requests of the good clients; latency
    // up to 1.5 x the baseline counts as unloaded, so that the delays of a machine shared with other
    // work do not move the limit by themselves (a slow reader's 4 s counted as latency still does).
    const { gateways, good } = await fleet({ windowMs: 250, tolerance: 1.5 })
    try {
      await sleep(1_000)
      const quiet = await phase(gateways, good, 1_500)
      // Without an attack the limit sits near its max: the upstream is far from its capacity.
      expect(quiet.median).toBeGreaterThanOrEqual(0.75 * MAX)
      // Started 500 ms apart: their responses end in different windows.
      const readers = [
        slowReader(gateways[0]!, 0),
        slowReader(gateways[1]!, 500),
        slowReader(gateways[1]!, 1000),
      ]
      const attacked = await phase(gateways, good, 6_000)
      await Promise.all(readers.map((r) => r.stop()))
      // The attack took place: slow reads ended within it (each one a sample).
      expect(readers.reduce((sum, r) => sum + r.completed(), 0)).toBeGreaterThan(0)
      const seen = `limit ${quiet.median} -> lowest ${attacked.min}; ok/s ${quiet.okPerS.toFixed(0)} -> ${attacked.okPerS.toFixed(0)}`
      expect(attacked.min, seen).toBeGreaterThanOrEqual(0.75 * quiet.median)
    } finally {
      await good.stop()
    }
  }, 30_000)
})
