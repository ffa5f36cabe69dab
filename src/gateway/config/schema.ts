// The config file's schema (every object strict: an unknown field is an error, never ignored), and
// the field validators the flags share. Issues come back as `path: expected ...`.
import proxyaddr from 'proxy-addr'
import { z } from 'zod'
import {
  MAX_FLOW_NAME,
  MAX_FLOW_WEIGHT,
  MAX_PRIORITY,
  MIN_PRIORITY,
  PRIORITY_CLASSES,
} from '../../core/fair.js'
import { isCanonicalPrefix, normalizeHost } from '../http/target.js'
import { GatewayConfigError, type TrustProxy } from './types.js'

export const intIn = (min: number, max: number, expected: string) =>
  z
    .number({ error: expected })
    .int({ error: expected })
    .min(min, { error: expected })
    .max(max, { error: expected })
export const positiveInt = (max = 1_000_000_000) => intIn(1, max, 'expected a positive integer')
export const ms = (min = 1) =>
  intIn(
    min,
    86_400_000,
    min === 0 ? 'expected an integer of milliseconds >= 0' : 'expected a positive integer',
  )
export const port = intIn(0, 65_535, 'expected a port number from 0 to 65535')
const bool = z.boolean({ error: 'expected true or false' })
export const host = z
  .string({ error: 'expected a host name or address' })
  .min(1, { error: 'expected a host name or address' })
const matchHost = z
  .string({ error: 'expected a host name' })
  .refine((value) => normalizeHost(value) !== undefined, {
    error: 'expected a host name (letters, digits, - and .), an IPv4 address or [IPv6]',
  })
const maxWait = intIn(0, 600_000, 'expected an integer of milliseconds from 0 to 600000')
const statusCode = intIn(400, 599, 'expected an HTTP error status from 400 to 599')
/** Permit keep-alive: past a few seconds it only holds capacity other replicas wait for. */
export const keepAlive = intIn(0, 10_000, 'expected an integer of milliseconds from 0 (off) to 10000')
export const headerName = z
  .string({ error: 'expected an HTTP header name' })
  .regex(/^[!#$%&'*+.^`|~\w-]+$/, { error: 'expected an HTTP header name' })
const routeName = z
  .string({ error: 'expected a name of letters, digits and . _ : / -' })
  .regex(/^[\w.:/-]{1,64}$/, { error: 'expected a name of letters, digits and . _ : / -' })
export const httpUrl = z
  .string({ error: 'expected an http:// or https:// URL' })
  .refine(isHttpUrl, { error: 'expected an http:// or https:// URL' })
  .refine((url) => !hasCredentials(url), {
    error: 'credentials (user:password@) in the upstream URL are not supported: the gateway never sends them',
  })
  .refine((url) => !/[?#]/.test(url), { error: 'expected an upstream URL without a query or fragment' })
export const redisUrl = z.string({ error: 'expected a redis:// or rediss:// URL' }).refine(isRedisUrl, {
  error: 'expected a redis:// or rediss:// URL',
})
const regexSource = z.string({ error: 'expected a regular expression' }).refine(isRegex, {
  error: 'expected a valid regular expression',
})
const method = z
  .string({ error: 'expected an HTTP method' })
  .regex(/^[A-Za-z]+$/, { error: 'expected an HTTP method' })
export const keyPrefix = z
  .string({ error: 'expected a key prefix without braces or whitespace' })
  .regex(/^[^{}\s]{1,256}$/, { error: 'expected a key prefix without braces or whitespace' })
export const sampleRate = z
  .string()
  .regex(/^(0(\.\d{1,6})?|1(\.0{1,6})?)$/, { error: 'expected a decimal from 0 to 1, e.g. 0.1' })
  .transform(Number)
/** A share of a client's requests in a window (adaptive.dropShare): a number from 0 to 0.99. */
export const dropShare = z
  .number({ error: 'expected a number from 0 to 0.99 (a share: 0.05 is 5 %)' })
  .min(0, { error: 'expected a number from 0 to 0.99 (a share: 0.05 is 5 %)' })
  .max(0.99, { error: 'expected a number from 0 to 0.99 (a share: 0.05 is 5 %)' })
export const sentinelName = z
  .string({ error: 'expected a master name' })
  .regex(/^[\w.:-]{1,128}$/, { error: 'expected a master name of letters, digits and . _ : -' })
export const filePath = z.string({ error: 'expected a file path' }).min(1, { error: 'expected a file path' })
/** `host:port` or `[v6]:port` (a Sentinel's address). */
export const hostPort = z.string({ error: 'expected host:port' }).transform((value, ctx) => {
  const found = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s[\]]+)):(\d{1,5})$/.exec(value)
  const portNumber = Number(found?.[3])
  if (!found || portNumber < 1 || portNumber > 65_535) {
    ctx.addIssue({ code: 'custom', message: 'expected host:port, e.g. 10.0.0.5:26379' })
    return z.NEVER
  }
  return { host: (found[1] ?? found[2]) as string, port: portNumber }
})
export const per = z.enum(['global', 'route', 'tenant', 'ip'], {
  error: 'expected one of global, route, tenant, ip',
})
/** The proxies trusted to say who the client is: true (one hop), false, a number of hops, or a list
 * of addresses and CIDR ranges (and proxy-addr's names loopback, linklocal, uniquelocal). */
export const trustProxy = z
  .union(
    [z.boolean(), z.number().int().min(0).max(100), z.array(z.string().min(1).max(64)).min(1).max(1000)],
    {
      error:
        'expected true, false, a number of proxy hops (0 to 100), or a list of proxy addresses and CIDR ranges',
    },
  )
  .superRefine((value, context) => {
    if (!Array.isArray(value)) return
    for (const entry of value) {
      try {
        proxyaddr.compile(entry)
      } catch {
        context.addIssue({
          code: 'custom',
          message: `expected an IP address, a CIDR range, loopback, linklocal or uniquelocal (got "${entry}")`,
        })
        return
      }
    }
  })
  .transform((value): TrustProxy => (value === true ? 1 : value === 0 ? false : value))

export const logFormat = z.enum(['json', 'pretty'], { error: 'expected json or pretty' })

export const logLevel = z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
  error: 'expected one of fatal, error, warn, info, debug, trace, silent',
})

const orFalse = <T extends z.ZodType>(schema: T, what: string) =>
  z.union([schema, z.literal(false)], { error: `expected ${what} or false` })

const ratio = (low: number, high: number) =>
  z
    .number({ error: `expected a number from ${low} to ${high}` })
    .min(low, { error: `expected a number from ${low} to ${high}` })
    .max(high, { error: `expected a number from ${low} to ${high}` })
/** A number above 0 (excluded), at most `high`: the library's bounds (primitives/adaptive/controller.ts). */
const above0 = (high: number) =>
  z
    .number({ error: `expected a number above 0, at most ${high}` })
    .gt(0, { error: `expected a number above 0, at most ${high}` })
    .max(high, { error: `expected a number above 0, at most ${high}` })
const DROP_RULE = "expected an HTTP status from 400 to 599, '5xx' or 'timeout'"
const dropRule = z.union([intIn(400, 599, DROP_RULE), z.literal('5xx'), z.literal('timeout')], {
  error: DROP_RULE,
})
/** An adaptive limit (docs/adaptive.md); cross-field rules (min <= initial <= max) are checked
 * when the route is resolved. */
export const adaptiveSchema = z.strictObject({
  min: positiveInt(1_000_000).optional(),
  max: positiveInt(1_000_000),
  initial: positiveInt(1_000_000).optional(),
  algorithm: z.enum(['gradient', 'aimd'], { error: 'expected gradient or aimd' }).optional(),
  windowMs: intIn(100, 3_600_000, 'expected an integer of milliseconds from 100 to 3600000').optional(),
  tolerance: ratio(1, 10).optional(),
  probeEvery: intIn(3, 1_000_000, 'expected an integer of windows from 3 to 1000000').optional(),
  smoothing: above0(1).optional(),
  backoff: above0(0.99).optional(),
  dropShare: dropShare.optional(),
  increase: positiveInt(1_000_000).optional(),
  drops: z.array(dropRule, { error: "expected a list of statuses, '5xx' and 'timeout'" }).optional(),
  scope: z.enum(['fleet', 'local'], { error: 'expected fleet or local' }).optional(),
})

const CLASS = `expected critical, standard, sheddable or an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}`
/** A priority class: a name (core/fair.ts PRIORITY_CLASSES) or its number. */
export const priorityClass = z.union(
  [
    z.enum(Object.keys(PRIORITY_CLASSES) as [keyof typeof PRIORITY_CLASSES]),
    intIn(MIN_PRIORITY, MAX_PRIORITY, CLASS),
  ],
  { error: CLASS },
)
const flowName = z
  .string()
  .min(1, { error: 'expected a non-empty flow name' })
  .max(MAX_FLOW_NAME, { error: `expected a flow name of at most ${MAX_FLOW_NAME} characters` })
const byClass = <T extends z.ZodType>(value: T) =>
  z.record(z.string(), value, { error: 'expected a map of class -> value' }).superRefine((map, context) => {
    for (const key of Object.keys(map))
      if (!priorityClass.safeParse(/^\d+$/.test(key) ? Number(key) : key).success)
        context.addIssue({ code: 'custom', path: [key], message: `${CLASS} as a class` })
  })
/** `priority`: one class for every request of the route, or where each request's class comes from. */
const prioritySchema = z.union(
  [
    priorityClass,
    z.strictObject({
      header: headerName.optional(),
      trustHeader: bool.optional(),
      tenants: z
        .record(z.string().min(1, { error: 'expected a non-empty tenant id' }), priorityClass, {
          error: 'expected a map of tenant -> class',
        })
        .optional(),
      default: priorityClass.optional(),
      maxWaitMs: byClass(maxWait).optional(),
    }),
  ],
  { error: `${CLASS}, or an object with header, trustHeader, tenants, default, maxWaitMs` },
)
const FLOW_FROM = 'expected tenant, ip or header:<name>'
/** Where a request's flow comes from (`flow.from`, --flow-from). */
export const flowFrom = z
  .string({ error: FLOW_FROM })
  .refine((from) => from === 'tenant' || from === 'ip' || /^header:[!#$%&'*+.^`|~\w-]+$/.test(from), {
    error: FLOW_FROM,
  })
/** `flow`: where a request's flow comes from, and the flows' weights and caps. */
const flowSchema = z.strictObject({
  from: flowFrom,
  weights: z
    .record(flowName, intIn(1, MAX_FLOW_WEIGHT, `expected an integer from 1 to ${MAX_FLOW_WEIGHT}`), {
      error: 'expected a map of flow -> weight',
    })
    .optional(),
  max: positiveInt(1_000_000).optional(),
  maxFor: z
    .record(flowName, positiveInt(1_000_000), { error: 'expected a map of flow -> permits' })
    .optional(),
})

const concurrencySchema = z.strictObject({
  permits: positiveInt(1_000_000).optional(),
  adaptive: orFalse(adaptiveSchema, 'an adaptive object').optional(),
  per: per.optional(),
  tenantHeader: headerName.optional(),
  maxWaitMs: maxWait.optional(),
  maxQueue: positiveInt(1_000_000).optional(),
  statusCode: statusCode.optional(),
  failOpen: bool.optional(),
  outage: z.enum(['closed', 'open', 'share'], { error: 'expected closed, open or share' }).optional(),
  outageShare: positiveInt(1_000_000).optional(),
  keepAliveMs: keepAlive.optional(),
  weight: intIn(1, 1000, 'expected an integer from 1 to 1000').optional(),
  overrides: z
    .record(z.string().min(1, { error: 'expected a non-empty bucket name' }), positiveInt(1_000_000), {
      error: 'expected a map of bucket -> permits',
    })
    .optional(),
  priority: prioritySchema.optional(),
  flow: flowSchema.optional(),
  maxQueued: positiveInt(100_000_000).optional(),
})
const rwlockSchema = z.strictObject({
  resourcePattern: regexSource.optional(),
  maxWaitMs: maxWait.optional(),
  maxQueue: positiveInt(1_000_000).optional(),
  statusCode: statusCode.optional(),
  failOpen: bool.optional(),
  outage: z
    .enum(['closed', 'open'], {
      error:
        'expected closed or open (a lock shared out in memory would no longer exclude: share is for concurrency)',
    })
    .optional(),
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
      z.strictObject({ host: host.optional(), port: port.optional(), tokenFile: filePath.optional() }),
      'an admin object',
    ).optional(),
    redis: z
      .strictObject({
        url: redisUrl.optional(),
        cluster: z.array(redisUrl, { error: 'expected a list of redis:// URLs' }).min(1).optional(),
        sentinel: z
          .strictObject({
            sentinels: z.array(hostPort, { error: 'expected a list of host:port' }).min(1),
            name: sentinelName.optional(),
          })
          .optional(),
        passwordFile: filePath.optional(),
        tls: z
          .strictObject({
            ca: filePath.optional(),
            cert: filePath.optional(),
            key: filePath.optional(),
            servername: host.optional(),
          })
          .optional(),
        prefix: keyPrefix.optional(),
        commandTimeoutMs: ms().optional(),
      })
      .optional(),
    accessLog: z
      .strictObject({
        sample: z
          .number({ error: 'expected a number from 0 to 1' })
          .min(0, { error: 'expected a number from 0 to 1' })
          .max(1, { error: 'expected a number from 0 to 1' })
          .optional(),
      })
      .optional(),
    ttlMs: ms().optional(),
    shutdownGraceMs: ms(0).optional(),
    logLevel: logLevel.optional(),
    trustProxy: trustProxy.optional(),
    logFormat: logFormat.optional(),
    lean: bool.optional(),
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
export type ConcurrencyInput = z.infer<typeof concurrencySchema>
export type RwLockInput = z.infer<typeof rwlockSchema>
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
