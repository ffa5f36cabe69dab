// What each script call costs Redis (issue 29, docs/cost.md "Cost"): for every call the store makes,
// the commands it runs inside (INFO commandstats), the keys it touches, the bytes of its reply (INFO
// stats total_net_output_bytes), and the server time of the call (commandstats usec of FCALL). Each
// kind of call runs N times on N names, pipelined, in its own measured step, against the state the
// step before left (acquire, then release of what it took, ...). Client CPU per operation is the
// primitives scenario's (it times the whole call path through the API).
import { Redis } from 'ioredis'
import { keySpace } from '../../src/core/keys.js'
import { functionName, loadLibraries, type ScriptName } from '../../src/core/redis/scripts.js'
import { parseInfo } from '../lib/redis.js'
import { fmtFixed } from '../lib/report.js'
import type { Scenario, Table } from '../lib/scenario.js'

const N = 1000
const PERMIT_PARTS = ['h', 'q', 'w', 'm', 'p', 'f', 'a']
const RW_PARTS = ['r', 'x', 'q', 'w', 'm', 'a']

interface Step {
  label: string
  script: ScriptName
  /** ARGV after the channel, for name i. */
  argv(i: number): (string | number)[]
  kind: 'sem' | 'rw'
  name: (i: number) => string
}

interface Counters {
  calls: Map<string, number>
  usec: Map<string, number>
  outBytes: number
  cpu: number
}

async function counters(admin: Redis): Promise<Counters> {
  const [stats, info, cpu] = await Promise.all([
    admin.info('commandstats'),
    admin.info('stats'),
    admin.info('cpu'),
  ])
  const calls = new Map<string, number>()
  const usec = new Map<string, number>()
  for (const m of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    calls.set(m[1] as string, Number(m[2]))
    usec.set(m[1] as string, Number(m[3]))
  }
  const cpuFields = parseInfo(cpu)
  return {
    calls,
    usec,
    outBytes: Number(parseInfo(info).total_net_output_bytes ?? 0),
    cpu: Number(cpuFields.used_cpu_sys ?? 0) + Number(cpuFields.used_cpu_user ?? 0),
  }
}

const TTL = 30_000
const WAITER_TTL = 5_000
const sem = (i: number) => `m${i}`
const rw = (i: number) => `r${i}`

/** The calls of the table, in order: each runs on the state the ones before it left. */
const STEPS: Step[] = [
  {
    label: 'mutex acquire, free',
    script: 'tgPermitAcquire',
    kind: 'sem',
    name: sem,
    argv: (i) => [TTL, 1, 1, WAITER_TTL, '', `t${i}`],
  },
  {
    label: 'renew 1 lease',
    script: 'tgPermitRenew',
    kind: 'sem',
    name: sem,
    argv: (i) => [TTL, `t${i}`, ''],
  },
  {
    label: 'acquire that queues (name held)',
    script: 'tgPermitAcquire',
    kind: 'sem',
    name: sem,
    argv: (i) => [TTL, 1, 1, WAITER_TTL, '', `u${i}`],
  },
  {
    label: 're-check of 1 waiter',
    script: 'tgPermitRecheck',
    kind: 'sem',
    name: sem,
    argv: (i) => [1, WAITER_TTL, `u${i}`, ''],
  },
  {
    label: 'release that hands the permit on',
    script: 'tgPermitRelease',
    kind: 'sem',
    name: sem,
    argv: (i) => [1, '', `t${i}`],
  },
  {
    label: 'release, nobody waits',
    script: 'tgPermitRelease',
    kind: 'sem',
    name: sem,
    argv: (i) => [1, '', `u${i}`],
  },
  {
    label: 'reentrant acquire, free',
    script: 'tgPermitAcquire',
    kind: 'sem',
    name: sem,
    argv: (i) => [TTL, 1, 1, WAITER_TTL, 'op1', `o${i}`],
  },
  {
    label: 'reentrant re-entry',
    script: 'tgPermitAcquire',
    kind: 'sem',
    name: sem,
    argv: (i) => [TTL, 1, 1, WAITER_TTL, 'op2', `o${i}`],
  },
  {
    label: 'reentrant release of a re-entry',
    script: 'tgPermitRelease',
    kind: 'sem',
    name: sem,
    argv: (i) => [1, 'op2', `o${i}`],
  },
  {
    label: 'reentrant release, last',
    script: 'tgPermitRelease',
    kind: 'sem',
    name: sem,
    argv: (i) => [1, 'op1', `o${i}`],
  },
  { label: 'inspect', script: 'tgPermitInspect', kind: 'sem', name: sem, argv: () => [] },
  {
    label: 'read acquire, free',
    script: 'tgRwAcquire',
    kind: 'rw',
    name: rw,
    argv: (i) => [`r${i}`, 'r', TTL, 1, WAITER_TTL, 'a'],
  },
  { label: 'read release', script: 'tgRwRelease', kind: 'rw', name: rw, argv: (i) => [`r${i}`, 'r', 'a'] },
  {
    label: 'write acquire, free',
    script: 'tgRwAcquire',
    kind: 'rw',
    name: rw,
    argv: (i) => [`w${i}`, 'w', TTL, 1, WAITER_TTL, 'a'],
  },
  {
    label: 'write renew 1 lease',
    script: 'tgRwRenew',
    kind: 'rw',
    name: rw,
    argv: (i) => ['w', TTL, `w${i}`, 'a'],
  },
  { label: 'write release', script: 'tgRwRelease', kind: 'rw', name: rw, argv: (i) => [`w${i}`, 'w', 'a'] },
]

export const scriptCosts: Scenario = {
  name: 'script-costs',
  title: `what each script call costs Redis: commands inside, keys, reply bytes, server time (${N} calls each, pipelined)`,
  seconds: 5,
  async run(ctx) {
    const client = await ctx.redis.connect()
    const admin = await ctx.redis.connect()
    await loadLibraries(client)
    const rows: (string | number)[][] = []
    const data: Record<string, unknown> = {}
    for (const step of STEPS) {
      const before = await counters(admin)
      const base = await counters(admin) // what INFO itself adds between two reads
      const pipeline = client.pipeline()
      for (let i = 0; i < N; i++) {
        const space = keySpace('cost', step.kind, step.name(i))
        const keys = (step.kind === 'sem' ? PERMIT_PARTS : RW_PARTS).map((part) => space.key(part))
        pipeline.call(
          'FCALL',
          functionName(step.script),
          keys.length,
          ...keys,
          space.channel,
          ...step.argv(i),
        )
      }
      const replies = (await pipeline.exec()) ?? []
      const failed = replies.find(([error]) => error)
      if (failed) throw new Error(`${step.label}: ${String(failed[0])}`)
      const after = await counters(admin)
      const inside: Record<string, number> = {}
      for (const [name, count] of after.calls) {
        const delta = count - (base.calls.get(name) ?? 0)
        if (delta > 0 && name !== 'info' && name !== 'fcall') inside[name] = delta / N
      }
      const fcallUs = ((after.usec.get('fcall') ?? 0) - (before.usec.get('fcall') ?? 0)) / N
      const infoBytes = base.outBytes - before.outBytes
      const replyBytes = (after.outBytes - base.outBytes - infoBytes) / N
      const commands = Object.values(inside).reduce((sum, n) => sum + n, 0)
      const cpuUs = ((after.cpu - base.cpu) * 1e6) / N
      rows.push([
        step.label,
        step.script,
        fmtFixed(commands, 1),
        Object.entries(inside)
          .sort((a, b) => b[1] - a[1])
          .map(([name, n]) => (n === 1 ? name : `${name} ${fmtFixed(n, 1)}`))
          .join(', '),
        fmtFixed(replyBytes, 0),
        fmtFixed(fcallUs, 1),
        fmtFixed(cpuUs, 1),
      ])
      data[step.label] = { script: step.script, commands, inside, replyBytes, fcallUs, cpuUs }
    }
    const table: Table = {
      columns: ['call', 'script', 'commands inside', 'which', 'reply bytes', 'server µs', 'Redis CPU µs'],
      rows,
    }
    return {
      tables: [table],
      verdicts: [],
      notes: [
        `${N} calls of each kind on ${N} names, one pipeline per kind, FCALL of the loaded library (src/core/redis/scripts.ts); each kind runs on the state the kinds above it left. Commands inside = INFO commandstats deltas per call (FCALL itself not counted); reply bytes = total_net_output_bytes delta per call, less what the INFO probes wrote; server µs = commandstats usec of FCALL per call (the script's own time, commands inside included); Redis CPU = INFO cpu delta per call (adds reading and parsing the pipelined request, writing the reply).`,
        'Keys: a permit call declares 7 keys (H Q W M P F A) and a read/write lock call 6 (R X Q W M A), all under one hash tag; the free paths touch 2-4 of them (see which commands ran).',
      ],
      data,
    }
  },
}

export const scriptCostScenarios: Scenario[] = [scriptCosts]
