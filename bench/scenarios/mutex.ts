// Mutex scenarios: uncontended acquire+release against a hand-written SET NX PX baseline, 50 keys in
// parallel, and 16 workers contending one mutex (throughput of hand-overs, fairness, Redis cost).
import { randomBytes } from 'node:crypto'
import os from 'node:os'
import type { Redis } from 'ioredis'
import { createMutex, createRedisStore, type Mutex, type Store } from '../../src/index.js'
import { alternate, type Variant, type VariantTotals } from '../lib/measure.js'
import { diffSnapshots, type ServerDelta, topCommands } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { BenchContext, Scenario, ScenarioOutput, Table } from '../lib/scenario.js'
import { jainIndex, minMax, percentile, Samples, type Summary, summarize } from '../lib/stats.js'

const PREFIX = 'bench'
const TTL_MS = 30_000

// The usual single-instance Redis lock: SET NX PX, and a compare-and-delete script to unlock.
const UNLOCK_LUA = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0"

interface UnlockCommand {
  benchUnlock(key: string, token: string): Promise<number>
}

function randomToken(): string {
  return randomBytes(16).toString('base64url')
}

/** acquire+release of the baseline lock on `key` (defineCommand: EVALSHA, EVAL on NOSCRIPT). */
function baselineLock(client: Redis): (key: string) => Promise<void> {
  if (!('benchUnlock' in client)) client.defineCommand('benchUnlock', { numberOfKeys: 1, lua: UNLOCK_LUA })
  const unlock = client as unknown as UnlockCommand
  return async (key) => {
    const token = randomToken()
    if ((await client.set(key, token, 'PX', TTL_MS, 'NX')) !== 'OK')
      throw new Error(`baseline: ${key} is taken`)
    if ((await unlock.benchUnlock(key, token)) !== 1)
      throw new Error(`baseline: ${key} was not ours to delete`)
  }
}

async function tollgateCycle(mutex: Mutex): Promise<void> {
  const lease = await mutex.acquire()
  await lease.release()
}

function loadAverage(): string {
  return os
    .loadavg()
    .map((value) => value.toFixed(2))
    .join(' ')
}

function opsPerSec(ops: number, elapsedMs: number): number {
  return (ops / elapsedMs) * 1000
}

function variantRow(total: VariantTotals): (string | number)[] {
  const latency = summarize(total.latencies)
  return [
    total.name,
    fmtInt(opsPerSec(total.ops, total.elapsedMs)),
    fmtMs(latency.p50),
    fmtMs(latency.p99),
    fmtFixed(total.server.scriptCalls / total.ops),
    fmtFixed(total.server.totalCalls / total.ops, 1),
    fmtFixed(total.server.scriptUsec / total.ops, 1),
    fmtFixed((total.server.cpuSeconds * 1e6) / total.ops, 1),
    fmtFixed((total.clientCpuMs * 1000) / total.ops, 1),
  ]
}

const VARIANT_COLUMNS = [
  'variant',
  'ops/s',
  'p50',
  'p99',
  'scripts/op',
  'redis cmds/op',
  'script µs/op',
  'redis CPU µs/op',
  'node CPU µs/op',
]

function variantData(total: VariantTotals) {
  return {
    ops: total.ops,
    elapsedMs: total.elapsedMs,
    opsPerSec: opsPerSec(total.ops, total.elapsedMs),
    roundOpsPerSec: total.roundOpsPerSec,
    latencyMs: summarize(total.latencies),
    clientCpuMs: total.clientCpuMs,
    server: total.server,
  }
}

interface Comparison {
  tollgate: VariantTotals
  baseline: VariantTotals
  /** Total tollgate ops/s over total baseline ops/s. */
  ratio: number
  /** tollgate ops/s / baseline ops/s of each round pair, in run order. */
  roundRatios: number[]
  /** Quartiles of roundRatios: robust against a burst of foreign load that hits a few rounds. */
  median: number
  q25: number
  q75: number
}

/** Tollgate vs baseline, alternated round by round on one connection; ratio and notes. */
async function compareWithBaseline(
  ctx: BenchContext,
  concurrency: number,
  names: (loop: number) => string,
  rounds: { warmupMs: number; rounds: number; roundMs: number },
): Promise<Comparison> {
  const client = await ctx.redis.connect()
  const store = createRedisStore(client, { prefix: PREFIX })
  try {
    // autoRenew: false, so no renewal scheduler is involved (each lease still arms one unref'd expiry
    // timer); ttlMs as in the baseline's PX.
    const mutexes = Array.from({ length: concurrency }, (_, i) =>
      createMutex(store, names(i), { ttlMs: TTL_MS, autoRenew: false }),
    )
    const lock = baselineLock(client)
    const variants: Variant[] = [
      { name: 'tollgate', concurrency, op: (loop) => tollgateCycle(mutexes[loop] as Mutex) },
      { name: 'baseline', concurrency, op: (loop) => lock(`${PREFIX}:baseline:${names(loop)}`) },
    ]
    ctx.log(
      `  ${concurrency} loop(s): warm-up ${rounds.warmupMs} ms each, then ${rounds.rounds} alternating rounds of ${rounds.roundMs} ms`,
    )
    const [tollgate, baseline] = (await alternate(ctx.redis, variants, rounds)) as [
      VariantTotals,
      VariantTotals,
    ]
    const ratio = opsPerSec(tollgate.ops, tollgate.elapsedMs) / opsPerSec(baseline.ops, baseline.elapsedMs)
    const roundRatios = tollgate.roundOpsPerSec.map((ops, i) => ops / (baseline.roundOpsPerSec[i] as number))
    const sorted = Float64Array.from(roundRatios).sort()
    const [q25, median, q75] = [25, 50, 75].map((p) => percentile(sorted, p)) as [number, number, number]
    return { tollgate, baseline, ratio, roundRatios, median, q25, q75 }
  } finally {
    await store.close()
  }
}

/** Per-round ratios spread this much (IQR / median) means the machine was busy with something else. */
const NOISY_SPREAD = 0.1

function spread(result: Comparison): number {
  return (result.q75 - result.q25) / result.median
}

function comparisonOutput(
  result: Comparison,
  rounds: number,
  roundMs: number,
): Pick<ScenarioOutput, 'tables' | 'data'> & { notes: string[] } {
  const { tollgate, baseline, ratio, roundRatios, median, q25, q75 } = result
  const blank = VARIANT_COLUMNS.slice(2).map(() => '')
  const table: Table = {
    columns: VARIANT_COLUMNS,
    rows: [
      variantRow(tollgate),
      variantRow(baseline),
      ['tollgate / baseline, all rounds', fmtFixed(ratio, 3), ...blank],
      ['tollgate / baseline, median round', fmtFixed(median, 3), ...blank],
    ],
  }
  const notes = [
    `${rounds} rounds of ${roundMs} ms per variant, order flipped every round (A B, B A, ...). Ratio per round pair: median ${median.toFixed(3)}, quartiles ${q25.toFixed(3)} .. ${q75.toFixed(3)}, all: ${roundRatios.map((r) => r.toFixed(2)).join(' ')}.${spread(result) > NOISY_SPREAD ? ` NOISY: the rounds disagree by more than ${NOISY_SPREAD * 100}% (load average ${loadAverage()}); other work on this machine skews the comparison.` : ''}`,
    'p50/p99: one acquire + release pair. Server counts come from INFO commandstats deltas (commands run inside Lua scripts included, INFO excluded); script µs = commandstats usec of EVALSHA/EVAL (time inside scripts); redis CPU from INFO cpu used_cpu_sys + used_cpu_user (includes network I/O), node CPU from process.cpuUsage().',
    `Redis commands per tollgate op: ${topCommands(tollgate.server, tollgate.ops)}, ...`,
    `Redis commands per baseline op: ${topCommands(baseline.server, baseline.ops)}.`,
  ]
  return {
    tables: [table],
    notes,
    data: {
      tollgate: variantData(tollgate),
      baseline: variantData(baseline),
      ratio,
      roundRatios,
      medianRoundRatio: median,
      roundRatioQuartiles: [q25, q75],
    },
  }
}

// Many short rounds rather than a few long ones: a burst of foreign load then spoils a few round pairs
// (which the median ignores) instead of a quarter of one variant's time.
const UNCONTENDED_ROUNDS = { warmupMs: 500, rounds: 20, roundMs: 200 }

export const mutexUncontended: Scenario = {
  name: 'mutex-uncontended',
  title: 'one client, acquire + release of one free mutex, vs SET NX PX + compare-and-delete',
  seconds: 10,
  async run(ctx) {
    const result = await compareWithBaseline(ctx, 1, () => 'uncontended', UNCONTENDED_ROUNDS)
    const output = comparisonOutput(result, UNCONTENDED_ROUNDS.rounds, UNCONTENDED_ROUNDS.roundMs)
    output.notes.unshift(
      'Tollgate: createMutex(store, name, { ttlMs: 30000, autoRenew: false }).acquire() then lease.release(). Baseline: SET key token NX PX 30000, then a compare-and-delete script via ioredis defineCommand (EVALSHA). Same ioredis connection for both.',
    )
    const tollgateOps = opsPerSec(result.tollgate.ops, result.tollgate.elapsedMs)
    const baselineOps = opsPerSec(result.baseline.ops, result.baseline.elapsedMs)
    return {
      ...output,
      verdicts: [
        {
          target: 'tollgate within 5% of baseline ops/s (median round ratio >= 0.95)',
          pass: result.median >= 0.95,
          detail: `median round ratio ${result.median.toFixed(3)} (quartiles ${result.q25.toFixed(3)} .. ${result.q75.toFixed(3)}; all rounds ${result.ratio.toFixed(3)}: tollgate ${fmtInt(tollgateOps)} ops/s, baseline ${fmtInt(baselineOps)} ops/s)${spread(result) > NOISY_SPREAD ? ', NOISY machine' : ''}`,
        },
      ],
    }
  },
}

const FIFTY_KEYS = 50
const FIFTY_ROUNDS = { warmupMs: 300, rounds: 10, roundMs: 300 }

export const mutex50Keys: Scenario = {
  name: 'mutex-50-keys',
  title: `${FIFTY_KEYS} concurrent loops, each on its own mutex, one connection`,
  seconds: 7,
  async run(ctx) {
    const result = await compareWithBaseline(ctx, FIFTY_KEYS, (loop) => `key-${loop}`, FIFTY_ROUNDS)
    const output = comparisonOutput(result, FIFTY_ROUNDS.rounds, FIFTY_ROUNDS.roundMs)
    output.notes.unshift(
      `${FIFTY_KEYS} async loops in one process share one ioredis connection (commands pipeline on it); ops/s is the total over all loops. Same options and baseline as mutex-uncontended.`,
    )
    return { ...output, verdicts: [] }
  },
}

/** A grant counts as overtaking when another waiter had called acquire() this much earlier and still
 * waits. The slack absorbs calls issued in the same tick on the two connections, whose order at the
 * server is not defined. */
const OVERTAKE_SLACK_MS = 0.5

interface ContendResult {
  workers: number
  acquisitions: number
  ownerChanges: number
  elapsedMs: number
  perWorker: number[]
  waits: Samples
  /** Grants that went to a worker while another one had queued earlier (see OVERTAKE_SLACK_MS). */
  overtakes: number
  /** Acquisitions while another worker of this run still held the mutex (must be 0). */
  overlaps: number
  /** Fencing tokens that did not increase (must be 0). */
  fenceRegressions: number
  clientCpuMs: number
}

/**
 * Every worker loops acquire -> (hold 0 ms) -> release until `durationMs` has passed; waiters already
 * queued then still get their turn, so every acquire() call is served and counted.
 */
async function contend(mutexes: readonly Mutex[], durationMs: number): Promise<ContendResult> {
  const workers = mutexes.length
  const perWorker: number[] = new Array<number>(workers).fill(0)
  const waits = new Samples()
  const queuedSince = new Map<number, number>()
  let acquisitions = 0
  let ownerChanges = 0
  let overtakes = 0
  let overlaps = 0
  let fenceRegressions = 0
  let lastOwner = -1
  let lastFence = Number.NEGATIVE_INFINITY
  let holding = false
  let failure: { error: unknown } | undefined
  const maxPerWorker = durationMs * 1000
  const cpuBefore = process.cpuUsage()
  const started = performance.now()
  const end = started + durationMs

  const worker = async (id: number) => {
    const mutex = mutexes[id] as Mutex
    for (let i = 0; i < maxPerWorker && !failure; i++) {
      const called = performance.now()
      if (called >= end) return
      queuedSince.set(id, called)
      let lease
      try {
        lease = await mutex.acquire()
      } catch (error) {
        queuedSince.delete(id)
        failure ??= { error }
        return
      }
      waits.push(performance.now() - called)
      queuedSince.delete(id)
      for (const since of queuedSince.values()) {
        if (since < called - OVERTAKE_SLACK_MS) {
          overtakes++
          break
        }
      }
      if (holding) overlaps++
      holding = true
      if (lease.fencingToken <= lastFence) fenceRegressions++
      lastFence = lease.fencingToken
      if (lastOwner !== -1 && lastOwner !== id) ownerChanges++
      lastOwner = id
      acquisitions++
      perWorker[id] = (perWorker[id] as number) + 1
      holding = false
      try {
        await lease.release()
      } catch (error) {
        failure ??= { error }
        return
      }
    }
  }
  await Promise.all(mutexes.map((_, id) => worker(id)))
  const elapsedMs = performance.now() - started
  const cpu = process.cpuUsage(cpuBefore)
  if (failure) throw failure.error
  return {
    workers,
    acquisitions,
    ownerChanges,
    elapsedMs,
    perWorker,
    waits,
    overtakes,
    overlaps,
    fenceRegressions,
    clientCpuMs: (cpu.user + cpu.system) / 1000,
  }
}

const CONTENDED_WORKERS = 16
const CONTENDED_WARMUP_MS = 500
const CONTENDED_MS = 5000
const OWNER_CHANGES_TARGET = 2000

interface ContendedVariant {
  label: string
  autoRenew: boolean
  result: ContendResult
  server: ServerDelta
  waits: Summary
  jain: number
  min: number
  max: number
  fifoHeld: boolean
}

async function contendedVariant(
  ctx: BenchContext,
  stores: readonly Store[],
  label: string,
  autoRenew: boolean,
): Promise<ContendedVariant> {
  const name = `contended-${autoRenew ? 'renew' : 'norenew'}`
  const mutexes = Array.from({ length: CONTENDED_WORKERS }, (_, id) =>
    createMutex(stores[id % stores.length] as Store, name, {
      ttlMs: TTL_MS,
      autoRenew,
      acquireTimeoutMs: 5000,
    }),
  )
  ctx.log(
    `  ${label}: ${CONTENDED_WORKERS} workers, warm-up ${CONTENDED_WARMUP_MS} ms, then ${CONTENDED_MS} ms`,
  )
  await contend(mutexes, CONTENDED_WARMUP_MS)
  const before = await ctx.redis.snapshot()
  const result = await contend(mutexes, CONTENDED_MS)
  const after = await ctx.redis.snapshot()
  const { min, max } = minMax(result.perWorker)
  return {
    label,
    autoRenew,
    result,
    server: diffSnapshots(before, after),
    waits: summarize(result.waits),
    jain: jainIndex(result.perWorker),
    min,
    max,
    // Strict FIFO with workers that re-queue right after releasing is round-robin: no overtakes and
    // per-worker counts at most 2 apart (start-up order).
    fifoHeld: result.overtakes === 0 && max - min <= 2,
  }
}

export const mutexContended: Scenario = {
  name: 'mutex-contended',
  title: `${CONTENDED_WORKERS} workers on 2 connections contend one mutex, release right after acquire`,
  seconds: 12,
  async run(ctx) {
    const clients = [await ctx.redis.connect(), await ctx.redis.connect()]
    const stores = clients.map((client) => createRedisStore(client, { prefix: PREFIX }))
    try {
      const variants = [
        await contendedVariant(ctx, stores, 'autoRenew: true (default)', true),
        await contendedVariant(ctx, stores, 'autoRenew: false', false),
      ]
      const per = (v: ContendedVariant, value: number) => value / v.result.acquisitions
      const rate = (v: ContendedVariant, value: number) => opsPerSec(value, v.result.elapsedMs)
      const row = (metric: string, value: (v: ContendedVariant) => string): string[] => [
        metric,
        ...variants.map(value),
      ]
      const table: Table = {
        columns: ['metric', ...variants.map((v) => v.label)],
        rows: [
          row('acquisitions', (v) => fmtInt(v.result.acquisitions)),
          row('acquisitions/s', (v) => fmtInt(rate(v, v.result.acquisitions))),
          row('owner changes/s', (v) => fmtInt(rate(v, v.result.ownerChanges))),
          row('wait p50', (v) => fmtMs(v.waits.p50)),
          row('wait p99', (v) => fmtMs(v.waits.p99)),
          row('wait max', (v) => fmtMs(v.waits.max)),
          row('per-worker min / max', (v) => `${v.min} / ${v.max}`),
          row('Jain fairness index', (v) => fmtFixed(v.jain, 4)),
          row('FIFO overtakes', (v) => fmtInt(v.result.overtakes)),
          row('FIFO held', (v) => (v.fifoHeld ? 'yes' : 'no')),
          row('script calls / acquisition', (v) => fmtFixed(per(v, v.server.scriptCalls))),
          row('redis cmds / acquisition', (v) => fmtFixed(per(v, v.server.totalCalls), 1)),
          row('script µs / acquisition', (v) => fmtFixed(per(v, v.server.scriptUsec), 1)),
          row('redis CPU µs / acquisition', (v) => fmtFixed(per(v, v.server.cpuSeconds * 1e6), 1)),
          row('node CPU µs / acquisition', (v) => fmtFixed(per(v, v.result.clientCpuMs * 1000), 1)),
          row('overlapping holds', (v) => fmtInt(v.result.overlaps)),
          row('fencing regressions', (v) => fmtInt(v.result.fenceRegressions)),
        ],
      }
      const main = variants[0] as ContendedVariant
      const notes = [
        `${CONTENDED_WORKERS} workers in this process, alternately on 2 stores (2 ioredis connections, each with its own subscriber connection); each loops acquire() -> release() with no hold, for ${CONTENDED_MS} ms after a ${CONTENDED_WARMUP_MS} ms warm-up; waiters queued at the end are still served and counted. Rates divide by the time until the last release.`,
        'Wait = from the acquire() call to the lease. Owner change = an acquisition by a different worker than the previous one.',
        `FIFO overtakes: grants made while another worker had called acquire() more than ${OVERTAKE_SLACK_MS} ms earlier and still waited. FIFO held = no overtakes and per-worker counts at most 2 apart (strict FIFO with immediate re-queueing is round-robin).`,
        'Script calls and Redis commands per acquisition come from INFO commandstats deltas over the measured run (commands run inside Lua included, INFO excluded).',
        ...variants.map(
          (v) =>
            `Redis commands per acquisition, ${v.label}: ${topCommands(v.server, v.result.acquisitions)}, ...`,
        ),
      ]
      const verdicts = [
        {
          target: `owner changes/s >= ${fmtInt(OWNER_CHANGES_TARGET)} (${main.label})`,
          pass: rate(main, main.result.ownerChanges) >= OWNER_CHANGES_TARGET,
          detail: `${fmtInt(rate(main, main.result.ownerChanges))} owner changes/s, ${fmtInt(rate(main, main.result.acquisitions))} acquisitions/s, wait p50 ${fmtMs(main.waits.p50)}, p99 ${fmtMs(main.waits.p99)}`,
        },
        ...variants.map((v) => ({
          target: `FIFO order (${v.label})`,
          pass: v.fifoHeld,
          detail: `${v.result.overtakes} overtakes, per-worker ${v.min}..${v.max}, Jain ${fmtFixed(v.jain, 4)}`,
        })),
        ...variants.map((v) => ({
          target: `mutual exclusion and increasing fencing tokens (${v.label})`,
          pass: v.result.overlaps === 0 && v.result.fenceRegressions === 0,
          detail: `${v.result.overlaps} overlapping holds, ${v.result.fenceRegressions} fencing regressions in ${fmtInt(v.result.acquisitions)} acquisitions`,
        })),
      ]
      const data = Object.fromEntries(
        variants.map((v) => [
          v.autoRenew ? 'autoRenew' : 'noAutoRenew',
          {
            label: v.label,
            acquisitions: v.result.acquisitions,
            ownerChanges: v.result.ownerChanges,
            elapsedMs: v.result.elapsedMs,
            acquisitionsPerSec: rate(v, v.result.acquisitions),
            ownerChangesPerSec: rate(v, v.result.ownerChanges),
            waitMs: v.waits,
            perWorker: v.result.perWorker,
            jain: v.jain,
            overtakes: v.result.overtakes,
            fifoHeld: v.fifoHeld,
            overlaps: v.result.overlaps,
            fenceRegressions: v.result.fenceRegressions,
            scriptCallsPerAcquisition: per(v, v.server.scriptCalls),
            commandsPerAcquisition: per(v, v.server.totalCalls),
            clientCpuMs: v.result.clientCpuMs,
            server: v.server,
          },
        ]),
      )
      return { tables: [table], verdicts, notes, data }
    } finally {
      await Promise.all(stores.map((store) => store.close()))
    }
  },
}

export const mutexScenarios: Scenario[] = [mutexUncontended, mutex50Keys, mutexContended]
