// Telling a promise from a value by its then(), never by `instanceof Promise`: an app that replaced
// the global Promise (a polyfill, Bluebird) would see the native promises of async functions fail
// that check.

/** True for a promise of any implementation (anything with a then()). */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function'
}
