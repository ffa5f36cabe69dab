// Read/write lock scenario (issue 4): 32 workers on 2 connections run a read-heavy (95 % reads) and a
// write-heavy (50 % reads) mix over 1 and over 100 resources, each holding the lock 1 ms. Throughput,
// waits, Redis cost per acquisition, and an in-process checker for exclusion and reader overlap.
import { setTimeout as sleep } from 'node:timers/promises'
import {
  AcquireTimeoutError,
  createReadWriteLock,
  createRedisStore,
  type Lease,
  type ReadWriteLock,
  type RwMode,
  type Store,
} from '../../src/index.js'
import { diffSnapshots, type ServerDelta, topCommands } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { minMax, Samples, type Summary, summarize } from '../lib/stats.js'

const PREFIX = 'bench'
const WORKERS = 32
const CONNECTIONS = 2
const HOLD_MS = 1
const TTL_MS = 30_000
const ACQUIRE_TIMEOUT_MS = 5000
const WARMUP_MS = 300
const MEASURE_MS = 3000
/** The read-heavy 1-resource mix must show readers really sharing the lock. */
const MIN_SHARED_READERS = 2

interface Mix {
  key: string
  label: string
  /** Probability that an iteration reads (else it writes). */
  readShare: number
  resources: number
}

const MIXES: readonly Mix[] = [
  { key: 'read95x1', label: '95 % reads, 1 resource', readShare: 0.95, resources: 1 },
  { key: 'read95x100', label: '95 % reads, 100 resources', readShare: 0.95, resources: 100 },
  { key: 'read50x1', label: '50 % reads, 1 resource', readShare: 0.5, resources: 1 },
  { key: 'read50x100', label: '50 % reads, 100 resources', readShare: 0.5, resources: 100 },
]

/** mulberry32: a small seeded PRNG, so every run draws the same sequence of resources and modes. */
function prng(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

interface MixResult {
  acquisitions: number
  reads: number
  writes: number
  elapsedMs: number
  perWorker: number[]
  /** acquire() call -> lease, ms, of every acquisition / of reads / of writes. */
  waits: Samples
  readWaits: Samples
  writeWaits: Samples
  /** Measured length of every hold (the sleep between acquire and release), ms. */
  holds: Samples
  /** Holds that began while a writer was inside the same resource, or writes that began while anyone
   * was (must be 0). */
  violations: number
  /** Most readers inside one resource at once. */
  maxReaders: number
  /** Read holds that began while another reader was inside the same resource. */
  sharedReads: number
  /** Acquires that gave up after ACQUIRE_TIMEOUT_MS (the worker then picks again). */
  timeouts: number
  clientCpuMs: number
}

/**
 * Every worker loops: pick a resource (uniform) and a mode (by the mix), acquire, hold HOLD_MS,
 * release, until `durationMs` has passed; waiters already queued then still get their turn, so every
 * acquire() call is served and counted. `locks[c][r]` is resource r on connection c; worker w uses
 * connection w % CONNECTIONS. The checker counts, per resource, the readers and writers between the
 * lease arriving and release() being sent (inside the lease on the server), from this process alone.
 */
async function runMix(
  locks: readonly (readonly ReadWriteLock[])[],
  mix: Mix,
  durationMs: number,
  seed: number,
): Promise<MixResult> {
  const readers = new Int32Array(mix.resources)
  const writers = new Int32Array(mix.resources)
  const perWorker: number[] = new Array<number>(WORKERS).fill(0)
  const waits = new Samples()
  const readWaits = new Samples()
  const writeWaits = new Samples()
  const holds = new Samples()
  let acquisitions = 0
  let reads = 0
  let writes = 0
  let violations = 0
  let maxReaders = 0
  let sharedReads = 0
  let timeouts = 0
  let failure: { error: unknown } | undefined
  const maxPerWorker = Math.ceil(durationMs / HOLD_MS) + 1
  const cpuBefore = process.cpuUsage()
  const started = performance.now()
  const end = started + durationMs

  const worker = async (id: number) => {
    const random = prng(seed * 1000 + id)
    const mine = locks[id % locks.length] as readonly ReadWriteLock[]
    for (let i = 0; i < maxPerWorker && !failure;) {
      const called = performance.now()
      if (called >= end) return
      const resource = Math.floor(random() * mix.resources)
      const mode: RwMode = random() < mix.readShare ? 'read' : 'write'
      const lock = mine[resource] as ReadWriteLock
      let lease: Lease
      try {
        lease = await lock[mode].acquire({ timeoutMs: ACQUIRE_TIMEOUT_MS })
      } catch (error) {
        if (error instanceof AcquireTimeoutError) {
          timeouts++
          continue
        }
        failure ??= { error }
        return
      }
      const holdStarted = performance.now()
      const wait = holdStarted - called
      waits.push(wait)
      if (mode === 'read') {
        readWaits.push(wait)
        if ((writers[resource] as number) > 0) violations++
        if ((readers[resource] as number) > 0) sharedReads++
        const inside = (readers[resource] as number) + 1
        readers[resource] = inside
        if (inside > maxReaders) maxReaders = inside
      } else {
        writeWaits.push(wait)
        if ((writers[resource] as number) > 0 || (readers[resource] as number) > 0) violations++
        writers[resource] = (writers[resource] as number) + 1
      }
      await sleep(HOLD_MS)
      holds.push(performance.now() - holdStarted)
      if (mode === 'read') {
        readers[resource] = (readers[resource] as number) - 1
        reads++
      } else {
        writers[resource] = (writers[resource] as number) - 1
        writes++
      }
      acquisitions++
      perWorker[id] = (perWorker[id] as number) + 1
      i++
      try {
        await lease.release()
      } catch (error) {
        failure ??= { error }
        return
      }
    }
  }
  await Promise.all(Array.from({ length: WORKERS }, (_, id) => worker(id)))
  const elapsedMs = performance.now() - started
  const cpu = process.cpuUsage(cpuBefore)
  if (failure) throw failure.error
  return {
    acquisitions,
    reads,
    writes,
    elapsedMs,
    perWorker,
    waits,
    readWaits,
    writeWaits,
    holds,
    violations,
    maxReaders,
    sharedReads,
    timeouts,
    clientCpuMs: (cpu.user + cpu.system) / 1000,
  }
}

interface Measured {
  mix: Mix
  result: MixResult
  server: ServerDelta
  perSec: number
  waits: Summary
  readWaits: Summary
  writeWaits: Summary
  hold: Summary
  min: number
  max: number
}

async function measureMix(
  ctx: BenchContext,
  stores: readonly Store[],
  mix: Mix,
  seed: number,
): Promise<Measured> {
  const locks = stores.map((store) =>
    Array.from({ length: mix.resources }, (_, r) =>
      createReadWriteLock(store, `rw-${mix.key}-${r}`, { ttlMs: TTL_MS, autoRenew: true }),
    ),
  )
  ctx.log(`  ${mix.label}: warm-up ${WARMUP_MS} ms, then ${MEASURE_MS} ms`)
  await runMix(locks, mix, WARMUP_MS, seed + 500)
  const before = await ctx.redis.snapshot()
  const result = await runMix(locks, mix, MEASURE_MS, seed)
  const after = await ctx.redis.snapshot()
  const perSec = (result.acquisitions / result.elapsedMs) * 1000
  ctx.log(`  ${mix.label}: ${fmtInt(perSec)} acquisitions/s, ${result.violations} violations`)
  const { min, max } = minMax(result.perWorker)
  return {
    mix,
    result,
    server: diffSnapshots(before, after),
    perSec,
    waits: summarize(result.waits),
    readWaits: summarize(result.readWaits),
    writeWaits: summarize(result.writeWaits),
    hold: summarize(result.holds),
    min,
    max,
  }
}

function percent(value: number): string {
  return `${fmtFixed(value * 100, 1)} %`
}

export const rwlockMixes: Scenario = {
  name: 'rwlock-mixes',
  title: `${WORKERS} workers on ${CONNECTIONS} connections, read/write lock, 95 % and 50 % reads over 1 and 100 resources, ${HOLD_MS} ms holds`,
  seconds: 15,
  async run(ctx) {
    const clients = await Promise.all(Array.from({ length: CONNECTIONS }, () => ctx.redis.connect()))
    const stores = clients.map((client) => createRedisStore(client, { prefix: PREFIX }))
    try {
      const variants: Measured[] = []
      for (const [i, mix] of MIXES.entries()) variants.push(await measureMix(ctx, stores, mix, i + 1))
      const per = (v: Measured, value: number) => value / v.result.acquisitions
      const row = (metric: string, value: (v: Measured) => string): string[] => [
        metric,
        ...variants.map(value),
      ]
      const table: Table = {
        columns: ['metric', ...variants.map((v) => v.mix.label)],
        rows: [
          row('acquisitions', (v) => fmtInt(v.result.acquisitions)),
          row('reads / writes', (v) => `${fmtInt(v.result.reads)} / ${fmtInt(v.result.writes)}`),
          row('read share (measured)', (v) => percent(v.result.reads / v.result.acquisitions)),
          row('ops/s (acquisitions/s)', (v) => fmtInt(v.perSec)),
          row('wait p50', (v) => fmtMs(v.waits.p50)),
          row('wait p99', (v) => fmtMs(v.waits.p99)),
          row('wait max', (v) => fmtMs(v.waits.max)),
          row('read wait p50 / p99', (v) => `${fmtMs(v.readWaits.p50)} / ${fmtMs(v.readWaits.p99)}`),
          row('write wait p50 / p99', (v) => `${fmtMs(v.writeWaits.p50)} / ${fmtMs(v.writeWaits.p99)}`),
          row('hold mean (measured)', (v) => fmtMs(v.hold.mean)),
          row('per-worker min / max', (v) => `${v.min} / ${v.max}`),
          row('acquire timeouts', (v) => fmtInt(v.result.timeouts)),
          row('script calls / acquisition', (v) => fmtFixed(per(v, v.server.scriptCalls))),
          row('redis cmds / acquisition', (v) => fmtFixed(per(v, v.server.totalCalls), 1)),
          row('script µs / acquisition', (v) => fmtFixed(per(v, v.server.scriptUsec), 1)),
          row('redis CPU µs / acquisition', (v) => fmtFixed(per(v, v.server.cpuSeconds * 1e6), 1)),
          row('node CPU µs / acquisition', (v) => fmtFixed(per(v, v.result.clientCpuMs * 1000), 1)),
          row('exclusion violations', (v) => fmtInt(v.result.violations)),
          row('max concurrent readers on one resource', (v) => fmtInt(v.result.maxReaders)),
          row('reads that began alongside another reader', (v) =>
            percent(v.result.reads === 0 ? 0 : v.result.sharedReads / v.result.reads),
          ),
        ],
      }
      const notes = [
        `${WORKERS} workers in this process, alternately on ${CONNECTIONS} ioredis connections (one store per connection, each with its own subscriber connection). Each worker loops: pick a resource uniformly, pick read with the mix's probability (else write; seeded PRNG, the same draws every run), acquire({ timeoutMs: ${ACQUIRE_TIMEOUT_MS} }), hold ${HOLD_MS} ms, release(). Per variant ${MEASURE_MS} ms after a ${WARMUP_MS} ms warm-up on the same names; waiters queued at the end are still served and counted. Rates divide by the time until the last release.`,
        `Tollgate: createReadWriteLock(store, name, { ttlMs: ${TTL_MS}, autoRenew: true }), one lock object per resource and connection, .read / .write .acquire() then lease.release(). No owner option and no withLease, so every acquisition is its own owner (no re-entry).`,
        `Hold = await setTimeout(${HOLD_MS}) from node:timers/promises, measured around the sleep (Node timers overshoot, see hold mean). Wait = from the acquire() call to the lease.`,
        'Checker: in-process counters of readers and writers per resource, raised when a lease arrives and lowered before release() is sent (so always inside the lease on the server). A violation is a read that began while a writer was inside the same resource, or a write that began while anyone was; every overlap starts with such an entry, so zero violations means no moment with a writer plus anyone else. Every worker is in this process, so the checker sees every hold.',
        'Script calls and Redis commands per acquisition come from INFO commandstats deltas over the measured run (commands run inside Lua included, INFO excluded; SUBSCRIBE/UNSUBSCRIBE of the wait groups included). Redis CPU = INFO cpu used_cpu_sys + used_cpu_user delta (includes network I/O); node CPU = process.cpuUsage() of the whole process.',
        ...variants.map(
          (v) =>
            `Redis commands per acquisition, ${v.mix.label}: ${topCommands(v.server, v.result.acquisitions, 12)}.`,
        ),
      ]
      const overlap = variants.find((v) => v.mix.resources === 1 && v.mix.readShare > 0.9) as Measured
      const verdicts: Verdict[] = [
        ...variants.map((v) => ({
          target: `no moment with a writer plus anyone else on one resource (${v.mix.label})`,
          pass: v.result.violations === 0,
          detail: `${v.result.violations} violations in ${fmtInt(v.result.acquisitions)} acquisitions (${fmtInt(v.result.reads)} reads, ${fmtInt(v.result.writes)} writes); ${v.result.timeouts} acquire timeouts`,
        })),
        {
          target: `readers overlap: max concurrent readers on one resource >= ${MIN_SHARED_READERS} (${overlap.mix.label})`,
          pass: overlap.result.maxReaders >= MIN_SHARED_READERS,
          detail: `max ${overlap.result.maxReaders} readers at once; ${percent(overlap.result.sharedReads / overlap.result.reads)} of reads began alongside another reader`,
        },
      ]
      const data = Object.fromEntries(
        variants.map((v) => [
          v.mix.key,
          {
            label: v.mix.label,
            readShare: v.mix.readShare,
            resources: v.mix.resources,
            workers: WORKERS,
            holdMsTarget: HOLD_MS,
            acquisitions: v.result.acquisitions,
            reads: v.result.reads,
            writes: v.result.writes,
            elapsedMs: v.result.elapsedMs,
            opsPerSec: v.perSec,
            waitMs: v.waits,
            readWaitMs: v.readWaits,
            writeWaitMs: v.writeWaits,
            holdMs: v.hold,
            perWorker: v.result.perWorker,
            timeouts: v.result.timeouts,
            violations: v.result.violations,
            maxReaders: v.result.maxReaders,
            sharedReads: v.result.sharedReads,
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

export const rwlockScenarios: Scenario[] = [rwlockMixes]
