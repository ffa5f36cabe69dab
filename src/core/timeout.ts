// Bounding how long we wait for something, in one place. within() is the general form: wait for a
// promise at most so long and say what happened, never rejecting (so nothing is left unhandled and no
// timer is left running). Deadlines is the same bound for the hot path: many pending calls, one timer.

import { type AbortSignalLike, abortReason, onAbort } from './abort.js'
import { monoNow } from './clock.js'
export class TimeoutError extends Error {}

export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown; timedOut: boolean }

/**
 * Wait for `work` at most `ms`. Never rejects: a failure or the timeout comes back as `ok: false`.
 * The work keeps running after a timeout; a late failure of it is swallowed (callers that care about a
 * late outcome attach their own handler to `work`).
 */
export function within<T>(work: Promise<T>, ms: number): Promise<Settled<T>> {
  return new Promise((resolve) => {
    const timer = setTimeout(
      () => resolve({ ok: false, error: new TimeoutError(`no answer within ${ms} ms`), timedOut: true }),
      ms,
    )
    timer.unref?.()
    work.then(
      (value) => {
        clearTimeout(timer)
        resolve({ ok: true, value })
      },
      (error: unknown) => {
        clearTimeout(timer)
        resolve({ ok: false, error, timedOut: false })
      },
    )
  })
}

/** Wait `ms`, or reject with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignalLike): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal))
    const unwatch = signal
      ? onAbort(signal, () => {
          clearTimeout(timer)
          reject(abortReason(signal))
        })
      : undefined
    const timer = setTimeout(() => {
      unwatch?.()
      resolve()
    }, ms)
  })
}

/**
 * Deadlines of many concurrent calls without a timer per call: pending calls sit in a set that one
 * unref'd interval sweeps every tenth of the timeout, so a call fails within 1.1 x its bound.
 */
export class Deadlines {
  private readonly pending = new Set<{ at: number; fail: (error: Error) => void }>()
  private sweeper: NodeJS.Timeout | undefined

  constructor(private readonly timeoutMs: number) {}

  /** `promise`, or a TimeoutError once the local monotonic clock (clock.ts) passes `at`. */
  watch<T>(promise: Promise<T>, at: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry = { at, fail: reject }
      this.pending.add(entry)
      this.sweeper ??= setInterval(() => this.sweep(), Math.max(5, Math.floor(this.timeoutMs / 10))).unref()
      promise.then(
        (value) => {
          this.pending.delete(entry)
          resolve(value)
        },
        (error: unknown) => {
          this.pending.delete(entry)
          reject(error)
        },
      )
    })
  }

  private sweep(): void {
    const now = monoNow()
    for (const entry of this.pending) {
      if (entry.at > now) continue
      this.pending.delete(entry)
      entry.fail(new TimeoutError(`timed out after ${this.timeoutMs} ms`))
    }
    if (this.pending.size === 0) {
      clearInterval(this.sweeper)
      this.sweeper = undefined
    }
  }
}
