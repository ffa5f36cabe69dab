// Semaphore scenario (issue 3): 64 workers on 2 connections contend one semaphore of 8 permits, each
// holding its permit 2 ms; Tollgate's createSemaphore() against redis-semaphore's polling Semaphore on
// the same two connections, rounds alternated, every variant-round on a fresh key.
import { setTimeout as sleep } from 'node:timers/promises'
import type { Redis } from 'ioredis'
import { Semaphore as RsSemaphore, TimeoutError as RsTimeoutError } from 'redis-semaphore'
import { AcquireTimeoutError, createRedisStore, createSemaphore, type Store } from '../../src/index.js'
import { diffSnapshots, type ServerDelta, type ServerSnapshot, sumDeltas, topCommands } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { jainIndex, minMax, Samples, type Summary, summarize } from '../lib/stats.js'

const PREFIX = 'bench'
const WORKERS = 64
const PERMITS = 8
/** The "separate processes" variant: this many stores, each on its own connection. */
const SEPARATE = 8
const HOLD_MS = 2
/** permits / hold: the completions/s of 8 permits that are never idle. */
const THEORETICAL_PER_SEC = (PERMITS * 1000) / HOLD_MS
const TTL_MS = 30_000
const ACQUIRE_TIMEOUT_MS = 10_000
/** redis-semaphore re-runs its acquire script every retryInterval ms while the set is full (default
 * 10). 1 ms is the smallest interval a Node timer can express, so its waiters notice a free permit as
 * early as polling can. */
const RETRY_INTERVAL_MS = 1
/** redis-semaphore's refresh timer, set like Tollgate's auto-renewal (a third of the TTL); neither
 * fires during a 2 ms hold. */
const REFRESH_INTERVAL_MS = TTL_MS / 3
const WARMUP_MS = 500
/** 4 rounds of 2 s per variant = 8 s measured each, order flipped every round (A B, B A, ...). */
const ROUNDS = 4
const ROUND_MS = 2000

const TARGETS = {
  efficiency: 0.95,
  waitP99Ms: 20,
  roundTrips: 3,
  jain: 0.99,
}

/** One worker's handle: acquire resolves with the release function of the permit it got. */
type Acquirer = () => Promise<() => Promise<unknown>>

interface SemVariant {
  key: string
  label: string
  /** Commands this library sends itself besides EVALSHA/EVAL (commandstats names); the rest of the
   * commandstats delta runs inside its scripts. */
  topLevelCommands: readonly string[]
  /** One acquirer per worker on a fresh name, spread over the connections. */
  workers(name: string): Acquirer[]
  isTimeout(error: unknown): boolean
}

/** Counts the commands ioredis sends on a connection (its own count, independent of INFO). */
class CommandCounter {
  private readonly counts = new Map<string, number>()

  attach(client: Redis): void {
    const send = client.sendCommand.bind(client)
    client.sendCommand = (...args: Parameters<Redis['sendCommand']>) => {
      const name = args[0].name
      this.counts.set(name, (this.counts.get(name) ?? 0) + 1)
      return send(...args)
    }
  }

  snapshot(): Map<string, number> {
    return new Map(this.counts)
  }

  static diff(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
    const delta: Record<string, number> = {}
    for (const [name, count] of after) {
      const calls = count - (before.get(name) ?? 0)
      if (calls > 0) delta[name] = calls
    }
    return delta
  }
}

interface RunResult {
  acquisitions: number
  elapsedMs: number
  perWorker: number[]
  /** acquire() call -> permit, ms. */
  waits: Samples
  /** Measured length of every hold (the sleep between acquire and release), ms. */
  holds: Samples
  /** Most workers of this process inside a hold at once (an in-process counter, not the store's). */
  maxHolders: number
  /** Holds that began while `PERMITS` others were already inside (must be 0). */
  violations: number
  /** Acquires that gave up after ACQUIRE_TIMEOUT_MS (the worker then queues again). */
  timeouts: number
  clientCpuMs: number
}

/**
 * Every worker loops acquire -> hold HOLD_MS -> release until `durationMs` has passed; waiters already
 * queued then still get their turn, so every acquire() call is served and counted. The first error
 * other than an acquire timeout stops every worker and is rethrown once they have all finished.
 */
async function contend(acquirers: readonly Acquirer[], variant: SemVariant, durationMs: number) {
  const perWorker: number[] = new Array<number>(acquirers.length).fill(0)
  const waits = new Samples()
  const holds = new Samples()
  let acquisitions = 0
  let holders = 0
  let maxHolders = 0
  let violations = 0
  let timeouts = 0
  let failure: { error: unknown } | undefined
  const maxPerWorker = Math.ceil(durationMs / HOLD_MS) + 1
  const cpuBefore = process.cpuUsage()
  const started = performance.now()
  const end = started + durationMs

  const worker = async (id: number) => {
    const acquire = acquirers[id] as Acquirer
    for (let i = 0; i < maxPerWorker && !failure;) {
      const called = performance.now()
      if (called >= end) return
      let release: () => Promise<unknown>
      try {
        release = await acquire()
      } catch (error) {
        if (variant.isTimeout(error)) {
          timeouts++
          continue
        }
        failure ??= { error }
        return
      }
      const holdStarted = performance.now()
      waits.push(holdStarted - called)
      if (holders >= PERMITS) violations++
      holders++
      if (holders > maxHolders) maxHolders = holders
      await sleep(HOLD_MS)
      holds.push(performance.now() - holdStarted)
      holders--
      acquisitions++
      perWorker[id] = (perWorker[id] as number) + 1
      i++
      try {
        await release()
      } catch (error) {
        failure ??= { error }
        return
      }
    }
  }
  await Promise.all(acquirers.map((_, id) => worker(id)))
  const elapsedMs = performance.now() - started
  const cpu = process.cpuUsage(cpuBefore)
  if (failure) throw failure.error
  return {
    acquisitions,
    elapsedMs,
    perWorker,
    waits,
    holds,
    maxHolders,
    violations,
    timeouts,
    clientCpuMs: (cpu.user + cpu.system) / 1000,
  } satisfies RunResult
}

interface VariantTotals {
  variant: SemVariant
  acquisitions: number
  elapsedMs: number
  perWorker: number[]
  waits: Samples
  holds: Samples
  maxHolders: number
  violations: number
  timeouts: number
  clientCpuMs: number
  /** Completions/s of each measured round, in run order. */
  roundPerSec: number[]
  deltas: ServerDelta[]
  /** Commands sent by ioredis on the two connections, per name. */
  sent: Record<string, number>
  /** commandstats usec per command (a script's includes the commands it runs). */
  usec: Record<string, number>
}

function emptyTotals(variant: SemVariant): VariantTotals {
  return {
    variant,
    acquisitions: 0,
    elapsedMs: 0,
    perWorker: new Array<number>(WORKERS).fill(0),
    waits: new Samples(),
    holds: new Samples(),
    maxHolders: 0,
    violations: 0,
    timeouts: 0,
    clientCpuMs: 0,
    roundPerSec: [],
    deltas: [],
    sent: {},
    usec: {},
  }
}

/** commandstats usec per command between two snapshots (INFO excluded). */
function usecDelta(before: ServerSnapshot, after: ServerSnapshot): Record<string, number> {
  const delta: Record<string, number> = {}
  for (const [name, usec] of after.usec) {
    const spent = usec - (before.usec.get(name) ?? 0)
    if (spent > 0 && name !== 'info') delta[name] = spent
  }
  return delta
}

function addRun(
  total: VariantTotals,
  run: RunResult,
  before: ServerSnapshot,
  after: ServerSnapshot,
  sent: Record<string, number>,
) {
  total.acquisitions += run.acquisitions
  total.elapsedMs += run.elapsedMs
  run.perWorker.forEach((count, id) => {
    total.perWorker[id] = (total.perWorker[id] as number) + count
  })
  total.waits.add(run.waits)
  total.holds.add(run.holds)
  total.maxHolders = Math.max(total.maxHolders, run.maxHolders)
  total.violations += run.violations
  total.timeouts += run.timeouts
  total.clientCpuMs += run.clientCpuMs
  total.roundPerSec.push((run.acquisitions / run.elapsedMs) * 1000)
  total.deltas.push(diffSnapshots(before, after))
  for (const [name, count] of Object.entries(sent)) total.sent[name] = (total.sent[name] ?? 0) + count
  for (const [name, usec] of Object.entries(usecDelta(before, after)))
    total.usec[name] = (total.usec[name] ?? 0) + usec
}

/** "evalsha 81.2, zrangebyscore 3.1, ...": commandstats µs per acquisition, most expensive first. */
function topUsec(total: VariantTotals, top = 10): string {
  return Object.entries(total.usec)
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([name, usec]) => `${name} ${(usec / total.acquisitions).toFixed(1)}`)
    .join(', ')
}

interface Measured {
  key: string
  label: string
  total: VariantTotals
  server: ServerDelta
  perSec: number
  efficiency: number
  hold: Summary
  /** Completions/s over what PERMITS permits allow with the measured mean hold. */
  holdEfficiency: number
  /** Mean time a permit sits between one hold's end and the next hold's start: permits / rate - hold. */
  handoverMs: number
  waits: Summary
  jain: number
  min: number
  max: number
  /** Top-level requests per acquisition from commandstats: EVALSHA + EVAL + the library's own
   * non-script commands. */
  roundTrips: number
  /** Commands ioredis sent on the two connections, per acquisition. */
  sentPerAcquisition: number
}

function measured(total: VariantTotals): Measured {
  const server = sumDeltas(total.deltas)
  const perSec = (total.acquisitions / total.elapsedMs) * 1000
  const hold = summarize(total.holds)
  const { min, max } = minMax(total.perWorker)
  const topLevel = total.variant.topLevelCommands.reduce((sum, name) => sum + (server.calls[name] ?? 0), 0)
  const sent = Object.values(total.sent).reduce((sum, count) => sum + count, 0)
  return {
    key: total.variant.key,
    label: total.variant.label,
    total,
    server,
    perSec,
    efficiency: perSec / THEORETICAL_PER_SEC,
    hold,
    holdEfficiency: perSec / ((PERMITS * 1000) / hold.mean),
    handoverMs: (PERMITS * 1000) / perSec - hold.mean,
    waits: summarize(total.waits),
    jain: jainIndex(total.perWorker),
    min,
    max,
    roundTrips: (server.scriptCalls + topLevel) / total.acquisitions,
    sentPerAcquisition: sent / total.acquisitions,
  }
}

function percent(value: number): string {
  return `${fmtFixed(value * 100, 1)} %`
}

function tollgateVariant(
  stores: readonly Store[],
  key = 'tollgate',
  label = 'tollgate createSemaphore',
): SemVariant {
  return {
    key,
    label,
    topLevelCommands: ['subscribe', 'unsubscribe'],
    workers: (name) =>
      Array.from({ length: WORKERS }, (_, id) => {
        const semaphore = createSemaphore(stores[id % stores.length] as Store, name, {
          permits: PERMITS,
          ttlMs: TTL_MS,
          autoRenew: true,
        })
        return async () => {
          const lease = await semaphore.acquire({ timeoutMs: ACQUIRE_TIMEOUT_MS })
          return () => lease.release()
        }
      }),
    isTimeout: (error) => error instanceof AcquireTimeoutError,
  }
}

function redisSemaphoreVariant(clients: readonly Redis[]): SemVariant {
  return {
    key: 'redisSemaphore',
    label: 'redis-semaphore 5.8.0 Semaphore',
    topLevelCommands: ['zrem'],
    workers: (name) =>
      Array.from({ length: WORKERS }, (_, id) => {
        const semaphore = new RsSemaphore(
          clients[id % clients.length] as Redis,
          `${PREFIX}:${name}`,
          PERMITS,
          {
            lockTimeout: TTL_MS,
            acquireTimeout: ACQUIRE_TIMEOUT_MS,
            retryInterval: RETRY_INTERVAL_MS,
            refreshInterval: REFRESH_INTERVAL_MS,
          },
        )
        return async () => {
          await semaphore.acquire()
          return () => semaphore.release()
        }
      }),
    isTimeout: (error) => error instanceof RsTimeoutError,
  }
}

async function runRounds(ctx: BenchContext, variants: readonly SemVariant[], counter: CommandCounter) {
  for (const variant of variants) {
    ctx.log(`  ${variant.label}: warm-up ${WARMUP_MS} ms`)
    await contend(variant.workers(`sem-contended-${variant.key}-warmup`), variant, WARMUP_MS)
  }
  const totals = variants.map(emptyTotals)
  for (let round = 0; round < ROUNDS; round++) {
    const order = variants.map((_, i) => i)
    if (round % 2 === 1) order.reverse()
    for (const i of order) {
      const variant = variants[i] as SemVariant
      // A fresh name every round: no state of an earlier round (queue, holders, counters) carries over.
      const acquirers = variant.workers(`sem-contended-${variant.key}-r${round}`)
      const sentBefore = counter.snapshot()
      const before = await ctx.redis.snapshot()
      const run = await contend(acquirers, variant, ROUND_MS)
      const after = await ctx.redis.snapshot()
      const sent = CommandCounter.diff(sentBefore, counter.snapshot())
      addRun(totals[i] as VariantTotals, run, before, after, sent)
      ctx.log(
        `  round ${round + 1}/${ROUNDS} ${variant.label}: ${fmtInt((run.acquisitions / run.elapsedMs) * 1000)} completions/s`,
      )
    }
  }
  return totals.map(measured)
}

export const semContended: Scenario = {
  name: 'sem-contended',
  title: `${WORKERS} workers on 2 connections contend one semaphore of ${PERMITS} permits, ${HOLD_MS} ms holds, vs redis-semaphore`,
  seconds: 28,
  async run(ctx) {
    const clients = [await ctx.redis.connect(), await ctx.redis.connect()]
    const counter = new CommandCounter()
    for (const client of clients) counter.attach(client)
    const stores = clients.map((client) => createRedisStore(client, { prefix: PREFIX }))
    // As if the workers were spread over SEPARATE processes: each store batches only its own calls.
    const separateClients = await Promise.all(Array.from({ length: SEPARATE }, () => ctx.redis.connect()))
    for (const client of separateClients) counter.attach(client)
    const separateStores = separateClients.map((client) => createRedisStore(client, { prefix: PREFIX }))
    try {
      ctx.log(
        `  ${WORKERS} workers, ${PERMITS} permits, hold ${HOLD_MS} ms; ${ROUNDS} alternating rounds of ${ROUND_MS} ms per variant`,
      )
      const variants = await runRounds(
        ctx,
        [
          tollgateVariant(stores),
          redisSemaphoreVariant(clients),
          tollgateVariant(separateStores, 'tollgate-separate', `tollgate, ${SEPARATE} stores`),
        ],
        counter,
      )
      const [ours, theirs, separate] = variants as [Measured, Measured, Measured]
      const per = (v: Measured, value: number) => value / v.total.acquisitions
      const row = (metric: string, value: (v: Measured) => string): string[] => [
        metric,
        ...variants.map(value),
      ]
      const table: Table = {
        columns: ['metric', ...variants.map((v) => v.label)],
        rows: [
          row('acquisitions', (v) => fmtInt(v.total.acquisitions)),
          row('completions/s', (v) => fmtInt(v.perSec)),
          row(`efficiency vs ${fmtInt(THEORETICAL_PER_SEC)}/s`, (v) => percent(v.efficiency)),
          row('hold mean (measured)', (v) => fmtMs(v.hold.mean)),
          row('hold p99 (measured)', (v) => fmtMs(v.hold.p99)),
          row('efficiency vs measured hold', (v) => percent(v.holdEfficiency)),
          row('permit idle per hand-over (implied)', (v) => fmtMs(v.handoverMs)),
          row('wait p50', (v) => fmtMs(v.waits.p50)),
          row('wait p99', (v) => fmtMs(v.waits.p99)),
          row('wait max', (v) => fmtMs(v.waits.max)),
          row('per-worker min / max', (v) => `${v.min} / ${v.max}`),
          row('Jain fairness index', (v) => fmtFixed(v.jain, 4)),
          row('max observed holders', (v) => fmtInt(v.total.maxHolders)),
          row('violations (holders > permits)', (v) => fmtInt(v.total.violations)),
          row('acquire timeouts', (v) => fmtInt(v.total.timeouts)),
          row('round trips / acquisition', (v) => fmtFixed(v.roundTrips)),
          row('commands sent / acquisition (ioredis)', (v) => fmtFixed(v.sentPerAcquisition)),
          row('script calls / acquisition', (v) => fmtFixed(per(v, v.server.scriptCalls))),
          row('redis cmds / acquisition', (v) => fmtFixed(per(v, v.server.totalCalls), 1)),
          row('script µs / acquisition', (v) => fmtFixed(per(v, v.server.scriptUsec), 1)),
          row('redis CPU µs / acquisition', (v) => fmtFixed(per(v, v.server.cpuSeconds * 1e6), 1)),
          row('node CPU µs / acquisition', (v) => fmtFixed(per(v, v.total.clientCpuMs * 1000), 1)),
          row('completions/s per round', (v) => v.total.roundPerSec.map((r) => fmtInt(r)).join(' ')),
        ],
      }
      const notes = [
        `${WORKERS} workers in this process, alternately on 2 ioredis connections (Tollgate: one store per connection, each with its own subscriber connection; redis-semaphore: the same two connections). 'tollgate, ${SEPARATE} stores': the same workers spread over ${SEPARATE} stores on ${SEPARATE} connections of their own, as ${SEPARATE} processes would be: each store batches only its own workers' calls. Each worker loops acquire() -> hold -> release(); ${ROUNDS} rounds of ${ROUND_MS} ms per variant after a ${WARMUP_MS} ms warm-up each, order flipped every round, every variant-round on a fresh name; waiters queued at a round's end are still served and counted. Rates divide by the time until the last release.`,
        `Tollgate: createSemaphore(store, name, { permits: ${PERMITS}, ttlMs: ${TTL_MS}, autoRenew: true }).acquire({ timeoutMs: ${ACQUIRE_TIMEOUT_MS} }) then lease.release(). redis-semaphore: new Semaphore(client, key, ${PERMITS}, { lockTimeout: ${TTL_MS}, acquireTimeout: ${ACQUIRE_TIMEOUT_MS}, retryInterval: ${RETRY_INTERVAL_MS}, refreshInterval: ${REFRESH_INTERVAL_MS} }).acquire() then release(), one instance per worker. redis-semaphore has no notification: a waiter re-runs its acquire script every retryInterval (default 10 ms; ${RETRY_INTERVAL_MS} ms here, the smallest a Node timer takes, so polling is not what caps it). Its FairSemaphore was removed; Semaphore is the library's fair(-ish) variant.`,
        `Hold = await setTimeout(${HOLD_MS}) from node:timers/promises, measured around the sleep. Node timers fire on a loop turn at or after the deadline (ms resolution), so holds overshoot ${HOLD_MS} ms and cap both libraries below ${fmtInt(THEORETICAL_PER_SEC)}/s; efficiency vs measured hold = completions/s / (${PERMITS} x 1000 / mean hold ms).`,
        'Wait = from the acquire() call to the permit. Max observed holders / violations: an in-process counter incremented when a hold starts and decremented before release() is sent, so it only sees holds that overlap in this process (which, with every worker here, is every hold).',
        `Round trips: top-level requests from INFO commandstats deltas (EVALSHA + EVAL, plus Tollgate's SUBSCRIBE/UNSUBSCRIBE on its subscriber connections, plus redis-semaphore's ZREM release); commands sent: counted by wrapping ioredis sendCommand on the two connections (subscriber connections not included). Redis cmds include those run inside scripts. Redis CPU = INFO cpu used_cpu_sys + used_cpu_user delta (includes network I/O); node CPU = process.cpuUsage() of the whole process.`,
        `Permit idle per hand-over = ${PERMITS} x 1000 / completions/s - mean hold: how long, on average, a permit sits unused between a hold's end and the next hold's start (release call, server work, notification or next poll, client wake-up).`,
        ...variants.map(
          (v) =>
            `Redis commands per acquisition, ${v.label}: ${topCommands(v.server, v.total.acquisitions, 12)}.`,
        ),
        ...variants.map(
          (v) =>
            `Redis µs per acquisition by command (commandstats usec; a script's time includes the commands it runs), ${v.label}: ${topUsec(v.total)}.`,
        ),
      ]
      const ourCpu = per(ours, ours.server.cpuSeconds * 1e6)
      const theirCpu = per(theirs, theirs.server.cpuSeconds * 1e6)
      const verdicts: Verdict[] = [
        {
          target: `efficiency >= ${TARGETS.efficiency * 100} % of ${fmtInt(THEORETICAL_PER_SEC)}/s (${ours.label})`,
          pass: ours.efficiency >= TARGETS.efficiency,
          detail: `${fmtInt(ours.perSec)} completions/s = ${percent(ours.efficiency)}; measured mean hold ${fmtMs(ours.hold.mean)}, so ${percent(ours.holdEfficiency)} of what the measured hold allows (redis-semaphore ${fmtInt(theirs.perSec)}/s = ${percent(theirs.efficiency)}, ${percent(theirs.holdEfficiency)} of its measured hold)`,
        },
        {
          target: `wait p99 <= ${TARGETS.waitP99Ms} ms (${ours.label})`,
          pass: ours.waits.p99 <= TARGETS.waitP99Ms,
          detail: `p50 ${fmtMs(ours.waits.p50)}, p99 ${fmtMs(ours.waits.p99)}, max ${fmtMs(ours.waits.max)} (redis-semaphore p50 ${fmtMs(theirs.waits.p50)}, p99 ${fmtMs(theirs.waits.p99)})`,
        },
        {
          target: `<= ${TARGETS.roundTrips} round trips per acquisition incl. release (${ours.label})`,
          pass: ours.roundTrips <= TARGETS.roundTrips,
          detail: `${fmtFixed(ours.roundTrips)} (commands sent ${fmtFixed(ours.sentPerAcquisition)}); redis-semaphore ${fmtFixed(theirs.roundTrips)}`,
        },
        {
          target: 'Redis CPU per acquisition <= redis-semaphore in the same run',
          pass: ourCpu <= theirCpu,
          detail: `tollgate ${fmtFixed(ourCpu, 1)} µs, redis-semaphore ${fmtFixed(theirCpu, 1)} µs (script µs ${fmtFixed(per(ours, ours.server.scriptUsec), 1)} vs ${fmtFixed(per(theirs, theirs.server.scriptUsec), 1)})`,
        },
        {
          target: `Jain fairness >= ${TARGETS.jain} and every worker progressed (${ours.label})`,
          pass: ours.jain >= TARGETS.jain && ours.min > 0,
          detail: `Jain ${fmtFixed(ours.jain, 4)}, per-worker ${ours.min}..${ours.max} (redis-semaphore Jain ${fmtFixed(theirs.jain, 4)}, ${theirs.min}..${theirs.max})`,
        },
        {
          target: `${separate.label} (${SEPARATE} processes' worth of clients): completions/s >= redis-semaphore's, at <= its Redis CPU per acquisition`,
          pass:
            separate.perSec >= theirs.perSec && per(separate, separate.server.cpuSeconds * 1e6) <= theirCpu,
          detail: `${fmtInt(separate.perSec)} against ${fmtInt(theirs.perSec)} completions/s (${fmtFixed(separate.perSec / theirs.perSec)}x); Redis CPU ${fmtFixed(per(separate, separate.server.cpuSeconds * 1e6), 1)} against ${fmtFixed(theirCpu, 1)} µs per acquisition`,
        },
        ...variants.map((v) => ({
          target: `zero violations: never more than ${PERMITS} holders (${v.label})`,
          pass: v.total.violations === 0 && v.total.maxHolders <= PERMITS,
          detail: `${v.total.violations} violations, max observed holders ${v.total.maxHolders} in ${fmtInt(v.total.acquisitions)} acquisitions; ${v.total.timeouts} acquire timeouts`,
        })),
      ]
      const data = Object.fromEntries(
        variants.map((v) => [
          v.key,
          {
            label: v.label,
            acquisitions: v.total.acquisitions,
            elapsedMs: v.total.elapsedMs,
            completionsPerSec: v.perSec,
            roundCompletionsPerSec: v.total.roundPerSec,
            efficiency: v.efficiency,
            holdMs: v.hold,
            holdEfficiency: v.holdEfficiency,
            handoverMs: v.handoverMs,
            usec: v.total.usec,
            waitMs: v.waits,
            perWorker: v.total.perWorker,
            jain: v.jain,
            maxHolders: v.total.maxHolders,
            violations: v.total.violations,
            timeouts: v.total.timeouts,
            roundTripsPerAcquisition: v.roundTrips,
            sentPerAcquisition: v.sentPerAcquisition,
            sent: v.total.sent,
            redisCpuUsPerAcquisition: per(v, v.server.cpuSeconds * 1e6),
            clientCpuMs: v.total.clientCpuMs,
            server: v.server,
          },
        ]),
      )
      return {
        tables: [table],
        verdicts,
        notes,
        data: {
          ...data,
          workers: WORKERS,
          permits: PERMITS,
          holdMs: HOLD_MS,
          retryIntervalMs: RETRY_INTERVAL_MS,
        },
      }
    } finally {
      await Promise.all([...stores, ...separateStores].map((store) => store.close()))
    }
  },
}

export const semaphoreScenarios: Scenario[] = [semContended]
