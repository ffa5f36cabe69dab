// Redis processes the plain startRedisServer() cannot start: a TLS-only redis-server (no plain port to
// poll), a redis-server behind a password, and redis-sentinel processes with a config file of their
// own; plus a throw-away certificate authority made with openssl. Like redis-server.ts: free ports,
// temp dirs, every process signalled only by the PID spawned here, and stopped after each test (also
// when it fails), when this process exits, and by the reaper if this process is SIGKILLed.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { rmSync } from 'node:fs'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import tls from 'node:tls'
import { Redis, type RedisOptions } from 'ioredis'
import { afterEach } from 'vitest'
import { onProcessExit } from './process-cleanup.js'
import { reapDirOnDeath, reapPidOnDeath } from './reaper.js'
import { freePort, REDIS_HOST } from './redis-server.js'

const START_TIMEOUT_MS = 10_000
const STOP_TIMEOUT_MS = 5_000
const LOG_TAIL_CHARS = 4_000

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

interface Stoppable {
  stop(): Promise<void>
}

const live = new Set<Stoppable>()

/** Everything started here (and whatever was handed to stopAfterTest) is stopped after each test. */
afterEach(async () => {
  const stopping = [...live]
  live.clear()
  await Promise.allSettled(stopping.map((handle) => handle.stop()))
})

/** Have a handle (e.g. of startRedisServer()) stopped after the current test, also when it fails. */
export function stopAfterTest<T extends Stoppable>(handle: T): T {
  live.add(handle)
  return handle
}

/**
 * An ioredis client of the current test (to a process started here, or any endpoint), disconnected
 * after the test: disconnect() at once, as quit() would wait for a server the test may have stopped.
 */
export function connectClient(endpoint: { host: string; port: number }, options: RedisOptions = {}): Redis {
  const client = new Redis({ host: endpoint.host, port: endpoint.port, ...options })
  client.on('error', () => {})
  live.add({ stop: async () => client.disconnect() })
  return client
}

/** A temp dir removed by the returned function, or when this process dies first. */
async function tempDir(label: string): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), `tollgate-${label}-`))
  const forgetExit = onProcessExit(() => rmSync(dir, { recursive: true, force: true }))
  const forgetReap = reapDirOnDeath(dir)
  return {
    dir,
    remove: async () => {
      await rm(dir, { recursive: true, force: true })
      forgetExit()
      forgetReap()
    },
  }
}

// ---------------------------------------------------------------------------------------------------
// Certificates

export interface TlsFiles {
  dir: string
  /** The CA certificate (PEM) that signed both the server's and the client's. */
  ca: string
  serverCert: string
  serverKey: string
  clientCert: string
  clientKey: string
  /** A second, unrelated CA: what a client that trusts the wrong authority has. */
  otherCa: string
}

/**
 * A CA, a server certificate for 127.0.0.1 and localhost (SAN IP:127.0.0.1, DNS:localhost) and a
 * client certificate, all signed by the CA (P-256 keys, valid for a day), in a temp dir removed after
 * the test.
 */
export async function makeTlsFiles(): Promise<TlsFiles> {
  const { dir, remove } = await tempDir('tls')
  live.add({ stop: remove })
  const at = (name: string) => path.join(dir, name)
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' })
  const ecKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
  const ca = (name: string, subject: string) =>
    openssl(
      ...['req', '-x509', ...ecKey, '-keyout', at(`${name}.key`), '-out', at(`${name}.pem`)],
      ...['-days', '1', '-subj', subject],
      ...['-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'],
    )
  const leaf = async (name: string, subject: string, extensions: string[]) => {
    await writeFile(at(`${name}.ext`), `${extensions.join('\n')}\n`)
    openssl('req', ...ecKey, '-keyout', at(`${name}.key`), '-out', at(`${name}.csr`), '-subj', subject)
    openssl(
      ...['x509', '-req', '-in', at(`${name}.csr`), '-CA', at('ca.pem'), '-CAkey', at('ca.key')],
      ...['-CAcreateserial', '-out', at(`${name}.pem`), '-days', '1', '-extfile', at(`${name}.ext`)],
    )
  }
  ca('ca', '/CN=tollgate test CA')
  ca('other-ca', '/CN=tollgate unrelated CA')
  await leaf('server', '/CN=localhost', [
    'basicConstraints=CA:FALSE',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage=serverAuth',
    'subjectAltName=IP:127.0.0.1,DNS:localhost',
  ])
  await leaf('client', '/CN=tollgate gateway', [
    'basicConstraints=CA:FALSE',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage=clientAuth',
  ])
  return {
    dir,
    ca: at('ca.pem'),
    serverCert: at('server.pem'),
    serverKey: at('server.key'),
    clientCert: at('client.pem'),
    clientKey: at('client.key'),
    otherCa: at('other-ca.pem'),
  }
}

// ---------------------------------------------------------------------------------------------------
// Processes

/** How to reach a process to ask INFO server: plain TCP, or TLS with these options. */
interface Probe {
  port: number
  tls?: tls.ConnectionOptions
  password?: string
}

/**
 * PID of the redis-server or redis-sentinel answering INFO server on the probe's port (after AUTH if a
 * password is given), or 0 while nothing answers properly (refused, handshake failing, loading, ...).
 */
function answeringPid(probe: Probe, timeoutMs = 1_000): Promise<number> {
  return new Promise((resolve) => {
    const socket = probe.tls
      ? tls.connect({ host: REDIS_HOST, port: probe.port, ...probe.tls })
      : net.connect({ host: REDIS_HOST, port: probe.port })
    let data = ''
    const done = (pid: number) => {
      socket.destroy()
      resolve(pid)
    }
    const auth = probe.password === undefined ? '' : `AUTH ${probe.password}\r\n`
    socket.setTimeout(timeoutMs, () => done(0))
    socket.once('error', () => done(0))
    socket.once(probe.tls ? 'secureConnect' : 'connect', () => socket.write(`${auth}INFO server\r\n`))
    socket.on('data', (chunk: Buffer) => {
      data += chunk.toString('utf8')
      if (data.startsWith('-')) return done(0)
      const match = /process_id:(\d+)\r\n/.exec(data)
      if (match) done(Number(match[1]))
    })
  })
}

export interface RedisProcessHandle {
  readonly host: string
  /** The port it answers on (the TLS port of a TLS-only server). */
  readonly port: number
  readonly pid: number
  readonly dir: string
  readonly running: boolean
  /** SIGTERM, SIGKILL after 5 s, waits for the exit, removes the temp dir. Idempotent. */
  stop(): Promise<void>
  /** Signal the process by its PID (default SIGKILL); does not wait. */
  kill(signal?: NodeJS.Signals): void
}

class BindError extends Error {}

/**
 * Spawn `command args` (args built for the picked port, in the temp dir) and resolve once the process
 * with that PID answers INFO server as the probe says; a lost bind race picks another port (twice).
 */
async function startProcess(
  label: string,
  command: string,
  build: (port: number, dir: string) => Promise<{ args: string[]; probe: Probe }>,
): Promise<RedisProcessHandle> {
  const { dir, remove } = await tempDir(label)
  for (let attempt = 1; ; attempt++) {
    const port = await freePort()
    try {
      const { args, probe } = await build(port, dir)
      const handle = await spawnAndWait(label, command, args, probe, dir, remove)
      live.add(handle)
      return handle
    } catch (error) {
      if (!(error instanceof BindError) || attempt >= 3) {
        await remove()
        throw error
      }
    }
  }
}

async function spawnAndWait(
  label: string,
  command: string,
  args: string[],
  probe: Probe,
  dir: string,
  removeDir: () => Promise<void>,
): Promise<RedisProcessHandle> {
  let log = ''
  const appendLog = (chunk: Buffer) => {
    log = (log + chunk.toString('utf8')).slice(-LOG_TAIL_CHARS)
  }
  const child: ChildProcess = spawn(command, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout?.on('data', appendLog)
  child.stderr?.on('data', appendLog)
  const forgetExit = onProcessExit(() => child.kill('SIGKILL'))
  const forgetReap = child.pid === undefined ? () => {} : reapPidOnDeath(child.pid)
  let spawnError: Error | undefined
  const exited = new Promise<void>((resolve) => {
    const finish = () => {
      forgetExit()
      forgetReap()
      resolve()
    }
    child.once('error', (error) => {
      spawnError = error
      if (child.pid === undefined) finish()
    })
    child.once('exit', finish)
  })
  const isRunning = () => child.pid !== undefined && child.exitCode === null && child.signalCode === null
  let stopping: Promise<void> | undefined
  const stop = () =>
    (stopping ??= (async () => {
      if (isRunning()) {
        child.kill('SIGTERM')
        child.kill('SIGCONT')
        let timer: NodeJS.Timeout | undefined
        const timedOut = await Promise.race([
          exited.then(() => false),
          new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), STOP_TIMEOUT_MS))),
        ])
        clearTimeout(timer)
        if (timedOut) child.kill('SIGKILL')
      }
      await exited
      await removeDir()
    })())
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (!isRunning()) {
      await exited
      const detail = spawnError?.message ?? `exit code ${child.exitCode}, signal ${child.signalCode}`
      const message = `${command} (${label}) on port ${probe.port} died during startup (${detail}). Log tail:\n${log}`
      throw /Address already in use/i.test(log) ? new BindError(message) : new Error(message)
    }
    if ((await answeringPid(probe)) === child.pid) break
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      await exited
      throw new Error(
        `${command} (${label}) on port ${probe.port} did not answer within ${START_TIMEOUT_MS} ms:\n${log}`,
      )
    }
    await sleep(50)
  }
  return {
    host: REDIS_HOST,
    port: probe.port,
    dir,
    get pid() {
      return child.pid ?? -1
    },
    get running() {
      return isRunning()
    },
    stop,
    kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (isRunning()) child.kill(signal)
    },
  }
}

const serverBase = (dir: string) => [
  ...['--bind', REDIS_HOST, '--dir', dir, '--save', '', '--appendonly', 'no', '--protected-mode', 'no'],
]

/**
 * A redis-server with TLS only (`--port 0 --tls-port <free>`), its certificate from `files`, clients
 * made to present one signed by the CA (`--tls-auth-clients yes`). Ready once it answers over TLS.
 */
export function startTlsRedisServer(files: TlsFiles, extraArgs: string[] = []): Promise<RedisProcessHandle> {
  return startProcess('redis-tls', 'redis-server', async (port, dir) => ({
    args: [
      ...serverBase(dir),
      ...['--port', '0', '--tls-port', String(port)],
      ...['--tls-cert-file', files.serverCert, '--tls-key-file', files.serverKey],
      ...['--tls-ca-cert-file', files.ca, '--tls-auth-clients', 'yes'],
      ...extraArgs,
    ],
    probe: { port, tls: await clientTls(files) },
  }))
}

/** What a client of startTlsRedisServer() passes as ioredis `tls` (or tls.connect options). */
export async function clientTls(files: TlsFiles): Promise<tls.ConnectionOptions> {
  return {
    ca: await readFile(files.ca, 'utf8'),
    cert: await readFile(files.clientCert, 'utf8'),
    key: await readFile(files.clientKey, 'utf8'),
    servername: 'localhost',
  }
}

/** A plain redis-server that asks for `password` (`--requirepass`): ready once AUTH + INFO answer. */
export function startPasswordRedisServer(password: string): Promise<RedisProcessHandle> {
  return startProcess('redis-auth', 'redis-server', async (port, dir) => ({
    args: [...serverBase(dir), '--port', String(port), '--requirepass', password],
    probe: { port, password },
  }))
}

export interface SentinelOptions {
  masterName: string
  masterPort: number
  quorum: number
  downAfterMs?: number
  failoverTimeoutMs?: number
}

/**
 * A Sentinel with a sentinel.conf of its own (in its temp dir: Sentinel rewrites it) monitoring
 * 127.0.0.1:masterPort as `masterName`. Started as `redis-server <conf> --sentinel` (what the
 * redis-sentinel binary is), so it needs nothing beyond the redis-server the setup installs: Debian
 * ships redis-sentinel as a package of its own.
 */
export function startSentinel(options: SentinelOptions): Promise<RedisProcessHandle> {
  const name = options.masterName
  return startProcess('sentinel', 'redis-server', async (port, dir) => {
    const conf = path.join(dir, 'sentinel.conf')
    await writeFile(
      conf,
      [
        `port ${port}`,
        `bind ${REDIS_HOST}`,
        `dir ${dir}`,
        'protected-mode no',
        'sentinel resolve-hostnames no',
        `sentinel monitor ${name} ${REDIS_HOST} ${options.masterPort} ${options.quorum}`,
        `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 1000}`,
        `sentinel failover-timeout ${name} ${options.failoverTimeoutMs ?? 5000}`,
        '',
      ].join('\n'),
    )
    return { args: [conf, '--sentinel'], probe: { port } }
  })
}
