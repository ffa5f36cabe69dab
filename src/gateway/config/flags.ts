// The command line: flags parsed strictly (unknown flags, stray arguments and non-decimal numbers are
// errors naming the flag) into typed values, validated with the file's field validators.
import { parseArgs } from 'node:util'
import { z } from 'zod'
import {
  flowFrom,
  headerName,
  host,
  httpUrl,
  intIn,
  keepAlive,
  keyPrefix,
  logFormat,
  logLevel,
  ms,
  per,
  port,
  positiveInt,
  redisUrl,
  sampleRate,
  dropShare,
  sentinelName,
  filePath,
  hostPort,
  trustProxy as trustProxySchema,
} from './schema.js'
import {
  GATEWAY_DEFAULTS,
  GatewayConfigError,
  type LogFormat,
  type LogLevel,
  type Per,
  type TrustProxy,
} from './types.js'

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
  redisSentinel?: { host: string; port: number }[]
  redisSentinelName?: string
  redisPasswordFile?: string
  redisTlsCa?: string
  redisTlsCert?: string
  redisTlsKey?: string
  redisTlsServername?: string
  prefix?: string
  adminPort?: number
  adminHost?: string
  adminTokenFile?: string
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
  outage?: 'closed' | 'open' | 'share'
  outageShare?: number
  permitKeepAliveMs?: number
  /** Every route's requests take their priority class from this header (trusted: docs/gateway/behaviour.md,
   * "Priorities and fair shares"). */
  priorityHeader?: string
  /** Every route's requests are shared fairly between flows from here: tenant, ip or header:<name>. */
  flowFrom?: string
  /** An adaptive limit instead of --permits (any of these turns it on; --adaptive-max is needed). */
  adaptiveMax?: number
  adaptiveMin?: number
  adaptiveInitial?: number
  adaptiveAlgorithm?: 'gradient' | 'aimd'
  adaptiveWindowMs?: number
  adaptiveScope?: 'fleet' | 'local'
  adaptiveDrops?: (number | '5xx' | 'timeout')[]
  adaptiveDropShare?: number
  trustProxy?: TrustProxy
  logLevel?: LogLevel
  logFormat?: LogFormat
  lean?: boolean
  /** Print the example config file (every field, commented) and exit. */
  exampleConfig?: boolean
  accessLogSample?: number
  config?: string
  watchConfig?: boolean
  /** Only from the environment (TOLLGATE_REDIS_PASSWORD): a secret never given as a flag. */
  redisPassword?: string
  /** Only from the environment (TOLLGATE_ADMIN_TOKEN). */
  adminToken?: string
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
  'redis-sentinel': { type: 'string' },
  'redis-sentinel-name': { type: 'string' },
  'redis-password-file': { type: 'string' },
  'redis-tls-ca': { type: 'string' },
  'redis-tls-cert': { type: 'string' },
  'redis-tls-key': { type: 'string' },
  'redis-tls-servername': { type: 'string' },
  prefix: { type: 'string' },
  'admin-port': { type: 'string' },
  'admin-host': { type: 'string' },
  'admin-token-file': { type: 'string' },
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
  outage: { type: 'string' },
  'outage-share': { type: 'string' },
  'permit-keepalive-ms': { type: 'string' },
  'priority-header': { type: 'string' },
  'flow-from': { type: 'string' },
  'adaptive-max': { type: 'string' },
  'adaptive-min': { type: 'string' },
  'adaptive-initial': { type: 'string' },
  'adaptive-algorithm': { type: 'string' },
  'adaptive-window-ms': { type: 'string' },
  'adaptive-scope': { type: 'string' },
  'adaptive-drops': { type: 'string' },
  'adaptive-drop-share': { type: 'string' },
  'trust-proxy': { type: 'boolean' },
  'trusted-proxies': { type: 'string' },
  'log-level': { type: 'string' },
  'log-format': { type: 'string' },
  lean: { type: 'string' },
  'access-log-sample': { type: 'string' },
  config: { type: 'string' },
  'watch-config': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
  'example-config': { type: 'boolean' },
} as const

type FlagName = keyof typeof FLAG_OPTIONS
/** Flags that only steer the command itself: no environment variable. */
const NO_ENV: ReadonlySet<FlagName> = new Set(['help', 'version', 'example-config'])

/** The environment variable of a flag: TOLLGATE_ and the flag in upper snake case (--redis is
 * TOLLGATE_REDIS_URL, as operators spell it). */
export function envName(flag: string): string {
  return flag === 'redis' ? 'TOLLGATE_REDIS_URL' : `TOLLGATE_${flag.toUpperCase().replace(/-/g, '_')}`
}

function envListing(): string {
  const names = (Object.keys(FLAG_OPTIONS) as FlagName[]).filter((f) => !NO_ENV.has(f)).map(envName)
  const lines: string[] = []
  let line = ''
  for (const name of names) {
    if (line && line.length + name.length > 96) {
      lines.push(line)
      line = ''
    }
    line += line ? ` ${name}` : name
  }
  if (line) lines.push(line)
  return lines.join('\n  ')
}

export const USAGE = `Usage: tollgate-gateway --upstream <url> [options]

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
  --redis-sentinel <host:port,...>  find the Redis master through these Sentinels
  --redis-sentinel-name <name>  the master's name in Sentinel (default ${GATEWAY_DEFAULTS.sentinelName})
  --redis-password-file <file>  the Redis password, read from a file (also TOLLGATE_REDIS_PASSWORD)
  --redis-tls-ca <file>       TLS to Redis: trust this CA (PEM); any --redis-tls-* or rediss:// turns TLS on
  --redis-tls-cert <file>     TLS client certificate (PEM), with --redis-tls-key
  --redis-tls-key <file>      TLS client key (PEM)
  --redis-tls-servername <name>  TLS server name to verify (default: the host connected to)
  --prefix <p>                Redis key prefix (default ${GATEWAY_DEFAULTS.prefix})
  --admin-port <n>            /metrics, /healthz, /readyz port (default ${GATEWAY_DEFAULTS.adminPort}; 0 = any free port)
  --admin-host <addr>         admin listen address (default ${GATEWAY_DEFAULTS.adminHost})
  --admin-token-file <file>   bearer token for the admin /limits API (also TOLLGATE_ADMIN_TOKEN);
                              required for it when --admin-host is not a loopback address
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
  --outage <closed|open|share>  while Redis is unavailable: 503 (closed, the default), let every request
                              through (open), or this replica's share of each limit, in memory (share)
  --outage-share <n>          share: the permits per bucket of a replica that never saw Redis (default 1)
  --fail-open                 the older spelling of --outage open
  --permit-keepalive-ms <n>   keep a finished request's permit up to n ms for the next request of its
                              bucket on this replica, fewer Redis calls; no fencing header (default 0: off)
  --priority-header <name>    a request's priority class from this header (critical, standard, sheddable
                              or 0-7; else standard). Trusted: use it only where a proxy in front sets
                              or strips the header, or any client can claim critical
  --flow-from <tenant|ip|header:name>  share each bucket fairly between the flows found here
  --adaptive-max <n>          an adaptive limit instead of --permits: found from the requests' latency and
                              drops, one for the fleet, never above n (docs/adaptive.md)
  --adaptive-min <n>          never below n (default 1)
  --adaptive-initial <n>      the limit before the first step (default: --adaptive-min)
  --adaptive-algorithm <gradient|aimd>  gradient: follows latency; aimd: only drops (default gradient)
  --adaptive-window-ms <n>    one step per window of n ms (default 1000)
  --adaptive-scope <fleet|local>  fleet: one limit shared through the store; local: this replica's own
                              (default fleet)
  --adaptive-drops <list>     what backs the limit off: statuses, 5xx, timeout (default timeout,503)
  --adaptive-drop-share <0..0.99>  back off when more than half of a window's clients saw more
                              than this share of their requests dropped (default 0.05)
  --trust-proxy               trust the proxy clients connect to: the client address is the last
                              X-Forwarded-For entry (one hop; see --trusted-proxies)
  --trusted-proxies <n|list>  trust n proxy hops, or the proxies at these addresses and CIDR ranges
                              (e.g. 10.0.0.0/8,loopback): X-Forwarded-For is read from the right,
                              past trusted proxies only (Express's trust proxy, nginx's set_real_ip_from)
  --log-level <level>         fatal|error|warn|info|debug|trace|silent (default ${GATEWAY_DEFAULTS.logLevel})
  --log-format <json|pretty>  pretty: one readable line per log record, for a terminal (needs the
                              pino-pretty package; default json)
  --lean <on|off>             the lean HTTP paths on Node internals (docs/gateway/internals.md, "Lean paths");
                              off: every request through http.Server and undici (default on)
  --access-log-sample <0..1>  share of successful (< 400) requests written to the access log (default 1)
  --config <file>             YAML or JSON config file (routes, per-tenant overrides, ...); flags win
  --watch-config              reload the config file when it changes (SIGHUP always reloads it)
  -h, --help                  this text
  --version                   print the version
  --example-config            print a config file with every field, commented, and exit

Environment: every flag can be set as TOLLGATE_<FLAG>; flags win over the environment, the
environment over the config file. Booleans take true/false/1/0.
  ${envListing()}
Secrets that never show in ps: TOLLGATE_REDIS_PASSWORD, TOLLGATE_ADMIN_TOKEN (or the *_FILE flags).

Signals: SIGTERM/SIGINT drain and exit; SIGHUP reloads the config file (an invalid one is logged and
the running config kept).

Exit codes: 0 after a clean shutdown, 2 for bad flags or config, 1 for anything else.
`

/** Where each given value came from, for error messages: `--max-wait-ms` or `TOLLGATE_MAX_WAIT_MS`. */
type Sources = Partial<Record<string, string>>

function checkFlag<T>(label: string, raw: string, value: unknown, schema: z.ZodType<T, unknown>): T {
  const result = schema.safeParse(value)
  if (result.success) return result.data
  // A URL's password never reaches the terminal or the log.
  const shown = raw.replace(/\/\/([^@/]*):[^@/]*@/, '//$1:***@')
  throw new GatewayConfigError([
    { path: label, message: `${result.error.issues[0]?.message} (got "${shown}")` },
  ])
}

/** Parse argv (without node and the script), then fill what argv lacks from `env` (TOLLGATE_*).
 * Throws GatewayConfigError naming the flag or the variable. */
export function parseFlags(argv: readonly string[], env: NodeJS.ProcessEnv = {}): GatewayFlags {
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
  const v = parsed.values as Record<string, string | boolean | undefined>
  const sources: Sources = {}
  // One store: a store flag on the command line beats every store variable, not only its own.
  const storeFlags: FlagName[] = ['redis', 'redis-cluster', 'redis-sentinel']
  const storeOnArgv = storeFlags.some((flag) => v[flag] !== undefined)
  for (const flag of Object.keys(FLAG_OPTIONS) as FlagName[]) {
    if (v[flag] !== undefined || NO_ENV.has(flag)) continue
    if (storeOnArgv && storeFlags.includes(flag)) continue
    const name = envName(flag)
    const raw = env[name]
    if (raw === undefined || raw === '') continue
    sources[flag] = name
    if (FLAG_OPTIONS[flag].type === 'string') {
      v[flag] = raw
    } else if (/^(true|1)$/i.test(raw)) {
      v[flag] = true
    } else if (/^(false|0)$/i.test(raw)) {
      v[flag] = false
    } else {
      throw new GatewayConfigError([{ path: name, message: `expected true or false (got "${raw}")` }])
    }
  }
  const label = (flag: string) => sources[flag] ?? `--${flag}`
  /** Plain decimal digits only: `1e3`, `0x10`, `+5` or ` 5` are not numbers of milliseconds or permits. */
  const numberFlag = <T>(flag: FlagName, schema: z.ZodType<T>): T | undefined => {
    const raw = v[flag] as string | undefined
    if (raw === undefined) return undefined
    return checkFlag(label(flag), raw, /^\d{1,16}$/.test(raw) ? Number(raw) : Number.NaN, schema)
  }
  const stringFlag = <T>(
    flag: FlagName,
    schema: z.ZodType<T, unknown>,
    raw = v[flag] as string | undefined,
  ) => (raw === undefined ? undefined : checkFlag(label(flag), raw, raw, schema))
  const boolFlag = (flag: FlagName) => v[flag] as boolean | undefined
  const fileFlag = (flag: FlagName) => stringFlag(flag, filePath)
  /** --trust-proxy (one hop) or --trusted-proxies (hops, or addresses and ranges), not both. */
  const trustFlags = (): TrustProxy | undefined => {
    const list = v['trusted-proxies'] as string | undefined
    if (list === undefined) {
      const one = boolFlag('trust-proxy')
      return one === undefined ? undefined : one ? 1 : false
    }
    if (v['trust-proxy'] !== undefined)
      throw new GatewayConfigError([
        { path: label('trusted-proxies'), message: 'not with --trust-proxy (which is --trusted-proxies 1)' },
      ])
    const value = /^\d{1,3}$/.test(list.trim()) ? Number(list) : list.split(',').map((entry) => entry.trim())
    return checkFlag(label('trusted-proxies'), list, value, trustProxySchema)
  }
  const flags: GatewayFlags = {
    upstream: stringFlag('upstream', httpUrl),
    port: numberFlag('port', port),
    host: stringFlag('host', host),
    permits: numberFlag('permits', positiveInt(1_000_000)),
    per: stringFlag('per', per),
    tenantHeader: stringFlag('tenant-header', headerName),
    maxWaitMs: numberFlag('max-wait-ms', ms(0)),
    maxQueue: numberFlag('max-queue', positiveInt(1_000_000)),
    rwlock: boolFlag('rwlock'),
    redis: stringFlag('redis', redisUrl),
    redisSentinelName: stringFlag('redis-sentinel-name', sentinelName),
    redisPasswordFile: fileFlag('redis-password-file'),
    redisTlsCa: fileFlag('redis-tls-ca'),
    redisTlsCert: fileFlag('redis-tls-cert'),
    redisTlsKey: fileFlag('redis-tls-key'),
    redisTlsServername: stringFlag('redis-tls-servername', host),
    prefix: stringFlag('prefix', keyPrefix),
    adminPort: numberFlag('admin-port', port),
    adminHost: stringFlag('admin-host', host),
    adminTokenFile: fileFlag('admin-token-file'),
    ttlMs: numberFlag('ttl-ms', ms()),
    timeoutMs: numberFlag('timeout-ms', ms()),
    sendTimeoutMs: numberFlag('send-timeout-ms', ms()),
    clientBodyTimeoutMs: numberFlag('client-body-timeout-ms', ms()),
    requestTimeoutMs: numberFlag('request-timeout-ms', ms()),
    websocketIdleTimeoutMs: numberFlag('websocket-idle-timeout-ms', ms()),
    requestBufferBytes: numberFlag(
      'request-buffer-bytes',
      intIn(0, 1_073_741_824, 'expected a number of bytes from 0 to 1073741824'),
    ),
    commandTimeoutMs: numberFlag('command-timeout-ms', ms()),
    mergeSlashes: stringFlag(
      'merge-slashes',
      z.enum(['on', 'off'], { error: 'expected on or off' }).transform((value) => value === 'on'),
    ),
    escapedSlashes: stringFlag(
      'escaped-slashes',
      z.enum(['reject', 'keep'], { error: 'expected reject or keep' }),
    ),
    shutdownGraceMs: numberFlag('shutdown-grace-ms', ms(0)),
    failOpen: boolFlag('fail-open'),
    outage: stringFlag(
      'outage',
      z.enum(['closed', 'open', 'share'], { error: 'expected closed, open or share' }),
    ),
    outageShare: numberFlag('outage-share', positiveInt(1_000_000)),
    permitKeepAliveMs: numberFlag('permit-keepalive-ms', keepAlive),
    priorityHeader: stringFlag('priority-header', headerName),
    flowFrom: stringFlag('flow-from', flowFrom),
    adaptiveMax: numberFlag('adaptive-max', positiveInt(1_000_000)),
    adaptiveMin: numberFlag('adaptive-min', positiveInt(1_000_000)),
    adaptiveInitial: numberFlag('adaptive-initial', positiveInt(1_000_000)),
    adaptiveAlgorithm: stringFlag(
      'adaptive-algorithm',
      z.enum(['gradient', 'aimd'], { error: 'expected gradient or aimd' }),
    ),
    adaptiveWindowMs: numberFlag(
      'adaptive-window-ms',
      intIn(100, 3_600_000, 'expected an integer of milliseconds from 100 to 3600000'),
    ),
    adaptiveScope: stringFlag(
      'adaptive-scope',
      z.enum(['fleet', 'local'], { error: 'expected fleet or local' }),
    ),
    adaptiveDrops: stringFlag(
      'adaptive-drops',
      z.string().transform((list, ctx) => {
        const rules = list.split(',').map((item) => item.trim())
        if (rules.every((rule) => rule === '5xx' || rule === 'timeout' || /^[45]\d\d$/.test(rule)))
          return rules.map((rule) => (rule === '5xx' || rule === 'timeout' ? rule : Number(rule)))
        ctx.addIssue({
          code: 'custom',
          message: 'expected a list of statuses (400-599), 5xx and timeout, e.g. timeout,503',
        })
        return z.NEVER
      }),
    ),
    adaptiveDropShare: stringFlag(
      'adaptive-drop-share',
      z
        .string()
        .regex(/^0(\.\d{1,6})?$/, { error: 'expected a decimal from 0 to 0.99, e.g. 0.05' })
        .transform(Number)
        .pipe(dropShare),
    ),
    trustProxy: trustFlags(),
    logLevel: stringFlag('log-level', logLevel),
    logFormat: stringFlag('log-format', logFormat),
    lean: stringFlag(
      'lean',
      z.enum(['on', 'off'], { error: 'expected on or off' }).transform((value) => value === 'on'),
    ),
    accessLogSample: stringFlag('access-log-sample', sampleRate),
    config: fileFlag('config'),
    watchConfig: boolFlag('watch-config'),
    help: boolFlag('help'),
    version: boolFlag('version'),
    exampleConfig: boolFlag('example-config'),
  }
  if (flags.watchConfig && flags.config === undefined) {
    throw new GatewayConfigError([
      { path: label('watch-config'), message: 'needs --config: there is no file to watch' },
    ])
  }
  if (env.TOLLGATE_REDIS_PASSWORD) flags.redisPassword = env.TOLLGATE_REDIS_PASSWORD
  if (env.TOLLGATE_ADMIN_TOKEN) flags.adminToken = env.TOLLGATE_ADMIN_TOKEN
  const list = (flag: FlagName) => (v[flag] as string | undefined)?.split(',').map((item) => item.trim())
  const cluster = list('redis-cluster')
  if (cluster) {
    for (const url of cluster) stringFlag('redis-cluster', redisUrl, url)
    flags.redisCluster = cluster
  }
  const sentinels = list('redis-sentinel')
  if (sentinels) flags.redisSentinel = sentinels.map((item) => stringFlag('redis-sentinel', hostPort, item)!)
  const stores = (['redis', 'redis-cluster', 'redis-sentinel'] as const).filter((f) => v[f] !== undefined)
  if (stores.length > 1) {
    throw new GatewayConfigError([
      {
        path: label(stores[1]!),
        message: `give one of --redis, --redis-cluster, --redis-sentinel (also got ${label(stores[0]!)})`,
      },
    ])
  }
  return flags
}
