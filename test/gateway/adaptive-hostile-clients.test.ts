// What one client can make the upstream answer must not set the fleet's adaptive limit (issue 37,
// README "Adaptive limits"): two replicas of the real bin on one Redis, an upstream that answers in
// 20 ms far below its capacity (a process of its own), 8 well-behaved clients. With no attack the
// limit sits at or near its max (16).
// The attack: one request per window to a path the upstream answers 503 (or 429). The limit's
// lowest value during the attack stays within 25 % of its value without it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { spawnChild } from '../helpers/child.js'
import { sleep } from '../helpers/contract.js'
import { type GatewayProcess, redisUrl, spawnGateway } from '../helpers/gateway.js'
import { topology, uniquePrefix } from '../helpers/redis.js'

const MAX = 16
const GOOD_CLIENTS = 8
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
})
