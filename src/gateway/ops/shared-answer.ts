// An answer computed at most once per interval, whoever asks and however many ask at once: a scrape,
// a probe or a poll of the dashboard costs the store one computation a second, not one per request.
// Answers that differ by what is asked (/limits of a route, of a bucket) are each shared so, and
// made in turns, so many a second at most, whatever the number of things asked.

/** How old a shared answer of the admin listener may be (/metrics, /readyz's PING, data.json). */
export const ANSWER_INTERVAL_MS = 1000

/**
 * `compute` behind a share: the first asker starts it, and everyone asking while it runs or within
 * `intervalMs` of its start gets the same promise (its failure too). A new computation starts only
 * once the last one has settled and started at least `intervalMs` ago: never two in flight, and at
 * most one per interval.
 */
export function sharedAnswer<T>(intervalMs: number, compute: () => Promise<T>): () => Promise<T> {
  let last: { at: number; answer: Promise<T>; settled: boolean } | undefined
  return () => {
    const now = performance.now()
    if (last && (!last.settled || now - last.at < intervalMs)) return last.answer
    const current = { at: now, answer: new Promise<T>((resolve) => resolve(compute())), settled: false }
    const settle = () => {
      current.settled = true
    }
    current.answer.then(settle, settle)
    last = current
    return current.answer
  }
}

/** Whoever asks: its connection. */
export interface Asker {
  readonly destroyed: boolean
}

/** Answers shared per key, as sharedAnswer() shares one. */
export interface SharedAnswers<T> {
  /** The answer for `key`: the one being made or made within the interval, else `compute`'s, which
   * is told whether every asker of it has gone (then nobody waits for it). */
  (key: string, asker: Asker, compute: (gone: () => boolean) => Promise<T>): Promise<T>
  /** Forget every answer (what they show has changed): the next asker of each gets a new one. */
  clear(): void
}

/** sharedAnswer() per key. Kept: the answers being made, and those made within `intervalMs`. */
export function sharedAnswers<T>(intervalMs: number): SharedAnswers<T> {
  interface Entry {
    at: number
    answer: Promise<T>
    settled: boolean
    askers: Set<Asker>
  }
  /** In the order they were started (so the stale ones come first). */
  const entries = new Map<string, Entry>()
  const ask = (key: string, asker: Asker, compute: (gone: () => boolean) => Promise<T>): Promise<T> => {
    const now = performance.now()
    const last = entries.get(key)
    if (last && (!last.settled || now - last.at < intervalMs)) {
      if (!last.settled) last.askers.add(asker)
      return last.answer
    }
    for (const [stale, entry] of entries) {
      if (!entry.settled || now - entry.at < intervalMs) break
      entries.delete(stale)
    }
    entries.delete(key)
    const askers = new Set([asker])
    const gone = () => {
      for (const one of askers) if (!one.destroyed) return false
      return true
    }
    const entry: Entry = {
      at: now,
      answer: new Promise<T>((resolve) => resolve(compute(gone))),
      settled: false,
      askers,
    }
    const settle = () => {
      entry.settled = true
      // Nobody received it: nothing to share.
      if (gone() && entries.get(key) === entry) entries.delete(key)
      askers.clear()
    }
    entry.answer.then(settle, settle)
    entries.set(key, entry)
    return entry.answer
  }
  return Object.assign(ask, { clear: () => entries.clear() })
}

/**
 * Turns, `perSecond` a second at most, in the order asked: resolves true when the caller's turn
 * comes, or false, without using the turn, if by then `gone()` says nobody waits for it (a caller
 * whose connection was closed takes no one's turn).
 */
export function paced(perSecond: number): (gone: () => boolean) => Promise<boolean> {
  const gap = 1000 / perSecond
  const waiting: { gone: () => boolean; go: (mine: boolean) => void }[] = []
  let last = Number.NEGATIVE_INFINITY
  let timer: NodeJS.Timeout | undefined
  const next = () => {
    timer = undefined
    for (let waiter = waiting.shift(); waiter; waiter = waiting.shift()) {
      if (waiter.gone()) {
        waiter.go(false)
        continue
      }
      const wait = last + gap - performance.now()
      if (wait > 0) {
        waiting.unshift(waiter)
        timer = setTimeout(next, wait)
        return
      }
      last = performance.now()
      waiter.go(true)
    }
  }
  return (gone) =>
    new Promise<boolean>((go) => {
      waiting.push({ gone, go })
      if (!timer) next()
    })
}
