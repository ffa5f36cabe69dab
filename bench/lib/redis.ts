// The benchmark's own redis-server (started through the test helper, stopped by its PID) and the
// server-side counters the scenarios read: INFO commandstats call totals and INFO cpu seconds.
import { readdirSync, readFileSync } from 'node:fs'
import { Redis } from 'ioredis'
import { type RedisServerHandle, startRedisServer } from '../../test/helpers/redis-server.js'

export interface ServerSnapshot {
  /** performance.now() when the INFO reply arrived. */
  at: number
  /** Command name (as in cmdstat_<name>, e.g. evalsha, zadd, client|setname) -> calls. */
  calls: Map<string, number>
  /** Command name -> total µs the server spent executing it (a script's time includes its commands). */
  usec: Map<string, number>
  /** used_cpu_sys + used_cpu_user, seconds. */
  cpuSeconds: number
}

export interface ServerDelta {
  elapsedMs: number
  /** Calls per command between two snapshots (commands run inside Lua scripts included). */
  calls: Record<string, number>
  /** All calls except INFO (our own probes and ioredis' ready checks). */
  totalCalls: number
  /** FCALL + EVALSHA + EVAL (+ their read-only variants). */
  scriptCalls: number
  /** µs the server spent executing scripts (commandstats usec of the script commands). */
  scriptUsec: number
  cpuSeconds: number
}

const SCRIPT_COMMANDS = new Set(['fcall', 'fcall_ro', 'evalsha', 'eval', 'evalsha_ro', 'eval_ro'])
const IGNORED_COMMANDS = new Set(['info', 'function|load'])

export function parseInfo(text: string): Record<string, string> {
  const fields: Record<string, string> = {}
  for (const line of text.split(/\r?\n/)) {
    const at = line.indexOf(':')
    if (at > 0 && !line.startsWith('#')) fields[line.slice(0, at)] = line.slice(at + 1)
  }
  return fields
}

export function parseCommandStats(text: string): { calls: Map<string, number>; usec: Map<string, number> } {
  const calls = new Map<string, number>()
  const usec = new Map<string, number>()
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    calls.set(match[1] as string, Number(match[2]))
    usec.set(match[1] as string, Number(match[3]))
  }
  return { calls, usec }
}

export function diffSnapshots(before: ServerSnapshot, after: ServerSnapshot): ServerDelta {
  const calls: Record<string, number> = {}
  let totalCalls = 0
  let scriptCalls = 0
  let scriptUsec = 0
  for (const [name, count] of after.calls) {
    const delta = count - (before.calls.get(name) ?? 0)
    if (delta <= 0 || IGNORED_COMMANDS.has(name)) continue
    calls[name] = delta
    totalCalls += delta
    if (!SCRIPT_COMMANDS.has(name)) continue
    scriptCalls += delta
    scriptUsec += (after.usec.get(name) ?? 0) - (before.usec.get(name) ?? 0)
  }
  return {
    elapsedMs: after.at - before.at,
    calls,
    totalCalls,
    scriptCalls,
    scriptUsec,
    cpuSeconds: after.cpuSeconds - before.cpuSeconds,
  }
}

/** Sum of several deltas (e.g. the rounds of one variant). */
export function sumDeltas(deltas: readonly ServerDelta[]): ServerDelta {
  const total: ServerDelta = {
    elapsedMs: 0,
    calls: {},
    totalCalls: 0,
    scriptCalls: 0,
    scriptUsec: 0,
    cpuSeconds: 0,
  }
  for (const delta of deltas) {
    total.elapsedMs += delta.elapsedMs
    total.totalCalls += delta.totalCalls
    total.scriptCalls += delta.scriptCalls
    total.scriptUsec += delta.scriptUsec
    total.cpuSeconds += delta.cpuSeconds
    for (const [name, count] of Object.entries(delta.calls))
      total.calls[name] = (total.calls[name] ?? 0) + count
  }
  return total
}

/** "zadd 4.00, zrangebyscore 4.00, ...": the `top` commands by calls, per `per` (e.g. per op). */
export function topCommands(delta: ServerDelta, per: number, top = 8): string {
  return Object.entries(delta.calls)
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([name, count]) => `${name} ${(count / per).toFixed(2)}`)
    .join(', ')
}

export interface BenchRedis {
  readonly host: string
  readonly port: number
  readonly pid: number
  readonly version: string
  /** A new ioredis connection, closed by closeClients() (or stop()). Resolves once it is ready. */
  connect(): Promise<Redis>
  /** Quit every connection made by connect() so far. */
  closeClients(): Promise<void>
  snapshot(): Promise<ServerSnapshot>
  flush(): Promise<void>
  /** Quit the clients, then stop the server by its PID and check that the PID is gone. */
  stop(): Promise<void>
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

async function quit(client: Redis): Promise<void> {
  try {
    await Promise.race([
      client.quit(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('quit timed out')), 1000).unref()),
    ])
  } catch {
    client.disconnect()
  }
}

/** Start a private redis-server on 127.0.0.1 (free port, no persistence). */
export async function startBenchRedis(): Promise<BenchRedis> {
  const server: RedisServerHandle = await startRedisServer()
  const pid = server.pid
  const clients = new Set<Redis>()
  let admin: Redis | undefined
  let stopped = false

  const connect = async (): Promise<Redis> => {
    const client = new Redis({
      host: server.host,
      port: server.port,
      lazyConnect: true,
      maxRetriesPerRequest: 1,
    })
    client.on('error', () => {})
    clients.add(client)
    await client.connect()
    return client
  }
  const closeClients = async () => {
    const all = [...clients]
    clients.clear()
    admin = undefined
    await Promise.all(all.map(quit))
  }
  const adminClient = async () => {
    admin ??= await connect()
    return admin
  }

  try {
    const version = parseInfo(await (await adminClient()).info('server')).redis_version ?? 'unknown'
    return {
      host: server.host,
      port: server.port,
      pid,
      version,
      connect,
      closeClients,
      async snapshot() {
        const client = await adminClient()
        const [stats, cpu] = await Promise.all([client.info('commandstats'), client.info('cpu')])
        const fields = parseInfo(cpu)
        return {
          at: performance.now(),
          ...parseCommandStats(stats),
          cpuSeconds: Number(fields.used_cpu_sys ?? 0) + Number(fields.used_cpu_user ?? 0),
        }
      },
      async flush() {
        await (await adminClient()).flushall()
      },
      async stop() {
        if (stopped) return
        stopped = true
        await closeClients()
        await server.stop()
        if (pidAlive(pid)) throw new Error(`redis-server PID ${pid} is still alive after stop()`)
      },
    }
  } catch (error) {
    await closeClients()
    await server.stop()
    throw error
  }
}

/**
 * PIDs of live redis-server processes whose parent is this process (read from /proc; empty where there
 * is none). After a run this must be empty: every server a scenario starts, it stops.
 */
export function childRedisServers(): number[] {
  let entries: string[]
  try {
    entries = readdirSync('/proc')
  } catch {
    return []
  }
  const pids: number[] = []
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const close = stat.lastIndexOf(')')
      const command = stat.slice(stat.indexOf('(') + 1, close)
      const [state, ppid] = stat.slice(close + 2).split(' ')
      if (Number(ppid) === process.pid && state !== 'Z' && command.startsWith('redis-server')) {
        pids.push(Number(entry))
      }
    } catch {
      // the process went away while we looked
    }
  }
  return pids
}
