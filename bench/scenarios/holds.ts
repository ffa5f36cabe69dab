// Holds scenario (issues 29 and 37): what a held lease costs Redis in memory, against a bare SET NX PX
// lock and redis-semaphore; and what one call costs when an owner holds 10,000 acquisitions (a
// reentrant mutex, a read lock) that the scheduler renews, measured once every lease was renewed at
// least twice and the first ttl has passed (an aged hold): each call against the same call on the
// fresh hold (commands inside Redis, exact; server µs), the owner's call against the one-hold case
// (latency), and whether a renewal call of the 10,000 stalls Redis (SLOWLOG at 5 ms).
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
import { MAX_RENEW_BATCH } from '../../src/core/client/renewal.js'
import { keySpace } from '../../src/core/keys.js'
import { parseInfo } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { median, percentile } from '../lib/stats.js'

const LEASES = 10_000
const HOLDS = 10_000
const TTL_MS = 30_000
/** Lease of the many holds: renewed by the scheduler at a third of its term. */
const HOLD_TTL_MS = 3_000
/** Renewals of every lease before a hold counts as aged (and the server's clock past its first expiry). */
const AGE_RENEWALS = 2
/** Cycles of each of issue 37's calls, fresh and aged: before, the first 100 calls after a ttl paid. */
const CALL_CYCLES = 100
/** Latency samples of one acquire + release, with one hold and with HOLDS. */
const SAMPLES = 2_000
/** Cycles of each name timed on the server (SLOWLOG): the median cycle. */
const SERVER_CYCLES = 500
const TARGETS = { memory: 1.5, latency: 1.2, aged: 1.2, stallMs: 5 }
const STALL_US = TARGETS.stallMs * 1000

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

/** Rounds of ROUND_CYCLES cycles, alternating between the two locks (the one-hold case first in odd
 * rounds, second in even ones), so that both see the same machine: p50 and p99 of each, in ms. */
const ROUNDS = 20
const ROUND_CYCLES = SAMPLES / ROUNDS

interface Latency {
  p50: number
  p99: number
}

/** Both locks' latency, and the median over rounds of the second's round p50 over the first's (the
 * machine's latency shifts between modes for seconds at a time, the same for both: a ratio of the
 * same round is robust against it). */
async function alternateLatency(
  cycles: [() => Promise<void>, () => Promise<void>],
): Promise<{ one: Latency; many: Latency; ratio: number }> {
  const samples: [number[], number[]] = [[], []]
  for (const cycle of cycles) for (let i = 0; i < 200; i++) await cycle() // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? [0, 1] : [1, 0]
    for (const which of order) {
      const cycle = cycles[which] as () => Promise<void>
      for (let i = 0; i < ROUND_CYCLES; i++) {
        const started = performance.now()
        await cycle()
        samples[which]?.push(performance.now() - started)
      }
    }
  }
  const roundP50 = (list: number[], round: number) =>
    percentile(
      list.slice(round * ROUND_CYCLES, (round + 1) * ROUND_CYCLES).sort((a, b) => a - b),
      50,
    )
  const ratios = Array.from(
    { length: ROUNDS },
    (_, round) => roundP50(samples[1], round) / roundP50(samples[0], round),
  )
  const [one, many] = samples.map((list) => {
    const sorted = [...list].sort((a, b) => a - b)
    return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) }
  }) as [Latency, Latency]
  return { one, many, ratio: median(ratios) }
}

/** One script call as the server ran it: its function, first key, the commands it ran inside Redis
 * and its µs. */
interface ScriptCall {
  fn: string
  key: string
  /** Arguments after the function's name (SLOWLOG keeps 32 and counts the rest). */
  argc: number
  commands: number
  us: number
}

/** The leases a renewal call carried: after <numkeys> <keys> <channel> [mode] <ttl>, two a lease. */
function leasesOf(call: ScriptCall, numkeys: number): number {
  const head = call.fn.endsWith('rwlock_renew') ? 3 : 2
  return (call.argc - 1 - numkeys - head) / 2
}

/** Every script call while `during` ran (renewals included: callers filter by function and key).
 * SLOWLOG at 0 µs logs each call, and before it, each command it ran (client "?:0"): exact however
 * many other calls ran meanwhile, unlike INFO commandstats, which renewal calls of the held leases
 * would add to. */
async function scriptCalls(admin: Redis, during: () => Promise<void>): Promise<ScriptCall[]> {
  const room = 1_000_000
  const [, slower] = (await admin.config('GET', 'slowlog-log-slower-than')) as [string, string]
  const [, length] = (await admin.config('GET', 'slowlog-max-len')) as [string, string]
  await admin.config('SET', 'slowlog-log-slower-than', '0', 'slowlog-max-len', String(room))
  await admin.call('SLOWLOG', 'RESET')
  try {
    await during()
  } finally {
    await admin.config('SET', 'slowlog-log-slower-than', slower)
  }
  const log = (await admin.call('SLOWLOG', 'GET', '-1')) as [number, number, number, string[], string][]
  await admin.call('SLOWLOG', 'RESET')
  await admin.config('SET', 'slowlog-max-len', length)
  if (log.length >= room) throw new Error(`SLOWLOG kept ${room} entries: some were pushed out`)
  const calls: ScriptCall[] = []
  let inner = 0
  for (const [, , us, args, client] of log.reverse()) {
    if (client === '?:0') {
      inner++
      continue
    }
    if (/^(fcall|evalsha)$/i.test(args[0] ?? '')) {
      const more = /^\.\.\. \((\d+) more arguments\)$/.exec(args[args.length - 1] ?? '')
      const argc = more ? args.length - 1 + Number(more[1]) - 2 : args.length - 2
      calls.push({ fn: args[1] ?? '', key: args[3] ?? '', argc, commands: inner, us })
    }
    inner = 0
  }
  return calls
}

/** The acquire and release calls of one name (by its hash tag), in order, as cycles of `size` calls
 * each; throws unless there are exactly `cycles` cycles. */
function cyclesOf(calls: ScriptCall[], tag: string, size: number, cycles: number): ScriptCall[][] {
  const mine = calls.filter((c) => c.key.includes(tag) && /_(acquire|release)$/.test(c.fn))
  if (mine.length !== size * cycles)
    throw new Error(`${tag}: ${mine.length} acquire/release calls, expected ${size * cycles}`)
  return Array.from({ length: cycles }, (_, i) => mine.slice(i * size, (i + 1) * size))
}

/** Commands per cycle (mean, most) and server µs per cycle (p50, p99). */
interface CallCost {
  commands: number
  most: number
  p50: number
  p99: number
}

/** Cost of cycles, each the calls given. */
function costOf(cycles: ScriptCall[][]): CallCost {
  const sums = cycles.map((calls) => ({
    commands: calls.reduce((sum, c) => sum + c.commands, 0),
    us: calls.reduce((sum, c) => sum + c.us, 0),
  }))
  const us = sums.map((c) => c.us).sort((a, b) => a - b)
  return {
    commands: sums.reduce((sum, c) => sum + c.commands, 0) / sums.length,
    most: Math.max(...sums.map((c) => c.commands)),
    p50: percentile(us, 50),
    p99: percentile(us, 99),
  }
}

interface CallRow {
  variant: string
  fresh: CallCost
  aged: CallCost
}

interface HoldsRow {
  variant: string
  one: { p50: number; p99: number; us: number }
  many: { p50: number; p99: number; us: number }
  /** Median over rounds of many's round p50 / one's. */
  ratio: number
  /** Leases of the many holds renewed at least AGE_RENEWALS times before anything aged was measured. */
  renewed: number
  /** Whether the fresh calls all ran before the first lease's first expiry (server clock). */
  freshInTime: boolean
  slowCalls: number
  slowestMs: number
  /** The renewal calls of the many holds until they aged: leases renewed, µs and commands per lease. */
  renewal: { calls: number; leases: number; usPerLease: number; commandsPerLease: number }
  calls: CallRow[]
}

async function manyHolds(ctx: BenchContext, admin: Redis, kind: 'reentrant' | 'read'): Promise<HoldsRow> {
  const client = await ctx.redis.connect()
  const prefix = `holds-${kind}`
  const store = createRedisStore(client, { prefix })
  const lockOf = (name: string, owner?: string) => {
    const options = { owner, ttlMs: HOLD_TTL_MS }
    return kind === 'reentrant'
      ? createReentrantMutex(store, name, options)
      : createReadWriteLock(store, name, options).read
  }
  const holdMany = async (lock: ReturnType<typeof lockOf>) => {
    const held: Lease[] = []
    for (let from = 0; from < HOLDS; from += 500)
      held.push(
        ...(await Promise.all(Array.from({ length: Math.min(500, HOLDS - from) }, () => lock.acquire()))),
      )
    return held
  }
  // Two names, each with its own owner, one held once, the other HOLDS times, every lease renewed by
  // the process-wide scheduler (at a third of its term) from the start.
  const small = lockOf('small', 'job-1')
  const big = lockOf('big', 'job-2')
  const smallHeld = await small.acquire()
  const firstExpiry = (await holdMany(big)).map((lease) => [lease, lease.expiresAt] as const)
  const bigHeld = firstExpiry.map(([lease]) => lease)
  const earliest = Math.min(...firstExpiry.map(([, at]) => at))
  const cycleOf = (lock: typeof small) => async () => {
    await (await lock.acquire()).release()
  }

  // The calls of issue 37 on 'big', CALL_CYCLES of each, interleaved: the owner's one more
  // acquisition and its release; and another owner's: a reentrant mutex's waiter that queues and
  // gives up (the store's calls: the public acquire() waits), a read lock's other reader.
  const space = keySpace(prefix, kind === 'reentrant' ? 'mutex' : 'rw', 'big')
  const otherReader = lockOf('big')
  const other =
    kind === 'reentrant'
      ? async (phase: string, i: number) => {
          const token = `waiter-${phase}-${i}`
          const request = {
            token,
            op: token,
            ttlMs: HOLD_TTL_MS,
            permits: 1,
            enqueue: true,
            waiterTtlMs: 5_000,
          }
          const reply = await store.permits.acquire(space, request)
          if (reply.granted) throw new Error('the waiter was granted a held mutex')
          if ((await store.permits.release(space, token, 1, token)) !== 'dequeued')
            throw new Error('the waiter did not leave the queue')
        }
      : cycleOf(otherReader)
  const owner = cycleOf(big)
  // Each cycle: the owner's two calls, then the other's two.
  const callsOf = async (phase: string): Promise<[CallCost, CallCost]> => {
    const calls = await scriptCalls(admin, async () => {
      for (let i = 0; i < CALL_CYCLES; i++) {
        await owner()
        await other(phase, i)
      }
    })
    const cycles = cyclesOf(calls, ':big}', 4, CALL_CYCLES)
    return [costOf(cycles.map((c) => c.slice(0, 2))), costOf(cycles.map((c) => c.slice(2)))]
  }
  const fresh = await callsOf('fresh')
  const freshInTime = (await serverNow(admin)) < earliest

  // Aged: every lease of 'big' renewed at least AGE_RENEWALS times, and the server's clock past every
  // lease's first expiry. Every renewal call meanwhile, timed (SLOWLOG).
  const renewals = new Map<Lease, number>(bigHeld.map((lease) => [lease, 0]))
  const seen = new Map<Lease, number>(firstExpiry)
  const lastFirst = Math.max(...firstExpiry.map(([, at]) => at))
  const aged = () => [...renewals.values()].filter((n) => n >= AGE_RENEWALS).length
  const renewalCalls = (
    await scriptCalls(admin, async () => {
      const deadline = performance.now() + 20_000
      while (performance.now() < deadline) {
        for (const lease of bigHeld) {
          if (lease.expiresAt !== seen.get(lease)) renewals.set(lease, (renewals.get(lease) ?? 0) + 1)
          seen.set(lease, lease.expiresAt)
        }
        if (aged() === HOLDS && (await serverNow(admin)) > lastFirst) break
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    })
  ).filter((call) => call.key.includes(':big}') && call.fn.endsWith('_renew'))
  const numkeys = kind === 'reentrant' ? 7 : 6
  const renewedLeases = renewalCalls.reduce((sum, call) => sum + leasesOf(call, numkeys), 0)
  const slow = renewalCalls.filter((call) => call.us >= STALL_US)
  const renewed = bigHeld.filter(
    (lease) => !lease.signal.aborted && (renewals.get(lease) ?? 0) >= AGE_RENEWALS,
  ).length
  const agedCalls = await callsOf('aged')

  // The owner's cycle with one hold and with HOLDS, both aged: latency, and server µs per cycle.
  const latency = await alternateLatency([cycleOf(small), cycleOf(big)])
  const timed = await scriptCalls(admin, async () => {
    for (let i = 0; i < SERVER_CYCLES; i++) {
      await cycleOf(small)()
      await cycleOf(big)()
    }
  })
  const serverUs = (tag: string) => costOf(cyclesOf(timed, tag, 2, SERVER_CYCLES)).p50
  const one = { ...latency.one, us: serverUs(':small}') }
  const many = { ...latency.many, us: serverUs(':big}') }
  await releaseAll([smallHeld, ...bigHeld])()
  await store.close()
  const label = kind === 'reentrant' ? 'reentrant mutex' : 'read lock'
  return {
    variant: `${label}, one owner`,
    one,
    many,
    ratio: latency.ratio,
    renewed,
    freshInTime,
    slowCalls: slow.length,
    slowestMs: slow.reduce((most, call) => Math.max(most, call.us / 1000), 0),
    renewal: {
      calls: renewalCalls.length,
      leases: renewedLeases,
      usPerLease: renewalCalls.reduce((sum, call) => sum + call.us, 0) / renewedLeases,
      commandsPerLease: renewalCalls.reduce((sum, call) => sum + call.commands, 0) / renewedLeases,
    },
    calls: [
      {
        variant: `${label}: the owner's one more acquisition + its release`,
        fresh: fresh[0],
        aged: agedCalls[0],
      },
      {
        variant:
          kind === 'reentrant'
            ? `${label}: another owner queues + gives up`
            : `${label}: another reader's acquire + release`,
        fresh: fresh[1],
        aged: agedCalls[1],
      },
    ],
  }
}

async function serverNow(admin: Redis): Promise<number> {
  const [s, us] = await admin.time()
  return Number(s) * 1000 + Math.floor(Number(us) / 1000)
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
        `one owner, aged holds`,
        'p50 / p99, 1 hold',
        `p50 / p99, ${fmtInt(HOLDS)} holds`,
        'p50 ratio (median round)',
        'server µs/cycle, 1 hold',
        `server µs/cycle, ${fmtInt(HOLDS)} holds`,
        `leases renewed ${AGE_RENEWALS}+ times`,
        'renewal calls (leases)',
        'renewal µs / commands per lease',
        'renewal calls >= 5 ms',
      ],
      rows: holds.map((row) => [
        row.variant,
        `${fmtMs(row.one.p50)} / ${fmtMs(row.one.p99)}`,
        `${fmtMs(row.many.p50)} / ${fmtMs(row.many.p99)}`,
        fmtFixed(row.ratio),
        fmtFixed(row.one.us, 1),
        fmtFixed(row.many.us, 1),
        `${fmtInt(row.renewed)} of ${fmtInt(HOLDS)}`,
        `${fmtInt(row.renewal.calls)} (${fmtInt(row.renewal.leases)})`,
        `${fmtFixed(row.renewal.usPerLease)} / ${fmtFixed(row.renewal.commandsPerLease)}`,
        row.slowCalls === 0 ? '0' : `${row.slowCalls} (slowest ${fmtFixed(row.slowestMs, 1)} ms)`,
      ]),
    },
    {
      columns: [
        `${fmtInt(HOLDS)} holds, ${CALL_CYCLES} cycles each`,
        'commands/cycle, fresh (most)',
        'commands/cycle, aged (most)',
        'aged / fresh',
        'server µs p50 / p99, fresh',
        'server µs p50 / p99, aged',
      ],
      rows: holds.flatMap((row) =>
        row.calls.map((call) => [
          call.variant,
          `${fmtFixed(call.fresh.commands, 1)} (${call.fresh.most})`,
          `${fmtFixed(call.aged.commands, 1)} (${call.aged.most})`,
          fmtFixed(call.aged.commands / call.fresh.commands),
          `${fmtFixed(call.fresh.p50, 1)} / ${fmtFixed(call.fresh.p99, 1)}`,
          `${fmtFixed(call.aged.p50, 1)} / ${fmtFixed(call.aged.p99, 1)}`,
        ]),
      ),
    },
  ]
  const verdicts: Verdict[] = [
    ...memory.slice(2).map((row) => ({
      target: `memory per held lease <= ${TARGETS.memory}x raw (${row.variant})`,
      pass: row.bytes <= raw * TARGETS.memory,
      detail: `${fmtInt(row.bytes)} vs ${fmtInt(raw)} bytes (${fmtFixed(row.bytes / raw)}x)`,
    })),
    ...holds.map((row) => ({
      target: `${row.variant}: with ${fmtInt(HOLDS)} aged holds, a call's p50 <= ${TARGETS.latency}x the one-hold case, and no renewal call >= ${TARGETS.stallMs} ms`,
      pass: row.ratio <= TARGETS.latency && row.slowCalls === 0 && row.renewed === HOLDS,
      detail: `p50 ${fmtMs(row.many.p50)} vs ${fmtMs(row.one.p50)} (median round ${fmtFixed(row.ratio)}x), server ${fmtFixed(row.many.us, 1)} vs ${fmtFixed(row.one.us, 1)} µs; ${row.slowCalls} calls >= 5 ms; ${fmtInt(row.renewed)} renewed ${AGE_RENEWALS}+ times`,
    })),
    ...holds.flatMap((row) =>
      row.calls.map((call) => ({
        target: `${call.variant}: aged <= ${TARGETS.aged}x fresh in commands per cycle, on average and at most`,
        pass:
          row.freshInTime &&
          call.aged.commands <= call.fresh.commands * TARGETS.aged &&
          call.aged.most <= call.fresh.most * TARGETS.aged,
        detail: `${fmtFixed(call.aged.commands, 1)} vs ${fmtFixed(call.fresh.commands, 1)} (most ${call.aged.most} vs ${call.fresh.most})${row.freshInTime ? '' : '; the fresh cycles ran past the first expiry: not fresh'}`,
      })),
    ),
  ]
  return {
    tables,
    verdicts,
    notes: [
      `Memory: used_memory (INFO memory, after MEMORY PURGE) with ${fmtInt(LEASES)} leases held, less before, divided by ${fmtInt(LEASES)}; each variant on its own names, released before the next. Key names as each library makes them (tollgate: bench:{mutex:mutex-m<i>}:f; redis-semaphore: bench:rs:m<i> under its own prefix; raw: bench:raw:m<i>). Includes each key's expiry entry.`,
      `Many holds: on one store, owner job-1 holds one name once and owner job-2 holds another ${fmtInt(HOLDS)} times (a reentrant mutex or a read lock), every lease of ${fmtInt(HOLD_TTL_MS)} ms renewed by the process-wide scheduler at a third of its term, in calls of at most ${MAX_RENEW_BATCH} leases. Fresh: right after the ${fmtInt(HOLDS)} are held, before the first lease's first expiry. Aged: once every lease was renewed ${AGE_RENEWALS}+ times and the server's clock passed every first expiry ('leases renewed'); every renewal call of the many holds until then is timed and its commands counted (SLOWLOG at 0 µs, below), per lease renewed. Until issue 37 the holds took 2-minute leases, never renewed while measured, and a third name held 10,000 times measured the renewals.`,
      `Calls (issue 37): ${CALL_CYCLES} cycles of each, fresh and then aged, interleaved: the owner's one more acquisition and its release (public API), and another owner's call: a reentrant mutex's waiter that queues and gives up (store calls: a public acquire() would wait), a read lock's reader that takes and gives back its own hold. Commands: those each call ran inside Redis, from SLOWLOG at 0 µs (each command a script runs is logged before the script: exact while renewals run); server µs: each call's SLOWLOG time, summed per cycle. Before issue 37, renewals extended the hold but not the scores of its acquisitions in A: one ttl on, every acquisition was due and each release re-scored 100 of them.`,
      `Latency: one more acquire + release of the owner's, timed ${fmtInt(SAMPLES)} times on each aged name, in ${ROUNDS} rounds alternating between the two (after 200 warm-up cycles each), renewals running; the ratio is the median over rounds of the two round p50s' ratio. (Until issue 37 the p50 and p99 columns took percentile(0.5) and (0.99) of a function that takes 0..100: the fastest sample and about the 1st percentile.) Server µs: the median cycle's SLOWLOG time over ${SERVER_CYCLES} cycles of each name, alternating (before issue 37: commandstats usec of FCALL, which renewal calls add to, on unrenewed holds).`,
    ],
    data: { memory, holds },
  }
}

export const holdsScenarios: Scenario[] = [
  {
    name: 'holds',
    title:
      'memory per held lease vs SET NX PX and redis-semaphore; one owner with 10,000 acquisitions, fresh and aged',
    seconds: 20,
    run,
  },
]
