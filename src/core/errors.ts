/** Stable error codes: match on `error.code`, never on the message. See docs/errors.md. */
export type TollgateErrorCode = `ERR_TOLLGATE_${string}`

/** Base class of every error Tollgate throws. */
export class TollgateError extends Error {
  readonly code: TollgateErrorCode

  constructor(code: TollgateErrorCode, message: string, options?: ErrorOptions) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

/** `acquire()` gave up: the wait (`timeoutMs`) ran out before a permit was free. */
export class AcquireTimeoutError extends TollgateError {
  readonly key: string
  readonly waitedMs: number

  constructor(key: string, waitedMs: number) {
    super(
      'ERR_TOLLGATE_ACQUIRE_TIMEOUT',
      `Could not acquire "${key}" within ${waitedMs} ms. Raise "timeoutMs" or use tryAcquire().`,
    )
    this.key = key
    this.waitedMs = waitedMs
  }
}

/** The lease ended without `release()`: it expired on the Redis clock or another owner holds it now. */
export class LeaseLostError extends TollgateError {
  readonly key: string

  constructor(key: string, reason: string, options?: ErrorOptions) {
    super('ERR_TOLLGATE_LEASE_LOST', `Lease on "${key}" was lost: ${reason}.`, options)
    this.key = key
  }
}

/**
 * A read/write lock refused a request its owner could only wait for forever. `reason` 'upgrade': an
 * owner that holds only the read lock asked for the write lock (two readers upgrading together would
 * each wait for the other to leave); release the read lock and acquire the write lock instead (then
 * re-check what you read), or take the write lock from the start. 'waiting': the same owner (an
 * explicit `owner` used concurrently) already waits for this lock in the other mode; an owner waits in
 * one mode at a time (another call in the same mode waits with it).
 */
export class LockUpgradeError extends TollgateError {
  readonly key: string
  readonly reason: 'upgrade' | 'waiting'

  constructor(key: string, reason: 'upgrade' | 'waiting') {
    super(
      'ERR_TOLLGATE_LOCK_UPGRADE',
      reason === 'upgrade'
        ? `Cannot take the write lock of "${key}" while this owner holds its read lock: an upgrade would deadlock. Release the read lock first, or take the write lock from the start.`
        : `This owner already waits for the other side of "${key}"; an owner waits in one mode at a time (calls in the same mode wait together).`,
    )
    this.key = key
    this.reason = reason
  }
}

/**
 * A fair queue (a semaphore with `overload`) turned the acquisition away for requests it would serve
 * first: 'evicted', it waited and an arrival to be served before it (a higher class, or a flow under
 * its share) took its place in a full queue (`maxQueued`);
 * 'queue-full', the queue was full of requests it would serve first. The permit is never granted
 * after this; retry later (the middleware and the gateway reject the request as `shed`, with
 * Retry-After and their usual status: 429 for a keyed bucket, 503 for a global one, or `statusCode`).
 */
export class ShedError extends TollgateError {
  readonly key: string
  readonly reason: 'evicted' | 'queue-full'

  constructor(key: string, reason: 'evicted' | 'queue-full') {
    super(
      'ERR_TOLLGATE_SHED',
      reason === 'evicted'
        ? `The wait for "${key}" was shed: a request to be served before it (a higher priority, or a flow under its share) took its place in the full queue. Retry later, or raise "maxQueued".`
        : `The queue of "${key}" is full of requests it would serve first. Retry later, or raise "maxQueued".`,
    )
    this.key = key
    this.reason = reason
  }
}

/** An option was missing or invalid. Thrown where the option is given: at construction for a store's,
 * a primitive's or a middleware's options, at the call for an acquire's own. */
export class ConfigError extends TollgateError {
  readonly option: string

  /** `expected` completes `Invalid option "<option>": expected …`; `{ message }` replaces that whole
   * head, for what is not a bad value (an unknown option, an argument out of place). */
  constructor(option: string, expected: string | { message: string }, ...received: [unknown?]) {
    const got = received.length > 0 ? ` (received ${describe(received[0])})` : ''
    const head =
      typeof expected === 'string' ? `Invalid option "${option}": expected ${expected}` : expected.message
    super('ERR_TOLLGATE_CONFIG', `${head}${got}.`)
    this.option = option
  }
}

/** The store (Redis) failed or did not answer in time; `cause` holds the underlying error. */
export class StoreUnavailableError extends TollgateError {
  constructor(message: string, options?: ErrorOptions) {
    super('ERR_TOLLGATE_STORE_UNAVAILABLE', message, options)
  }
}

/** How one RedLock attempt ended, node by node (see RedlockQuorumError). */
export interface QuorumTally {
  /** Nodes that granted the lock within the per-node timeout. */
  granted: number
  /** Nodes that answered that another owner holds it. */
  busy: number
  /** Nodes that failed or did not answer within `perNodeTimeoutMs`. */
  failed: number
  /** Nodes asked. */
  nodes: number
  /** Grants needed: floor(nodes / 2) + 1. */
  quorum: number
  /** A majority granted, but only after the validity window (ttl − drift) had run out. */
  validityExpired: boolean
}

/** A RedLock could not be taken on a majority of its nodes within the validity window: after the
 * last retry for `acquire()`, or at once from `tryAcquire()` when nodes failed rather than refused. */
export class RedlockQuorumError extends TollgateError implements QuorumTally {
  readonly key: string
  readonly granted: number
  readonly busy: number
  readonly failed: number
  readonly nodes: number
  readonly quorum: number
  readonly validityExpired: boolean
  readonly attempts: number
  readonly waitedMs: number

  constructor(key: string, tally: QuorumTally, attempts: number, waitedMs: number, options?: ErrorOptions) {
    const why = tally.validityExpired
      ? `${tally.granted} of ${tally.nodes} nodes granted it, but only after its validity (ttlMs minus drift) had run out`
      : `only ${tally.granted} of ${tally.nodes} nodes granted it (quorum ${tally.quorum}; ${tally.busy} held by another owner, ${tally.failed} failed or timed out)`
    const hint = tally.validityExpired
      ? 'Raise "ttlMs" or lower "perNodeTimeoutMs".'
      : tally.failed > tally.nodes - tally.quorum
        ? 'Too many nodes are down or slow (option "perNodeTimeoutMs").'
        : 'Raise "acquireTimeoutMs" / "retryCount", or use tryAcquire().'
    super(
      'ERR_TOLLGATE_QUORUM',
      `Could not acquire RedLock "${key}" after ${attempts} attempt${attempts === 1 ? '' : 's'} in ${waitedMs} ms: ${why}. ${hint}`,
      options,
    )
    this.key = key
    this.granted = tally.granted
    this.busy = tally.busy
    this.failed = tally.failed
    this.nodes = tally.nodes
    this.quorum = tally.quorum
    this.validityExpired = tally.validityExpired
    this.attempts = attempts
    this.waitedMs = waitedMs
  }
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value)
  return typeof value
}
