// RedLock scenario: uncontended acquire+release over 3 independent Redis masters, Tollgate's
// createRedlock() against the `redlock` npm package (5.0.0-beta.2, the release line for ioredis 5), on
// the same three connections, alternated round by round.
import { Redis } from 'ioredis'
import Redlock from 'redlock'
import {
  createRedisStore,
  createRedlock,
  type Redlock as TollgateRedlock,
  type Store,
} from '../../src/index.js'
import { type RedisServerHandle, startRedisServer } from '../../test/helpers/redis-server.js'
import { alternate, type VariantTotals } from '../lib/measure.js'
import { topCommands } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { Scenario, Table } from '../lib/scenario.js'
import { summarize } from '../lib/stats.js'

const PREFIX = 'bench'
const TTL_MS = 30_000
const ROUNDS = { warmupMs: 500, rounds: 4, roundMs: 1000 }

function opsPerSec(total: VariantTotals): number {
  return (total.ops / total.elapsedMs) * 1000
}

function row(total: VariantTotals): (string | number)[] {
  const latency = summarize(total.latencies)
  return [
    total.name,
    fmtInt(opsPerSec(total)),
    fmtMs(latency.p50),
    fmtMs(latency.p99),
    fmtFixed(total.server.totalCalls / total.ops, 1),
    fmtFixed((total.clientCpuMs * 1000) / total.ops, 1),
  ]
}

async function connect(endpoint: { host: string; port: number }): Promise<Redis> {
  const client = new Redis({ ...endpoint, lazyConnect: true, maxRetriesPerRequest: 1 })
  client.on('error', () => {})
  await client.connect()
  return client
}

export const redlockUncontended: Scenario = {
  name: 'redlock-uncontended',
  title: 'one client, acquire + release of one free RedLock on 3 masters, vs the redlock npm package',
  seconds: 12,
  async run(ctx) {
    // Node 0 is the run's server (its counters feed the report); nodes 1 and 2 are started here.
    const extra: RedisServerHandle[] = []
    const clients: Redis[] = []
    const stores: Store[] = []
    try {
      extra.push(...(await Promise.all([startRedisServer(), startRedisServer()])))
      clients.push(await ctx.redis.connect(), ...(await Promise.all(extra.map(connect))))
      for (const client of clients) await client.flushall()
      stores.push(...clients.map((client) => createRedisStore(client, { prefix: PREFIX })))
      const tollgate: TollgateRedlock = createRedlock(stores, 'uncontended', {
        ttlMs: TTL_MS,
        autoRenew: false,
      })
      const npm = new Redlock(clients, { retryCount: 0 })
      ctx.log(
        `  3 nodes (ports ${clients.map((c) => c.options.port).join(', ')}), 1 loop, ${ROUNDS.rounds} rounds`,
      )
      const [ours, theirs] = (await alternate(
        ctx.redis,
        [
          {
            name: 'tollgate createRedlock',
            concurrency: 1,
            op: async () => {
              const lease = await tollgate.acquire({ timeoutMs: 0 })
              await lease.release()
            },
          },
          {
            name: 'redlock 5.0.0-beta.2',
            concurrency: 1,
            op: async () => {
              const lock = await npm.acquire([`${PREFIX}:npm-redlock:uncontended`], TTL_MS)
              await lock.release()
            },
          },
        ],
        ROUNDS,
      )) as [VariantTotals, VariantTotals]
      const ratio = opsPerSec(ours) / opsPerSec(theirs)
      const roundRatios = ours.roundOpsPerSec.map((ops, i) => ops / (theirs.roundOpsPerSec[i] as number))
      const table: Table = {
        columns: ['variant', 'ops/s', 'p50', 'p99', 'node-0 redis cmds/op', 'node CPU µs/op'],
        rows: [row(ours), row(theirs), ['tollgate / redlock', fmtFixed(ratio, 3), '', '', '', '']],
      }
      return {
        tables: [table],
        verdicts: [],
        notes: [
          'Tollgate: createRedlock(3 stores, name, { ttlMs: 30000, autoRenew: false }).acquire({ timeoutMs: 0 }) then lease.release(): one permit-acquire script per node in parallel, decided once 2 of 3 granted, validity checked; release on all 3. redlock: new Redlock(clients, { retryCount: 0 }).acquire([key], 30000) then lock.release(). Same three ioredis connections for both.',
          `${ROUNDS.rounds} rounds of ${ROUNDS.roundMs} ms per variant, order flipped every round; ratio per round: ${roundRatios.map((r) => r.toFixed(3)).join(', ')}.`,
          "p50/p99: one acquire + release pair. Both libraries return from acquire once a majority (2 of 3) granted, so the third node may still be working when the next op starts; Tollgate's release waits for every node (at most perNodeTimeoutMs), redlock's returns at a majority too. Ops are sequential on one loop.",
          "Tollgate's per-node script is the mutex's fair permit set (TIME, purge of expired holders, fencing counter, key expiries), redlock's is SET NX PX: compare the mutex-uncontended scenario for the single-node cost of that script.",
          `Redis commands per op on node 0 (INFO commandstats; scripts' inner commands included): tollgate ${topCommands(ours.server, ours.ops)}; redlock ${topCommands(theirs.server, theirs.ops)}.`,
        ],
        data: {
          tollgate: { ops: ours.ops, opsPerSec: opsPerSec(ours), latencyMs: summarize(ours.latencies) },
          redlock: { ops: theirs.ops, opsPerSec: opsPerSec(theirs), latencyMs: summarize(theirs.latencies) },
          ratio,
          roundRatios,
        },
      }
    } finally {
      await Promise.all(stores.map((store) => store.close()))
      await Promise.all(clients.slice(1).map((client) => client.quit().catch(() => client.disconnect())))
      await Promise.all(extra.map((server) => server.stop()))
    }
  },
}

export const redlockScenarios: Scenario[] = [redlockUncontended]
