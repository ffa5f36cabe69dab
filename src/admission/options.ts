// The options of semaphore() and rwlock() (for the middleware and the gateway alike), validated once
// over frozen defaults into the fully-required config an admission runs on. Their types are
// option-types.ts's, re-exported here with them.
import { ConfigError } from '../core/errors.js'
import { MAX_PRIORITY, MIN_PRIORITY, PRIORITY_CLASSES } from '../core/fair.js'
import { createMemoryStore } from '../core/memory/store.js'
import { defined, nonEmptyString, positiveInt, rejectUnknown, storeOption } from '../core/options.js'
import type { Store } from '../core/protocol/store.js'
import type {
  CommonOptions,
  Logger,
  MetricsRegistry,
  OnLost,
  OutageMode,
  Rejection,
  RejectionMessage,
  StandardHeaders,
} from './option-types.js'
import { requestPropertyOption } from './request-property.js'

export * from './option-types.js'

/** The name of every unnamed middleware. */
export const DEFAULT_NAME = 'default'

const SILENT: Logger = { warn() {}, error() {} }

let defaultStore: Store | undefined
/** The process-wide in-memory store behind every middleware without a `store` option. */
export function processStore(): Store {
  defaultStore ??= createMemoryStore()
  return defaultStore
}

export interface ResolvedConfig<Req> {
  store: Store
  name: string
  /** `name` was given (not a default one). */
  named: boolean
  /** The wait of the 'standard' class (every request's, without per-class waits). */
  maxWaitMs: number
  /** `maxWaitMs` of each class 0-7 (index), when given per class; undefined when one number. */
  maxWaitByClass: readonly number[] | undefined
  maxQueue: number
  ttlMs: number
  statusCode: number | undefined
  /** `outage` is 'open' (failOpen is its older spelling). */
  failOpen: boolean
  outage: OutageMode
  outageShare: number | undefined
  dryRun: boolean
  /** Send RateLimit headers (standardHeaders !== false). */
  headers: boolean
  standardHeaders: StandardHeaders
  skip: ((req: Req) => boolean | Promise<boolean>) | undefined
  message: RejectionMessage<Req> | undefined
  /** The framework's rejection handler (its signature is the adapter's). */
  handler: ((...args: never[]) => unknown) | undefined
  requestPropertyName: string
  metrics: { registry: MetricsRegistry } | undefined
  onRejected: ((req: Req, rejection: Rejection, ...framework: never[]) => void) | undefined
  onLost: OnLost
  logger: Logger
}

const COMMON_DEFAULTS = Object.freeze({
  maxWaitMs: 1000,
  maxQueue: 100,
  ttlMs: 30_000,
  failOpen: false,
  dryRun: false,
  requestPropertyName: 'tollgate',
  onLost: 'log' as OnLost,
})

/** Every option of semaphore() and rwlock() (besides their own): anything else is a mistake. */
const COMMON_KEYS = [
  'store',
  'name',
  'maxWaitMs',
  'maxQueue',
  'ttlMs',
  'statusCode',
  'failOpen',
  'outage',
  'outageShare',
  'dryRun',
  'standardHeaders',
  'headers',
  'skip',
  'message',
  'handler',
  'onRejected',
  'requestPropertyName',
  'metrics',
  'onLost',
  'logger',
]

/** What users of express-rate-limit (and p-limit, Bottleneck) reach for, and what it is here. */
const HINTS: Record<string, string> = {
  keyGenerator: 'tollgate calls it `key`',
  max: 'a concurrency cap is `permits`',
  limit: 'a concurrency cap is `permits`',
  concurrency: 'a concurrency cap is `permits`',
  windowMs: 'tollgate caps requests in flight: there is no window; see `maxWaitMs`',
  legacyHeaders: 'only the IETF RateLimit headers are sent: see `standardHeaders`',
  validate: 'options are always validated at construction',
  requestWasSuccessful: 'every request holds its permit until its response closes',
  skipFailedRequests: 'every request holds its permit until its response closes',
  skipSuccessfulRequests: 'every request holds its permit until its response closes',
}

/** Reject an option no middleware knows, naming it (ConfigError), with a hint for familiar names. */
export function rejectUnknownOptions(options: object, own: readonly string[]): void {
  rejectUnknown(options, [...COMMON_KEYS, ...own], HINTS)
}

/** Unnamed middlewares of one kind seen per store: a second one shares the first one's buckets. */
const unnamedOn = new WeakMap<Store, Set<string>>()
const warnedUnnamed = new WeakSet<Store>()
/**
 * Every unnamed middleware is 'default', whatever the order in which a process creates them: the
 * same policy in several apps or processes counts in the same buckets. Two unnamed middlewares of one
 * kind on one store therefore share them; said once per store (TOLLGATE_UNNAMED_POLICY), as
 * express-rate-limit warns when one store serves two limiters.
 */
function noteUnnamed(store: Store, kind: string): void {
  let kinds = unnamedOn.get(store)
  if (!kinds) unnamedOn.set(store, (kinds = new Set()))
  const second = kinds.has(kind)
  kinds.add(kind)
  if (!second || warnedUnnamed.has(store)) return
  warnedUnnamed.add(store)
  process.emitWarning(
    `tollgate: two ${kind} middlewares without a \`name\` share one store, so they count in the same ` +
      'buckets ("default"). Fine if they are one policy mounted in several apps; otherwise give each ' +
      'its own `name`.',
    { code: 'TOLLGATE_UNNAMED_POLICY' },
  )
}

const MAX_WAIT_MS = 600_000

/** `maxWaitMs` by class ({ critical: 2000, sheddable: 250 }, or by number): each class's wait, a
 * missing class taking standard's, else the default. */
function parseMaxWaitByClass(value: object): number[] {
  if (Array.isArray(value))
    throw new ConfigError('maxWaitMs', 'a number, or an object by priority class', value)
  const given = new Map<number, number>()
  for (const [key, wait] of Object.entries(value)) {
    const priority = Object.hasOwn(PRIORITY_CLASSES, key)
      ? PRIORITY_CLASSES[key as keyof typeof PRIORITY_CLASSES]
      : /^\d$/.test(key) && Number(key) >= MIN_PRIORITY && Number(key) <= MAX_PRIORITY
        ? Number(key)
        : undefined
    if (priority === undefined)
      throw new ConfigError(
        `maxWaitMs.${key}`,
        {
          message: `Unknown priority class "${key}" in maxWaitMs: the classes are critical, standard, sheddable or 0 to ${MAX_PRIORITY}`,
        },
        wait,
      )
    if (given.has(priority))
      throw new ConfigError(
        `maxWaitMs.${key}`,
        { message: `maxWaitMs gives class ${priority} twice ("${key}")` },
        wait,
      )
    if (!(typeof wait === 'number' && Number.isInteger(wait) && wait >= 0 && wait <= MAX_WAIT_MS))
      throw new ConfigError(`maxWaitMs.${key}`, `an integer from 0 to ${MAX_WAIT_MS}`, wait)
    given.set(priority, wait)
  }
  const standard = given.get(PRIORITY_CLASSES.standard) ?? COMMON_DEFAULTS.maxWaitMs
  const waits: number[] = []
  for (let p = MIN_PRIORITY; p <= MAX_PRIORITY; p++) waits.push(given.get(p) ?? standard)
  return waits
}

/** Validate the options every middleware shares (ConfigError naming the option). `kind` (semaphore,
 * rwlock) tells unnamed middlewares apart for the shared-store warning: their keys never meet. */
export function resolveCommon<Req>(options: CommonOptions<Req>, kind = 'semaphore'): ResolvedConfig<Req> {
  const config = { ...COMMON_DEFAULTS, ...defined(options) }
  const named = config.name !== undefined
  const name = nonEmptyString('name', config.name ?? DEFAULT_NAME, 64)
  if (!/^[\w.:/-]+$/.test(name)) throw new ConfigError('name', 'letters, digits and . _ : / - only', name)
  const maxWaitByClass =
    typeof config.maxWaitMs === 'object' && config.maxWaitMs !== null && kind === 'semaphore'
      ? parseMaxWaitByClass(config.maxWaitMs)
      : undefined
  const maxWaitMs = (maxWaitByClass ? maxWaitByClass[PRIORITY_CLASSES.standard] : config.maxWaitMs) as number
  if (!(Number.isInteger(maxWaitMs) && maxWaitMs >= 0 && maxWaitMs <= MAX_WAIT_MS)) {
    throw new ConfigError(
      'maxWaitMs',
      `an integer from 0 to ${MAX_WAIT_MS}${kind === 'semaphore' ? ', or an object of them by priority class' : ''}`,
      config.maxWaitMs,
    )
  }
  const maxQueue = positiveInt('maxQueue', config.maxQueue, 1_000_000)
  const ttlMs = positiveInt('ttlMs', config.ttlMs, 24 * 3600 * 1000)
  const statusCode = config.statusCode
  if (statusCode !== undefined && !(Number.isInteger(statusCode) && statusCode >= 400 && statusCode <= 599)) {
    throw new ConfigError('statusCode', 'an HTTP error status from 400 to 599', statusCode)
  }
  for (const flag of ['failOpen', 'dryRun'] as const) {
    if (typeof config[flag] !== 'boolean') throw new ConfigError(flag, 'a boolean', config[flag])
  }
  if (config.headers !== undefined && typeof config.headers !== 'boolean')
    throw new ConfigError('headers', 'a boolean', config.headers)
  if (config.headers !== undefined && config.standardHeaders !== undefined)
    throw new ConfigError(
      'headers',
      'not given with standardHeaders (it is its older spelling)',
      config.headers,
    )
  const { outage, outageShare } = resolveOutage(config, kind)
  const standardHeaders: StandardHeaders =
    config.standardHeaders ?? (config.headers === false ? false : 'draft-8')
  if (standardHeaders !== 'draft-7' && standardHeaders !== 'draft-8' && standardHeaders !== false) {
    throw new ConfigError(
      'standardHeaders',
      "'draft-7', 'draft-8' or false (express-rate-limit's true is an older draft: use 'draft-7' or 'draft-8')",
      standardHeaders,
    )
  }
  for (const hook of ['onRejected', 'skip', 'handler'] as const) {
    if (config[hook] !== undefined && typeof config[hook] !== 'function') {
      throw new ConfigError(hook, 'a function', config[hook])
    }
  }
  const message = config.message
  if (
    message !== undefined &&
    typeof message !== 'string' &&
    typeof message !== 'function' &&
    !(typeof message === 'object' && message !== null && !Array.isArray(message))
  ) {
    throw new ConfigError('message', 'a string, an object or a function', message)
  }
  const requestPropertyName = requestPropertyOption(config.requestPropertyName)
  const metrics = config.metrics
  if (
    metrics !== undefined &&
    (typeof metrics !== 'object' ||
      metrics === null ||
      typeof metrics.registry?.registerMetric !== 'function' ||
      typeof metrics.registry?.getSingleMetric !== 'function')
  ) {
    throw new ConfigError('metrics', 'an object { registry } with a prom-client Registry', metrics)
  }
  const onLost = config.onLost
  if (onLost !== 'log' && onLost !== 'abort' && typeof onLost !== 'function') {
    throw new ConfigError('onLost', "'log', 'abort' or a function", onLost)
  }
  const logger = config.logger ?? SILENT
  if (typeof logger.warn !== 'function' || typeof logger.error !== 'function') {
    throw new ConfigError('logger', 'an object with warn() and error()', logger)
  }
  const store = config.store === undefined ? processStore() : storeOption('store', config.store)
  if (!named) noteUnnamed(store, kind)
  return {
    store,
    name,
    named,
    maxWaitMs,
    maxWaitByClass,
    maxQueue,
    ttlMs,
    statusCode,
    failOpen: outage === 'open',
    outage,
    outageShare,
    dryRun: config.dryRun,
    headers: standardHeaders !== false,
    standardHeaders,
    skip: config.skip,
    message,
    handler: config.handler as ((...args: never[]) => unknown) | undefined,
    requestPropertyName,
    metrics,
    onRejected: config.onRejected,
    onLost,
    logger,
  }
}

/** `outage` and its older spelling `failOpen` (which says 'open' or 'closed'), and `outageShare`. */
function resolveOutage(
  config: { failOpen: boolean; outage?: unknown; outageShare?: unknown },
  kind: string,
): { outage: OutageMode; outageShare: number | undefined } {
  const given = config.outage
  if (given !== undefined && given !== 'closed' && given !== 'open' && given !== 'share')
    throw new ConfigError('outage', "'closed', 'open' or 'share'", given)
  if (given === 'share' && kind !== 'semaphore')
    throw new ConfigError(
      'outage',
      "'closed' or 'open' (a lock shared out in memory while the store is down would no longer exclude: 'share' is semaphore()'s)",
      given,
    )
  if (given !== undefined && config.failOpen && given !== 'open')
    throw new ConfigError('failOpen', `not true beside outage: '${given}' (it is outage: 'open')`, true)
  const outage: OutageMode = given ?? (config.failOpen ? 'open' : 'closed')
  if (config.outageShare !== undefined && outage !== 'share')
    throw new ConfigError('outageShare', "only with outage: 'share'", config.outageShare)
  const outageShare =
    config.outageShare === undefined ? undefined : positiveInt('outageShare', config.outageShare, 1_000_000)
  return { outage, outageShare }
}
