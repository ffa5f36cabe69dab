// Benchmark runner: `npm run bench` runs every scenario, `npm run bench -- <name> ...` only those.
// Starts a private redis-server on 127.0.0.1 and stops exactly that one (by PID) at the end, also on
// failure. Prints a markdown report and writes bench/results/latest.{md,json} (--out <name>:
// bench/results/<name>.{md,json}, so a run of one scenario leaves the full run's report alone).
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { mkdir, rename, writeFile } from 'node:fs/promises'
import os from 'node:os'
import { type BenchRedis, childRedisServers, startBenchRedis } from './lib/redis.js'
import { renderReport, type RunMeta, verdictLine } from './lib/report.js'
import type { BenchContext, Scenario, ScenarioResult } from './lib/scenario.js'
import { scenarios } from './scenarios/index.js'

const RESULTS_DIR = new URL('./results/', import.meta.url)

function log(line: string): void {
  process.stderr.write(`${line}\n`)
}

function usage(): string {
  return [
    'usage: npm run bench [-- [--out <name>] <scenario> ...]',
    '  --out <name>  write bench/results/<name>.{md,json} instead of latest.{md,json}',
    'scenarios:',
    ...scenarios.map((s) => `  ${s.name.padEnd(20)} ${s.title} (~${s.seconds} s)`),
  ].join('\n')
}

/** --out <name>: letters, digits, '-' and '_' only (it names files in bench/results). */
function outName(args: string[]): { out: string; rest: string[] } {
  const at = args.indexOf('--out')
  if (at < 0) return { out: 'latest', rest: args }
  const out = args[at + 1]
  if (out === undefined || !/^[A-Za-z0-9_-]{1,64}$/.test(out))
    throw new UsageError(
      `--out needs a name of letters, digits, '-' or '_' (got ${out ?? 'nothing'})\n${usage()}`,
    )
  return { out, rest: [...args.slice(0, at), ...args.slice(at + 2)] }
}

function select(args: string[]): Scenario[] {
  if (args.length === 0) return scenarios
  const unknown = args.filter((name) => !scenarios.some((s) => s.name === name))
  if (unknown.length > 0) throw new UsageError(`unknown scenario(s): ${unknown.join(', ')}\n${usage()}`)
  return scenarios.filter((s) => args.includes(s.name))
}

class UsageError extends Error {}

/** 1, 5 and 15 minute load averages: other work on the machine skews every number here. */
function loadAverages(): string {
  return os
    .loadavg()
    .map((value) => value.toFixed(2))
    .join(' ')
}

function gitDescription(): string {
  try {
    const cwd = new URL('..', import.meta.url)
    return execFileSync('git', ['describe', '--always', '--dirty'], {
      cwd,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim()
  } catch {
    return 'unknown'
  }
}

function ioredisVersion(): string {
  try {
    const file = new URL('../node_modules/ioredis/package.json', import.meta.url)
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version
  } catch {
    return 'unknown'
  }
}

async function writeAtomically(name: string, text: string): Promise<string> {
  const target = new URL(name, RESULTS_DIR)
  const temporary = new URL(`${name}.tmp`, RESULTS_DIR)
  await writeFile(temporary, text)
  await rename(temporary, target)
  return target.pathname
}

/** A scenario that started servers of its own must have stopped them: kill leftovers by their PID. */
function killStrayServers(): void {
  const stray = childRedisServers()
  for (const pid of stray) process.kill(pid, 'SIGKILL')
  if (stray.length > 0) {
    log(`bench: redis-server PID(s) ${stray.join(', ')} of this run were still running; killed them`)
    process.exitCode = 1
  }
}

async function runScenario(scenario: Scenario, redis: BenchRedis): Promise<ScenarioResult> {
  const ctx: BenchContext = { redis, log }
  log(`- ${scenario.name} (~${scenario.seconds} s)`)
  const started = performance.now()
  try {
    await redis.flush()
    const output = await scenario.run(ctx)
    return {
      name: scenario.name,
      title: scenario.title,
      wallSeconds: (performance.now() - started) / 1000,
      ...output,
    }
  } catch (error) {
    log(`  ${scenario.name} failed: ${(error as Error)?.stack ?? String(error)}`)
    return {
      name: scenario.name,
      title: scenario.title,
      wallSeconds: (performance.now() - started) / 1000,
      error: (error as Error)?.message ?? String(error),
      tables: [],
      verdicts: [],
      notes: [],
      data: {},
    }
  } finally {
    await redis.closeClients()
  }
}

async function main(): Promise<number> {
  const args = process.argv.slice(2)
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(`${usage()}\n`)
    return 0
  }
  const { out, rest } = outName(args)
  const selected = select(rest)
  const started = performance.now()
  const date = new Date().toISOString()
  const loadAverage = loadAverages()
  log(
    `tollgate bench: ${selected.map((s) => s.name).join(', ')} (~${selected.reduce((sum, s) => sum + s.seconds, 0)} s)`,
  )

  const results: ScenarioResult[] = []
  let redis: BenchRedis | undefined
  let redisVersion = 'unknown'
  try {
    redis = await startBenchRedis()
    redisVersion = redis.version
    log(`redis-server ${redis.version} on ${redis.host}:${redis.port}, PID ${redis.pid}`)
    for (const scenario of selected) results.push(await runScenario(scenario, redis))
  } finally {
    try {
      if (redis) {
        await redis.stop()
        log(`redis-server PID ${redis.pid} stopped`)
      }
    } finally {
      killStrayServers()
    }
  }

  const meta: RunMeta = {
    date,
    node: process.version,
    redis: redisVersion,
    ioredis: ioredisVersion(),
    cpu: os.cpus()[0]?.model ?? 'unknown',
    nproc: os.availableParallelism(),
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    loadAverage,
    loadAverageEnd: loadAverages(),
    git: gitDescription(),
    scenarios: selected.map((s) => s.name),
    wallSeconds: (performance.now() - started) / 1000,
  }
  const markdown = renderReport(meta, results)
  process.stdout.write(`\n${markdown}`)
  await mkdir(RESULTS_DIR, { recursive: true })
  const written = [
    await writeAtomically(`${out}.md`, markdown),
    await writeAtomically(`${out}.json`, `${JSON.stringify({ meta, results }, null, 2)}\n`),
  ]
  log(`wrote ${written.join(', ')}`)
  for (const result of results) for (const verdict of result.verdicts) log(verdictLine(result, verdict))
  return results.some((result) => result.error) || process.exitCode === 1 ? 1 : 0
}

main().then(
  (code) => {
    process.exitCode = code
    // Everything is closed by now; if some handle still kept the process alive, do not hang the run.
    setTimeout(() => {
      log('bench: the event loop did not drain within 3 s, exiting')
      process.exit(code)
    }, 3000).unref()
  },
  (error: unknown) => {
    log(
      error instanceof UsageError
        ? error.message
        : `bench failed: ${(error as Error)?.stack ?? String(error)}`,
    )
    process.exitCode = error instanceof UsageError ? 2 : 1
  },
)
