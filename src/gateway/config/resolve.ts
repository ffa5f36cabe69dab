// File + flags + defaults -> the GatewayConfig the gateway runs on (flags win over the file, a route's
// own fields over `defaults`), with the checks only the whole config can make.
import { readFileSync } from 'node:fs'
import { defined } from '../../core/options.js'
import { normalizeHost } from '../http/target.js'
import { readConfigFile } from './file.js'
import type { GatewayFlags } from './flags.js'
import type { ConcurrencyInput, GatewayFile, RwLockInput } from './schema.js'
import { ConfigError } from '../../core/errors.js'
import { priorityName, priorityNumber, type Priority } from '../../core/fair.js'
import { parseAdaptiveOptions, type ResolvedAdaptiveOptions } from '../../primitives/adaptive/options.js'
import {
  type ConcurrencyConfig,
  type FlowConfig,
  GATEWAY_DEFAULTS,
  type GatewayConfig,
  GatewayConfigError,
  type PriorityConfig,
  type RouteConfig,
  type RwLockConfig,
  type RedisAuth,
  type RedisTlsConfig,
  type StoreConfig,
  type TimeoutsConfig,
} from './types.js'

/** Flags and an optional file (path or already-parsed object) -> the validated GatewayConfig. */
export async function loadConfig(flags: GatewayFlags): Promise<GatewayConfig> {
  const file = flags.config === undefined ? {} : await readConfigFile(flags.config)
  return resolveConfig(file, flags)
}

type Issues = { path: string; message: string }[]

/** What every route inherits: `defaults` of the file, overridden by the flags. */
interface Inherited {
  upstream: string | undefined
  concurrency: ConcurrencyInput | false
  rwlock: RwLockInput | false
  timeouts: TimeoutsConfig
  bufferBytes: number
}

/** Merge a validated file with flags (flags win) and fill in the defaults. Throws GatewayConfigError. */
export function resolveConfig(file: GatewayFile, flags: GatewayFlags = {}): GatewayConfig {
  const d = GATEWAY_DEFAULTS
  const issues: Issues = []
  const store = storeOf(file, flags, issues)
  const base = inherited(file, flags)
  const routes = routesOf(file, flags, base, issues)
  if (issues.length > 0) throw new GatewayConfigError(issues)
  const fileAdmin = file.admin || undefined
  const admin =
    file.admin === false && flags.adminPort === undefined
      ? undefined
      : {
          host: flags.adminHost ?? fileAdmin?.host ?? d.adminHost,
          port: flags.adminPort ?? fileAdmin?.port ?? d.adminPort,
          token: adminToken(flags, fileAdmin?.tokenFile, issues),
        }
  if (issues.length > 0) throw new GatewayConfigError(issues)
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
    logFormat: flags.logFormat ?? file.logFormat ?? d.logFormat,
    lean: flags.lean ?? file.lean ?? d.lean,
    accessLogSample: flags.accessLogSample ?? file.accessLog?.sample ?? d.accessLogSample,
    sendTimeoutMs: base.timeouts.sendMs,
    paths: {
      mergeSlashes: flags.mergeSlashes ?? file.paths?.mergeSlashes ?? d.mergeSlashes,
      escapedSlashes: flags.escapedSlashes ?? file.paths?.escapedSlashes ?? d.escapedSlashes,
    },
    routes,
  }
}

function storeOf(file: GatewayFile, flags: GatewayFlags, issues: Issues): StoreConfig {
  // Flags (or their TOLLGATE_* variables) name at most one kind; one given replaces the file's kind.
  const flagged =
    flags.redis !== undefined || flags.redisCluster !== undefined || flags.redisSentinel !== undefined
  const redis = file.redis ?? {}
  const url = flagged ? flags.redis : redis.url
  const urls = flagged ? flags.redisCluster : redis.cluster
  const sentinels = flagged ? flags.redisSentinel : redis.sentinel?.sentinels
  const kinds = [url, urls, sentinels].filter((value) => value !== undefined).length
  if (kinds > 1) {
    issues.push({ path: 'redis', message: 'give one of redis.url, redis.cluster, redis.sentinel' })
    return { kind: 'memory' }
  }
  if (kinds === 0) return { kind: 'memory' }
  const auth = redisAuth(file, flags, issues)
  if (url !== undefined) return { kind: 'redis', url, ...auth }
  if (urls !== undefined) return { kind: 'cluster', urls, ...auth }
  return {
    kind: 'sentinel',
    sentinels: sentinels!,
    name: flags.redisSentinelName ?? redis.sentinel?.name ?? GATEWAY_DEFAULTS.sentinelName,
    ...auth,
  }
}

/** A secret or certificate read from a file; a trailing newline (as `echo` writes) is not part of a secret. */
function readSecret(path: string, label: string, issues: Issues, trim: boolean): string | undefined {
  try {
    const text = readFileSync(path, 'utf8')
    const value = trim ? text.replace(/\r?\n$/, '') : text
    if (value === '') issues.push({ path: label, message: `${path} is empty` })
    return value
  } catch (error) {
    issues.push({
      path: label,
      message: `cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    })
    return undefined
  }
}

/** Where a secret (or certificate) may come from, in order: a file's path or the value itself. */
interface SecretSource {
  path?: string | undefined
  value?: string | undefined
  label: string
}

/** The first source given (a flag's file, the environment, the config file's file, as the caller
 * orders them), read, and the label its errors name. */
function firstGiven(
  sources: readonly SecretSource[],
  issues: Issues,
  trim: boolean,
): { value: string | undefined; label: string } | undefined {
  for (const source of sources) {
    if (source.path !== undefined)
      return { value: readSecret(source.path, source.label, issues, trim), label: source.label }
    if (source.value !== undefined) return { value: source.value, label: source.label }
  }
  return undefined
}

/** Password: --redis-password-file (or TOLLGATE_REDIS_PASSWORD_FILE), TOLLGATE_REDIS_PASSWORD, then
 * redis.passwordFile; each over one in the URL. TLS: the flags' files over the file's, field by field. */
function redisAuth(file: GatewayFile, flags: GatewayFlags, issues: Issues): RedisAuth {
  const redis = file.redis ?? {}
  const password = firstGiven(
    [
      { path: flags.redisPasswordFile, label: '--redis-password-file' },
      { value: flags.redisPassword, label: 'TOLLGATE_REDIS_PASSWORD' },
      { path: redis.passwordFile, label: 'redis.passwordFile' },
    ],
    issues,
    true,
  )?.value
  const t = redis.tls ?? {}
  const pem = (flag: string | undefined, flagLabel: string, own: string | undefined, ownLabel: string) =>
    firstGiven(
      [
        { path: flag, label: flagLabel },
        { path: own, label: ownLabel },
      ],
      issues,
      false,
    )?.value
  const tls: RedisTlsConfig = {
    ca: pem(flags.redisTlsCa, '--redis-tls-ca', t.ca, 'redis.tls.ca'),
    cert: pem(flags.redisTlsCert, '--redis-tls-cert', t.cert, 'redis.tls.cert'),
    key: pem(flags.redisTlsKey, '--redis-tls-key', t.key, 'redis.tls.key'),
    servername: flags.redisTlsServername ?? t.servername,
  }
  if ((tls.cert === undefined) !== (tls.key === undefined) && issues.length === 0) {
    issues.push({
      path: tls.cert ? '--redis-tls-key' : '--redis-tls-cert',
      message: 'a client certificate needs both cert and key',
    })
  }
  const anyTls = Object.values(tls).some((value) => value !== undefined) || redis.tls !== undefined
  return { password, tls: anyTls ? tls : undefined }
}

/** The admin API's bearer token: --admin-token-file (or TOLLGATE_ADMIN_TOKEN_FILE), TOLLGATE_ADMIN_TOKEN,
 * then admin.tokenFile. At least 16 characters: it guards changing every replica's limits. */
function adminToken(flags: GatewayFlags, tokenFile: string | undefined, issues: Issues): string | undefined {
  const given = firstGiven(
    [
      { path: flags.adminTokenFile, label: '--admin-token-file' },
      { value: flags.adminToken, label: 'TOLLGATE_ADMIN_TOKEN' },
      { path: tokenFile, label: 'admin.tokenFile' },
    ],
    issues,
    true,
  )
  const token = given?.value
  if (token !== undefined && token !== '' && !/^[\x21-\x7e]{16,4096}$/.test(token)) {
    issues.push({
      path: given!.label,
      message: 'expected a token of 16 to 4096 printable characters without spaces',
    })
    return undefined
  }
  return token
}

const bufferOf = (value: { maxBytes: number } | false | undefined) =>
  value === undefined ? undefined : value === false ? 0 : value.maxBytes

/** The file's `defaults`, with the flags over them: what a route without its own values gets. */
function inherited(file: GatewayFile, flags: GatewayFlags): Inherited {
  const d = GATEWAY_DEFAULTS
  const defaults = file.defaults ?? {}
  let concurrency: ConcurrencyInput | false = defaults.concurrency ?? {}
  const concurrencyFlags: ConcurrencyInput = {
    permits: flags.permits,
    per: flags.per,
    tenantHeader: flags.tenantHeader,
    maxWaitMs: flags.maxWaitMs,
    maxQueue: flags.maxQueue,
    failOpen: flags.failOpen,
    outage: flags.outage,
    outageShare: flags.outageShare,
    keepAliveMs: flags.permitKeepAliveMs,
    // The operator who names the header on the command line is the one who trusts it.
    priority:
      flags.priorityHeader === undefined ? undefined : { header: flags.priorityHeader, trustHeader: true },
    flow: flags.flowFrom === undefined ? undefined : { from: flags.flowFrom },
  }
  if (Object.values(concurrencyFlags).some((value) => value !== undefined))
    concurrency = { ...(concurrency || {}), ...defined(concurrencyFlags) }
  const adaptiveFlags = defined({
    max: flags.adaptiveMax,
    min: flags.adaptiveMin,
    initial: flags.adaptiveInitial,
    algorithm: flags.adaptiveAlgorithm,
    windowMs: flags.adaptiveWindowMs,
    scope: flags.adaptiveScope,
    drops: flags.adaptiveDrops,
    dropShare: flags.adaptiveDropShare,
  })
  if (Object.keys(adaptiveFlags).length > 0) {
    // The flags turn an adaptive limit on for every route that inherits the defaults: it replaces the
    // file's default permits (--permits beside them is refused when the route is resolved).
    const base = concurrency || {}
    const fileAdaptive = base.adaptive || {}
    const { permits: _, ...rest } = base
    concurrency = {
      ...rest,
      ...(flags.permits === undefined ? {} : { permits: flags.permits }),
      adaptive: { ...fileAdaptive, ...adaptiveFlags } as NonNullable<ConcurrencyInput['adaptive']>,
    }
  }
  let rwlock: RwLockInput | false = defaults.rwlock ?? false
  if (flags.rwlock) {
    // The lock waits and fails like the concurrency cap: the same flags set both.
    const { maxWaitMs, maxQueue, failOpen } = concurrencyFlags
    // (--outage share is the concurrency cap's alone: the lock keeps failing closed, or open.)
    const outage = flags.outage === 'share' ? undefined : flags.outage
    rwlock = { ...(rwlock || {}), ...defined({ maxWaitMs, maxQueue, failOpen, outage }) }
  }
  const t = defaults.timeouts
  return {
    upstream: flags.upstream ?? defaults.upstream,
    concurrency,
    rwlock,
    timeouts: {
      upstreamMs: flags.timeoutMs ?? t?.upstreamMs ?? d.upstreamTimeoutMs,
      sendMs: flags.sendTimeoutMs ?? t?.sendMs ?? d.sendTimeoutMs,
      clientBodyMs: flags.clientBodyTimeoutMs ?? t?.clientBodyMs ?? d.clientBodyTimeoutMs,
      requestMs: flags.requestTimeoutMs ?? t?.requestMs ?? d.requestTimeoutMs,
      websocketIdleMs: flags.websocketIdleTimeoutMs ?? t?.websocketIdleMs ?? d.websocketIdleTimeoutMs,
    },
    bufferBytes: flags.requestBufferBytes ?? bufferOf(defaults.requestBuffer) ?? d.requestBufferBytes,
  }
}

/** `own` over `base` field by field; `false` (either way) means none. */
function merged<T extends object>(base: T | false, own: T | false | undefined): T | false {
  if (own === false) return false
  if (own === undefined) return base
  return { ...(base || ({} as T)), ...own }
}

function routesOf(file: GatewayFile, flags: GatewayFlags, base: Inherited, issues: Issues): RouteConfig[] {
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
    const target = route.upstream ?? base.upstream
    if (target === undefined) {
      issues.push(
        file.routes === undefined
          ? { path: '--upstream', message: 'required: where should requests go? (or use --config)' }
          : {
              path: `${at}.upstream`,
              message: `required: give --upstream${flags.config === undefined ? '' : ' (or --config)'}, defaults.upstream or ${at}.upstream`,
            },
      )
      return
    }
    const concurrencyInput = merged(base.concurrency, route.concurrency)
    const concurrency =
      concurrencyInput === false
        ? undefined
        : resolveConcurrency(
            concurrencyInput,
            `${at}.concurrency`,
            issues,
            route.concurrency,
            base.concurrency,
          )
    if (concurrency?.per === 'global') globalBuckets.push({ index, concurrency })
    else if (concurrency && concurrency.maxQueued > 0 && !isFair(concurrency)) unfairBound(index, issues)
    if (concurrency && concurrency.weight > concurrency.permits)
      issues.push({
        path: `${at}.concurrency.weight`,
        message: `expected at most permits (${concurrency.permits}): a heavier request could never be admitted`,
      })
    const rwlockInput = merged(base.rwlock, route.rwlock)
    routes.push({
      name,
      pathPrefix: route.match.pathPrefix,
      methods: route.match.methods?.map((m) => m.toUpperCase()),
      host: normalizeHost(route.match.host),
      upstream: new URL(target),
      stripPrefix: route.stripPrefix ?? false,
      concurrency,
      rwlock: rwlockInput === false ? undefined : resolveRwLock(rwlockInput),
      timeouts: { ...base.timeouts, ...defined(route.timeouts ?? {}) },
      requestBufferBytes: bufferOf(route.requestBuffer) ?? base.bufferBytes,
    })
  })
  // per: global is one bucket for several routes: they must agree on what it is.
  const first = globalBuckets[0]
  // (Each route keeps its own weight: what its requests count for in the shared bucket; and its own
  // priority and waits, as a critical and a sheddable route share one limit.)
  const bucketOf = (c: ConcurrencyConfig | undefined) =>
    JSON.stringify(c && { ...c, weight: undefined, priority: undefined, maxWaitMs: undefined })
  for (const other of globalBuckets.slice(1)) {
    const at = `routes[${other.index}].concurrency`
    const [mine, theirs] = [other.concurrency, first!.concurrency]
    if (JSON.stringify(mine.flow) !== JSON.stringify(theirs.flow)) {
      issues.push({
        path: `${at}.flow`,
        message: `per: global routes share one bucket, so their flow settings must equal those of routes[${first!.index}] (priority and maxWaitMs may differ)`,
      })
    } else if (mine.maxQueued !== theirs.maxQueued) {
      issues.push({
        path: `${at}.maxQueued`,
        message: `per: global routes share one bucket, so maxQueued must equal that of routes[${first!.index}] (${theirs.maxQueued || 'none'})`,
      })
    } else if (bucketOf(mine) !== bucketOf(theirs)) {
      issues.push({
        path: at,
        message: `per: global routes share one bucket, so their concurrency settings must equal those of routes[${first!.index}]`,
      })
    }
  }
  if (first && first.concurrency.maxQueued > 0 && !globalBuckets.some((g) => isFair(g.concurrency)))
    unfairBound(first.index, issues)
  if (globalBuckets.length > 1 && issues.length === 0) sharedWaits(globalBuckets, issues)
  return routes
}

/** A bucket whose requests carry a priority or a flow is a fair queue. */
export const isFair = (concurrency: ConcurrencyConfig) =>
  concurrency.priority !== undefined || concurrency.flow !== undefined

function unfairBound(index: number, issues: Issues): void {
  issues.push({
    path: `routes[${index}].concurrency.maxQueued`,
    message:
      'only with priority or flow: maxQueued bounds a fair queue across the fleet (maxQueue bounds each replica)',
  })
}

/** The waits of a per: global bucket, by class: each route's requests wait as long as that route
 * says, so two routes that can send one class must agree on its wait. */
function sharedWaits(routes: { index: number; concurrency: ConcurrencyConfig }[], issues: Issues): void {
  const waits = new Map<number, { ms: number; index: number }>()
  for (const { index, concurrency } of routes) {
    for (const [priority, ms] of classWaits(concurrency)) {
      const seen = waits.get(priority)
      if (seen === undefined) waits.set(priority, { ms, index })
      else if (seen.ms !== ms) {
        issues.push({
          path: `routes[${index}].concurrency`,
          message: `per: global routes share one queue: its ${priorityName(priority)} requests wait ${seen.ms} ms by routes[${seen.index}] but ${ms} ms here; give the class one maxWaitMs (or a different class)`,
        })
        return
      }
    }
  }
}

/** The classes a route's requests can have, each with how long it waits (ms). */
export function classWaits(concurrency: ConcurrencyConfig): Map<number, number> {
  const priority = concurrency.priority
  const waits = new Map<number, number>()
  if (!priority) return waits.set(4, concurrency.maxWaitMs)
  const waitOf = (p: number) => priority.maxWaitMs[p] ?? concurrency.maxWaitMs
  const classes = new Set([priority.default, ...Object.values(priority.tenants)])
  // A trusted header can name any class.
  if (priority.header !== undefined) for (let p = 0; p <= 7; p++) classes.add(p)
  for (const p of classes) waits.set(p, waitOf(p))
  return waits
}

function resolveConcurrency(
  input: ConcurrencyInput,
  at: string,
  issues: Issues,
  own: ConcurrencyInput | false | undefined,
  inherited: ConcurrencyInput | false,
): ConcurrencyConfig {
  const d = GATEWAY_DEFAULTS
  let adaptive: ResolvedAdaptiveOptions | undefined
  if (input.adaptive) {
    try {
      adaptive = parseAdaptiveOptions(input.adaptive, `${at}.adaptive.`)
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      issues.push({ path: error.option, message: error.message.replace(/^Invalid option "[^"]*": /, '') })
    }
    // One limit, learnt from the requests it admits: one bucket, each request counting 1. `permits`
    // is refused where the adaptive limit is set (the route's own, or defaults), not when one layer
    // has each (a route's adaptive limit replaces the default permits).
    const layer = own && own.adaptive ? own : inherited
    if (layer && layer.permits !== undefined)
      issues.push({
        path: `${at}.permits`,
        message:
          'not beside adaptive: an adaptive limit starts at adaptive.initial, within adaptive.min and adaptive.max',
      })
    if (input.per === 'tenant' || input.per === 'ip')
      issues.push({ path: `${at}.per`, message: 'an adaptive limit is one bucket: per global or per route' })
    if ((input.weight ?? 1) !== 1)
      issues.push({ path: `${at}.weight`, message: 'not beside adaptive: an adaptive limit counts requests' })
    if ((input.keepAliveMs ?? 0) > 0)
      issues.push({
        path: `${at}.keepAliveMs`,
        message: 'not beside adaptive: permit keep-alive would hide the requests it measures',
      })
    if (Object.keys(input.overrides ?? {}).length > 0)
      issues.push({ path: `${at}.overrides`, message: 'an adaptive limit is one bucket: no overrides' })
  }
  const per = input.per ?? d.per
  const priority = resolvePriority(input.priority, at, issues)
  const flow = resolveFlow(input.flow, per, at, issues)
  if ((input.keepAliveMs ?? 0) > 0 && (priority || flow))
    issues.push({
      path: `${at}.keepAliveMs`,
      message: `not beside ${priority ? 'priority' : 'flow'}: a kept permit would serve this replica's next request past the queue's order (set keepAliveMs: 0)`,
    })
  return {
    adaptive,
    permits: input.permits ?? d.permits,
    per,
    tenantHeader: (input.tenantHeader ?? d.tenantHeader).toLowerCase(),
    maxWaitMs: input.maxWaitMs ?? d.maxWaitMs,
    maxQueue: input.maxQueue ?? d.maxQueue,
    statusCode: input.statusCode,
    // `outage` wins over `failOpen` (its older spelling), wherever each was set.
    failOpen: outageOf(input) === 'open',
    outage: outageOf(input),
    outageShare: input.outageShare,
    keepAliveMs: input.keepAliveMs ?? d.keepAliveMs,
    weight: input.weight ?? 1,
    overrides: { ...input.overrides },
    priority,
    flow,
    maxQueued: input.maxQueued ?? 0,
  }
}

const classOf = (value: Priority) => priorityNumber(value)

function resolvePriority(
  input: ConcurrencyInput['priority'],
  at: string,
  issues: Issues,
): PriorityConfig | undefined {
  if (input === undefined) return undefined
  if (typeof input !== 'object')
    return { header: undefined, tenants: {}, default: classOf(input), maxWaitMs: {} }
  if (input.header !== undefined && input.trustHeader !== true)
    issues.push({
      path: `${at}.priority.trustHeader`,
      message: `required (true) beside header: a client could claim critical by sending ${input.header}; set it only where a proxy in front sets or strips that header`,
    })
  if (input.trustHeader === true && input.header === undefined)
    issues.push({
      path: `${at}.priority.header`,
      message: 'required beside trustHeader: which header to trust',
    })
  const tenants: Record<string, number> = {}
  for (const [tenant, value] of Object.entries(input.tenants ?? {})) tenants[tenant] = classOf(value)
  const maxWaitMs: Record<number, number> = {}
  for (const [key, ms] of Object.entries(input.maxWaitMs ?? {}))
    maxWaitMs[classOf(/^\d+$/.test(key) ? Number(key) : (key as Priority))] = ms
  return {
    header: input.header?.toLowerCase(),
    tenants,
    default: classOf(input.default ?? 'standard'),
    maxWaitMs,
  }
}

/** Flows are metric labels (docs/gateway.md): a config names this many at most. */
const MAX_NAMED_FLOWS = 100

function resolveFlow(
  input: ConcurrencyInput['flow'],
  per: string,
  at: string,
  issues: Issues,
): FlowConfig | undefined {
  if (input === undefined) return undefined
  const from = input.from.startsWith('header:') ? 'header' : (input.from as 'tenant' | 'ip')
  if (from === per)
    issues.push({
      path: `${at}.flow.from`,
      message: `not with per: ${per}: flows share one bucket, and per: ${per} makes one bucket per ${per}; choose per: route (or global) to share the limit fairly, or keep per: ${per} without flow`,
    })
  const weights = { ...input.weights }
  const maxFor = { ...input.maxFor }
  if (new Set([...Object.keys(weights), ...Object.keys(maxFor)]).size > MAX_NAMED_FLOWS)
    issues.push({
      path: `${at}.flow`,
      message: `expected at most ${MAX_NAMED_FLOWS} flows named in weights and maxFor (each named flow is a metric series)`,
    })
  return {
    from,
    header: from === 'header' ? input.from.slice('header:'.length).toLowerCase() : undefined,
    weights,
    max: input.max ?? 0,
    maxFor,
  }
}

function resolveRwLock(input: RwLockInput): RwLockConfig {
  const d = GATEWAY_DEFAULTS
  return {
    resourcePattern: input.resourcePattern === undefined ? undefined : new RegExp(input.resourcePattern),
    maxWaitMs: input.maxWaitMs ?? d.maxWaitMs,
    maxQueue: input.maxQueue ?? d.maxQueue,
    statusCode: input.statusCode,
    failOpen: outageOf(input) === 'open',
  }
}

/** A limit's `outage`, or what its older spelling `failOpen` says. */
function outageOf<M extends string>(input: {
  outage?: M | undefined
  failOpen?: boolean | undefined
}): M | 'open' | 'closed' {
  return input.outage ?? ((input.failOpen ?? GATEWAY_DEFAULTS.failOpen) ? 'open' : 'closed')
}
