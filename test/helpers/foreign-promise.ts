// The global Promise replaced, as an app with a polyfill (Bluebird, core-js) runs: a subclass, so every
// promise still works, but the native promises that async functions return are no instances of it.
const NATIVE = globalThis.Promise
class ForeignPromise<T> extends NATIVE<T> {}

/** Run `fn` with the global Promise replaced; it is put back when `fn` returns. */
export function whilePromiseReplaced<T>(fn: () => T): T {
  globalThis.Promise = ForeignPromise as PromiseConstructor
  try {
    return fn()
  } finally {
    globalThis.Promise = NATIVE
  }
}

/** Run `fn` with the global Promise replaced until what it returns has settled. */
export async function whilePromiseReplacedAsync<T>(fn: () => Promise<T>): Promise<T> {
  globalThis.Promise = ForeignPromise as PromiseConstructor
  try {
    return await fn()
  } finally {
    globalThis.Promise = NATIVE
  }
}
