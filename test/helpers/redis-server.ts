// Spawns and supervises real redis-server processes for tests: standalone servers, cluster nodes and
// whole clusters. Processes are only ever signalled by the PIDs spawned here, never by name.
import { type ChildProcess, spawn } from 'node:child_process'
import { rmSync } from 'node:fs'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { Redis } from 'ioredis'
import { onProcessExit } from './process-cleanup.js'
import { reapDirOnDeath, reapPidOnDeath } from './reaper.js'

export const REDIS_HOST = '127.0.0.1'
const START_TIMEOUT_MS = 10_000
const STOP_TIMEOUT_MS = 5_000
const CLUSTER_TIMEOUT_MS = 20_000
const CLUSTER_BUS_OFFSET = 10_000
const TOTAL_SLOTS = 16_384
const LOG_TAIL_CHARS = 4_000

export interface RedisEndpoint {
  host: string
  port: number
}

export interface RedisTopology {
  standalone: RedisEndpoint
  cluster: RedisEndpoint[]
  independents: RedisEndpoint[]
}

export interface StartRedisServerOptions {
  /** Fixed port; by default a free one is picked (and re-picked if the server loses a bind race). */
  port?: number
  /** Start as a cluster node (cluster-enabled, node timeout 2 s). */
  cluster?: boolean
  /** Working directory; by default a fresh temp dir that stop() removes. */
  dir?: string
  /** Extra redis-server arguments, e.g. ['--maxmemory', '1mb']. */
  args?: string[]
}

export interface RedisServerHandle extends RedisEndpoint {
  readonly url: string
  readonly dir: string
  /** PID of the current process (changes on restart). */
  readonly pid: number
  readonly running: boolean
  /** SIGTERM, SIGKILL after 5 s, waits for exit, then removes the temp dir it created. Idempotent. */
  stop(): Promise<void>
  /** Sends a signal to the current process only (default SIGKILL); does not wait and keeps the dir. */
  kill(signal?: NodeJS.Signals): void
  /** Resolves when the current process has exited (immediately if it is not running). */
  exited(): Promise<void>
  /** Terminates the server if it still runs, then starts it again on the same port and dir. */
  restart(): Promise<void>
}

export interface RedisClusterHandle {
  nodes: RedisEndpoint[]
  servers: RedisServerHandle[]
  stop(): Promise<void>
}

const reservedPorts = new Set<number>()

function listenOnce(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.once('error', reject)
    server.listen({ port, host: REDIS_HOST, exclusive: true }, () => {
      const address = server.address()
      const bound = typeof address === 'object' && address ? address.port : 0
      server.close(() => resolve(bound))
    })
  })
}

async function isPortFree(port: number): Promise<boolean> {
  try {
    await listenOnce(port)
    return true
  } catch {
    return false
  }
}

/**
 * A port that is free on 127.0.0.1 right now and not handed out before by this process. With
 * `cluster`, port + 10000 (the cluster bus) is free too.
 */
export async function freePort(options: { cluster?: boolean } = {}): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await listenOnce(0)
    if (reservedPorts.has(port)) continue
    if (options.cluster) {
      const bus = port + CLUSTER_BUS_OFFSET
      if (bus > 65_535 || !(await isPortFree(bus)) || reservedPorts.has(bus)) continue
      reservedPorts.add(bus)
    }
    reservedPorts.add(port)
    return port
  }
  throw new Error('freePort: no free port found after 50 attempts')
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/**
 * PID of the redis-server answering on `port` (INFO server, over a raw socket), or 0 while nothing
 * answers properly (refused, still loading, ...). Tells our server apart from another one on the port.
 */
function servingPid(port: number, timeoutMs = 1_000): Promise<number> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: REDIS_HOST })
    let data = ''
    const done = (pid: number) => {
      socket.destroy()
      resolve(pid)
    }
    socket.setTimeout(timeoutMs, () => done(0))
    socket.once('error', () => done(0))
    socket.once('connect', () => socket.write('INFO server\r\n'))
    socket.on('data', (chunk) => {
      data += chunk.toString('utf8')
      if (data.startsWith('-')) return done(0)
      const match = /process_id:(\d+)\r\n/.exec(data)
      if (match) done(Number(match[1]))
    })
  })
}

function serverArgs(port: number, dir: string, options: StartRedisServerOptions): string[] {
  const args = [
    ...['--port', String(port), '--bind', REDIS_HOST, '--dir', dir],
    ...['--save', '', '--appendonly', 'no', '--protected-mode', 'no'],
    // DEBUG SLEEP etc. for fault-injection tests.
    ...['--enable-debug-command', 'yes'],
  ]
  if (options.cluster) {
    args.push('--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`)
    args.push('--cluster-node-timeout', '2000')
  }
  return [...args, ...(options.args ?? [])]
}

class BindError extends Error {}

interface Spawned {
  child: ChildProcess
  exited: Promise<void>
}

async function spawnServer(port: number, dir: string, options: StartRedisServerOptions): Promise<Spawned> {
  let log = ''
  const appendLog = (chunk: Buffer) => {
    log = (log + chunk.toString('utf8')).slice(-LOG_TAIL_CHARS)
  }
  const child = spawn('redis-server', serverArgs(port, dir, options), { stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout?.on('data', appendLog)
  child.stderr?.on('data', appendLog)
  let hasExited = false
  let spawnError: Error | undefined
  // If this process dies first, SIGKILL this server by its PID (never by name): synchronously when we
  // can, and from the reaper process when we cannot (we were SIGKILLed).
  const forgetExit = onProcessExit(() => child.kill('SIGKILL'))
  const forgetReap = child.pid === undefined ? () => {} : reapPidOnDeath(child.pid)
  const unregister = () => {
    forgetExit()
    forgetReap()
  }
  const exited = new Promise<void>((resolve) => {
    const finish = () => {
      hasExited = true
      unregister()
      resolve()
    }
    child.once('error', (error) => {
      spawnError = error
      if (child.pid === undefined) finish()
    })
    child.once('exit', finish)
  })

  const deadline = Date.now() + START_TIMEOUT_MS
  while (true) {
    if (hasExited) {
      const detail = spawnError
        ? spawnError.message
        : `exit code ${child.exitCode}, signal ${child.signalCode}`
      const message = `redis-server on port ${port} died during startup (${detail}). Log tail:\n${log}`
      throw /Address already in use/i.test(log) ? new BindError(message) : new Error(message)
    }
    if ((await servingPid(port)) === child.pid) return { child, exited }
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      await exited
      throw new Error(
        `redis-server on port ${port} did not answer INFO within ${START_TIMEOUT_MS} ms. Log:\n${log}`,
      )
    }
    await sleep(50)
  }
}

async function terminate(spawned: Spawned | undefined): Promise<void> {
  if (!spawned || spawned.child.exitCode !== null || spawned.child.signalCode !== null) return
  spawned.child.kill('SIGTERM')
  spawned.child.kill('SIGCONT') // in case a test paused it with kill('SIGSTOP')
  let timer: NodeJS.Timeout | undefined
  const timedOut = await Promise.race([
    spawned.exited.then(() => false),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), STOP_TIMEOUT_MS)
    }),
  ])
  clearTimeout(timer)
  if (timedOut) {
    spawned.child.kill('SIGKILL')
    await spawned.exited
  }
}

/** Starts redis-server (no config file) and resolves once it answers on its port. */
export async function startRedisServer(options: StartRedisServerOptions = {}): Promise<RedisServerHandle> {
  const ownsDir = options.dir === undefined
  const dir = options.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'tollgate-redis-')))
  // A temp dir we created is removed by stop(), or synchronously if this process dies first.
  let forgetDir = () => {}
  const trackDir = () => {
    if (!ownsDir) return
    const forgetExit = onProcessExit(() => rmSync(dir, { recursive: true, force: true }))
    const forgetReap = reapDirOnDeath(dir)
    forgetDir = () => {
      forgetExit()
      forgetReap()
    }
  }
  const removeDir = async () => {
    if (!ownsDir) return
    await rm(dir, { recursive: true, force: true })
    forgetDir()
  }
  trackDir()
  let port = options.port ?? (await freePort({ cluster: options.cluster }))
  let current: Spawned
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        current = await spawnServer(port, dir, options)
        break
      } catch (error) {
        // Somebody grabbed the picked port between freePort() and the bind: pick another one.
        if (!(error instanceof BindError) || options.port !== undefined || attempt >= 3) throw error
        port = await freePort({ cluster: options.cluster })
      }
    }
  } catch (error) {
    await removeDir()
    throw error
  }

  const isRunning = () => current.child.exitCode === null && current.child.signalCode === null
  return {
    host: REDIS_HOST,
    port,
    url: `redis://${REDIS_HOST}:${port}`,
    dir,
    get pid() {
      return current.child.pid ?? -1
    },
    get running() {
      return isRunning()
    },
    async stop() {
      await terminate(current)
      await removeDir()
    },
    kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (isRunning()) current.child.kill(signal)
    },
    exited() {
      return current.exited
    },
    async restart() {
      await terminate(current)
      forgetDir()
      trackDir()
      await mkdir(dir, { recursive: true })
      current = await spawnServer(port, dir, options)
    },
  }
}

function parseInfo(text: string): Record<string, string> {
  const fields: Record<string, string> = {}
  for (const line of text.split(/\r?\n/)) {
    const at = line.indexOf(':')
    if (at > 0) fields[line.slice(0, at)] = line.slice(at + 1)
  }
  return fields
}

/** Runs `fn` with a short-lived client that never retries or queues, then disconnects it. */
async function withClient<T>(endpoint: RedisEndpoint, fn: (client: Redis) => Promise<T>): Promise<T> {
  const client = new Redis({
    host: endpoint.host,
    port: endpoint.port,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  })
  client.on('error', () => {})
  try {
    await client.connect()
    return await fn(client)
  } finally {
    client.disconnect()
  }
}

type SlotRange = [number, number, ...unknown[]]

/** Empty string when the node sees a healthy cluster of `masters` masters covering all slots. */
async function clusterProblem(node: RedisEndpoint, masters: number): Promise<string> {
  try {
    return await withClient(node, async (client) => {
      const info = parseInfo(await client.cluster('INFO'))
      if (info.cluster_state !== 'ok') return `cluster_state:${info.cluster_state}`
      if (info.cluster_known_nodes !== String(masters))
        return `cluster_known_nodes:${info.cluster_known_nodes}`
      const ranges = (await client.cluster('SLOTS')) as SlotRange[]
      const covered = ranges.reduce((sum, [from, to]) => sum + (to - from + 1), 0)
      return covered === TOTAL_SLOTS ? '' : `CLUSTER SLOTS covers ${covered} slots`
    })
  } catch (error) {
    return (error as Error).message
  }
}

async function waitForCluster(nodes: RedisEndpoint[]): Promise<void> {
  const deadline = Date.now() + CLUSTER_TIMEOUT_MS
  while (true) {
    const problems = await Promise.all(nodes.map((node) => clusterProblem(node, nodes.length)))
    const bad = problems.map((problem, i) => (problem ? `${nodes[i]!.port}: ${problem}` : '')).filter(Boolean)
    if (bad.length === 0) return
    if (Date.now() > deadline) {
      throw new Error(`cluster not healthy after ${CLUSTER_TIMEOUT_MS} ms: ${bad.join('; ')}`)
    }
    await sleep(100)
  }
}

/**
 * What `redis-cli --cluster create --cluster-replicas 0` does, without its 1 s polling: give every
 * node a distinct config epoch and an equal share of the slots, then introduce them to each other.
 */
async function formCluster(nodes: RedisEndpoint[]): Promise<void> {
  const share = Math.ceil(TOTAL_SLOTS / nodes.length)
  await Promise.all(
    nodes.map((node, i) =>
      withClient(node, async (client) => {
        await client.cluster('SET-CONFIG-EPOCH', i + 1)
        const last = Math.min(TOTAL_SLOTS, (i + 1) * share) - 1
        await client.cluster('ADDSLOTSRANGE', i * share, last)
      }),
    ),
  )
  // Every node meets every other one directly: waiting for gossip to spread the news instead makes
  // the time to cluster_state:ok vary between 2 and 7 s.
  await Promise.all(
    nodes.map((node) =>
      withClient(node, async (client) => {
        for (const other of nodes) if (other !== node) await client.cluster('MEET', other.host, other.port)
      }),
    ),
  )
}

async function stopAll(servers: RedisServerHandle[]): Promise<void> {
  await Promise.allSettled(servers.map((server) => server.stop()))
}

/**
 * Starts `masters` cluster-enabled nodes (no replicas), assigns the slots, joins them and waits until
 * every node reports cluster_state:ok, knows all nodes and sees all 16384 slots covered.
 */
export async function startCluster(masters = 3): Promise<RedisClusterHandle> {
  const settled = await Promise.allSettled(
    Array.from({ length: masters }, () => startRedisServer({ cluster: true })),
  )
  const servers = settled.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []))
  try {
    const failed = settled.find((result): result is PromiseRejectedResult => result.status === 'rejected')
    if (failed) throw failed.reason
    const nodes = servers.map(({ host, port }) => ({ host, port }))
    await formCluster(nodes)
    await waitForCluster(nodes)
    return { nodes, servers, stop: () => stopAll(servers) }
  } catch (error) {
    await stopAll(servers)
    throw error
  }
}
