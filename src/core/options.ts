import { ConfigError } from './errors.js'

/** Drop `undefined` values so that spreading over frozen defaults keeps the default (express-rate-limit). */
export function defined<T extends object>(options: T | undefined): Partial<T> {
  const out: Partial<T> = {}
  if (!options) return out
  for (const [k, v] of Object.entries(options)) if (v !== undefined) (out as Record<string, unknown>)[k] = v
  return out
}

export function positiveInt(option: string, value: unknown, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw new ConfigError(option, `an integer from 1 to ${max}`, value)
  }
  return value
}

export function optionalPositiveInt(option: string, value: unknown): number | undefined {
  return value === undefined ? undefined : positiveInt(option, value)
}

export function nonEmptyString(option: string, value: unknown, max = 65_536): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > max) {
    throw new ConfigError(option, `a non-empty string of at most ${max} characters`, value)
  }
  return value
}

/** A key prefix ends up in front of the hash tag, so braces in it would move the tag. */
export function keyPrefix(option: string, value: unknown): string {
  const prefix = nonEmptyString(option, value, 256)
  if (/[{}\s]/u.test(prefix)) throw new ConfigError(option, 'a prefix without braces or whitespace', value)
  return prefix
}

export function optionalFunction<F>(option: string, value: unknown): F | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'function') throw new ConfigError(option, 'a function', value)
  return value as F
}

export function isPlainObjectOrUndefined(option: string, value: unknown): void {
  if (value !== undefined && (typeof value !== 'object' || value === null || Array.isArray(value))) {
    throw new ConfigError(option, 'an options object', value)
  }
}
