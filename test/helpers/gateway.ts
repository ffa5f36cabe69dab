// Runs the real `tollgate-gateway` bin (node --import tsx src/gateway/main.ts) as a child process. Every child
// is SIGKILLed by its PID after each test (also when the test fails), when this process exits or is
// interrupted, and by the reaper if this process is SIGKILLed itself.
import { type ChildProcess, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { afterEach } from 'vitest'
import { ANSWER_INTERVAL_MS } from '../../src/gateway/ops/shared-answer.js'
import { onProcessExit } from './process-cleanup.js'
import { reapPidOnDeath } from './reaper.js'

const MAIN = fileURLToPath(new URL('../../src/gateway/main.ts', import.meta.url))
const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const START_TIMEOUT_MS = 20_000

export interface GatewayExit {
  code: number | null
  signal: NodeJS.Signals | null
}

export interface GatewayProcess {
  readonly pid: number
  /** The proxy URL from the "tollgate listening on" line. */
  readonly url: string
  /** The admin URL from the "tollgate ready" log line (undefined without an admin listener). */
  readonly adminUrl: string | undefined
  readonly exited: Promise<GatewayExit>
  readonly stdout: () => string
  readonly stderr: () => string
  /** Parsed JSON log lines so far. */
  logs(): Record<string, unknown>[]
  /** Signal this PID (default SIGKILL); no-op once it has exited. */
  kill(signal?: NodeJS.Signals): void
  /** Close this end of its stdout and stderr pipes, as a log reader that goes away does: its writes
   * then fail (EPIPE). */
  closeOutput(): void
}

const live = new Set<ChildProcess>()

afterEach(async () => {
  await Promise.all(
    [...live].map(
      (child) =>
        new Promise<void>((resolve) => {
          live.delete(child)
          if (child.exitCode !== null || child.signalCode !== null) return resolve()
          child.once('exit', () => resolve())
          child.kill('SIGKILL')
        }),
    ),
  )
})

/** `redis://host:port` of a test server. */
export const redisUrl = ({ host, port }: { host: string; port: number }) => `redis://${host}:${port}`

/** The flags every spawned gateway of a test starts with: ports of its own, a key prefix of its own. */
export const baseFlags = (upstream: string, prefix: string) => [
  '--upstream',
  upstream,
  '--port',
  '0',
  '--admin-port',
  '0',
  '--prefix',
  prefix,
]

export interface RunOptions {
  /** Extra environment variables (TOLLGATE_*, ...), over the runner's own minus its TOLLGATE_*. */
  env?: Record<string, string>
  cwd?: string
}

/** Start the bin and resolve once it listens; rejects (with its output) if it exits first. */
export async function spawnGateway(args: string[], options: RunOptions = {}): Promise<GatewayProcess> {
  const run = runGateway(args, options)
  const deadline = Date.now() + START_TIMEOUT_MS
  // The admin URL is in the info-level "tollgate ready" line, absent with a quieter --log-level.
  const flag = args.indexOf('--log-level')
  const quiet = flag >= 0 && !['info', 'debug', 'trace'].includes(String(args[flag + 1]))
  for (;;) {
    const listening = /tollgate listening on (\S+)/.exec(run.stdout())?.[1]
    const ready = run.logs().find((line) => /^tollgate (ready|waiting)/.test(String(line.msg)))
    if (listening && (ready || quiet)) {
      return { ...run, url: listening, adminUrl: ready?.adminUrl as string | undefined }
    }
    const exit = await Promise.race([run.exited, new Promise((resolve) => setTimeout(resolve, 25))])
    if (exit) throw new Error(`tollgate exited ${JSON.stringify(exit)} before listening:\n${run.stderr()}`)
    if (Date.now() > deadline)
      throw new Error(`tollgate did not start within ${START_TIMEOUT_MS} ms:\n${run.stderr()}`)
  }
}

/** Start the bin without waiting for anything (e.g. to watch it fail). */
export function runGateway(
  args: string[],
  options: RunOptions = {},
): Omit<GatewayProcess, 'url' | 'adminUrl'> {
  // TOLLGATE_* of the test runner's own environment never leak into a spawned gateway.
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith('TOLLGATE_')),
  )
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: options.cwd ?? ROOT,
    env: { ...inherited, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  live.add(child)
  const forgetExit = onProcessExit(() => child.kill('SIGKILL'))
  const forgetReap = child.pid === undefined ? () => {} : reapPidOnDeath(child.pid)
  let stdout = ''
  let stderr = ''
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')))
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')))
  const exited = new Promise<GatewayExit>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child)
      forgetExit()
      forgetReap()
      resolve({ code, signal })
    })
    child.once('error', (error) => {
      stderr += `\n${error.message}`
      if (child.pid === undefined) resolve({ code: null, signal: null })
    })
  })
  return {
    pid: child.pid ?? -1,
    exited,
    stdout: () => stdout,
    stderr: () => stderr,
    logs: () =>
      stderr
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .flatMap((line) => {
          try {
            return [JSON.parse(line) as Record<string, unknown>]
          } catch {
            return []
          }
        }),
    kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
    },
    closeOutput() {
      child.stdout?.destroy()
      child.stderr?.destroy()
    },
  }
}

/** Prometheus text -> value of one series, e.g. metric(text, 'tollgate_admitted_total', { route: 'api' }). */
export function metric(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue
    const match = /^([^{\s]+)(?:\{([^}]*)\})?\s+(\S+)$/.exec(line)
    if (!match || match[1] !== name) continue
    const found = Object.fromEntries(
      (match[2] ?? '')
        .split(',')
        .filter(Boolean)
        .map((pair) => {
          const [key, value] = pair.split('=') as [string, string]
          return [key, JSON.parse(value) as string]
        }),
    )
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) return Number(match[3])
  }
  return undefined
}

const lastAnswered = new Map<string, number>()

/**
 * GET `url` of an admin listener for an answer made after this call: the listener shares each
 * answer for ANSWER_INTERVAL_MS from when it began making it (ops/shared-answer.ts), so a read
 * within that would see the earlier answer. Waits out the interval since this helper last got an
 * answer from that URL (that answer was begun before it came, whatever the machine's load).
 */
export async function freshAdminGet(url: string): Promise<Response> {
  const wait = (lastAnswered.get(url) ?? -Infinity) + ANSWER_INTERVAL_MS + 2 - performance.now()
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
  const response = await fetch(url)
  lastAnswered.set(url, performance.now())
  return response
}
