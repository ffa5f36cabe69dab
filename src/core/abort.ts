// What a wait needs of a cancellation, and a light one for per-request use.

/**
 * What `acquire({ signal })` reads of its signal: an `AbortSignal` fits, and so does any object with
 * these members (the middleware and the gateway pass an {@link AbortFlag}).
 */
export interface AbortSignalLike {
  readonly aborted: boolean
  readonly reason?: unknown
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void
  removeEventListener(type: 'abort', listener: () => void): void
}

/**
 * A one-shot abort flag with listeners: what an `AbortController` gives a wait, without an
 * `EventTarget` (and its maps) per request: signals cost CPU per request and survive into the old
 * generation, which makes every request pay for extra full collections (docs/cost.md, "Why the code
 * is as it is").
 */
export class AbortFlag implements AbortSignalLike {
  aborted = false
  reason: unknown = undefined
  private listeners: (() => void)[] | undefined = undefined

  abort(reason: unknown): void {
    if (this.aborted) return
    this.aborted = true
    this.reason = reason
    const listeners = this.listeners
    this.listeners = undefined
    if (!listeners) return
    // As EventTarget dispatches: every listener runs; a throwing one is reported (as an uncaught
    // exception, on a later turn), never allowed to keep the others or the caller from running.
    for (const listener of listeners) {
      try {
        listener()
      } catch (error) {
        queueMicrotask(() => {
          throw error
        })
      }
    }
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    if (this.aborted) return // as EventTarget: an abort is dispatched once, to those listening then
    ;(this.listeners ??= []).push(listener)
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const listeners = this.listeners
    if (!listeners) return
    const at = listeners.indexOf(listener)
    if (at >= 0) listeners.splice(at, 1)
  }
}

/** Listeners of each signal some wait watches: one 'abort' listener per signal, whatever the number
 * of waits sharing it (an AbortSignal warns past 10 listeners: MaxListenersExceededWarning). */
const watchers = new WeakMap<AbortSignalLike, Set<() => void>>()

/**
 * Run `listener` once when `signal` aborts; returns the function that stops watching. Many waits may
 * share one signal (a request's, a shutdown's): the signal gets one listener, which calls theirs.
 */
export function onAbort(signal: AbortSignalLike, listener: () => void): () => void {
  let listeners = watchers.get(signal)
  if (!listeners) {
    const created = new Set<() => void>()
    listeners = created
    watchers.set(signal, created)
    signal.addEventListener(
      'abort',
      () => {
        watchers.delete(signal)
        for (const each of [...created]) each()
      },
      { once: true },
    )
  }
  const mine = listeners
  mine.add(listener)
  return () => {
    mine.delete(listener)
  }
}

/** What an aborted signal without a reason rejects with (an AbortSignal always has one; an
 * AbortSignalLike may not, and `throw undefined` would reach the caller). One object: no stack per use. */
const ABORTED = new DOMException('This operation was aborted', 'AbortError')

/** The error an aborted wait rejects with: the signal's reason, or an AbortError. */
export function abortReason(signal: AbortSignalLike): unknown {
  return signal.reason ?? ABORTED
}

/** An object usable as an acquire's `signal`. */
export function isAbortSignalLike(value: unknown): value is AbortSignalLike {
  if (value instanceof AbortSignal) return true
  const v = value as Partial<AbortSignalLike> | null
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.aborted === 'boolean' &&
    typeof v.addEventListener === 'function' &&
    typeof v.removeEventListener === 'function'
  )
}
