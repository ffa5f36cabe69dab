// Holds scenario (issue 29): what a held lease costs Redis in memory, against a bare SET NX PX lock
// and redis-semaphore; and what one call costs when an owner holds 10,000 acquisitions (a reentrant
// mutex, a read lock): its latency against the one-hold case, and whether a round of renewals of
// all 10,000 stalls Redis (SLOWLOG at 5 ms).
import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import { Mutex as RsMutex } from 'redis-semaphore'
import {
  createMutex,
  createReadWriteLock,
  createRedisStore,
  createReentrantMutex,
  createSemaphore,
  type Lease,
} from '../../src/index.js'
import { parseInfo } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { percentile } from '../lib/stats.js'

const LEASES = 10_000
const HOLDS = 10_000
const TTL_MS = 30_000
/** Latency samples of one acquire + release, with one hold and with HOLDS. */
const SAMPLES = 2_000
const TARGETS = { memory: 1.5, latency: 1.2, stallMs: 5 }

async function usedMemory(admin: Redis): Promise<number> {
  await admin.call('MEMORY', 'PURGE').catch(() => undefined)
  return Number(parseInfo(await admin.info('memory')).used_memory ?? 0)
}

interface MemoryRow {
  variant: string
  bytes: number
}

/** Bytes per lease: used_memory with LEASES leases held, less before, over LEASES. */
async function memoryOf(
  admin: Redis,
  variant: string,
  hold: () => Promise<() => Promise<unknown>>,
): Promise<MemoryRow> {
  const before = await usedMemory(admin)
  const release = await hold()
  const after = await usedMemory(admin)
  await release()
  return { variant, bytes: (after - before) / LEASES }
}

/** `n` calls of `make(i)`, at most 200 at a time. */
async function inBatches<T>(n: number, make: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = []
  for (let from = 0; from < n; from += 200) {
    out.push(
      ...(await Promise.all(Array.from({ length: Math.min(200, n - from) }, (_, k) => make(from + k)))),
    )
  }
  return out
}

const releaseAll = (leases: Lease[]) => async () => {
  for (let from = 0; from < leases.length; from += 200)
    await Promise.all(leases.slice(from, from + 200).map((lease) => lease.release()))
}

/** p50 and p99 of one acquire + release, in ms. */
async function cycleLatency(cycle: () => Promise<void>): Promise<{ p50: number; p99: number }> {
  const samples: number[] = []
  for (let i = 0; i < 200; i++) await cycle() // warm-up
  for (let i = 0; i < SAMPLES; i++) {
    const started = performance.now()
    await cycle()
    samples.push(performance.now() - started)
  }
  samples.sort((a, b) => a - b)
  return { p50: percentile(samples, 0.5), p99: percentile(samples, 0.99) }
}

/** FCALL µs per call on the server over `times` cycles. */
async function serverUs(admin: Redis, times: number, cycle: () => Promise<void>): Promise<number> {
  const read = async () => {
    const m = /^cmdstat_fcall:calls=(\d+),usec=(\d+)/m.exec(await admin.info('commandstats'))
    return { calls: Number(m?.[1] ?? 0), usec: Number(m?.[2] ?? 0) }
  }
  const before = await read()
  for (let i = 0; i < times; i++) await cycle()
  const after = await read()
  return (after.usec - before.usec) / (after.calls - before.calls)
}

interface HoldsRow {
  variant: string
  one: { p50: number; p99: number; us: number }
  many: { p50: number; p99: number; us: number }
  renewed: number
  slowCalls: number
  slowestMs: number
}

async function manyHolds(ctx: BenchContext, admin: Redis, kind: 'reentrant' | 'read'): Promise<HoldsRow> {
  const client = await ctx.redis.connect()
  const store = createRedisStore(client, { prefix: `holds-${kind}` })
  // Renewed at a third of 3 s: one round of renewals of every hold within the measurement.
  const options = { owner: 'job-1', ttlMs: 3_000 }
  const lock =
    kind === 'reentrant'
      ? createReentrantMutex(store, 'big', options)
      : createReadWriteLock(store, 'big', options).read
  const held: Lease[] = [await lock.acquire()]
  const cycle = async () => {
    await (await lock.acquire()).release()
  }
  const one = { ...(await cycleLatency(cycle)), us: await serverUs(admin, 500, cycle) }
  for (let from = 1; from < HOLDS; from += 500)
    held.push(
      ...(await Promise.all(Array.from({ length: Math.min(500, HOLDS - from) }, () => lock.acquire()))),
    )
  await admin.config('SET', 'slowlog-log-slower-than', '5000')
  await admin.call('SLOWLOG', 'RESET')
  const firstExpiry = held[0]?.expiresAt ?? 0
  const many = { ...(await cycleLatency(cycle)), us: await serverUs(admin, 500, cycle) }
  // Until every hold was renewed at least once (due ~1 s after its acquire).
  const deadline = performance.now() + 10_000
  while ((held[0]?.expiresAt ?? 0) <= firstExpiry && performance.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 100))
  const slow = (await admin.call('SLOWLOG', 'GET', '128')) as [number, number, number][]
  await admin.config('SET', 'slowlog-log-slower-than', '10000')
  const renewed = held.filter((lease) => !lease.signal.aborted).length
  await releaseAll(held)()
  await store.close()
  return {
    variant: kind === 'reentrant' ? 'reentrant mutex, one owner' : 'read lock, one owner',
    one,
    many,
    renewed,
    slowCalls: slow.length,
    slowestMs: slow.reduce((most, entry) => Math.max(most, Number(entry[2]) / 1000), 0),
  }
}

async function run(ctx: BenchContext) {
  const admin = await ctx.redis.connect()
  const client = await ctx.redis.connect()
  const store = createRedisStore(client, { prefix: 'bench' })
  const names = Array.from({ length: LEASES }, (_, i) => `m${i}`)
  ctx.log(`  memory of ${fmtInt(LEASES)} held leases`)

  const memory: MemoryRow[] = []
  memory.push(
    await memoryOf(admin, 'raw SET NX PX (key bench:raw:m<i>)', async () => {
      const keys = names.map((name) => `bench:raw:${name}`)
      await inBatches(LEASES, (i) =>
        client.set(keys[i] as string, randomBytes(16).toString('base64url'), 'PX', TTL_MS, 'NX'),
      )
      return () => inBatches(LEASES, (i) => client.del(keys[i] as string))
    }),
  )
  memory.push(
    await memoryOf(admin, 'redis-semaphore 5.8.0 Mutex', async () => {
      const mutexes = names.map(
        (name) =>
          new RsMutex(client, `bench:rs:${name}`, {
            lockTimeout: TTL_MS,
            acquireTimeout: 2000,
            refreshInterval: 0,
          }),
      )
      await inBatches(LEASES, (i) => (mutexes[i] as RsMutex).acquire())
      return () => inBatches(LEASES, (i) => (mutexes[i] as RsMutex).release())
    }),
  )
  const tollgateOptions = { ttlMs: TTL_MS, autoRenew: false }
  memory.push(
    await memoryOf(admin, 'tollgate mutex (a lone holder: one key)', async () => {
      const leases = await inBatches(LEASES, (i) =>
        createMutex(store, `mutex-${names[i]}`, tollgateOptions).acquire(),
      )
      return releaseAll(leases)
    }),
  )
  memory.push(
    await memoryOf(admin, `tollgate semaphore(${fmtInt(LEASES)}), one name, every lease held`, async () => {
      const sem = createSemaphore(store, 'wide', { permits: LEASES, ...tollgateOptions })
      const leases = await inBatches(LEASES, () => sem.acquire())
      return releaseAll(leases)
    }),
  )
  memory.push(
    await memoryOf(admin, 'tollgate reentrant mutex, one acquisition each', async () => {
      const leases = await inBatches(LEASES, (i) =>
        createReentrantMutex(store, `re-${names[i]}`, { ...tollgateOptions, owner: 'o' }).acquire(),
      )
      return releaseAll(leases)
    }),
  )
  memory.push(
    await memoryOf(admin, 'tollgate read lock, one reader each', async () => {
      const leases = await inBatches(LEASES, (i) =>
        createReadWriteLock(store, `rw-${names[i]}`, tollgateOptions).read.acquire(),
      )
      return releaseAll(leases)
    }),
  )
  await store.close()

  ctx.log(`  one owner with ${fmtInt(HOLDS)} acquisitions: reentrant mutex, read lock`)
  const holds = [await manyHolds(ctx, admin, 'reentrant'), await manyHolds(ctx, admin, 'read')]

  const raw = memory[0]?.bytes ?? 1
  const tables: Table[] = [
    {
      columns: ['held lease', 'bytes per lease (used_memory)', 'x raw'],
      rows: memory.map((row) => [row.variant, fmtInt(row.bytes), fmtFixed(row.bytes / raw)]),
    },
    {
      columns: [
        `one owner`,
        'p50 / p99, 1 hold',
        `p50 / p99, ${fmtInt(HOLDS)} holds`,
        'p50 ratio',
        'server µs/call, 1 hold',
        `server µs/call, ${fmtInt(HOLDS)} holds`,
        'leases renewed',
        'calls >= 5 ms (SLOWLOG)',
      ],
      rows: holds.map((row) => [
        row.variant,
        `${fmtMs(row.one.p50)} / ${fmtMs(row.one.p99)}`,
        `${fmtMs(row.many.p50)} / ${fmtMs(row.many.p99)}`,
        fmtFixed(row.many.p50 / row.one.p50),
        fmtFixed(row.one.us, 1),
        fmtFixed(row.many.us, 1),
        `${fmtInt(row.renewed)} of ${fmtInt(HOLDS)}`,
        row.slowCalls === 0 ? '0' : `${row.slowCalls} (slowest ${fmtFixed(row.slowestMs, 1)} ms)`,
      ]),
    },
  ]
  const verdicts: Verdict[] = [
    ...memory.slice(2).map((row) => ({
      target: `memory per held lease <= ${TARGETS.memory}x raw (${row.variant})`,
      pass: row.bytes <= raw * TARGETS.memory,
      detail: `${fmtInt(row.bytes)} vs ${fmtInt(raw)} bytes (${fmtFixed(row.bytes / raw)}x)`,
    })),
    ...holds.map((row) => ({
      target: `${row.variant}: with ${fmtInt(HOLDS)} holds, a call's p50 <= ${TARGETS.latency}x the one-hold case, and no renewal call >= ${TARGETS.stallMs} ms`,
      pass: row.many.p50 <= row.one.p50 * TARGETS.latency && row.slowCalls === 0 && row.renewed === HOLDS,
      detail: `p50 ${fmtMs(row.many.p50)} vs ${fmtMs(row.one.p50)} (${fmtFixed(row.many.p50 / row.one.p50)}x), server ${fmtFixed(row.many.us, 1)} vs ${fmtFixed(row.one.us, 1)} µs; ${row.slowCalls} calls >= 5 ms; ${fmtInt(row.renewed)} renewed`,
    })),
  ]
  return {
    tables,
    verdicts,
    notes: [
      `Memory: used_memory (INFO memory, after MEMORY PURGE) with ${fmtInt(LEASES)} leases held, less before, divided by ${fmtInt(LEASES)}; each variant on its own names, released before the next. Key names as each library makes them (tollgate: bench:{mutex:mutex-m<i>}:f; redis-semaphore: bench:rs:m<i> under its own prefix; raw: bench:raw:m<i>). Includes each key's expiry entry.`,
      `Many holds: one owner (owner: 'job-1', ttlMs 3000: renewed every second, in calls of at most 500 leases) holds ${fmtInt(HOLDS)} acquisitions of one reentrant mutex or read lock; one more acquire + release is timed ${fmtInt(SAMPLES)} times (after 200 warm-up cycles) with 1 hold and with ${fmtInt(HOLDS)}; server µs = commandstats usec of FCALL per call over 500 cycles. SLOWLOG at 5 ms from the moment all are held until every lease was renewed once.`,
    ],
    data: { memory, holds },
  }
}

export const holdsScenarios: Scenario[] = [
  {
    name: 'holds',
    title: 'memory per held lease vs SET NX PX and redis-semaphore; one owner with 10,000 acquisitions',
    seconds: 30,
    run,
  },
]
