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

/** An option was missing or invalid. Thrown at construction, never later. */
export class ConfigError extends TollgateError {
  readonly option: string

  constructor(option: string, expected: string, ...received: [unknown?]) {
    const got = received.length > 0 ? ` (received ${describe(received[0])})` : ''
    super('ERR_TOLLGATE_CONFIG', `Invalid option "${option}": expected ${expected}${got}.`)
    this.option = option
  }
}

/** The store (Redis) failed or did not answer in time; `cause` holds the underlying error. */
export class StoreUnavailableError extends TollgateError {
  constructor(message: string, options?: ErrorOptions) {
    super('ERR_TOLLGATE_STORE_UNAVAILABLE', message, options)
  }
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value)
  return typeof value
}
