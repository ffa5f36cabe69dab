// The command line: flags parsed strictly (unknown flags, stray arguments and non-decimal numbers are
// errors naming the flag) into typed values, validated with the file's field validators.
import { parseArgs } from 'node:util'
import { z } from 'zod'
import {
  headerName,
  host,
  httpUrl,
  intIn,
  keyPrefix,
  logLevel,
  ms,
  per,
  port,
  positiveInt,
  redisUrl,
} from './schema.js'
import { GATEWAY_DEFAULTS, GatewayConfigError, type LogLevel, type Per } from './types.js'

export interface GatewayFlags {
  upstream?: string
  port?: number
  host?: string
  permits?: number
  per?: Per
  tenantHeader?: string
  maxWaitMs?: number
  maxQueue?: number
  rwlock?: boolean
  redis?: string
  redisCluster?: string[]
  prefix?: string
  adminPort?: number
  adminHost?: string
  ttlMs?: number
  timeoutMs?: number
  sendTimeoutMs?: number
  clientBodyTimeoutMs?: number
  requestTimeoutMs?: number
  websocketIdleTimeoutMs?: number
  requestBufferBytes?: number
  commandTimeoutMs?: number
  mergeSlashes?: boolean
  escapedSlashes?: 'reject' | 'keep'
  shutdownGraceMs?: number
  failOpen?: boolean
  trustProxy?: boolean
  logLevel?: LogLevel
  config?: string
  help?: boolean
  version?: boolean
}

const FLAG_OPTIONS = {
  upstream: { type: 'string' },
  port: { type: 'string' },
  host: { type: 'string' },
  permits: { type: 'string' },
  per: { type: 'string' },
  'tenant-header': { type: 'string' },
  'max-wait-ms': { type: 'string' },
  'max-queue': { type: 'string' },
  rwlock: { type: 'boolean' },
  redis: { type: 'string' },
  'redis-cluster': { type: 'string' },
  prefix: { type: 'string' },
  'admin-port': { type: 'string' },
  'admin-host': { type: 'string' },
  'ttl-ms': { type: 'string' },
  'timeout-ms': { type: 'string' },
  'send-timeout-ms': { type: 'string' },
  'client-body-timeout-ms': { type: 'string' },
  'request-timeout-ms': { type: 'string' },
  'websocket-idle-timeout-ms': { type: 'string' },
  'request-buffer-bytes': { type: 'string' },
  'command-timeout-ms': { type: 'string' },
  'merge-slashes': { type: 'string' },
  'escaped-slashes': { type: 'string' },
  'shutdown-grace-ms': { type: 'string' },
  'fail-open': { type: 'boolean' },
  'trust-proxy': { type: 'boolean' },
  'log-level': { type: 'string' },
  config: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
} as const

export const USAGE = `Usage: tollgate --upstream <url> [options]

A reverse proxy that caps the requests in flight; replicas share the caps through Redis.

  --upstream <url>            where requests go (http:// or https://)
  --port <n>                  listen port (default ${GATEWAY_DEFAULTS.port}; 0 = any free port)
  --host <addr>               listen address (default ${GATEWAY_DEFAULTS.host})
  --permits <n>               requests in flight per bucket (default ${GATEWAY_DEFAULTS.permits})
  --per <global|route|tenant|ip>  what one bucket is (default ${GATEWAY_DEFAULTS.per})
  --tenant-header <name>      tenant id header for --per tenant (default ${GATEWAY_DEFAULTS.tenantHeader})
  --max-wait-ms <n>           wait this long for a permit, then reject (default ${GATEWAY_DEFAULTS.maxWaitMs})
  --max-queue <n>             at most this many waiting per bucket and process (default ${GATEWAY_DEFAULTS.maxQueue})
  --rwlock                    GET/HEAD/OPTIONS share a read lock on the path, other methods write-lock it
  --redis <url>               share limits through Redis (default: in-memory, this process only)
  --redis-cluster <url,...>   share limits through a Redis Cluster (seed node URLs)
  --prefix <p>                Redis key prefix (default ${GATEWAY_DEFAULTS.prefix})
  --admin-port <n>            /metrics, /healthz, /readyz port (default ${GATEWAY_DEFAULTS.adminPort}; 0 = any free port)
  --admin-host <addr>         admin listen address (default ${GATEWAY_DEFAULTS.adminHost})
  --ttl-ms <n>                lease length; a dead replica's permits come back after it (default ${GATEWAY_DEFAULTS.ttlMs})
  --timeout-ms <n>            upstream silent this long -> 504 (default ${GATEWAY_DEFAULTS.upstreamTimeoutMs})
  --send-timeout-ms <n>       a client that reads nothing this long is cut (default ${GATEWAY_DEFAULTS.sendTimeoutMs})
  --client-body-timeout-ms <n>  no request body byte this long -> 408 (default ${GATEWAY_DEFAULTS.clientBodyTimeoutMs})
  --request-timeout-ms <n>    the whole request must arrive within this long -> 408 (default ${GATEWAY_DEFAULTS.requestTimeoutMs})
  --websocket-idle-timeout-ms <n>  close a WebSocket silent both ways this long (default ${GATEWAY_DEFAULTS.websocketIdleTimeoutMs})
  --request-buffer-bytes <n>  read bodies up to n bytes before taking a permit, 413 above (default 0 = stream)
  --command-timeout-ms <n>    a Redis call slower than this fails (default ${GATEWAY_DEFAULTS.commandTimeoutMs})
  --merge-slashes <on|off>    collapse repeated slashes in paths (default on)
  --escaped-slashes <reject|keep>  %2F and %5C in paths: 400, or keep them encoded (default reject)
  --shutdown-grace-ms <n>     SIGTERM waits this long for in-flight requests (default ${GATEWAY_DEFAULTS.shutdownGraceMs})
  --fail-open                 let requests through while Redis is unavailable (default: reject with 503)
  --trust-proxy               take the client address from X-Forwarded-For
  --log-level <level>         fatal|error|warn|info|debug|trace|silent (default ${GATEWAY_DEFAULTS.logLevel})
  --config <file>             YAML or JSON config file (routes, per-tenant overrides, ...); flags win
  -h, --help                  this text
  --version                   print the version

Exit codes: 0 after a clean shutdown, 2 for bad flags or config, 1 for anything else.
`

function checkFlag<T>(flag: string, raw: string, value: unknown, schema: z.ZodType<T, unknown>): T {
  const result = schema.safeParse(value)
  if (result.success) return result.data
  throw new GatewayConfigError([
    { path: `--${flag}`, message: `${result.error.issues[0]?.message} (got "${raw}")` },
  ])
}
/** Plain decimal digits only: `1e3`, `0x10`, `+5` or ` 5` are not numbers of milliseconds or permits. */
const numberFlag = <T>(flag: string, raw: string | undefined, schema: z.ZodType<T>): T | undefined =>
  raw === undefined
    ? undefined
    : checkFlag(flag, raw, /^\d{1,16}$/.test(raw) ? Number(raw) : Number.NaN, schema)
const stringFlag = <T>(
  flag: string,
  raw: string | undefined,
  schema: z.ZodType<T, unknown>,
): T | undefined => (raw === undefined ? undefined : checkFlag(flag, raw, raw, schema))

/** Parse argv (without node and the script). Throws GatewayConfigError naming the flag. */
export function parseFlags(argv: readonly string[]): GatewayFlags {
  let parsed: ReturnType<typeof parseArgs<{ options: typeof FLAG_OPTIONS; strict: true }>>
  try {
    parsed = parseArgs({ args: [...argv], options: FLAG_OPTIONS, strict: true, allowPositionals: false })
  } catch (error) {
    const { code, message } = error as NodeJS.ErrnoException
    const flag = /'(-{1,2}[\w-]+)/.exec(message)?.[1]
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && flag) {
      throw new GatewayConfigError([{ path: flag, message: 'unknown flag (see --help)' }])
    }
    if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
      const arg = /'([^']*)'/.exec(message)?.[1] ?? ''
      throw new GatewayConfigError([{ path: arg, message: 'unexpected argument: every setting is a --flag' }])
    }
    const detail = /argument missing/.test(message) ? 'expected a value' : message
    throw new GatewayConfigError([{ path: flag ?? 'arguments', message: detail }])
  }
  const v = parsed.values
  const flags: GatewayFlags = {
    upstream: stringFlag('upstream', v.upstream, httpUrl),
    port: numberFlag('port', v.port, port),
    host: stringFlag('host', v.host, host),
    permits: numberFlag('permits', v.permits, positiveInt(1_000_000)),
    per: stringFlag('per', v.per, per),
    tenantHeader: stringFlag('tenant-header', v['tenant-header'], headerName),
    maxWaitMs: numberFlag('max-wait-ms', v['max-wait-ms'], ms(0)),
    maxQueue: numberFlag('max-queue', v['max-queue'], positiveInt(1_000_000)),
    rwlock: v.rwlock,
    redis: stringFlag('redis', v.redis, redisUrl),
    prefix: stringFlag('prefix', v.prefix, keyPrefix),
    adminPort: numberFlag('admin-port', v['admin-port'], port),
    adminHost: stringFlag('admin-host', v['admin-host'], host),
    ttlMs: numberFlag('ttl-ms', v['ttl-ms'], ms()),
    timeoutMs: numberFlag('timeout-ms', v['timeout-ms'], ms()),
    sendTimeoutMs: numberFlag('send-timeout-ms', v['send-timeout-ms'], ms()),
    clientBodyTimeoutMs: numberFlag('client-body-timeout-ms', v['client-body-timeout-ms'], ms()),
    requestTimeoutMs: numberFlag('request-timeout-ms', v['request-timeout-ms'], ms()),
    websocketIdleTimeoutMs: numberFlag('websocket-idle-timeout-ms', v['websocket-idle-timeout-ms'], ms()),
    requestBufferBytes: numberFlag(
      'request-buffer-bytes',
      v['request-buffer-bytes'],
      intIn(0, 1_073_741_824, 'expected a number of bytes from 0 to 1073741824'),
    ),
    commandTimeoutMs: numberFlag('command-timeout-ms', v['command-timeout-ms'], ms()),
    mergeSlashes: stringFlag(
      'merge-slashes',
      v['merge-slashes'],
      z.enum(['on', 'off'], { error: 'expected on or off' }).transform((value) => value === 'on'),
    ),
    escapedSlashes: stringFlag(
      'escaped-slashes',
      v['escaped-slashes'],
      z.enum(['reject', 'keep'], { error: 'expected reject or keep' }),
    ),
    shutdownGraceMs: numberFlag('shutdown-grace-ms', v['shutdown-grace-ms'], ms(0)),
    failOpen: v['fail-open'],
    trustProxy: v['trust-proxy'],
    logLevel: stringFlag('log-level', v['log-level'], logLevel),
    config: v.config,
    help: v.help,
    version: v.version,
  }
  if (v['redis-cluster'] !== undefined) {
    const urls = v['redis-cluster'].split(',').map((url) => url.trim())
    for (const url of urls) stringFlag('redis-cluster', url, redisUrl)
    flags.redisCluster = urls
  }
  if (flags.redis !== undefined && flags.redisCluster !== undefined) {
    throw new GatewayConfigError([
      { path: '--redis-cluster', message: 'give either --redis or --redis-cluster' },
    ])
  }
  return flags
}
