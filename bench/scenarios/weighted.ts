// Weighted acquire (issue 28 #12): what a weight costs, and what it costs a call without one. One
// client, acquire + release of a free semaphore of 8 permits, three variants alternated round by round
// on one connection: unweighted (the call every existing user makes), weight 4, and the physical floor,
// a bare SET NX PX lock with a compare-and-delete release. The unweighted call's cost before weights
// existed is mutex-uncontended's (same scripts, same path).
import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import { createRedisStore, createSemaphore, type Semaphore } from '../../src/index.js'
import { alternate, type Variant, type VariantTotals } from '../lib/measure.js'
import { topCommands } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { Scenario } from '../lib/scenario.js'
import { summarize } from '../lib/stats.js'

const PREFIX = 'bench'
const TTL_MS = 30_000
const ROUNDS = { warmupMs: 500, rounds: 16, roundMs: 250 }
const UNLOCK_LUA = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0"

function floorLock(client: Redis): () => Promise<void> {
  if (!('benchFloorUnlock' in client))
    client.defineCommand('benchFloorUnlock', { numberOfKeys: 1, lua: UNLOCK_LUA })
  const unlock = client as unknown as { benchFloorUnlock(key: string, token: string): Promise<number> }
  return async () => {
    const token = randomBytes(16).toString('base64url')
    if ((await client.set(`${PREFIX}:floor`, token, 'PX', TTL_MS, 'NX')) !== 'OK')
      throw new Error('floor: taken')
    if ((await unlock.benchFloorUnlock(`${PREFIX}:floor`, token)) !== 1) throw new Error('floor: not ours')
  }
}

const perSec = (t: VariantTotals) => (t.ops / t.elapsedMs) * 1000

export const semaphoreWeighted: Scenario = {
  name: 'semaphore-weighted',
  title: 'one client, acquire + release of a free semaphore: unweighted vs weight 4 vs SET NX PX',
  seconds: 16,
  async run(ctx) {
    const client = await ctx.redis.connect()
    const store = createRedisStore(client, { prefix: PREFIX })
    try {
      const options = { permits: 8, ttlMs: TTL_MS, autoRenew: false }
      const plain: Semaphore = createSemaphore(store, 'unweighted', options)
      const heavy: Semaphore = createSemaphore(store, 'weighted', options)
      const floor = floorLock(client)
      const variants: Variant[] = [
        { name: 'unweighted', concurrency: 1, op: async () => (await plain.acquire()).release() },
        { name: 'weight 4', concurrency: 1, op: async () => (await heavy.acquire({ weight: 4 })).release() },
        { name: 'SET NX PX (floor)', concurrency: 1, op: floor },
      ]
      ctx.log(
        `  warm-up ${ROUNDS.warmupMs} ms each, then ${ROUNDS.rounds} alternating rounds of ${ROUNDS.roundMs} ms`,
      )
      const totals = await alternate(ctx.redis, variants, ROUNDS)
      const floorOps = perSec(totals[2] as VariantTotals)
      const rows = totals.map((t) => {
        const latency = summarize(t.latencies)
        return [
          t.name,
          fmtInt(perSec(t)),
          fmtFixed(perSec(t) / floorOps, 2),
          fmtMs(latency.p50),
          fmtMs(latency.p99),
          fmtFixed(t.server.totalCalls / t.ops, 1),
          fmtFixed(t.server.scriptUsec / t.ops, 1),
          fmtFixed((t.server.cpuSeconds * 1e6) / t.ops, 1),
        ]
      })
      const [unweighted, weighted] = totals as [VariantTotals, VariantTotals]
      return {
        tables: [
          {
            columns: [
              'variant',
              'ops/s',
              'x floor',
              'p50',
              'p99',
              'redis cmds/op',
              'script µs/op',
              'redis CPU µs/op',
            ],
            rows,
          },
        ],
        verdicts: [
          {
            target:
              'a weight costs at most 3 more Redis commands per acquire+release (w - 1 more ZSET members)',
            pass:
              weighted.server.totalCalls / weighted.ops - unweighted.server.totalCalls / unweighted.ops <=
              3.5,
            detail: `${fmtFixed(unweighted.server.totalCalls / unweighted.ops, 1)} vs ${fmtFixed(weighted.server.totalCalls / weighted.ops, 1)} commands per op`,
          },
        ],
        notes: [
          'createSemaphore(store, name, { permits: 8, ttlMs: 30000, autoRenew: false }); acquire() or acquire({ weight: 4 }), then release(). Floor: SET key token NX PX 30000 and a compare-and-delete script. One ioredis connection for all three, rounds alternated (A B C, C B A, ...).',
          `Redis commands per unweighted op: ${topCommands(unweighted.server, unweighted.ops)}.`,
          `Redis commands per weight-4 op: ${topCommands(weighted.server, weighted.ops)}.`,
          'An unweighted call before weights existed: see mutex-uncontended of the same run and of the run before (the same permit scripts and client path).',
        ],
        data: Object.fromEntries(
          totals.map((t) => [
            t.name,
            { opsPerSec: perSec(t), latencyMs: summarize(t.latencies), server: t.server, ops: t.ops },
          ]),
        ),
      }
    } finally {
      await store.close()
    }
  },
}

export const weightedScenarios: Scenario[] = [semaphoreWeighted]
