// Command-line flags and the config file (YAML or JSON) -> one validated GatewayConfig. Pure: reads the
// file it is given and nothing else; every problem is a GatewayConfigError naming the flag or the path
// of the bad field (`routes[1].concurrency.permits: expected a positive integer`).
import { readFile } from 'node:fs/promises'
import { extname } from 'node:path'
import { parseArgs } from 'node:util'
import { parse as parseYaml } from 'yaml'
import { z } from 'zod'
import { ConfigError } from '../core/errors.js'
import { isCanonicalPrefix, normalizeHost, PATH_DEFAULTS, type PathOptions } from './target.js'

export type Per = 'global' | 'route' | 'tenant' | 'ip'
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'

export interface ConcurrencyConfig {
  /** Permits per bucket. */
  permits: number
  /** global: one bucket shared by every route that says global; route: one per route; tenant: one per
   * value of `tenantHeader`; ip: one per client address. */
  per: Per
  tenantHeader: string
  maxWaitMs: number
  maxQueue: number
  /** Rejection status; undefined = 503 for global/route, 429 for tenant/ip. */
  statusCode: number | undefined
  failOpen: boolean
  /** Permits of particular buckets (tenant ids or addresses). */
  overrides: Readonly<Record<string, number>>
}

export interface RwLockConfig {
  /** Resource of a request: the first capture group (or the whole match) of this pattern on the path;
   * undefined = the path itself. */
  resourcePattern: RegExp | undefined
  maxWaitMs: number
  maxQueue: number
  statusCode: number | undefined
  failOpen: boolean
}

export interface RouteConfig {
  name: string
  pathPrefix: string
  /** Upper-case methods; undefined = any. */
  methods: readonly string[] | undefined
  /** Lower-case host without port; undefined = any. */
  host: string | undefined
  upstream: URL
  /** Remove `pathPrefix` from the path sent upstream. */
  stripPrefix: boolean
  /** undefined: this route is not limited. */
  concurrency: ConcurrencyConfig | undefined
  rwlock: RwLockConfig | undefined
  timeouts: TimeoutsConfig
  /** Read request bodies up to this many bytes before admission (larger: 413); 0 = stream them. */
  requestBufferBytes: number
}

/** Every bound on how long a request may hold a permit (G14). */
export interface TimeoutsConfig {
  /** Upstream silent this long (no response headers, or a stalled body) -> 504; also the WebSocket
   * handshake bound. */
  upstreamMs: number
  /** A client that takes no response byte for this long is cut (nginx send_timeout). */
  sendMs: number
  /** No request body byte for this long -> 408 (nginx client_body_timeout). */
  clientBodyMs: number
  /** The whole request (headers and body) must have arrived within this long of its start -> 408. */
  requestMs: number
  /** A WebSocket with no byte either way for this long is closed. */
  websocketIdleMs: number
}

export type StoreConfig =
  { kind: 'memory' } | { kind: 'redis'; url: string } | { kind: 'cluster'; urls: readonly string[] }

export interface GatewayConfig {
  host: string
  port: number
  /** The admin listener (/metrics, /healthz, /readyz); undefined = none. */
  admin: { host: string; port: number } | undefined
  store: StoreConfig
  /** Prefix of every Redis key. */
  prefix: string
  commandTimeoutMs: number
  ttlMs: number
  shutdownGraceMs: number
  logLevel: LogLevel
  /** Take the client address from X-Forwarded-For (per: ip, and the X-Forwarded-For sent upstream). */
  trustProxy: boolean
  /** How request paths are made canonical before routing (docs/gateway.md, "Paths"). */
  paths: PathOptions
  /** Matched in order: the first route that matches a request serves it. */
  routes: readonly RouteConfig[]
}

/** Defaults of every setting, also what `--help` and docs/gateway.md print. */
export const GATEWAY_DEFAULTS = Object.freeze({
  host: '127.0.0.1',
  port: 8080,
  adminHost: '127.0.0.1',
  adminPort: 9090,
  prefix: 'tollgate',
  commandTimeoutMs: 2000,
  ttlMs: 30_000,
  shutdownGraceMs: 10_000,
  logLevel: 'info' as LogLevel,
  trustProxy: false,
  permits: 10,
  per: 'global' as Per,
  tenantHeader: 'x-tenant-id',
  maxWaitMs: 1000,
  maxQueue: 100,
  failOpen: false,
  upstreamTimeoutMs: 30_000,
  sendTimeoutMs: 60_000,
  clientBodyTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  websocketIdleTimeoutMs: 60_000,
  requestBufferBytes: 0,
  mergeSlashes: PATH_DEFAULTS.mergeSlashes,
  escapedSlashes: PATH_DEFAULTS.escapedSlashes,
})

/** A ConfigError carrying every problem found, each as `path: expected ...`. */
export class GatewayConfigError extends ConfigError {
  readonly issues: readonly { path: string; message: string }[]

  constructor(issues: { path: string; message: string }[]) {
    super(issues[0]?.path ?? 'config', issues[0]?.message ?? 'a valid configuration')
    this.issues = issues
    this.message = issues.map((issue) => `${issue.path}: ${issue.message}`).join('\n')
  }
}

// ---------------------------------------------------------------------------------------------------
// Schema of the file (every object strict: an unknown field is an error, never ignored)

const intIn = (min: number, max: number, expected: string) =>
  z
    .number({ error: expected })
    .int({ error: expected })
    .min(min, { error: expected })
    .max(max, { error: expected })
const positiveInt = (max = 1_000_000_000) => intIn(1, max, 'expected a positive integer')
const ms = (min = 1) =>
  intIn(
    min,
    86_400_000,
    min === 0 ? 'expected an integer of milliseconds >= 0' : 'expected a positive integer',
  )
const port = intIn(0, 65_535, 'expected a port number from 0 to 65535')
const bool = z.boolean({ error: 'expected true or false' })
const host = z
  .string({ error: 'expected a host name or address' })
  .min(1, { error: 'expected a host name or address' })
const matchHost = z
  .string({ error: 'expected a host name' })
  .refine((value) => normalizeHost(value) !== undefined, {
    error: 'expected a host name (letters, digits, - and .), an IPv4 address or [IPv6]',
  })
const maxWait = intIn(0, 600_000, 'expected an integer of milliseconds from 0 to 600000')
const statusCode = intIn(400, 599, 'expected an HTTP error status from 400 to 599')
const headerName = z
  .string({ error: 'expected an HTTP header name' })
  .regex(/^[!#$%&'*+.^`|~\w-]+$/, { error: 'expected an HTTP header name' })
const routeName = z
  .string({ error: 'expected a name of letters, digits and . _ : / -' })
  .regex(/^[\w.:/-]{1,64}$/, { error: 'expected a name of letters, digits and . _ : / -' })
const httpUrl = z
  .string({ error: 'expected an http:// or https:// URL' })
  .refine(isHttpUrl, { error: 'expected an http:// or https:// URL' })
  .refine((url) => !hasCredentials(url), {
    error: 'credentials (user:password@) in the upstream URL are not supported: the gateway never sends them',
  })
  .refine((url) => !/[?#]/.test(url), { error: 'expected an upstream URL without a query or fragment' })
const redisUrl = z.string({ error: 'expected a redis:// or rediss:// URL' }).refine(isRedisUrl, {
  error: 'expected a redis:// or rediss:// URL',
})
const regexSource = z.string({ error: 'expected a regular expression' }).refine(isRegex, {
  error: 'expected a valid regular expression',
})
const method = z
  .string({ error: 'expected an HTTP method' })
  .regex(/^[A-Za-z]+$/, { error: 'expected an HTTP method' })
const keyPrefix = z
  .string({ error: 'expected a key prefix without braces or whitespace' })
  .regex(/^[^{}\s]{1,256}$/, { error: 'expected a key prefix without braces or whitespace' })
const per = z.enum(['global', 'route', 'tenant', 'ip'], {
  error: 'expected one of global, route, tenant, ip',
})
const logLevel = z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
  error: 'expected one of fatal, error, warn, info, debug, trace, silent',
})

const concurrencySchema = z.strictObject({
  permits: positiveInt(1_000_000).optional(),
  per: per.optional(),
  tenantHeader: headerName.optional(),
  maxWaitMs: maxWait.optional(),
  maxQueue: positiveInt(1_000_000).optional(),
  statusCode: statusCode.optional(),
  failOpen: bool.optional(),
  overrides: z
    .record(z.string().min(1, { error: 'expected a non-empty bucket name' }), positiveInt(1_000_000), {
      error: 'expected a map of bucket -> permits',
    })
    .optional(),
})
const rwlockSchema = z.strictObject({
  resourcePattern: regexSource.optional(),
  maxWaitMs: maxWait.optional(),
  maxQueue: positiveInt(1_000_000).optional(),
  statusCode: statusCode.optional(),
  failOpen: bool.optional(),
})
const timeoutsSchema = z.strictObject({
  upstreamMs: ms().optional(),
  sendMs: ms().optional(),
  clientBodyMs: ms().optional(),
  requestMs: ms().optional(),
  websocketIdleMs: ms().optional(),
})
const bufferSchema = z.strictObject({
  maxBytes: intIn(1, 1_073_741_824, 'expected a number of bytes from 1 to 1073741824'),
})
const orFalse = <T extends z.ZodType>(schema: T, what: string) =>
  z.union([schema, z.literal(false)], { error: `expected ${what} or false` })

const routeSchema = z.strictObject({
  name: routeName.optional(),
  match: z.strictObject(
    {
      pathPrefix: z
        .string({ error: 'expected a path starting with /' })
        .startsWith('/', { error: 'expected a path starting with /' })
        .refine((prefix) => !prefix.startsWith('/') || isCanonicalPrefix(prefix), {
          error:
            'expected a canonical path: no dot segments, repeated slashes, ";", "?", "#", backslashes, encoded slashes or needless escapes',
        }),
      methods: z.array(method, { error: 'expected a list of HTTP methods' }).min(1).optional(),
      host: matchHost.optional(),
    },
    { error: 'expected an object with pathPrefix' },
  ),
  upstream: httpUrl.optional(),
  stripPrefix: bool.optional(),
  concurrency: orFalse(concurrencySchema, 'a concurrency object').optional(),
  rwlock: orFalse(rwlockSchema, 'an rwlock object').optional(),
  timeouts: timeoutsSchema.optional(),
  requestBuffer: orFalse(bufferSchema, 'a requestBuffer object').optional(),
})

const fileSchema = z.strictObject(
  {
    listen: z.strictObject({ host: host.optional(), port: port.optional() }).optional(),
    admin: orFalse(
      z.strictObject({ host: host.optional(), port: port.optional() }),
      'an admin object',
    ).optional(),
    redis: z
      .strictObject({
        url: redisUrl.optional(),
        cluster: z.array(redisUrl, { error: 'expected a list of redis:// URLs' }).min(1).optional(),
        prefix: keyPrefix.optional(),
        commandTimeoutMs: ms().optional(),
      })
      .optional(),
    ttlMs: ms().optional(),
    shutdownGraceMs: ms(0).optional(),
    logLevel: logLevel.optional(),
    trustProxy: bool.optional(),
    defaults: z
      .strictObject({
        upstream: httpUrl.optional(),
        concurrency: orFalse(concurrencySchema, 'a concurrency object').optional(),
        rwlock: orFalse(rwlockSchema, 'an rwlock object').optional(),
        timeouts: timeoutsSchema.optional(),
        requestBuffer: orFalse(bufferSchema, 'a requestBuffer object').optional(),
      })
      .optional(),
    paths: z
      .strictObject({
        mergeSlashes: bool.optional(),
        escapedSlashes: z.enum(['reject', 'keep'], { error: 'expected reject or keep' }).optional(),
      })
      .optional(),
    routes: z.array(routeSchema, { error: 'expected a list of routes' }).optional(),
  },
  { error: 'expected a mapping of settings' },
)

export type GatewayFile = z.infer<typeof fileSchema>
type ConcurrencyInput = z.infer<typeof concurrencySchema>
type RwLockInput = z.infer<typeof rwlockSchema>

// ---------------------------------------------------------------------------------------------------
// Flags

/** The command line, as typed values (validated; undefined = not given). */
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

// ---------------------------------------------------------------------------------------------------
// File

/** Read and validate a config file (.yaml, .yml or .json). Throws GatewayConfigError. */
export async function readConfigFile(path: string): Promise<GatewayFile> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (error) {
    throw new GatewayConfigError([
      { path: '--config', message: `cannot read ${path}: ${(error as Error).message}` },
    ])
  }
  let raw: unknown
  try {
    raw = extname(path).toLowerCase() === '.json' ? JSON.parse(text) : parseYaml(text, { uniqueKeys: true })
  } catch (error) {
    const message = (error as Error).message.split('\n')[0] ?? 'parse error'
    throw new GatewayConfigError([
      { path: path, message: `not valid ${extname(path) === '.json' ? 'JSON' : 'YAML'}: ${message}` },
    ])
  }
  return validateConfigFile(raw ?? {})
}

/** Validate a parsed config document (also what tests and embedders call). */
export function validateConfigFile(raw: unknown): GatewayFile {
  const result = fileSchema.safeParse(raw)
  if (result.success) return result.data
  throw new GatewayConfigError(result.error.issues.flatMap((issue) => describeIssue(issue, [])))
}

type Issue = z.core.$ZodIssue

function describeIssue(issue: Issue, base: PropertyKey[]): { path: string; message: string }[] {
  const path = [...base, ...issue.path]
  if (issue.code === 'unrecognized_keys') {
    return issue.keys.map((key) => ({ path: formatPath([...path, key]), message: 'unknown field' }))
  }
  if (issue.code === 'invalid_union') {
    // An object given where "object or false" is allowed: report what is wrong inside the object.
    const inner = issue.errors.find((branch) =>
      branch.some((i) => i.path.length > 0 || i.code === 'unrecognized_keys'),
    )
    if (inner) return inner.flatMap((i) => describeIssue(i, path))
  }
  if (issue.code === 'too_small' && issue.origin === 'array') {
    return [{ path: formatPath(path), message: 'expected a non-empty list' }]
  }
  return [{ path: formatPath(path), message: issue.message }]
}

/** ['routes', 1, 'concurrency', 'permits'] -> 'routes[1].concurrency.permits' */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = ''
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`
    else out += out === '' ? String(part) : `.${String(part)}`
  }
  return out === '' ? '(config)' : out
}

// ---------------------------------------------------------------------------------------------------
// Resolution: file + flags + defaults -> GatewayConfig

/** Flags and an optional file (path or already-parsed object) -> the validated GatewayConfig. */
export async function loadConfig(flags: GatewayFlags): Promise<GatewayConfig> {
  const file = flags.config === undefined ? {} : await readConfigFile(flags.config)
  return resolveConfig(file, flags)
}

/** Merge a validated file with flags (flags win) and fill in the defaults. Throws GatewayConfigError. */
export function resolveConfig(file: GatewayFile, flags: GatewayFlags = {}): GatewayConfig {
  const d = GATEWAY_DEFAULTS
  const issues: { path: string; message: string }[] = []
  const fromFlags = flags.config === undefined ? '' : ' (or --config)'

  let store: StoreConfig = { kind: 'memory' }
  const clusterUrls = flags.redisCluster ?? (flags.redis === undefined ? file.redis?.cluster : undefined)
  const redisUrlValue = flags.redis ?? (flags.redisCluster === undefined ? file.redis?.url : undefined)
  if (redisUrlValue !== undefined && clusterUrls !== undefined) {
    issues.push({ path: 'redis', message: 'give either redis.url or redis.cluster, not both' })
  } else if (redisUrlValue !== undefined) {
    store = { kind: 'redis', url: redisUrlValue }
  } else if (clusterUrls !== undefined) {
    store = { kind: 'cluster', urls: clusterUrls }
  }

  // Flags configure the defaults every route inherits.
  const defaults = file.defaults ?? {}
  const upstream = flags.upstream ?? defaults.upstream
  let baseConcurrency: ConcurrencyInput | false = defaults.concurrency ?? {}
  const concurrencyFlags: ConcurrencyInput = {
    permits: flags.permits,
    per: flags.per,
    tenantHeader: flags.tenantHeader,
    maxWaitMs: flags.maxWaitMs,
    maxQueue: flags.maxQueue,
    failOpen: flags.failOpen,
  }
  const anyConcurrencyFlag = Object.values(concurrencyFlags).some((value) => value !== undefined)
  if (anyConcurrencyFlag) baseConcurrency = { ...(baseConcurrency || {}), ...dropUndefined(concurrencyFlags) }
  let baseRwlock: RwLockInput | false = defaults.rwlock ?? false
  if (flags.rwlock) {
    // The lock waits and fails like the concurrency cap: the same flags set both.
    const { maxWaitMs, maxQueue, failOpen } = concurrencyFlags
    baseRwlock = { ...(baseRwlock || {}), ...dropUndefined({ maxWaitMs, maxQueue, failOpen }) }
  }
  const baseTimeouts: TimeoutsConfig = {
    upstreamMs: flags.timeoutMs ?? defaults.timeouts?.upstreamMs ?? d.upstreamTimeoutMs,
    sendMs: flags.sendTimeoutMs ?? defaults.timeouts?.sendMs ?? d.sendTimeoutMs,
    clientBodyMs: flags.clientBodyTimeoutMs ?? defaults.timeouts?.clientBodyMs ?? d.clientBodyTimeoutMs,
    requestMs: flags.requestTimeoutMs ?? defaults.timeouts?.requestMs ?? d.requestTimeoutMs,
    websocketIdleMs:
      flags.websocketIdleTimeoutMs ?? defaults.timeouts?.websocketIdleMs ?? d.websocketIdleTimeoutMs,
  }
  const bufferOf = (value: { maxBytes: number } | false | undefined) =>
    value === undefined ? undefined : value === false ? 0 : value.maxBytes
  const baseBuffer = flags.requestBufferBytes ?? bufferOf(defaults.requestBuffer) ?? d.requestBufferBytes

  const fileRoutes = file.routes ?? [{ name: 'default', match: { pathPrefix: '/' } }]
  if (fileRoutes.length === 0) issues.push({ path: 'routes', message: 'expected at least one route' })
  const names = new Map<string, number>()
  const routes: RouteConfig[] = []
  const globalBuckets: { index: number; concurrency: ConcurrencyConfig }[] = []
  fileRoutes.forEach((route, index) => {
    const at = `routes[${index}]`
    const name = route.name ?? (route.match.pathPrefix === '/' ? 'default' : route.match.pathPrefix.slice(1))
    if (!/^[\w.:/-]{1,64}$/.test(name)) {
      issues.push({
        path: `${at}.name`,
        message: 'required: the path prefix is not a usable name (letters, digits and . _ : / -)',
      })
    } else if (names.has(name)) {
      issues.push({ path: `${at}.name`, message: `"${name}" is also the name of routes[${names.get(name)}]` })
    }
    names.set(name, index)
    const target = route.upstream ?? upstream
    if (target === undefined && file.routes === undefined) {
      issues.push({ path: '--upstream', message: 'required: where should requests go? (or use --config)' })
      return
    }
    if (target === undefined) {
      issues.push({
        path: `${at}.upstream`,
        message: `required: give --upstream${fromFlags}, defaults.upstream or ${at}.upstream`,
      })
      return
    }
    const concurrencyInput =
      route.concurrency === false
        ? false
        : route.concurrency === undefined
          ? baseConcurrency
          : { ...(baseConcurrency || {}), ...route.concurrency }
    const concurrency = concurrencyInput === false ? undefined : resolveConcurrency(concurrencyInput)
    if (concurrency?.per === 'global') globalBuckets.push({ index, concurrency })
    const rwlockInput =
      route.rwlock === false
        ? false
        : route.rwlock === undefined
          ? baseRwlock
          : { ...(baseRwlock || {}), ...route.rwlock }
    const rwlock = rwlockInput === false ? undefined : resolveRwLock(rwlockInput)
    routes.push({
      name,
      pathPrefix: route.match.pathPrefix,
      methods: route.match.methods?.map((m) => m.toUpperCase()),
      host: normalizeHost(route.match.host),
      upstream: new URL(target),
      stripPrefix: route.stripPrefix ?? false,
      concurrency,
      rwlock,
      timeouts: { ...baseTimeouts, ...dropUndefined(route.timeouts ?? {}) },
      requestBufferBytes: bufferOf(route.requestBuffer) ?? baseBuffer,
    })
  })
  // per: global is one bucket for several routes: they must agree on what it is.
  const first = globalBuckets[0]
  for (const other of globalBuckets.slice(1)) {
    if (JSON.stringify(other.concurrency) !== JSON.stringify(first?.concurrency)) {
      issues.push({
        path: `routes[${other.index}].concurrency`,
        message: `per: global routes share one bucket, so their concurrency settings must equal those of routes[${first?.index}]`,
      })
    }
  }
  if (issues.length > 0) throw new GatewayConfigError(issues)

  const admin =
    file.admin === false && flags.adminPort === undefined
      ? undefined
      : {
          host: flags.adminHost ?? (file.admin || undefined)?.host ?? d.adminHost,
          port: flags.adminPort ?? (file.admin || undefined)?.port ?? d.adminPort,
        }
  return {
    host: flags.host ?? file.listen?.host ?? d.host,
    port: flags.port ?? file.listen?.port ?? d.port,
    admin,
    store,
    prefix: flags.prefix ?? file.redis?.prefix ?? d.prefix,
    commandTimeoutMs: flags.commandTimeoutMs ?? file.redis?.commandTimeoutMs ?? d.commandTimeoutMs,
    ttlMs: flags.ttlMs ?? file.ttlMs ?? d.ttlMs,
    shutdownGraceMs: flags.shutdownGraceMs ?? file.shutdownGraceMs ?? d.shutdownGraceMs,
    logLevel: flags.logLevel ?? file.logLevel ?? d.logLevel,
    trustProxy: flags.trustProxy ?? file.trustProxy ?? d.trustProxy,
    paths: {
      mergeSlashes: flags.mergeSlashes ?? file.paths?.mergeSlashes ?? d.mergeSlashes,
      escapedSlashes: flags.escapedSlashes ?? file.paths?.escapedSlashes ?? d.escapedSlashes,
    },
    routes,
  }
}

function resolveConcurrency(input: ConcurrencyInput): ConcurrencyConfig {
  const d = GATEWAY_DEFAULTS
  return {
    permits: input.permits ?? d.permits,
    per: input.per ?? d.per,
    tenantHeader: (input.tenantHeader ?? d.tenantHeader).toLowerCase(),
    maxWaitMs: input.maxWaitMs ?? d.maxWaitMs,
    maxQueue: input.maxQueue ?? d.maxQueue,
    statusCode: input.statusCode,
    failOpen: input.failOpen ?? d.failOpen,
    overrides: { ...input.overrides },
  }
}

function resolveRwLock(input: RwLockInput): RwLockConfig {
  const d = GATEWAY_DEFAULTS
  return {
    resourcePattern: input.resourcePattern === undefined ? undefined : new RegExp(input.resourcePattern),
    maxWaitMs: input.maxWaitMs ?? d.maxWaitMs,
    maxQueue: input.maxQueue ?? d.maxQueue,
    statusCode: input.statusCode,
    failOpen: input.failOpen ?? d.failOpen,
  }
}

function dropUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}

function isHttpUrl(value: string): boolean {
  try {
    const url = new URL(value)
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== ''
  } catch {
    return false
  }
}

function hasCredentials(value: string): boolean {
  try {
    const url = new URL(value)
    return url.username !== '' || url.password !== ''
  } catch {
    return false
  }
}

function isRedisUrl(value: string): boolean {
  try {
    const url = new URL(value)
    return (url.protocol === 'redis:' || url.protocol === 'rediss:') && url.hostname !== ''
  } catch {
    return false
  }
}

function isRegex(value: string): boolean {
  try {
    new RegExp(value)
    return true
  } catch {
    return false
  }
}
