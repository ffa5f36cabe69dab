// Child processes of a benchmark (servers under test), started with node (tsx for TypeScript) and stopped by their PID,
// also when the bench fails or is interrupted (and by the reaper if the bench itself is SIGKILLed).
import { type ChildProcess, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { onProcessExit } from '../../test/helpers/process-cleanup.js'
import { reapPidOnDeath } from '../../test/helpers/reaper.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const START_TIMEOUT_MS = 20_000

export interface BenchProcess {
  readonly pid: number
  /** The first capture group of `ready` in its stdout (e.g. its URL). */
  readonly ready: string
  /** SIGTERM, SIGKILL after 3 s; resolves once it has exited. Idempotent. */
  stop(): Promise<void>
}

/** `node --import tsx <script> ...args` from the repository root (a built `.js` runs without tsx, as
 * in production); resolves when stdout matches `ready`. */
export async function startProcess(
  script: string,
  args: string[],
  ready: RegExp,
  env: Record<string, string> = {},
): Promise<BenchProcess> {
  const loader = script.endsWith('.js') ? [] : ['--import', 'tsx']
  const child: ChildProcess = spawn(process.execPath, [...loader, script, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    // stderr (access logs of the gateway) is discarded, as a log shipper would take it away.
    stdio: ['ignore', 'pipe', 'ignore'],
  })
  const forgetExit = onProcessExit(() => child.kill('SIGKILL'))
  const forgetReap = child.pid === undefined ? () => {} : reapPidOnDeath(child.pid)
  const exited = new Promise<void>((resolve) => {
    child.once('exit', () => {
      forgetExit()
      forgetReap()
      resolve()
    })
  })
  let stopping: Promise<void> | undefined
  const stop = () => {
    stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM')
        const timer = setTimeout(() => child.kill('SIGKILL'), 3000)
        await exited
        clearTimeout(timer)
      }
    })()
    return stopping
  }
  let stdout = ''
  try {
    const match = await new Promise<RegExpExecArray>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${script} did not start within ${START_TIMEOUT_MS} ms`)),
        START_TIMEOUT_MS,
      )
      child.stdout?.on('data', (chunk: Buffer) => {
        stdout += chunk.toString('utf8')
        const found = ready.exec(stdout)
        if (found) {
          clearTimeout(timer)
          resolve(found)
        }
      })
      child.once('exit', (code, signal) => {
        clearTimeout(timer)
        reject(new Error(`${script} exited (${code ?? signal}) before it was ready: ${stdout}`))
      })
    })
    child.stdout?.resume()
    return { pid: child.pid ?? -1, ready: match[1] ?? match[0], stop }
  } catch (error) {
    await stop()
    throw error
  }
}
