// The command line: flags + config file -> a running gateway, the one "listening" line on stdout, a
// graceful shutdown on SIGTERM/SIGINT. Exit codes: 0 clean shutdown, 2 bad flags or config, 1 other.
import { ConfigError } from '../core/errors.js'
import { within } from '../core/timeout.js'
import { type Stats, unwatchFile, watchFile } from 'node:fs'
import { type GatewayConfigError, type GatewayFlags, loadConfig, parseFlags, USAGE } from './config/index.js'
import { startTracing, type Tracing } from './ops/tracing.js'
import { RedisAccessError } from './redis.js'
import { createGateway, type Gateway } from './server.js'
import { EXAMPLE_CONFIG, VERSION } from './version.js'
import { pino, type Logger as PinoLogger } from 'pino'

export interface CliIo {
  stdout: (line: string) => void
  stderr: (line: string) => void
}

const PROCESS_IO: CliIo = {
  stdout: (line) => process.stdout.write(`${line}\n`),
  stderr: (line) => process.stderr.write(`${line}\n`),
}

/**
 * Parse, validate, start. Resolves with the running gateway, or with an exit code when there is
 * nothing to run (--help, --version: 0; bad flags or config: 2, after printing why to stderr).
 */
export async function startFromArgs(
  argv: readonly string[],
  io: CliIo = PROCESS_IO,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Gateway | number> {
  let config
  let flags: GatewayFlags
  try {
    flags = parseFlags(argv, env)
    if (flags.help) {
      io.stdout(USAGE.trimEnd())
      return 0
    }
    if (flags.version) {
      io.stdout(version())
      return 0
    }
    if (flags.exampleConfig) {
      io.stdout(EXAMPLE_CONFIG.trimEnd())
      return 0
    }
    config = await loadConfig(flags)
    tracing ??= await startTracing(env)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    for (const line of error.message.split('\n')) io.stderr(`tollgate: ${line}`)
    io.stderr('tollgate: see --help and docs/gateway.md')
    return 2
  }
  let logger: PinoLogger | undefined
  if (config.logFormat === 'pretty') {
    const pretty = await prettyStream()
    if (!pretty) {
      io.stderr('tollgate: --log-format pretty needs the pino-pretty package: npm install pino-pretty')
      return 2
    }
    logger = pino({ level: config.logLevel }, pretty)
  }
  const gateway = createGateway(config, { logger })
  tracing?.reportTo(gateway.logger)
  let urls: Awaited<ReturnType<Gateway['listen']>>
  try {
    urls = await gateway.listen()
  } catch (error) {
    await gateway.close() // e.g. EADDRINUSE: let go of Redis too, or the process would linger
    if (error instanceof RedisAccessError) {
      io.stderr(`tollgate: ${error.message}`)
      io.stderr('tollgate: see docs/gateway/operate.md, "Redis ACL"')
      return 2
    }
    throw error
  }
  const { url, adminUrl } = urls
  if (flags.watchConfig && flags.config !== undefined)
    watchConfig(flags.config, () => reloadGateway(gateway, argv, env))
  // The truth about the store at start: ready only when Redis answers (or every limit fails open).
  const facts = {
    url,
    adminUrl,
    store: config.store.kind,
    routes: config.routes.map((route) => route.name),
    lean: config.lean,
  }
  if (urls.store === 'up') gateway.logger.info(facts, 'tollgate ready')
  else if (urls.store === 'down, failing open')
    gateway.logger.warn(facts, 'tollgate ready, failing open: Redis does not answer; requests pass unlimited')
  else
    gateway.logger.warn(
      facts,
      'tollgate waiting for Redis: limits without failOpen answer 503 until it answers',
    )
  io.stdout(`tollgate listening on ${url}`)
  return gateway
}

/** The tracer provider the bin registered from OTEL_* (one per process: kept across reloads). */
let tracing: Tracing | undefined

/** Its spans sent, within EXIT_FLUSH_MS, before the process exits; then the exports that failed and
 * were not told yet are told (the logger is flushed after). */
async function endTracing(): Promise<void> {
  const ending = tracing
  tracing = undefined
  if (!ending) return
  await within(ending.shutdown(), EXIT_FLUSH_MS)
  ending.flushReport()
}

/** The bin: start, then shut down gracefully on the first SIGTERM/SIGINT (a second one exits at once). */
export async function runCli(argv: readonly string[]): Promise<void> {
  // Listen for signals before anything is printed: a supervisor may signal as soon as it reads the
  // "listening" line, and a signal without a listener kills the process on the spot.
  const state: { gateway?: Gateway; signalled?: NodeJS.Signals } = {}
  const stop = (signal: NodeJS.Signals) => {
    if (state.signalled) {
      const gateway = state.gateway
      if (!gateway) process.exit(1)
      exitAfterFlush(gateway, 1, () => gateway.logger.warn({ signal }, 'second signal: exiting now'))
      return
    }
    state.signalled = signal
    if (state.gateway) shutdown(state.gateway, signal)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  // nginx's `kill -HUP`: reload the config. Before the gateway runs there is nothing to reload (and
  // the default action, exiting, must not happen either).
  const hup = () => {
    if (state.gateway && !state.signalled) void reloadGateway(state.gateway, argv, process.env)
  }
  process.on('SIGHUP', hup)
  let started: Gateway | number
  try {
    started = await startFromArgs(argv)
  } catch (error) {
    process.stderr.write(`tollgate: could not start: ${(error as Error)?.message ?? String(error)}\n`)
    started = 1
  }
  if (typeof started === 'number') {
    process.off('SIGTERM', stop)
    process.off('SIGINT', stop)
    process.off('SIGHUP', hup)
    process.exitCode = started
    return
  }
  state.gateway = started
  if (state.signalled) shutdown(started, state.signalled)
}

/** Per gateway: the reload under way, and whether another was asked for meanwhile. */
const reloads = new WeakMap<Gateway, { running: Promise<void> | undefined; again: boolean }>()

/**
 * Read flags, environment and config file again, validate them whole, and swap the result in. An
 * invalid config is logged (every field path) and counted, and the running one stays. Reloads never
 * overlap: one asked for during another runs after it.
 */
export function reloadGateway(
  gateway: Gateway,
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<void> {
  let state = reloads.get(gateway)
  if (!state) reloads.set(gateway, (state = { running: undefined, again: false }))
  if (state.running) {
    state.again = true
    return state.running
  }
  const own = state
  own.running = (async () => {
    do {
      own.again = false
      await reloadOnce(gateway, argv, env)
    } while (own.again)
  })().finally(() => {
    own.running = undefined
  })
  return own.running
}

async function reloadOnce(gateway: Gateway, argv: readonly string[], env: NodeJS.ProcessEnv): Promise<void> {
  const { metrics, logger } = gateway
  try {
    const next = await loadConfig(parseFlags(argv, env))
    const { kept } = gateway.reload(next)
    metrics.reloads.inc({ result: 'success' })
    metrics.reloadSuccessful.set(1)
    metrics.reloadTimestamp.set(Math.floor(Date.now() / 1000))
    if (kept.length > 0)
      logger.warn({ kept }, 'config reloaded; these sections changed but need a restart, kept as they were')
    logger.info({ routes: next.routes.map((route) => route.name) }, 'config reloaded')
  } catch (error) {
    metrics.reloads.inc({ result: 'failure' })
    metrics.reloadSuccessful.set(0)
    gateway.reloadFailed(error instanceof Error ? error.message.split('\n')[0]! : String(error))
    if (!(error instanceof ConfigError)) {
      logger.error({ err: error }, 'config reload failed; the running config stays')
      return
    }
    const issues = (error as GatewayConfigError).issues ?? [{ path: error.option, message: error.message }]
    logger.error(
      { issues },
      `config reload failed; the running config stays: ${error.message.split('\n')[0]}`,
    )
  }
}

/** --watch-config: poll the file (a stat every 500 ms: sees in-place writes, renames over it and the
 * symlink swaps of a Kubernetes ConfigMap alike) and reload once it changed and then stayed the same
 * for a poll (an editor's save in several writes is read whole, not half-written). */
function watchConfig(path: string, reload: () => Promise<void>): void {
  let settle: NodeJS.Timeout | undefined
  const changed = (now: Stats, before: Stats) => {
    if (now.mtimeMs === before.mtimeMs && now.size === before.size && now.ino === before.ino) return
    clearTimeout(settle)
    settle = setTimeout(() => void reload(), WATCH_INTERVAL_MS + 100)
    settle.unref()
  }
  watchFile(path, { interval: WATCH_INTERVAL_MS, persistent: false }, changed)
  process.once('exit', () => unwatchFile(path, changed))
}

const WATCH_INTERVAL_MS = 500

function shutdown(gateway: Gateway, signal: NodeJS.Signals): void {
  logged(() => gateway.logger.info({ signal }, 'shutting down: draining in-flight requests'))
  gateway.close().then(
    () => endTracing().then(() => exitAfterFlush(gateway, 0, () => gateway.logger.info('shutdown complete'))),
    (error: unknown) =>
      endTracing().then(() =>
        exitAfterFlush(gateway, 1, () => gateway.logger.error({ err: error }, 'shutdown failed')),
      ),
  )
}

/** A logger that throws (one given in-process; pino's own never does) never stops a shutdown. */
function logged(line: () => void): void {
  try {
    line()
  } catch {
    // the exit goes on without the line
  }
}

/** The longest the exit waits for the log to be written out. */
const EXIT_FLUSH_MS = 2000

/** Write the `last` line, then exit once the log is written, or failed to be (its reader has gone),
 * or after EXIT_FLUSH_MS (a stuck reader): the log never keeps the process from exiting. */
function exitAfterFlush(gateway: Gateway, code: number, last: () => void): void {
  logged(last)
  void gateway.logWritten(EXIT_FLUSH_MS).then(() => process.exit(code))
}

/** package.json's version, embedded at build time (scripts/embed-version.mjs): no import.meta, so the
 * CommonJS build and bundles print it too. */
function version(): string {
  return VERSION
}

/** pino-pretty's stream to stderr, or undefined when it is not installed (it is optional). */
async function prettyStream(): Promise<NodeJS.WritableStream | undefined> {
  const specifier = 'pino-pretty' // computed: bundlers leave an optional package to run time
  try {
    const loaded = (await import(specifier)) as { default: (options: object) => NodeJS.WritableStream }
    return loaded.default({ destination: 2, sync: true, colorize: process.stderr.isTTY === true })
  } catch {
    return undefined
  }
}
