// Primitives scenario: uncontended acquire+release of every Tollgate primitive against a bare
// SET NX PX lock, redis-semaphore and node-redlock (1 node), all in one process on one ioredis
// connection, rounds alternated. Part A: one loop on one name; part B: 50 loops, loop i on name i.
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import os from 'node:os'
import type { Redis } from 'ioredis'
import Redlock from 'redlock'
import { Mutex as RsMutex, Semaphore as RsSemaphore } from 'redis-semaphore'
import {
  createMutex,
  createReadWriteLock,
  createRedisStore,
  createReentrantMutex,
  createSemaphore,
  type Store,
} from '../../src/index.js'
import { alternate, type AlternateOptions, type Variant, type VariantTotals } from '../lib/measure.js'
import { topCommands } from '../lib/redis.js'
import { fmtFixed, fmtInt, fmtMs } from '../lib/report.js'
import type { BenchContext, Scenario, Table, Verdict } from '../lib/scenario.js'
import { median, percentile, summarize } from '../lib/stats.js'

const PREFIX = 'bench'
const TTL_MS = 30_000
const NAMES = 50
const SEM_PERMITS = 5
/** Acquires per reentrant cycle (then as many releases). */
const REENTRANT_DEPTH = 3
const PART_A_ROUNDS: AlternateOptions = { warmupMs: 500, rounds: 8, roundMs: 250 }
const PART_B_ROUNDS: AlternateOptions = { warmupMs: 500, rounds: 6, roundMs: 300 }
/** redis-semaphore options: lease as long as ours, retry every 1 ms (never needed: uncontended), and
 * refreshInterval 0 so no refresh timer is armed (Lock.tryAcquire only starts it when > 0). */
const RS_OPTIONS = { lockTimeout: TTL_MS, acquireTimeout: 2000, retryInterval: 1, refreshInterval: 0 }
/** Per-round ratios spread this much (IQR / median) means the machine was busy with something else. */
const NOISY_SPREAD = 0.1

const TARGETS = {
  mutexOpsA: 0.9,
  mutexOpsB: 0.85,
  redisCpu: 1.3,
  nodeCpu: 1.3,
  rwOps: 0.85,
  cpuVsMutex: 1.5,
}

// The usual single-instance Redis lock: SET NX PX, and a compare-and-delete script to unlock (as in
// mutex.ts's baseline).
const UNLOCK_LUA = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0"

interface UnlockCommand {
  benchUnlock(key: string, token: string): Promise<number>
}

/** acquire+release of the bare lock on `key` (defineCommand: EVALSHA, EVAL on NOSCRIPT). */
function rawLock(client: Redis): (key: string) => Promise<void> {
  if (!('benchUnlock' in client)) client.defineCommand('benchUnlock', { numberOfKeys: 1, lua: UNLOCK_LUA })
  const unlock = client as unknown as UnlockCommand
  return async (key) => {
    const token = randomBytes(16).toString('base64url')
    if ((await client.set(key, token, 'PX', TTL_MS, 'NX')) !== 'OK') throw new Error(`raw: ${key} is taken`)
    if ((await unlock.benchUnlock(key, token)) !== 1) throw new Error(`raw: ${key} was not ours to delete`)
  }
}

function packageVersion(relative: string): string {
  try {
    const file = new URL(`../../${relative}`, import.meta.url)
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version.replace(/^v/, '')
  } catch {
    return 'unknown'
  }
}

const VERSIONS = {
  tollgate: packageVersion('package.json'),
  ioredis: packageVersion('node_modules/ioredis/package.json'),
  redisSemaphore: packageVersion('node_modules/redis-semaphore/package.json'),
  redlock: packageVersion('node_modules/redlock/package.json'),
}

function loadAverage(): string {
  return os
    .loadavg()
    .map((value) => value.toFixed(2))
    .join(' ')
}

type VariantKey =
  'raw' | 'rsMutex' | 'redlock' | 'mutex' | 'rsSemaphore' | 'semaphore' | 'rwRead' | 'rwWrite' | 'reentrant'

interface PrimVariant extends Variant {
  key: VariantKey
  tollgate: boolean
}

/** The variants of one part; loop i works on name(i), every variant under its own keys. */
function buildVariants(
  client: Redis,
  store: Store,
  part: 'a' | 'b',
  concurrency: number,
  all: boolean,
): PrimVariant[] {
  const name = (loop: number) => (concurrency === 1 ? 'one' : `n${loop}`)
  const tg = (kind: string, loop: number) => `prim-${part}:${kind}:${name(loop)}`
  const redisKey = (kind: string, loop: number) => `${PREFIX}:prim-${part}:${kind}:${name(loop)}`
  const loops = <T>(make: (loop: number) => T): T[] => Array.from({ length: concurrency }, (_, i) => make(i))
  const tollgateOptions = { ttlMs: TTL_MS, autoRenew: false }

  const lock = rawLock(client)
  const rsMutexes = loops((i) => new RsMutex(client, redisKey('rs-mutex', i), RS_OPTIONS))
  const redlock = new Redlock([client], { retryCount: 0 })
  const mutexes = loops((i) => createMutex(store, tg('mutex', i), tollgateOptions))
  const variants: PrimVariant[] = [
    {
      key: 'raw',
      name: 'raw SET NX PX + compare-and-DEL',
      tollgate: false,
      concurrency,
      op: (i) => lock(redisKey('raw', i)),
    },
    {
      key: 'rsMutex',
      name: `redis-semaphore ${VERSIONS.redisSemaphore} Mutex`,
      tollgate: false,
      concurrency,
      op: async (i) => {
        const mutex = rsMutexes[i] as RsMutex
        await mutex.acquire()
        await mutex.release()
      },
    },
    {
      key: 'redlock',
      name: `node-redlock ${VERSIONS.redlock} (1 node)`,
      tollgate: false,
      concurrency,
      op: async (i) => {
        const held = await redlock.acquire([redisKey('redlock', i)], TTL_MS)
        await held.release()
      },
    },
    {
      key: 'mutex',
      name: 'tollgate mutex',
      tollgate: true,
      concurrency,
      op: async (i) => {
        const lease = await mutexes[i]!.acquire()
        await lease.release()
      },
    },
  ]
  if (!all) return variants

  const rsSemaphores = loops(
    (i) => new RsSemaphore(client, redisKey('rs-semaphore', i), SEM_PERMITS, RS_OPTIONS),
  )
  const semaphores = loops((i) =>
    createSemaphore(store, tg('semaphore', i), { permits: SEM_PERMITS, ...tollgateOptions }),
  )
  const readLocks = loops((i) => createReadWriteLock(store, tg('rw-read', i), tollgateOptions).read)
  const writeLocks = loops((i) => createReadWriteLock(store, tg('rw-write', i), tollgateOptions).write)
  const reentrants = loops((i) =>
    createReentrantMutex(store, tg('reentrant', i), { ...tollgateOptions, owner: `loop-${i}` }),
  )
  variants.push(
    {
      key: 'rsSemaphore',
      name: `redis-semaphore ${VERSIONS.redisSemaphore} Semaphore(${SEM_PERMITS})`,
      tollgate: false,
      concurrency,
      op: async (i) => {
        const semaphore = rsSemaphores[i] as RsSemaphore
        await semaphore.acquire()
        await semaphore.release()
      },
    },
    {
      key: 'semaphore',
      name: `tollgate semaphore(${SEM_PERMITS})`,
      tollgate: true,
      concurrency,
      op: async (i) => {
        const lease = await semaphores[i]!.acquire()
        await lease.release()
      },
    },
    {
      key: 'rwRead',
      name: 'tollgate rwlock read',
      tollgate: true,
      concurrency,
      op: async (i) => {
        const lease = await readLocks[i]!.acquire()
        await lease.release()
      },
    },
    {
      key: 'rwWrite',
      name: 'tollgate rwlock write',
      tollgate: true,
      concurrency,
      op: async (i) => {
        const lease = await writeLocks[i]!.acquire()
        await lease.release()
      },
    },
    {
      key: 'reentrant',
      name: `tollgate reentrant x${REENTRANT_DEPTH} (per cycle)`,
      tollgate: true,
      concurrency,
      op: async (i) => {
        const mutex = reentrants[i]!
        const leases = []
        for (let depth = 0; depth < REENTRANT_DEPTH; depth++) leases.push(await mutex.acquire())
        for (const lease of leases.reverse()) await lease.release()
      },
    },
  )
  return variants
}

interface Metrics {
  key: VariantKey
  name: string
  tollgate: boolean
  total: VariantTotals
  opsPerSec: number
  /** ops/s over raw's, totals of all rounds. */
  opsRatio: number
  /** ops/s ratio to raw of each round (same round index), in run order. */
  roundRatios: number[]
  medianRoundRatio: number
  q25: number
  q75: number
  p50: number
  p99: number
  redisCpuUs: number
  redisCpuRatio: number
  commands: number
  scriptCalls: number
  scriptUs: number
  nodeCpuUs: number
  nodeCpuRatio: number
}

function metrics(variant: PrimVariant, total: VariantTotals, raw: VariantTotals): Metrics {
  const opsPerSec = (t: VariantTotals) => (t.ops / t.elapsedMs) * 1000
  const redisCpu = (t: VariantTotals) => (t.server.cpuSeconds * 1e6) / t.ops
  const nodeCpu = (t: VariantTotals) => (t.clientCpuMs * 1000) / t.ops
  const roundRatios = total.roundOpsPerSec.map((ops, i) => ops / (raw.roundOpsPerSec[i] as number))
  const sorted = Float64Array.from(roundRatios).sort()
  const latency = summarize(total.latencies)
  return {
    key: variant.key,
    name: variant.name,
    tollgate: variant.tollgate,
    total,
    opsPerSec: opsPerSec(total),
    opsRatio: opsPerSec(total) / opsPerSec(raw),
    roundRatios,
    medianRoundRatio: median(roundRatios),
    q25: percentile(sorted, 25),
    q75: percentile(sorted, 75),
    p50: latency.p50,
    p99: latency.p99,
    redisCpuUs: redisCpu(total),
    redisCpuRatio: redisCpu(total) / redisCpu(raw),
    commands: total.server.totalCalls / total.ops,
    scriptCalls: total.server.scriptCalls / total.ops,
    scriptUs: total.server.scriptUsec / total.ops,
    nodeCpuUs: nodeCpu(total),
    nodeCpuRatio: nodeCpu(total) / nodeCpu(raw),
  }
}

const COLUMNS = [
  'variant',
  'ops/s',
  'x raw',
  'x raw, median round',
  'p50',
  'p99',
  'redis CPU µs/op',
  'x raw (redis CPU)',
  'redis cmds/op',
  'script µs/op',
  'node CPU µs/op',
  'x raw (node CPU)',
]

function row(m: Metrics): (string | number)[] {
  return [
    m.name,
    fmtInt(m.opsPerSec),
    fmtFixed(m.opsRatio, 3),
    fmtFixed(m.medianRoundRatio, 3),
    fmtMs(m.p50),
    fmtMs(m.p99),
    fmtFixed(m.redisCpuUs, 1),
    fmtFixed(m.redisCpuRatio),
    fmtFixed(m.commands, 1),
    fmtFixed(m.scriptUs, 1),
    fmtFixed(m.nodeCpuUs, 1),
    fmtFixed(m.nodeCpuRatio),
  ]
}

/** The reentrant cycle scaled to one acquire + release (ops x3, costs /3; latencies do not divide). */
function perSingleRow(m: Metrics): (string | number)[] {
  const d = REENTRANT_DEPTH
  return [
    `tollgate reentrant, per single acquire+release (cycle / ${d})`,
    fmtInt(m.opsPerSec * d),
    fmtFixed(m.opsRatio * d, 3),
    fmtFixed(m.medianRoundRatio * d, 3),
    '',
    '',
    fmtFixed(m.redisCpuUs / d, 1),
    fmtFixed(m.redisCpuRatio / d),
    fmtFixed(m.commands / d, 1),
    fmtFixed(m.scriptUs / d, 1),
    fmtFixed(m.nodeCpuUs / d, 1),
    fmtFixed(m.nodeCpuRatio / d),
  ]
}

function metricsData(m: Metrics) {
  return {
    name: m.name,
    ops: m.total.ops,
    elapsedMs: m.total.elapsedMs,
    opsPerSec: m.opsPerSec,
    roundOpsPerSec: m.total.roundOpsPerSec,
    opsRatioToRaw: m.opsRatio,
    roundRatiosToRaw: m.roundRatios,
    medianRoundRatioToRaw: m.medianRoundRatio,
    latencyMs: summarize(m.total.latencies),
    redisCpuUsPerOp: m.redisCpuUs,
    redisCpuRatioToRaw: m.redisCpuRatio,
    commandsPerOp: m.commands,
    scriptCallsPerOp: m.scriptCalls,
    scriptUsPerOp: m.scriptUs,
    nodeCpuUsPerOp: m.nodeCpuUs,
    nodeCpuRatioToRaw: m.nodeCpuRatio,
    clientCpuMs: m.total.clientCpuMs,
    server: m.total.server,
  }
}

interface Part {
  label: string
  rounds: AlternateOptions
  results: Metrics[]
}

async function runPart(
  ctx: BenchContext,
  client: Redis,
  store: Store,
  part: 'a' | 'b',
  concurrency: number,
  rounds: AlternateOptions,
): Promise<Part> {
  const label = concurrency === 1 ? '1 client' : `${concurrency} names`
  const variants = buildVariants(client, store, part, concurrency, part === 'b')
  ctx.log(
    `  ${label}: ${variants.length} variants, warm-up ${rounds.warmupMs} ms each, then ${rounds.rounds} alternating rounds of ${rounds.roundMs} ms`,
  )
  const totals = await alternate(ctx.redis, variants, rounds)
  const raw = totals[0] as VariantTotals
  return {
    label,
    rounds,
    results: variants.map((variant, i) => metrics(variant, totals[i] as VariantTotals, raw)),
  }
}

function find(part: Part, key: VariantKey): Metrics {
  const found = part.results.find((m) => m.key === key)
  if (!found) throw new Error(`no ${key} variant in ${part.label}`)
  return found
}

function table(part: Part): Table {
  const rows = part.results.map(row)
  const reentrant = part.results.find((m) => m.key === 'reentrant')
  if (reentrant) rows.push(perSingleRow(reentrant))
  return { columns: [`${part.label}: variant`, ...COLUMNS.slice(1)], rows }
}

function spread(m: Metrics): number {
  return (m.q75 - m.q25) / m.medianRoundRatio
}

function roundNote(part: Part): string {
  const tollgate = part.results.filter((m) => m.tollgate)
  const noisy = tollgate.filter((m) => spread(m) > NOISY_SPREAD)
  return `${part.label}: ${part.rounds.rounds} rounds of ${part.rounds.roundMs} ms per variant after ${part.rounds.warmupMs} ms warm-up each, order flipped every round. Median per-round ops/s ratio vs raw (quartiles): ${tollgate
    .map(
      (m) => `${m.name} ${fmtFixed(m.medianRoundRatio, 3)} (${fmtFixed(m.q25, 3)} .. ${fmtFixed(m.q75, 3)})`,
    )
    .join(
      '; ',
    )}.${noisy.length > 0 ? ` NOISY: per-round ratios of ${noisy.map((m) => m.name).join(', ')} disagree by more than ${NOISY_SPREAD * 100}% (load average ${loadAverage()}); other work on this machine skews the comparison.` : ''}`
}

function commandsNote(part: Part, m: Metrics): string {
  return `Redis commands per op, ${part.label}, ${m.name}: ${topCommands(m.total.server, m.total.ops)}.`
}

function verdicts(a: Part, b: Part): Verdict[] {
  const ratioDetail = (m: Metrics, raw: Metrics) =>
    `${fmtFixed(m.opsRatio, 3)}x (${fmtInt(m.opsPerSec)} vs raw ${fmtInt(raw.opsPerSec)} ops/s, all rounds; median round ${fmtFixed(m.medianRoundRatio, 3)}x)`
  const out: Verdict[] = []
  for (const [part, target] of [
    [a, TARGETS.mutexOpsA],
    [b, TARGETS.mutexOpsB],
  ] as const) {
    const mutex = find(part, 'mutex')
    const raw = find(part, 'raw')
    out.push({
      target: `tollgate mutex ops/s >= ${target}x raw (${part.label})`,
      pass: mutex.opsRatio >= target,
      detail: ratioDetail(mutex, raw),
    })
  }
  for (const part of [a, b]) {
    const mutex = find(part, 'mutex')
    const raw = find(part, 'raw')
    out.push({
      target: `tollgate mutex Redis CPU per op <= ${TARGETS.redisCpu}x raw (${part.label})`,
      pass: mutex.redisCpuRatio <= TARGETS.redisCpu,
      detail: `${fmtFixed(mutex.redisCpuRatio)}x (${fmtFixed(mutex.redisCpuUs, 1)} vs ${fmtFixed(raw.redisCpuUs, 1)} µs; script ${fmtFixed(mutex.scriptUs, 1)} vs ${fmtFixed(raw.scriptUs, 1)} µs; cmds ${fmtFixed(mutex.commands, 1)} vs ${fmtFixed(raw.commands, 1)})`,
    })
  }
  for (const part of [a, b]) {
    const mutex = find(part, 'mutex')
    const raw = find(part, 'raw')
    out.push({
      target: `tollgate mutex node CPU per op <= ${TARGETS.nodeCpu}x raw (${part.label})`,
      pass: mutex.nodeCpuRatio <= TARGETS.nodeCpu,
      detail: `${fmtFixed(mutex.nodeCpuRatio)}x (${fmtFixed(mutex.nodeCpuUs, 1)} vs ${fmtFixed(raw.nodeCpuUs, 1)} µs)`,
    })
  }
  const raw = find(b, 'raw')
  for (const key of ['rwRead', 'rwWrite'] as const) {
    const m = find(b, key)
    out.push({
      target: `${m.name} ops/s >= ${TARGETS.rwOps}x raw (${b.label})`,
      pass: m.opsRatio >= TARGETS.rwOps,
      detail: ratioDetail(m, raw),
    })
  }
  const mutex = find(b, 'mutex')
  for (const key of ['rwRead', 'rwWrite', 'reentrant'] as const) {
    const m = find(b, key)
    const per = key === 'reentrant' ? REENTRANT_DEPTH : 1
    const cpu = m.redisCpuUs / per
    const ratio = cpu / mutex.redisCpuUs
    const name = key === 'reentrant' ? `tollgate reentrant (cycle / ${REENTRANT_DEPTH})` : m.name
    out.push({
      target: `${name} Redis CPU per acquire+release <= ${TARGETS.cpuVsMutex}x tollgate mutex (${b.label})`,
      pass: ratio <= TARGETS.cpuVsMutex,
      detail: `${fmtFixed(ratio)}x (${fmtFixed(cpu, 1)} vs ${fmtFixed(mutex.redisCpuUs, 1)} µs; script ${fmtFixed(m.scriptUs / per, 1)} vs ${fmtFixed(mutex.scriptUs, 1)} µs; cmds ${fmtFixed(m.commands / per, 1)} vs ${fmtFixed(mutex.commands, 1)})`,
    })
  }
  return out
}

export const primitives: Scenario = {
  name: 'primitives',
  title:
    'uncontended acquire+release of every primitive vs a bare SET NX PX lock, redis-semaphore and node-redlock',
  seconds: 32,
  async run(ctx) {
    const client = await ctx.redis.connect()
    const store = createRedisStore(client, { prefix: PREFIX })
    try {
      const a = await runPart(ctx, client, store, 'a', 1, PART_A_ROUNDS)
      const b = await runPart(ctx, client, store, 'b', NAMES, PART_B_ROUNDS)
      const notes = [
        `All variants in one process on ONE ioredis ${VERSIONS.ioredis} connection to the bench's redis-server (Tollgate's store, createRedisStore(client, { prefix: '${PREFIX}' }), adds its own subscriber connection), each under its own keys. 1 client: one loop on one name; ${NAMES} names: ${NAMES} async loops, loop i on name i (commands pipeline on the shared connection), ops/s is the total over all loops.`,
        `raw: SET key token NX PX ${TTL_MS}, then a compare-and-DEL Lua script via ioredis defineCommand (EVALSHA). redis-semaphore ${VERSIONS.redisSemaphore}: new Mutex(client, key, ${JSON.stringify(RS_OPTIONS)}) and new Semaphore(client, key, ${SEM_PERMITS}, same options), one instance per loop, acquire() then release() (refreshInterval 0: no refresh timer). node-redlock ${VERSIONS.redlock}: new Redlock([client], { retryCount: 0 }).acquire([key], ${TTL_MS}) then lock.release().`,
        `tollgate ${VERSIONS.tollgate} (this checkout, src/): createMutex(store, name, { ttlMs: ${TTL_MS}, autoRenew: false }); createSemaphore(store, name, { permits: ${SEM_PERMITS}, ttlMs: ${TTL_MS}, autoRenew: false }); createReadWriteLock(store, name, { ttlMs: ${TTL_MS}, autoRenew: false }).read / .write; createReentrantMutex(store, name, { ttlMs: ${TTL_MS}, autoRenew: false, owner: 'loop-' + i }). Each op: acquire() then lease.release(); one primitive per loop, created once.`,
        `tollgate reentrant x${REENTRANT_DEPTH}: one op = one cycle of ${REENTRANT_DEPTH} acquire() calls by the same owner (the first takes the lock, the others re-enter) then the ${REENTRANT_DEPTH} leases released newest first; its row is per cycle (ops/s, latency, costs, ratios), the row below it divides the costs by ${REENTRANT_DEPTH} (and multiplies ops/s by ${REENTRANT_DEPTH}) for one acquire + release.`,
        'Ratios ("x raw") divide totals over all measured rounds: ops/s = all ops / all measured time; CPU and commands per op = summed deltas / all ops; the raw lock of the same part is the denominator. "x raw, median round" is the median of the per-round ops/s ratios (each variant round vs the raw round of the same index), robust against a burst of foreign load in a few rounds.',
        'p50/p99: one acquire + release pair (one cycle for reentrant). Redis CPU = INFO cpu used_cpu_sys + used_cpu_user delta around each variant-round (includes network I/O and the two INFO probes); redis cmds = INFO commandstats call deltas incl. commands run inside scripts/functions (INFO excluded); script µs = commandstats usec of FCALL/EVALSHA/EVAL; node CPU = process.cpuUsage() of the whole process during the round.',
        roundNote(a),
        roundNote(b),
        commandsNote(a, find(a, 'raw')),
        commandsNote(a, find(a, 'mutex')),
        commandsNote(b, find(b, 'raw')),
        commandsNote(b, find(b, 'mutex')),
        ...(['semaphore', 'rwRead', 'rwWrite', 'reentrant'] as const).map((key) =>
          commandsNote(b, find(b, key)),
        ),
      ]
      return {
        tables: [table(a), table(b)],
        verdicts: verdicts(a, b),
        notes,
        data: {
          versions: VERSIONS,
          redisSemaphoreOptions: RS_OPTIONS,
          reentrantDepth: REENTRANT_DEPTH,
          oneClient: {
            rounds: a.rounds,
            variants: Object.fromEntries(a.results.map((m) => [m.key, metricsData(m)])),
          },
          fiftyNames: {
            names: NAMES,
            rounds: b.rounds,
            variants: Object.fromEntries(b.results.map((m) => [m.key, metricsData(m)])),
          },
        },
      }
    } finally {
      await store.close()
    }
  },
}

export const primitivesScenarios: Scenario[] = [primitives]
