// Runs a TypeScript worker file in a child Node process (via tsx) with a JSON IPC channel. Every
// child is killed by PID after each test, also when the test fails, and when this process exits or
// is interrupted; child-guard.ts makes the child exit by itself if this process dies without notice.
import { type ChildProcess, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { afterEach, inject } from 'vitest'
import { type ChildMessage, TOPOLOGY_ENV } from './child-worker.js'
import { onProcessExit } from './process-cleanup.js'

export type { ChildMessage } from './child-worker.js'

const TAIL_CHARS = 4_000
const DEFAULT_WAIT_MS = 10_000

export interface ChildExit {
  code: number | null
  signal: NodeJS.Signals | null
}

export interface SpawnChildOptions {
  /** Extra environment variables (on top of process.env and TOLLGATE_TEST_REDIS). */
  env?: Record<string, string>
  /** Node and V8 flags before the script (some, such as --no-memory-reducer, NODE_OPTIONS refuses). */
  nodeArgs?: string[]
}

export interface ChildHandle {
  readonly pid: number
  /** Every message received so far, in order. */
  readonly messages: readonly ChildMessage[]
  /** Resolves with the next not yet consumed message of that type (including ones already received). */
  waitFor<T extends ChildMessage = ChildMessage>(type: string, timeoutMs?: number): Promise<T>
  send(message: ChildMessage): void
  /** Signals this child's PID (default SIGKILL); no-op once it has exited. */
  kill(signal?: NodeJS.Signals): void
  readonly exited: Promise<ChildExit>
  /** stdout+stderr tail, for assertions and error messages. */
  output(): string
}

const live = new Set<ChildProcess>()

const GUARD = fileURLToPath(new URL('./child-guard.ts', import.meta.url))

afterEach(killAllChildren)

/** SIGKILLs every child still running and waits until they have exited. */
export async function killAllChildren(): Promise<void> {
  const waiting = [...live].map(
    (child) =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.kill('SIGKILL')
      }),
  )
  live.clear()
  await Promise.all(waiting)
}

interface Waiter {
  type: string
  resolve: (message: ChildMessage) => void
  reject: (error: Error) => void
}

/** Starts `node [nodeArgs] --import tsx <file> ...args` with an IPC channel and the Redis topology in its env. */
export function spawnChild(
  file: string | URL,
  args: string[] = [],
  options: SpawnChildOptions = {},
): ChildHandle {
  const script = file instanceof URL ? fileURLToPath(file) : file
  const argv = [...(options.nodeArgs ?? []), '--import', 'tsx', '--import', GUARD, script, ...args]
  const child = spawn(process.execPath, argv, {
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    serialization: 'json',
    env: { ...process.env, ...options.env, [TOPOLOGY_ENV]: JSON.stringify(inject('redis')) },
  })
  live.add(child)
  // If this process dies before the afterEach, SIGKILL the child by its PID.
  const forget = onProcessExit(() => child.kill('SIGKILL'))

  let output = ''
  const append = (chunk: Buffer) => {
    output = (output + chunk.toString('utf8')).slice(-TAIL_CHARS)
  }
  child.stdout?.on('data', append)
  child.stderr?.on('data', append)

  const messages: ChildMessage[] = []
  const unconsumed: ChildMessage[] = []
  const waiters: Waiter[] = []
  let exit: ChildExit | undefined
  const describe = () => `child ${script} (pid ${child.pid})`

  child.on('message', (raw) => {
    const message = raw as ChildMessage
    messages.push(message)
    const index = waiters.findIndex((waiter) => waiter.type === message.type)
    if (index >= 0) waiters.splice(index, 1)[0]!.resolve(message)
    else unconsumed.push(message)
  })

  const exited = new Promise<ChildExit>((resolve) => {
    const finish = (result: ChildExit) => {
      live.delete(child)
      forget()
      exit = result
      for (const waiter of waiters.splice(0)) {
        waiter.reject(
          new Error(
            `${describe()} exited (${JSON.stringify(result)}) before sending "${waiter.type}":\n${output}`,
          ),
        )
      }
      resolve(result)
    }
    child.once('exit', (code, signal) => finish({ code, signal }))
    child.once('error', (error) => {
      output += `\n${error.message}`
      if (child.pid === undefined) finish({ code: null, signal: null })
    })
  })

  return {
    get pid() {
      return child.pid ?? -1
    },
    messages,
    exited,
    output: () => output,
    send(message) {
      if (!child.connected) throw new Error(`${describe()} is not connected`)
      child.send(message)
    },
    kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
    },
    waitFor<T extends ChildMessage = ChildMessage>(type: string, timeoutMs = DEFAULT_WAIT_MS): Promise<T> {
      const index = unconsumed.findIndex((message) => message.type === type)
      if (index >= 0) return Promise.resolve(unconsumed.splice(index, 1)[0] as T)
      if (exit) {
        return Promise.reject(new Error(`${describe()} already exited (${JSON.stringify(exit)}):\n${output}`))
      }
      return new Promise<T>((resolve, reject) => {
        const waiter: Waiter = {
          type,
          resolve: (message) => {
            clearTimeout(timer)
            resolve(message as T)
          },
          reject: (error) => {
            clearTimeout(timer)
            reject(error)
          },
        }
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1)
          reject(new Error(`${describe()} sent no "${type}" within ${timeoutMs} ms:\n${output}`))
        }, timeoutMs)
        waiters.push(waiter)
      })
    },
  }
}

/** spawnChild() and wait for the worker's { type: 'ready' } message. */
export async function spawnReadyChild(file: string | URL, timeoutMs = 15_000): Promise<ChildHandle> {
  const child = spawnChild(file)
  await child.waitFor('ready', timeoutMs)
  return child
}
